#include "feed/decode_split.h"

#include <gtest/gtest.h>

namespace saturate::feed {
namespace {

TEST(DecodeSplitTest, BalanceSplitsByRate) {
  EXPECT_DOUBLE_EQ(DecodeSplit::Balance(1000, 1000), 0.5);
  EXPECT_DOUBLE_EQ(DecodeSplit::Balance(1000, 3000), 0.75);
  EXPECT_DOUBLE_EQ(DecodeSplit::Balance(0, 3000), 1.0);
  EXPECT_DOUBLE_EQ(DecodeSplit::Balance(1000, 0), 0.0);
  EXPECT_DOUBLE_EQ(DecodeSplit::Balance(0, 0), 0.5);
}

TEST(DecodeSplitTest, StartsAtInitialUntilBothSidesAreMeasured) {
  DecodeSplit split;
  EXPECT_DOUBLE_EQ(split.gpu_fraction(), 0.5);
  split.Observe(100, 100'000'000, 4, 0, 0);  // CPU only
  EXPECT_DOUBLE_EQ(split.gpu_fraction(), 0.5);
  EXPECT_NEAR(split.cpu_images_per_s_per_thread(), 1000, 1e-9);
}

// Recorded on a 4-core host: libjpeg-turbo ~ 450 images/s per thread at
// 224x224 RandomResizedCrop of ImageNet; an H100's nvJPEG hardware engines
// ~ 3500 images/s. Four threads: 1800 on the CPU, so the GPU takes ~2/3.
TEST(DecodeSplitTest, RecordedRatesConverge) {
  DecodeSplit split;
  for (int i = 0; i < 50; ++i) {
    // An interval of 256 images split as the controller says.
    const double f = split.gpu_fraction();
    const uint64_t gpu = static_cast<uint64_t>(256 * f), cpu = 256 - gpu;
    split.Observe(cpu, static_cast<uint64_t>(cpu * 1e9 / 450), 4, gpu,
                  static_cast<uint64_t>(gpu * 1e9 / 3500));
  }
  EXPECT_NEAR(split.gpu_fraction(), 3500.0 / (3500 + 1800), 0.01);
}

TEST(DecodeSplitTest, ClampsSoBothSidesKeepBeingMeasured) {
  DecodeSplit split;
  split.Observe(100, 1'000'000'000, 1, 100, 1'000'000);  // GPU 1000x faster
  EXPECT_DOUBLE_EQ(split.gpu_fraction(), 0.95);
  DecodeSplit slow_gpu;
  slow_gpu.Observe(100, 1'000'000, 16, 100, 1'000'000'000);
  EXPECT_DOUBLE_EQ(slow_gpu.gpu_fraction(), 0.05);
}

TEST(DecodeSplitTest, SmoothsOneOutlier) {
  DecodeSplit split;
  split.Observe(100, 100'000'000, 1, 100, 100'000'000);  // equal: 0.5
  EXPECT_NEAR(split.gpu_fraction(), 0.5, 1e-9);
  split.Observe(0, 0, 1, 100, 1'000'000'000);  // one GPU interval 10x slower
  // The GPU rate moves a quarter of the way: 1000 -> 775, not to 100.
  EXPECT_NEAR(split.gpu_images_per_s(), 775, 1e-6);
  EXPECT_NEAR(split.gpu_fraction(), 775.0 / 1775.0, 1e-9);
}

TEST(DecodeSplitTest, MoreThreadsShiftWorkToTheCpu) {
  DecodeSplit split;
  split.Observe(100, 100'000'000, 2, 100, 50'000'000);  // cpu 1000/thread, gpu 2000
  EXPECT_NEAR(split.gpu_fraction(), 0.5, 1e-9);
  split.Observe(0, 0, 6, 0, 0);
  EXPECT_NEAR(split.gpu_fraction(), 0.25, 1e-9);
}

}  // namespace
}  // namespace saturate::feed
