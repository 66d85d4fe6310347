// The GPU JPEG decode (nvJPEG) on a real GPU: the same samples, labels and
// crops as the CPU path for one seed, with pixel differences bounded; and the
// decoder + crop-resize kernel against a full-resolution CPU reference.
// Every test skips itself where no GPU is visible (CI builds and lists
// them; `ctest -L gpu` runs them) or, for the nvJPEG ones, where libnvjpeg
// cannot be loaded (the skip message names it).
//
// Why these bounds: the CPU path decodes at the smallest DCT scale that still
// covers the output (libjpeg-turbo's scaled IDCT, then the antialiased
// bilinear resize), nvJPEG decodes at full size (its own IDCT and chroma
// upsampling) and the kernel resizes from there. Both approximate the same
// filtered image; they part mostly at hard edges (a disc in the test images)
// where chroma upsampling and the scaled IDCT's implicit box filter differ.
// The tests print the measured differences; the bounds are first estimates
// (not yet run on a GPU when written) to be tightened from those numbers.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "base/testing.h"
#include "device/gpu.h"
#include "device/testing/skip_without_gpu.h"
#include "feed/testing/datasets.h"
#include "feed/testing/photo_dataset.h"
#include "image/codec.h"
#include "image/transform.h"
#include "saturate/device/device.h"
#include "saturate/feed/device_loader.h"

namespace saturate::feed {
namespace {

// Loader-level bounds (CPU path with DCT scaling vs nvJPEG at full size).
// The mean catches a wrong crop, flip or row (those give tens of levels on
// average); the share of large differences and the maximum allow the hard
// edges, where chroma upsampling and DCT-domain scaling legitimately differ.
constexpr double kMaxMeanAbsDiff = 2.0;
constexpr int kLargeDiff = 32;
constexpr double kMaxLargeDiffShare = 0.01;
constexpr int kMaxAbsDiff = 160;
// Decoder-level bounds (the same full-size decode on both sides).
constexpr double kMaxMeanAbsDiffFullSize = 1.0;
constexpr int kMaxAbsDiffFullSize = 64;

std::string ToHost(const void* device_ptr, size_t bytes) {
  std::string out(bytes, '\0');
  EXPECT_EQ(cudaMemcpy(out.data(), device_ptr, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

struct Diff {
  double sum = 0;
  uint64_t n = 0, large = 0;
  int max = 0;
  void Add(const std::string& a, const std::string& b) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      const int d = std::abs(int(uint8_t(a[i])) - int(uint8_t(b[i])));
      sum += d;
      max = std::max(max, d);
      large += d > kLargeDiff;
    }
    n += a.size();
  }
  double mean() const { return n == 0 ? 0 : sum / n; }
  double large_share() const { return n == 0 ? 0 : double(large) / n; }
};

// Skips (naming the library) where nvJPEG cannot be opened.
#define SKIP_WITHOUT_NVJPEG(gpu)                                                   \
  do {                                                                             \
    auto probe_ = (gpu)->OpenJpegDecoder();                                        \
    if (!probe_.ok()) GTEST_SKIP() << "no nvJPEG: " << probe_.status().ToString(); \
  } while (0)

TEST(NvJpegDecoderGpuTest, CropResizeMatchesAFullSizeCpuReference) {
  SKIP_WITHOUT_GPU();
  auto gpu = device::OpenCudaGpu(0);
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  SKIP_WITHOUT_NVJPEG(*gpu);
  auto decoder = (*gpu)->OpenJpegDecoder();
  ASSERT_TRUE(decoder.ok());
  std::cout << "nvJPEG backend: " << (*decoder)->backend() << "\n";
  const int width = 400, height = 300, out_w = 96, out_h = 80;
  auto rgb = saturate::testing::PhotoLikeRgb(width, height, 3);
  auto jpeg = image::EncodeJpeg(rgb.data(), width, height, 90);
  ASSERT_TRUE(jpeg.ok());
  auto decoded = image::DecodeRgb(*jpeg);
  ASSERT_TRUE(decoded.ok());
  const std::vector<image::CropRect> crops = {
      {0, 0, width, height}, {37, 21, 250, 190}, {300, 200, 64, 50}, {10, 0, 40, 300}};
  const size_t out_bytes = size_t(out_w) * out_h * 3;
  void* d_out = nullptr;
  ASSERT_EQ(cudaMalloc(&d_out, out_bytes * crops.size() * 2), cudaSuccess);
  std::vector<device::JpegJob> jobs;
  for (size_t k = 0; k < crops.size() * 2; ++k) {
    device::JpegJob job;
    job.encoded = *jpeg;
    job.crop = crops[k / 2];
    job.hflip = k % 2 == 1;
    job.dst = static_cast<std::byte*>(d_out) + k * out_bytes;
    jobs.push_back(job);
  }
  std::vector<uint8_t> failed;
  SATURATE_ASSERT_OK((*decoder)->Decode(jobs, out_w, out_h, nullptr, &failed));
  image::DecodeScratch scratch;
  Diff all;
  for (size_t k = 0; k < jobs.size(); ++k) {
    ASSERT_FALSE(failed[k]) << "job " << k;
    std::string want(out_bytes, '\0');
    image::CropResizeRgb(decoded->data(), width, height, jobs[k].crop, out_w, out_h, jobs[k].hflip,
                         reinterpret_cast<uint8_t*>(want.data()), &scratch);
    Diff d;
    d.Add(ToHost(jobs[k].dst, out_bytes), want);
    all.Add(ToHost(jobs[k].dst, out_bytes), want);
    std::cout << "crop " << k / 2 << (jobs[k].hflip ? " flipped" : "") << ": mean abs diff "
              << d.mean() << ", max " << d.max << "\n";
  }
  EXPECT_LE(all.mean(), kMaxMeanAbsDiffFullSize);
  EXPECT_LE(all.max, kMaxAbsDiffFullSize);
  // Bytes nvJPEG cannot read are reported as failed, not as an error of the
  // whole call. (Whether the hardware engine notices a truncated JPEG is not
  // asserted: the CPU path would report Corruption; see docs/gpu.md.)
  std::vector<std::byte> junk(200, std::byte{0x42});
  device::JpegJob bad = jobs[0];
  bad.encoded = junk;
  std::vector<device::JpegJob> mixed = {bad, jobs[1]};
  SATURATE_ASSERT_OK((*decoder)->Decode(mixed, out_w, out_h, nullptr, &failed));
  EXPECT_TRUE(failed[0]);
  EXPECT_FALSE(failed[1]);
  cudaFree(d_out);
}

class NvJpegLoaderGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    auto gpu = device::OpenCudaGpu(0);
    ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
    SKIP_WITHOUT_NVJPEG(*gpu);
    SATURATE_ASSERT_OK(saturate::testing::WritePhotoDataset(tmp_.path(), 45));
    options_ = saturate::testing::SmallImageLoaderOptions(tmp_.path(), 7, 112, 128);
  }

  // Runs two epochs of the CPU loader and a DeviceLoader with `decode`
  // side by side: labels must be equal, pixels within the bounds.
  void CompareWithCpu(const std::string& decode, LoaderStats* stats) {
    auto cpu = Loader::Open(options_);
    ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
    DeviceOptions d;
    d.device = "cuda:0";
    d.decode = decode;
    auto loader = DeviceLoader::Open(options_, d);
    ASSERT_TRUE(loader.ok()) << loader.status().ToString();
    Diff diff;
    for (int epoch = 0; epoch < 2; ++epoch) {
      ASSERT_TRUE((*cpu)->SetEpoch(epoch).ok());
      ASSERT_TRUE((*loader)->SetEpoch(epoch).ok());
      int batches = 0;
      while (true) {
        auto want = (*cpu)->Next();
        auto got = (*loader)->Next();
        ASSERT_TRUE(want.ok()) << want.status().ToString();
        ASSERT_TRUE(got.ok()) << got.status().ToString();
        ASSERT_EQ(want->has_value(), got->has_value());
        if (!got->has_value()) break;
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const TensorView* wl = (*want)->Find("label");
        const TensorView* gl = (*got)->Find("label");
        ASSERT_TRUE(wl != nullptr && gl != nullptr);
        EXPECT_EQ(ToHost(gl->data, gl->bytes()),
                  std::string(static_cast<const char*>(wl->data), wl->bytes()))
            << "labels of batch " << batches;
        const TensorView* wi = (*want)->Find("image");
        const TensorView* gi = (*got)->Find("image");
        ASSERT_TRUE(wi != nullptr && gi != nullptr);
        EXPECT_EQ(gi->shape, wi->shape);
        diff.Add(ToHost(gi->data, gi->bytes()),
                 std::string(static_cast<const char*>(wi->data), wi->bytes()));
        ++batches;
      }
      EXPECT_EQ(batches, 6);
    }
    *stats = (*loader)->stats();
    std::cout << "decode=" << decode << " (" << stats->decode_backend << "): " << stats->gpu_decoded
              << " on the GPU, " << stats->gpu_decode_fallbacks << " refused; GPU share "
              << stats->gpu_decode_fraction << "; pixels vs CPU: mean abs diff " << diff.mean()
              << ", max " << diff.max << "\n";
    EXPECT_LE(diff.mean(), kMaxMeanAbsDiff);
    EXPECT_LE(diff.max, kMaxAbsDiff);
  }

  saturate::testing::TempDir tmp_;
  LoaderOptions options_;
};

TEST_F(NvJpegLoaderGpuTest, GpuDecodeGivesTheCpuPathsSamplesAndBoundedPixels) {
  LoaderStats stats;
  CompareWithCpu("gpu", &stats);
  EXPECT_EQ(stats.decode, "gpu");
  EXPECT_EQ(stats.gpu_decoded + stats.gpu_decode_fallbacks, 2u * 45u);
  EXPECT_EQ(stats.gpu_decode_fallbacks, 0u);
  EXPECT_DOUBLE_EQ(stats.gpu_decode_fraction, 1.0);
}

// Packed JPEGs (a restart marker after every MCU) reach nvJPEG cut to the
// MCUs around their crop (image::CutJpegAroundCrop): the same bounds must
// hold, so the hardware engine and the other backends decode the cut
// streams (renumbered markers, a smaller frame) as they decode whole files.
TEST_F(NvJpegLoaderGpuTest, PackedJpegsAreSentCutAndGiveTheSamePixels) {
  saturate::testing::TempDir packed;
  SATURATE_ASSERT_OK(saturate::testing::WritePhotoDataset(packed.path(), 45, true));
  options_.dataset = packed.path();
  LoaderStats stats;
  CompareWithCpu("gpu", &stats);
  std::cout << "packed: " << stats.gpu_decode_cut << " of " << stats.gpu_decoded
            << " sent cut to their crop\n";
  EXPECT_GE(stats.gpu_decode_cut, 30u);  // of 90: the crops (nearly) as large as the image are not
  EXPECT_EQ(stats.gpu_decode_fallbacks, 0u);
}

TEST_F(NvJpegLoaderGpuTest, GpuDecodeFeedsTheConversionKernels) {
  options_.fields[0].image.dtype = DType::kFloat32;
  options_.fields[0].image.layout = Layout::kCHW;
  auto cpu = Loader::Open(options_);
  ASSERT_TRUE(cpu.ok());
  DeviceOptions d;
  d.decode = "gpu";
  auto loader = DeviceLoader::Open(options_, d);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  double worst = 0;
  while (true) {
    auto want = (*cpu)->Next();
    auto got = (*loader)->Next();
    ASSERT_TRUE(want.ok() && got.ok());
    if (!got->has_value()) break;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const TensorView* wi = (*want)->Find("image");
    const TensorView* gi = (*got)->Find("image");
    std::string g = ToHost(gi->data, gi->bytes());
    const auto* gf = reinterpret_cast<const float*>(g.data());
    const auto* wf = static_cast<const float*>(wi->data);
    double sum = 0;
    const size_t n = gi->bytes() / 4;
    for (size_t i = 0; i < n; ++i) sum += std::abs(gf[i] - wf[i]);
    worst = std::max(worst, sum / n * 255);
  }
  EXPECT_LE(worst, 2 * kMaxMeanAbsDiff);  // per batch, in uint8 levels
}

// A JPEG whose header reads but whose scan is cut short: the worker finds no
// EOI after the scan and leaves it to the CPU path, which reports it, so with
// skip_bad it is skipped as the CPU loader skips it, never delivered as
// whatever nvJPEG makes of it (the H200's hardware decoder returned such a
// file as if whole): the labels of every batch match the CPU loader's.
TEST_F(NvJpegLoaderGpuTest, AJpegNoDecoderCanReadIsSkippedWithSkipBad) {
  saturate::testing::TempDir dir;
  SATURATE_ASSERT_OK(saturate::testing::WriteImageDataset(dir.path(), 20, /*cut=*/5));
  LoaderOptions options = saturate::testing::SmallImageLoaderOptions(dir.path(), 7, 32, 32);
  options.skip_bad = true;
  options.shuffle = false;
  auto cpu = Loader::Open(options);
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  DeviceOptions d;
  d.decode = "gpu";
  auto loader = DeviceLoader::Open(options, d);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  uint64_t rows = 0;
  while (true) {
    auto want = (*cpu)->Next();
    auto got = (*loader)->Next();
    ASSERT_TRUE(want.ok() && got.ok()) << (got.ok() ? want.status() : got.status()).ToString();
    ASSERT_EQ(want->has_value(), got->has_value());
    if (!got->has_value()) break;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const TensorView* wl = (*want)->Find("label");
    const TensorView* gl = (*got)->Find("label");
    EXPECT_EQ(ToHost(gl->data, gl->bytes()),
              std::string(static_cast<const char*>(wl->data), wl->bytes()));
    rows += (*got)->size();
  }
  EXPECT_EQ(rows, 19u);
  const LoaderStats stats = (*loader)->stats();
  std::cout << "cut JPEG: " << stats.gpu_decoded << " decoded on the GPU, "
            << stats.gpu_decode_fallbacks << " refused and decoded on the CPU, " << stats.skipped
            << " skipped\n";
  EXPECT_GE(stats.skipped, 1u);
}

TEST_F(NvJpegLoaderGpuTest, AutoSplitsAndKeepsTheSamples) {
  LoaderStats stats;
  CompareWithCpu("auto", &stats);
  EXPECT_EQ(stats.decode, "auto");
  EXPECT_GT(stats.gpu_decoded, 0u);
  EXPECT_GT(stats.gpu_decode_fraction, 0.0);
  EXPECT_LT(stats.gpu_decode_fraction, 1.0);
  EXPECT_GT(stats.gpu_decode_images_per_s, 0.0);
  EXPECT_GT(stats.cpu_decode_images_per_s_per_thread, 0.0);
}

}  // namespace
}  // namespace saturate::feed
