#include "remote/retry.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <thread>

#include "saturate/remote/url.h"

namespace saturate::remote {
namespace {

TEST(Retry, RetriesOnlyTransientFailures) {
  EXPECT_TRUE(ShouldRetry(Transport::kTransient, 0));
  EXPECT_FALSE(ShouldRetry(Transport::kPermanent, 0));
  EXPECT_TRUE(ShouldRetry(Transport::kOk, 500));
  EXPECT_TRUE(ShouldRetry(Transport::kOk, 503));
  EXPECT_TRUE(ShouldRetry(Transport::kOk, 429));
  EXPECT_TRUE(ShouldRetry(Transport::kOk, 408));
  EXPECT_FALSE(ShouldRetry(Transport::kOk, 200));
  EXPECT_FALSE(ShouldRetry(Transport::kOk, 403));
  EXPECT_FALSE(ShouldRetry(Transport::kOk, 404));
}

TEST(Retry, BackoffDoublesUpToTheCapWithHalfJitter) {
  RetryOptions o;
  o.base_delay_ns = 100;
  o.max_delay_ns = 1000;
  EXPECT_EQ(BackoffDelayNs(o, 0, 0), 50u);
  EXPECT_EQ(BackoffDelayNs(o, 0, 50), 100u);
  EXPECT_EQ(BackoffDelayNs(o, 1, 0), 100u);
  EXPECT_EQ(BackoffDelayNs(o, 3, 0), 400u);
  EXPECT_EQ(BackoffDelayNs(o, 4, 0), 500u);   // capped at 1000
  EXPECT_EQ(BackoffDelayNs(o, 60, 0), 500u);  // no overflow
  for (uint64_t r = 0; r < 5000; r += 7) {
    const uint64_t d = BackoffDelayNs(o, 2, r);
    EXPECT_GE(d, 200u);
    EXPECT_LE(d, 400u);
  }
}

TEST(Retry, StopsAtAttemptsOrDeadline) {
  RetryOptions o;
  o.max_attempts = 3;
  o.deadline_ns = 1000;
  EXPECT_TRUE(MayRetry(o, 1, 0, 10));
  EXPECT_TRUE(MayRetry(o, 2, 900, 100));
  EXPECT_FALSE(MayRetry(o, 3, 0, 10));
  EXPECT_FALSE(MayRetry(o, 1, 950, 100));
}

// A request retrying against a port where nothing listens (connection refused:
// transient, retried for up to two minutes by default) ends soon after Cancel().
TEST(Retry, CancelEndsARetryingRequestPromptly) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  close(fd);  // the port is now free: connecting is refused
  auto url = ParseObjectUrl("http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port)) + "/d");
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  auto store = OpenObjectStore(*url, StoreOptions{});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    (*store)->Cancel();
  });
  const auto start = std::chrono::steady_clock::now();
  std::array<std::byte, 16> out;
  const Status s = (*store)->GetRange("shard-00000.srec", 0, out);
  const auto took = std::chrono::steady_clock::now() - start;
  canceller.join();
  EXPECT_EQ(s.code(), StatusCode::kCancelled) << s.ToString();
  EXPECT_LT(took, std::chrono::seconds(2));
  EXPECT_GT((*store)->stats().retries, 0u);  // it was retrying when cancelled
  EXPECT_EQ((*store)->Get("manifest.json").status().code(), StatusCode::kCancelled);
}

}  // namespace
}  // namespace saturate::remote
