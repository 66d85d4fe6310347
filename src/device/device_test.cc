#include "saturate/device/device.h"

#include <gtest/gtest.h>

namespace saturate::device {
namespace {

TEST(DeviceTest, ProbeReportsGpusOrSaysWhyNot) {
  DeviceReport r = ProbeDevices();
  EXPECT_GE(r.cpu_cores, 1);
  if (r.gpus.empty()) {
    EXPECT_FALSE(r.no_gpu_reason.empty());
  } else {
    for (const GpuInfo& g : r.gpus) {
      EXPECT_FALSE(g.name.empty());
      EXPECT_GT(g.memory_bytes, 0u);
    }
  }
#ifdef SATURATE_WITH_CUDA
  EXPECT_TRUE(r.built_with_cuda);
#else
  EXPECT_FALSE(r.built_with_cuda);
  EXPECT_NE(r.no_gpu_reason.find("built without CUDA"), std::string::npos);
#endif
}

TEST(DeviceTest, ProbingTwiceIsStable) {
  EXPECT_EQ(ProbeDevices().gpus.size(), ProbeDevices().gpus.size());
}

}  // namespace
}  // namespace saturate::device
