// The CUDA device path on a real GPU: kernels bit-identical to the CPU path,
// batches ready on the consumer's own stream, no device allocation per
// batch. Every test skips itself where no GPU is visible, so CI (no GPU)
// builds and lists them; `ctest -L gpu` on a GPU machine runs them, and
// bench/gpu/run.sh runs them under compute-sanitizer.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "base/testing.h"
#include "device/gpu.h"
#include "device/testing/skip_without_gpu.h"
#include "feed/testing/datasets.h"
#include "image/transform.h"
#include "saturate/device/device.h"
#include "saturate/feed/device_loader.h"

namespace saturate::feed {
namespace {

#define ASSERT_CUDA(expr)                                     \
  do {                                                        \
    const cudaError_t err_ = (expr);                          \
    ASSERT_EQ(err_, cudaSuccess) << cudaGetErrorString(err_); \
  } while (0)

std::string ToHost(const void* device_ptr, size_t bytes, cudaStream_t stream) {
  std::string out(bytes, '\0');
  EXPECT_EQ(cudaMemcpyAsync(out.data(), device_ptr, bytes, cudaMemcpyDeviceToHost, stream),
            cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  return out;
}

TEST(PixelKernelGpuTest, MatchesTheCpuPathBitForBit) {
  SKIP_WITHOUT_GPU();
  auto gpu = device::OpenCudaGpu(0);
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  const int batch = 3, height = 17, width = 29;  // odd sizes: no tail assumptions
  const size_t pixels = size_t(batch) * height * width;
  std::vector<uint8_t> src(pixels * 3);
  std::mt19937 rng(5);
  for (uint8_t& v : src) v = static_cast<uint8_t>(rng());
  void *d_src = nullptr, *d_dst = nullptr;
  ASSERT_CUDA(cudaMalloc(&d_src, src.size()));
  ASSERT_CUDA(cudaMalloc(&d_dst, src.size() * 4));
  ASSERT_CUDA(cudaMemcpy(d_src, src.data(), src.size(), cudaMemcpyHostToDevice));
  for (auto type : {image::PixelType::kUInt8, image::PixelType::kFloat32,
                    image::PixelType::kFloat16, image::PixelType::kBFloat16}) {
    for (auto layout : {image::Layout::kCHW, image::Layout::kHWC}) {
      for (bool normalize : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "type " << int(type) << " layout " << int(layout)
                                          << " normalize " << normalize);
        device::PixelConvert spec{batch,
                                  height,
                                  width,
                                  type,
                                  layout,
                                  normalize,
                                  {0.485f, 0.456f, 0.406f},
                                  {0.229f, 0.224f, 0.225f}};
        ASSERT_TRUE((*gpu)->ConvertPixels(spec, d_src, d_dst, nullptr).ok());
        const size_t image_out = size_t(height) * width * 3 * image::PixelTypeSize(type);
        std::string expected(image_out * batch, '\0');
        for (int b = 0; b < batch; ++b) {
          image::ConvertPixels(src.data() + size_t(b) * height * width * 3, height, width,
                               normalize ? spec.mean.data() : nullptr,
                               normalize ? spec.std.data() : nullptr, layout, type,
                               expected.data() + b * image_out);
        }
        EXPECT_EQ(ToHost(d_dst, expected.size(), nullptr), expected);
      }
    }
  }
  cudaFree(d_src);
  cudaFree(d_dst);
}

class DeviceLoaderGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    SATURATE_ASSERT_OK(saturate::testing::WriteImageDataset(tmp_.path(), 40));
    options_ = saturate::testing::SmallImageLoaderOptions(tmp_.path(), 2, 64, 64);
    ImageTransform& image = options_.fields[0].image;
    image.dtype = DType::kFloat16;
    image.normalize = true;
    image.layout = Layout::kChannelsLast;
  }
  saturate::testing::TempDir tmp_;
  LoaderOptions options_;
};

// The consumer runs on its own non-blocking stream, which does not
// synchronize with anything: only the stage's event orders its reads.
TEST_F(DeviceLoaderGpuTest, BatchesOnAConsumerStreamEqualTheCpuPath) {
  auto cpu = Loader::Open(options_);
  ASSERT_TRUE(cpu.ok());
  auto loader = DeviceLoader::Open(options_, DeviceOptions{"cuda:0", 2});
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  cudaStream_t consumer = nullptr;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking));
  (*loader)->set_stream(consumer);
  for (int epoch = 0; epoch < 2; ++epoch) {
    ASSERT_TRUE((*cpu)->SetEpoch(epoch).ok());
    ASSERT_TRUE((*loader)->SetEpoch(epoch).ok());
    int batches = 0;
    while (true) {
      auto want = (*cpu)->Next();
      auto got = (*loader)->Next();
      ASSERT_TRUE(want.ok() && got.ok()) << got.status().ToString();
      ASSERT_EQ(want->has_value(), got->has_value());
      if (!got->has_value()) break;
      ASSERT_EQ((*want)->tensors().size(), (*got)->tensors().size());
      for (size_t i = 0; i < (*got)->tensors().size(); ++i) {
        const TensorView& w = (*want)->tensors()[i];
        const TensorView& g = (*got)->tensors()[i];
        EXPECT_EQ(g.cuda_device, 0);
        EXPECT_EQ(g.shape, w.shape);
        EXPECT_EQ(g.strides, w.strides);
        EXPECT_EQ(ToHost(g.data, g.bytes(), consumer),
                  std::string(static_cast<const char*>(w.data), w.bytes()))
            << g.name << " of batch " << batches;
      }
      ++batches;
    }
    EXPECT_EQ(batches, 5);
  }
  loader->reset();
  cudaStreamDestroy(consumer);
}

TEST_F(DeviceLoaderGpuTest, NoDeviceAllocationPerBatchInTheSteadyState) {
  auto loader = DeviceLoader::Open(options_, DeviceOptions{"cuda", 2});
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  auto epoch = [&](uint64_t e) {
    EXPECT_TRUE((*loader)->SetEpoch(e).ok());
    while (true) {
      auto next = (*loader)->Next();
      EXPECT_TRUE(next.ok());
      if (!next.ok() || !next->has_value()) return;
    }
  };
  epoch(0);
  size_t free_before = 0, total = 0, free_after = 0;
  ASSERT_CUDA(cudaDeviceSynchronize());
  ASSERT_CUDA(cudaMemGetInfo(&free_before, &total));
  const uint64_t buffers = (*loader)->stats().device_buffers;
  for (uint64_t e = 1; e <= 3; ++e) epoch(e);
  ASSERT_CUDA(cudaDeviceSynchronize());
  ASSERT_CUDA(cudaMemGetInfo(&free_after, &total));
  EXPECT_EQ(free_after, free_before);
  EXPECT_EQ((*loader)->stats().device_buffers, buffers);
  EXPECT_LE(buffers, 2u + static_cast<uint64_t>(options_.max_held_batches));
}

}  // namespace
}  // namespace saturate::feed
