#include "remote/retry.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace saturate::remote
