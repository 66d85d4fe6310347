// FakeGpu keeps CUDA's ordering rules (the device stage's tests rely on it),
// and device names parse as the Python and CLI flags take them.
#include "device/gpu.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "device/testing/fake_gpu.h"

namespace saturate::device {
namespace {

using namespace std::chrono_literals;
using saturate::testing::FakeGpu;

TEST(ParseCudaDeviceTest, AcceptsCudaAndCudaN) {
  EXPECT_EQ(*ParseCudaDevice("cuda"), 0);
  EXPECT_EQ(*ParseCudaDevice("cuda:3"), 3);
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:1x", "CUDA", "cpu"}) {
    auto r = ParseCudaDevice(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().ToString();
  }
}

TEST(FakeGpuTest, AStreamWaitsForAnEventRecordedOnAnother) {
  FakeGpu gpu(20ms);
  auto a = gpu.CreateStream(), b = gpu.CreateStream();
  auto event = gpu.CreateEvent();
  ASSERT_TRUE(a.ok() && b.ok() && event.ok());
  int src = 42, dst = 0, seen = -1;
  ASSERT_TRUE(gpu.CopyToDevice(&dst, &src, sizeof(int), *a).ok());  // slowed by 20 ms
  ASSERT_TRUE(gpu.Record(*event, *a).ok());
  EXPECT_FALSE(*gpu.Done(*event));
  ASSERT_TRUE(gpu.StreamWait(*b, *event).ok());
  gpu.Enqueue(*b, [&] { seen = dst; });
  gpu.Drain(*b);
  EXPECT_EQ(seen, 42);
  EXPECT_TRUE(*gpu.Done(*event));
  gpu.DestroyEvent(*event);
  gpu.DestroyStream(*a);
  gpu.DestroyStream(*b);
}

TEST(FakeGpuTest, SynchronizeWaitsForTheLastRecord) {
  FakeGpu gpu;
  auto s = gpu.CreateStream();
  auto event = gpu.CreateEvent();
  ASSERT_TRUE(s.ok() && event.ok());
  std::atomic<bool> ran{false};
  gpu.Enqueue(*s, [&] {
    std::this_thread::sleep_for(20ms);
    ran = true;
  });
  ASSERT_TRUE(gpu.Record(*event, *s).ok());
  ASSERT_TRUE(gpu.Synchronize(*event).ok());
  EXPECT_TRUE(ran);
  gpu.DestroyEvent(*event);
  gpu.DestroyStream(*s);
}

}  // namespace
}  // namespace saturate::device
