// The device stage on FakeGpu: its streams are host threads and its copies
// are slowed down, so a batch read before its copy (or a buffer reused
// before the consumer is done) shows up as wrong bytes.
#include "saturate/feed/device_loader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <mutex>
#include <thread>

#include "base/testing.h"
#include "device/testing/fake_gpu.h"
#include "feed/testing/datasets.h"
#include "feed/testing/photo_dataset.h"
#include "saturate/device/device.h"
#include "saturate/format/writer.h"

namespace saturate::feed {
namespace {

using saturate::testing::FakeGpu;
using namespace std::chrono_literals;

constexpr int kPrefetch = 2;

LoaderOptions Options(const std::string& dir, const ImageTransform& image) {
  LoaderOptions o;
  o.dataset = dir;
  o.batch_size = 4;
  o.seed = 11;
  o.threads = 2;
  o.prefetch = 2;  // fixed: the autotuner could grow the host pool mid-test
  o.rank = 0;
  o.world_size = 1;
  FieldOptions f{.field = "image"};
  f.image = image;
  f.image.height = 24;
  f.image.width = 32;
  o.fields = {f};
  return o;
}

// A tensor's bytes, shape and strides, for comparing batches.
struct Copied {
  std::string bytes;
  std::vector<int64_t> shape, strides;
  DType dtype;
  bool operator==(const Copied&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Copied& c) {
  return os << c.bytes.size() << " bytes, first "
            << (c.bytes.empty() ? -1 : int(uint8_t(c.bytes[0])));
}

Copied Copy(const TensorView& t) {
  return {std::string(static_cast<const char*>(t.data), t.bytes()), t.shape, t.strides, t.dtype};
}

// Every batch of the epoch from the CPU loader.
std::vector<std::vector<Copied>> CpuBatches(const LoaderOptions& options) {
  auto loader = Loader::Open(options);
  EXPECT_TRUE(loader.ok()) << loader.status().ToString();
  std::vector<std::vector<Copied>> out;
  while (true) {
    auto next = (*loader)->Next();
    EXPECT_TRUE(next.ok()) << next.status().ToString();
    if (!next.ok() || !next->has_value()) break;
    std::vector<Copied> batch;
    for (const TensorView& t : (*next)->tensors()) batch.push_back(Copy(t));
    out.push_back(std::move(batch));
  }
  return out;
}

// Reads a device batch the way a consumer kernel would: enqueued on the
// consumer's stream after Next() returned.
std::vector<Copied> ReadOnStream(FakeGpu* gpu, device::Stream stream, const Batch& batch) {
  std::vector<Copied> out;
  gpu->Enqueue(stream, [&] {
    for (const TensorView& t : batch.tensors()) out.push_back(Copy(t));
  });
  gpu->Drain(stream);
  return out;
}

class DeviceLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override { SATURATE_ASSERT_OK(saturate::testing::WriteImageDataset(dir_, 23)); }
  saturate::testing::TempDir tmp_;
  std::string dir_ = tmp_.path();
};

TEST_F(DeviceLoaderTest, BatchesEqualTheCpuPathForEveryDtypeAndLayout) {
  struct Case {
    DType dtype;
    Layout layout;
    bool normalize;
  };
  const Case cases[] = {
      {DType::kFloat32, Layout::kCHW, true},   {DType::kFloat16, Layout::kChannelsLast, true},
      {DType::kBFloat16, Layout::kCHW, false}, {DType::kFloat32, Layout::kHWC, false},
      {DType::kUInt8, Layout::kCHW, false},    {DType::kUInt8, Layout::kChannelsLast, false}};
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(format::DTypeName(c.dtype)) + " layout " +
                 std::to_string(static_cast<int>(c.layout)));
    ImageTransform image;
    image.dtype = c.dtype;
    image.layout = c.layout;
    image.normalize = c.normalize;
    const LoaderOptions options = Options(dir_, image);
    const auto expected = CpuBatches(options);

    auto gpu = std::make_shared<FakeGpu>(300us);
    auto consumer = gpu->CreateStream();
    ASSERT_TRUE(consumer.ok());
    auto loader = DeviceLoader::Open(options, kPrefetch, gpu);
    ASSERT_TRUE(loader.ok()) << loader.status().ToString();
    (*loader)->set_stream(*consumer);
    size_t n = 0;
    while (true) {
      auto next = (*loader)->Next();
      ASSERT_TRUE(next.ok()) << next.status().ToString();
      if (!next->has_value()) break;
      ASSERT_LT(n, expected.size());
      for (const TensorView& t : (*next)->tensors()) EXPECT_EQ(t.cuda_device, 0);
      EXPECT_EQ(ReadOnStream(gpu.get(), *consumer, **next), expected[n]) << "batch " << n;
      ++n;
    }
    EXPECT_EQ(n, expected.size());
    loader->reset();
    gpu->DestroyStream(*consumer);
  }
}

TEST_F(DeviceLoaderTest, PcieCarriesUint8AndNothingIsAllocatedPerBatch) {
  ImageTransform image;
  image.dtype = DType::kFloat32;
  image.normalize = true;
  auto gpu = std::make_shared<FakeGpu>();
  auto loader = DeviceLoader::Open(Options(dir_, image), kPrefetch, gpu);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  auto drain = [&] {
    uint64_t batches = 0;
    while (true) {
      auto next = (*loader)->Next();
      EXPECT_TRUE(next.ok());
      if (!next.ok() || !next->has_value()) return batches;
      ++batches;
    }
  };
  const uint64_t per_epoch = drain();
  const FakeGpu::Counters first = gpu->counters();
  for (uint64_t epoch = 1; epoch <= 3; ++epoch) {
    ASSERT_TRUE((*loader)->SetEpoch(epoch).ok());
    EXPECT_EQ(drain(), per_epoch);
  }
  // The pools fill lazily up to their size, then only reuse: allocations are
  // bounded by the pool sizes, however many batches pass (24 here).
  const FakeGpu::Counters after = gpu->counters();
  EXPECT_GE(after.device_allocs, first.device_allocs);
  EXPECT_LE(after.device_allocs, static_cast<uint64_t>(kPrefetch + 2));      // + max_held_batches
  EXPECT_LE(after.pinned_allocs, static_cast<uint64_t>(2 + kPrefetch + 2));  // host pool
  const LoaderStats stats = (*loader)->stats();
  EXPECT_EQ(stats.device_buffers, after.device_allocs);
  EXPECT_EQ(stats.h2d_batches, 4 * per_epoch);
  // 23 images of 24x32x3 uint8 and 23 int64 labels per epoch cross the bus.
  EXPECT_EQ(stats.h2d_bytes, 4 * 23 * (24 * 32 * 3 + 8));
  EXPECT_EQ(after.conversions, 4 * per_epoch);
}

TEST_F(DeviceLoaderTest, ABufferIsNotReusedUntilTheConsumersStreamIsDoneWithIt) {
  ImageTransform image;
  image.dtype = DType::kFloat32;
  const LoaderOptions options = Options(dir_, image);
  const auto expected = CpuBatches(options);
  auto gpu = std::make_shared<FakeGpu>();
  auto consumer = gpu->CreateStream();
  ASSERT_TRUE(consumer.ok());
  auto loader = DeviceLoader::Open(options, kPrefetch, gpu);
  ASSERT_TRUE(loader.ok());
  // The consumer queues a slow kernel reading batch 0, then drops the batch
  // at once (as Python does when the loop variable is rebound).
  std::vector<Copied> seen;
  {
    (*loader)->set_stream(*consumer);
    auto first = (*loader)->Next();
    ASSERT_TRUE(first.ok() && first->has_value());
    // The kernel holds raw pointers, not the batch.
    std::vector<TensorView> views = (*first)->tensors();
    gpu->Enqueue(*consumer, [&seen, views] {
      std::this_thread::sleep_for(50ms);
      for (const TensorView& t : views) seen.push_back(Copy(t));
    });
  }
  // Meanwhile the stage copies the following batches, reusing buffers.
  (*loader)->set_stream(nullptr);
  for (int i = 0; i < 4; ++i) {
    auto next = (*loader)->Next();
    ASSERT_TRUE(next.ok() && next->has_value());
  }
  gpu->Drain(*consumer);
  EXPECT_EQ(seen, expected[0]);
  loader->reset();
  gpu->DestroyStream(*consumer);
}

TEST_F(DeviceLoaderTest, RestoreResumesWithTheSameBytes) {
  ImageTransform image;
  image.dtype = DType::kFloat16;
  const LoaderOptions options = Options(dir_, image);
  auto gpu = std::make_shared<FakeGpu>();
  auto run = [&](std::optional<LoaderState> from, size_t batches) {
    auto loader = DeviceLoader::Open(options, kPrefetch, gpu);
    EXPECT_TRUE(loader.ok());
    if (from) {
      EXPECT_TRUE((*loader)->Restore(*from).ok());
    }
    std::vector<std::vector<Copied>> out;
    for (size_t i = 0; i < batches; ++i) {
      auto next = (*loader)->Next();
      EXPECT_TRUE(next.ok() && next->has_value());
      out.push_back(ReadOnStream(gpu.get(), nullptr, **next));
    }
    return std::make_pair(out, (*loader)->state());
  };
  auto [whole, _] = run(std::nullopt, 5);
  auto [head, state] = run(std::nullopt, 2);
  EXPECT_EQ(state.batches_done, 2u);  // copied ahead, not delivered, does not count
  auto [tail, end] = run(state, 3);
  EXPECT_EQ(head[0], whole[0]);
  EXPECT_EQ(tail[0], whole[2]);
  EXPECT_EQ(tail[2], whole[4]);
  EXPECT_EQ(end.batches_done, 5u);
}

TEST_F(DeviceLoaderTest, HoldingTooManyBatchesIsAnErrorNotADeadlock) {
  LoaderOptions options = Options(dir_, ImageTransform{});
  options.max_held_batches = 1;
  auto gpu = std::make_shared<FakeGpu>();
  auto loader = DeviceLoader::Open(options, kPrefetch, gpu);
  ASSERT_TRUE(loader.ok());
  std::vector<Batch> held;
  Status error;
  for (int i = 0; i < 5 && error.ok(); ++i) {
    auto next = (*loader)->Next();
    if (next.ok()) {
      held.push_back(**next);
    } else {
      error = next.status();
    }
  }
  EXPECT_EQ(error.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(error.message().find("max_held_batches"), std::string::npos) << error.ToString();
}

TEST_F(DeviceLoaderTest, BatchesOutliveTheLoaderAndEverythingIsFreed) {
  auto gpu = std::make_shared<FakeGpu>(200us);
  {
    std::optional<Batch> kept;
    {
      auto loader = DeviceLoader::Open(Options(dir_, ImageTransform{}), kPrefetch, gpu);
      ASSERT_TRUE(loader.ok());
      auto next = (*loader)->Next();
      ASSERT_TRUE(next.ok() && next->has_value());
      kept = std::move(**next);
      ASSERT_TRUE((*loader)->Next().ok());
    }  // destroyed mid-epoch with copies in flight
    EXPECT_EQ(ReadOnStream(gpu.get(), nullptr, *kept).size(), 2u);
    EXPECT_GE(gpu->counters().live_device_buffers, 1u);
  }
  EXPECT_EQ(gpu->counters().live_device_buffers, 0u);
  EXPECT_EQ(gpu->counters().live_pinned_buffers, 0u);
}

TEST_F(DeviceLoaderTest, ErrorsAreClear) {
  LoaderOptions options = Options(dir_, ImageTransform{});
  EXPECT_EQ(DeviceLoader::Open(options, 0, std::make_shared<FakeGpu>()).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(DeviceLoader::Open(options, {.device = "gpu0"}).status().code(),
            StatusCode::kInvalidArgument);
  options.dataset = dir_ + "/missing";
  EXPECT_FALSE(DeviceLoader::Open(options, 1, std::make_shared<FakeGpu>()).ok());
}

TEST_F(DeviceLoaderTest, CudaWithoutAGpuIsUnavailableAndSaysWhy) {
  if (!device::ProbeDevices().gpus.empty()) GTEST_SKIP() << "this machine has a GPU";
  auto loader = DeviceLoader::Open(Options(dir_, ImageTransform{}), {.device = "cuda:0"});
  ASSERT_FALSE(loader.ok());
  EXPECT_EQ(loader.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(loader.status().message().find("cuda:0"), std::string::npos)
      << loader.status().ToString();
}

// Every batch of the epoch from a DeviceLoader on `gpu` with `decode`.
std::vector<std::vector<Copied>> DeviceBatches(const LoaderOptions& options,
                                               std::shared_ptr<FakeGpu> gpu,
                                               const std::string& decode, LoaderStats* stats) {
  auto consumer = gpu->CreateStream();
  EXPECT_TRUE(consumer.ok());
  auto loader = DeviceLoader::Open(options, kPrefetch, gpu, decode);
  EXPECT_TRUE(loader.ok()) << loader.status().ToString();
  std::vector<std::vector<Copied>> out;
  if (!loader.ok()) return out;
  (*loader)->set_stream(*consumer);
  while (true) {
    auto next = (*loader)->Next();
    EXPECT_TRUE(next.ok()) << next.status().ToString();
    if (!next.ok() || !next->has_value()) break;
    out.push_back(ReadOnStream(gpu.get(), *consumer, **next));
  }
  *stats = (*loader)->stats();
  loader->reset();
  gpu->DestroyStream(*consumer);
  return out;
}

// The GPU decode's bookkeeping on FakeGpu, whose "GPU decoder" runs the CPU
// path's DecodeCropResize: handing JPEGs over (crop and flip drawn by the
// worker) must then give the CPU path's bytes exactly.
TEST_F(DeviceLoaderTest, GpuDecodeHandsOverTheSameSamplesCropsAndFlips) {
  saturate::testing::TempDir photos;
  SATURATE_ASSERT_OK(saturate::testing::WritePhotoDataset(photos.path(), 19));
  for (DType dtype : {DType::kUInt8, DType::kFloat32}) {
    ImageTransform image;
    image.dtype = dtype;
    image.normalize = dtype != DType::kUInt8;
    const LoaderOptions options = Options(photos.path(), image);
    const auto expected = CpuBatches(options);
    for (const char* decode : {"gpu", "auto"}) {
      SCOPED_TRACE(std::string(decode) + " " + std::string(format::DTypeName(dtype)));
      auto gpu = std::make_shared<FakeGpu>(100us);
      gpu->set_jpeg_decoder(true);
      LoaderStats stats;
      EXPECT_EQ(DeviceBatches(options, gpu, decode, &stats), expected);
      EXPECT_EQ(stats.decode, decode);
      EXPECT_GT(stats.gpu_decoded, 0u);
      EXPECT_EQ(stats.gpu_decode_fallbacks, 0u);
      if (std::string(decode) == "gpu") {
        EXPECT_EQ(stats.gpu_decoded, 19u);
        EXPECT_DOUBLE_EQ(stats.gpu_decode_fraction, 1.0);
      } else {
        EXPECT_LT(stats.gpu_decoded, 19u);
        EXPECT_GT(stats.gpu_decode_fraction, 0.0);
        EXPECT_LT(stats.gpu_decode_fraction, 1.0);
      }
    }
  }
}

// Packed JPEGs (a restart marker after every MCU) go to the GPU decoder cut
// to the MCUs around their crop: fewer bytes to send and decode, the same
// samples, crops and flips, pixels equal up to the resampler's rounding
// (the fake decoder runs the CPU path on what it is given).
TEST_F(DeviceLoaderTest, GpuDecodeOfPackedJpegsSendsOnlyTheCropsMcus) {
  saturate::testing::TempDir plain, packed;
  SATURATE_ASSERT_OK(saturate::testing::WritePhotoDataset(plain.path(), 19));
  SATURATE_ASSERT_OK(saturate::testing::WritePhotoDataset(packed.path(), 19, true));
  uint64_t sent_bytes[2] = {0, 0};
  for (int marked : {0, 1}) {
    SCOPED_TRACE(marked ? "restart-marked" : "plain");
    const LoaderOptions options = Options(marked ? packed.path() : plain.path(), ImageTransform{});
    const auto expected = CpuBatches(options);
    auto gpu = std::make_shared<FakeGpu>(100us);
    gpu->set_jpeg_decoder(true);
    LoaderStats stats;
    const auto got = DeviceBatches(options, gpu, "gpu", &stats);
    EXPECT_EQ(stats.gpu_decoded, 19u);
    EXPECT_EQ(stats.gpu_decode_fallbacks, 0u);
    sent_bytes[marked] = gpu->counters().jpeg_bytes;
    if (!marked) {
      EXPECT_EQ(stats.gpu_decode_cut, 0u);
      EXPECT_EQ(got, expected);
      continue;
    }
    EXPECT_GE(stats.gpu_decode_cut, 15u);  // all but crops (nearly) as large as the image
    ASSERT_EQ(got.size(), expected.size());
    int max_diff = 0;
    for (size_t b = 0; b < got.size(); ++b) {
      ASSERT_EQ(got[b].size(), expected[b].size());
      for (size_t t = 0; t < got[b].size(); ++t) {
        const Copied &g = got[b][t], &w = expected[b][t];
        ASSERT_EQ(g.shape, w.shape);
        ASSERT_EQ(g.bytes.size(), w.bytes.size());
        for (size_t i = 0; i < g.bytes.size(); ++i) {
          max_diff = std::max(max_diff, std::abs(int(uint8_t(g.bytes[i])) - uint8_t(w.bytes[i])));
        }
      }
    }
    EXPECT_LE(max_diff, 1);
  }
  std::printf("[ cut      ] encoded bytes sent to the decoder: %llu whole, %llu cut\n",
              static_cast<unsigned long long>(sent_bytes[0]),
              static_cast<unsigned long long>(sent_bytes[1]));
  EXPECT_LT(sent_bytes[1], sent_bytes[0] * 3 / 4);
}

// Skipped samples compact the batch: GPU-decoded ones must land in their
// compacted rows. Records 2 and 9 are not images (skipped with skip_bad).
TEST_F(DeviceLoaderTest, GpuDecodeFollowsSkippedSamples) {
  saturate::testing::TempDir dir;
  {
    format::Schema schema{{format::FieldSpec{"image", format::FieldKind::kImage},
                           format::FieldSpec{"label", format::FieldKind::kInt64}}};
    auto w = format::DatasetWriter::Create(dir.path(), schema);
    ASSERT_TRUE(w.ok());
    for (int64_t i = 0; i < 14; ++i) {
      auto rgb = saturate::testing::PhotoLikeRgb(120 + 8 * i, 96, i);
      auto jpeg = image::EncodeJpeg(rgb.data(), 120 + 8 * i, 96, 85);
      ASSERT_TRUE(jpeg.ok());
      std::vector<std::byte> junk(64, std::byte{7});
      std::span<const std::byte> img =
          (i == 2 || i == 9) ? std::span<const std::byte>(junk) : std::span<const std::byte>(*jpeg);
      std::vector<std::span<const std::byte>> f{img, format::AsBytes(i)};
      SATURATE_ASSERT_OK((*w)->Append(f));
    }
    SATURATE_ASSERT_OK((*w)->Finish());
  }
  LoaderOptions options = Options(dir.path(), ImageTransform{});
  options.skip_bad = true;
  options.shuffle = false;
  const auto expected = CpuBatches(options);
  auto gpu = std::make_shared<FakeGpu>();
  gpu->set_jpeg_decoder(true);
  LoaderStats stats;
  EXPECT_EQ(DeviceBatches(options, gpu, "gpu", &stats), expected);
  EXPECT_EQ(stats.gpu_decoded, 12u);
  EXPECT_GE(stats.skipped, 2u);  // the workers may have read into the next epoch too
}

// A JPEG whose header reads but whose scan is cut short goes to the GPU stage
// (the worker reads only its header), where neither decoder can read it.
// With skip_bad it is skipped and counted as the CPU path skips it:
// its row leaves every tensor of the batch on the device, so images and
// labels still match the CPU path's batches row for row.
TEST_F(DeviceLoaderTest, GpuDecodeSkipsAJpegNoDecoderCanReadWithSkipBad) {
  saturate::testing::TempDir dir;
  SATURATE_ASSERT_OK(saturate::testing::WriteImageDataset(dir.path(), 14, /*cut=*/5));
  LoaderOptions options = Options(dir.path(), ImageTransform{});
  options.skip_bad = true;
  options.shuffle = false;
  const auto expected = CpuBatches(options);
  size_t rows = 0;
  for (const auto& batch : expected) rows += batch.empty() ? 0 : batch[0].shape[0];
  ASSERT_EQ(rows, 13u);  // the CPU path skips record 5
  for (const char* decode : {"gpu", "auto"}) {
    SCOPED_TRACE(decode);
    auto gpu = std::make_shared<FakeGpu>();
    gpu->set_jpeg_decoder(true);
    LoaderStats stats;
    EXPECT_EQ(DeviceBatches(options, gpu, decode, &stats), expected);
    if (std::string(decode) == "gpu") {
      EXPECT_EQ(stats.gpu_decoded, 13u);
      EXPECT_GE(stats.skipped, 1u);
      EXPECT_EQ(stats.gpu_decode_fallbacks, 0u);  // the unreadable one is skipped, not decoded
    }
  }
}

// Without skip_bad the batch fails with an error that names the record.
TEST_F(DeviceLoaderTest, GpuDecodeOfAnUnreadableJpegNamesItsRecord) {
  saturate::testing::TempDir dir;
  SATURATE_ASSERT_OK(saturate::testing::WriteImageDataset(dir.path(), 14, /*cut=*/5));
  LoaderOptions options = Options(dir.path(), ImageTransform{});
  options.shuffle = false;
  auto gpu = std::make_shared<FakeGpu>();
  gpu->set_jpeg_decoder(true);
  auto consumer = gpu->CreateStream();
  ASSERT_TRUE(consumer.ok());
  auto loader = DeviceLoader::Open(options, kPrefetch, gpu, "gpu");
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  (*loader)->set_stream(*consumer);
  Status error;
  while (error.ok()) {
    auto next = (*loader)->Next();
    if (!next.ok()) error = next.status();
    if (next.ok() && !next->has_value()) break;
  }
  EXPECT_FALSE(error.ok());
  EXPECT_NE(error.message().find("record 5"), std::string::npos) << error.ToString();
  EXPECT_NE(error.message().find("field 'image'"), std::string::npos) << error.ToString();
  loader->reset();
  gpu->DestroyStream(*consumer);
}

// A GPU decode waits for the GPU, so the stage issues it off the consumer's
// thread: every decode runs elsewhere, and the consumer gets batch 0 while
// batch 1's decode may be held. (Issued inline, Next() would either wait on
// the held decode until the hook gave up, or decode on the consumer's thread.)
TEST_F(DeviceLoaderTest, GpuDecodeOverlapsTheConsumer) {
  saturate::testing::TempDir photos;
  SATURATE_ASSERT_OK(saturate::testing::WritePhotoDataset(photos.path(), 24));
  const LoaderOptions options = Options(photos.path(), ImageTransform{});
  const auto expected = CpuBatches(options);
  auto gpu = std::make_shared<FakeGpu>();
  gpu->set_jpeg_decoder(true);
  std::mutex mu;
  std::condition_variable cv;
  int decodes = 0;
  bool released = false, gave_up = false;
  std::vector<std::thread::id> decode_threads;
  gpu->set_jpeg_decode_hook([&] {
    std::unique_lock<std::mutex> lock(mu);
    decode_threads.push_back(std::this_thread::get_id());
    if (++decodes == 2) {  // batch 1: held until the consumer has batch 0
      gave_up = !cv.wait_for(lock, 10s, [&] { return released; });
    }
  });
  auto consumer = gpu->CreateStream();
  ASSERT_TRUE(consumer.ok());
  auto loader = DeviceLoader::Open(options, kPrefetch, gpu, "gpu");
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  (*loader)->set_stream(*consumer);
  std::vector<std::vector<Copied>> got;
  {  // batch 0, released before the consumer stream goes
    auto first = (*loader)->Next();
    ASSERT_TRUE(first.ok() && first->has_value());
    got.push_back(ReadOnStream(gpu.get(), *consumer, **first));
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_FALSE(gave_up) << "batch 0 waited for batch 1's decode";
    released = true;
    cv.notify_all();
  }
  while (true) {
    auto next = (*loader)->Next();
    ASSERT_TRUE(next.ok()) << next.status().ToString();
    if (!next->has_value()) break;
    got.push_back(ReadOnStream(gpu.get(), *consumer, **next));
  }
  EXPECT_EQ(got, expected);
  loader->reset();
  gpu->DestroyStream(*consumer);
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_FALSE(gave_up);
  for (std::thread::id id : decode_threads) EXPECT_NE(id, std::this_thread::get_id());
}

TEST_F(DeviceLoaderTest, GpuDecodeWithoutADecoderIsUnavailableAndAutoFallsBack) {
  const LoaderOptions options = Options(dir_, ImageTransform{});
  auto loader = DeviceLoader::Open(options, kPrefetch, std::make_shared<FakeGpu>(), "gpu");
  ASSERT_FALSE(loader.ok());
  EXPECT_EQ(loader.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(loader.status().message().find("decode=\"gpu\""), std::string::npos)
      << loader.status().ToString();
  EXPECT_EQ(
      DeviceLoader::Open(options, kPrefetch, std::make_shared<FakeGpu>(), "jpeg").status().code(),
      StatusCode::kInvalidArgument);
  const auto expected = CpuBatches(options);
  LoaderStats stats;
  EXPECT_EQ(DeviceBatches(options, std::make_shared<FakeGpu>(), "auto", &stats), expected);
  EXPECT_EQ(stats.decode, "auto");
  EXPECT_EQ(stats.gpu_decoded, 0u);
  EXPECT_NE(stats.decode_backend.find("unavailable"), std::string::npos) << stats.decode_backend;
}

// Batches discarded by SetEpoch leave entries behind in their buffers; the
// next batches written there must not pick them up.
TEST_F(DeviceLoaderTest, GpuDecodeSurvivesDiscardedBatches) {
  saturate::testing::TempDir photos;
  SATURATE_ASSERT_OK(saturate::testing::WritePhotoDataset(photos.path(), 18));
  const LoaderOptions options = Options(photos.path(), ImageTransform{});
  auto cpu = Loader::Open(options);
  ASSERT_TRUE(cpu.ok());
  auto gpu = std::make_shared<FakeGpu>(50us);
  gpu->set_jpeg_decoder(true);
  auto consumer = gpu->CreateStream();
  ASSERT_TRUE(consumer.ok());
  auto loader = DeviceLoader::Open(options, kPrefetch, gpu, "gpu");
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  (*loader)->set_stream(*consumer);
  ASSERT_TRUE((*loader)->Next().ok());  // some batches made, then thrown away
  std::this_thread::sleep_for(20ms);
  for (uint64_t epoch : {0, 1, 3}) {
    SCOPED_TRACE("epoch " + std::to_string(epoch));
    ASSERT_TRUE((*cpu)->SetEpoch(epoch).ok());
    ASSERT_TRUE((*loader)->SetEpoch(epoch).ok());
    int n = 0;
    while (true) {
      auto want = (*cpu)->Next();
      auto got = (*loader)->Next();
      ASSERT_TRUE(want.ok() && got.ok()) << got.status().ToString();
      ASSERT_EQ(want->has_value(), got->has_value());
      if (!got->has_value()) break;
      std::vector<Copied> expected;
      for (const TensorView& t : (*want)->tensors()) expected.push_back(Copy(t));
      EXPECT_EQ(ReadOnStream(gpu.get(), *consumer, **got), expected) << "batch " << n;
      ++n;
    }
    EXPECT_EQ(n, 5);
  }
  loader->reset();
  gpu->DestroyStream(*consumer);
}

}  // namespace
}  // namespace saturate::feed
