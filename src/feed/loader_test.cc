#include "saturate/feed/loader.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "base/file.h"
#include "base/testing.h"
#include "feed/testing/datasets.h"
#include "format/shard_format.h"
#include "image/codec.h"
#include "saturate/format/writer.h"
#include "saturate/trace/trace.h"

namespace saturate::feed {
namespace {

namespace fs = std::filesystem;
using format::FieldKind;
using format::FieldSpec;
using saturate::testing::WriteImageDataset;

// Records: pixels uint8[4,4] filled with (i % 251), label = i, tokens int32[i % 5].
Status WriteArrayDataset(const std::string& dir, uint64_t n) {
  format::Schema schema{{FieldSpec{"pixels", FieldKind::kArray, DType::kUInt8, {4, 4}},
                         FieldSpec{"label", FieldKind::kInt64},
                         FieldSpec{"tokens", FieldKind::kVarArray, DType::kInt32}}};
  SATURATE_ASSIGN_OR_RETURN(auto w,
                            format::DatasetWriter::Create(dir, schema, {.shard_bytes = 4096}));
  for (uint64_t i = 0; i < n; ++i) {
    std::vector<uint8_t> px(16, static_cast<uint8_t>(i % 251));
    int64_t label = static_cast<int64_t>(i);
    std::vector<int32_t> tokens(i % 5, static_cast<int32_t>(i));
    std::vector<std::span<const std::byte>> f{format::AsBytes(std::span<const uint8_t>(px)),
                                              format::AsBytes(label),
                                              format::AsBytes(std::span<const int32_t>(tokens))};
    SATURATE_RETURN_IF_ERROR(w->Append(f));
  }
  return w->Finish();
}

// One rank of one; threads 0: auto.
LoaderOptions Options(const std::string& dir, uint64_t batch_size, uint64_t seed, int threads) {
  LoaderOptions o;
  o.dataset = dir;
  o.batch_size = batch_size;
  o.seed = seed;
  o.threads = threads;
  o.rank = 0;
  o.world_size = 1;
  return o;
}

LoaderOptions ArrayOptions(const std::string& dir) {
  LoaderOptions o = Options(dir, 8, 7, 0);
  o.fields = {FieldOptions{.field = "tokens", .var_array = {.max_length = 8}}};
  return o;
}

LoaderOptions ImageOptions(const std::string& dir, int threads) {
  LoaderOptions o = Options(dir, 5, 3, threads);
  FieldOptions image{.field = "image"};
  image.image.height = image.image.width = 32;
  o.fields = {image};
  return o;
}

// Fixed-size records only (the gather path): pixels uint8[12,13] filled
// with (i * 7 + k) % 256 at element k, label = i. One shard.
Status WriteFixedDataset(const std::string& dir, uint64_t n) {
  format::Schema schema{{FieldSpec{"pixels", FieldKind::kArray, DType::kUInt8, {12, 13}},
                         FieldSpec{"label", FieldKind::kInt64}}};
  SATURATE_ASSIGN_OR_RETURN(auto w, format::DatasetWriter::Create(dir, schema, {}));
  for (uint64_t i = 0; i < n; ++i) {
    std::vector<uint8_t> px(156);
    for (size_t k = 0; k < px.size(); ++k) px[k] = static_cast<uint8_t>(i * 7 + k);
    int64_t label = static_cast<int64_t>(i);
    std::vector<std::span<const std::byte>> f{format::AsBytes(std::span<const uint8_t>(px)),
                                              format::AsBytes(label)};
    SATURATE_RETURN_IF_ERROR(w->Append(f));
  }
  return w->Finish();
}

LoaderOptions FixedOptions(const std::string& dir, int threads) {
  LoaderOptions o = Options(dir, 16, 5, threads);
  o.fields = {FieldOptions{
      .field = "pixels",
      .array = {.to_float = true, .scale = 1.0f / 255, .mean = 0.286f, .std = 0.353f}}};
  return o;
}

// Every batch of the current epoch, as raw bytes per tensor, concatenated.
std::vector<std::string> Drain(Loader* loader) {
  std::vector<std::string> out;
  while (true) {
    auto next = loader->Next();
    EXPECT_TRUE(next.ok()) << next.status().ToString();
    if (!next.ok() || !next->has_value()) break;
    std::string bytes;
    for (const TensorView& t : (*next)->tensors()) {
      bytes.append(static_cast<const char*>(t.data), t.bytes());
    }
    out.push_back(std::move(bytes));
  }
  return out;
}

std::vector<int64_t> Labels(const Batch& b) {
  const TensorView* t = b.Find("label");
  const auto* p = static_cast<const int64_t*>(t->data);
  return std::vector<int64_t>(p, p + t->shape[0]);
}

TEST(LoaderTest, EverySampleOncePerEpochAndEpochsDiffer) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK(WriteArrayDataset(dir.path(), 100));
  SATURATE_ASSERT_OK_AND_ASSIGN(auto loader, Loader::Open(ArrayOptions(dir.path())));
  EXPECT_EQ(loader->batches_per_epoch(), 13u);
  std::vector<int64_t> epoch0, epoch1;
  for (auto* labels : {&epoch0, &epoch1}) {
    while (true) {
      SATURATE_ASSERT_OK_AND_ASSIGN(auto b, loader->Next());
      if (!b) break;
      const TensorView* px = b->Find("pixels");
      ASSERT_EQ(px->shape, (std::vector<int64_t>{static_cast<int64_t>(b->size()), 4, 4}));
      auto l = Labels(*b);
      for (size_t s = 0; s < l.size(); ++s) {  // pixels travel with their label
        EXPECT_EQ(static_cast<const uint8_t*>(px->data)[s * 16 + 5], l[s] % 251);
      }
      labels->insert(labels->end(), l.begin(), l.end());
    }
    SATURATE_ASSERT_OK(loader->SetEpoch(1));
  }
  EXPECT_EQ(std::set<int64_t>(epoch0.begin(), epoch0.end()).size(), 100u);
  EXPECT_EQ(std::set<int64_t>(epoch1.begin(), epoch1.end()).size(), 100u);
  EXPECT_NE(epoch0, epoch1);
  EXPECT_EQ(loader->stats().batches_delivered, 26u);
}

TEST(LoaderTest, VarArraysArePaddedToTheBatchMaximumWithLengths) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK(WriteArrayDataset(dir.path(), 20));
  LoaderOptions o = ArrayOptions(dir.path());
  o.shuffle = false;
  o.fields[0].var_array.pad_value = -1;
  SATURATE_ASSERT_OK_AND_ASSIGN(auto loader, Loader::Open(o));
  SATURATE_ASSERT_OK_AND_ASSIGN(auto b, loader->Next());  // records 0..7: lengths 0,1,2,3,4,0,1,2
  const TensorView* tokens = b->Find("tokens");
  const TensorView* lengths = b->Find("tokens_lengths");
  ASSERT_NE(tokens, nullptr);
  ASSERT_NE(lengths, nullptr);
  EXPECT_EQ(tokens->shape, (std::vector<int64_t>{8, 4}));
  const auto* len = static_cast<const int64_t*>(lengths->data);
  const auto* tok = static_cast<const int32_t*>(tokens->data);
  for (int s = 0; s < 8; ++s) {
    EXPECT_EQ(len[s], s % 5);
    for (int e = 0; e < 4; ++e) EXPECT_EQ(tok[s * 4 + e], e < s % 5 ? s : -1) << s << "," << e;
  }
}

TEST(LoaderTest, ArrayToFloatNormalizes) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK(WriteArrayDataset(dir.path(), 10));
  LoaderOptions o = ArrayOptions(dir.path());
  o.shuffle = false;
  o.fields.push_back(
      FieldOptions{.field = "pixels",
                   .array = {.to_float = true, .scale = 1.0f / 255, .mean = 0.5f, .std = 0.25f}});
  SATURATE_ASSERT_OK_AND_ASSIGN(auto loader, Loader::Open(o));
  SATURATE_ASSERT_OK_AND_ASSIGN(auto b, loader->Next());
  const TensorView* px = b->Find("pixels");
  EXPECT_EQ(px->dtype, DType::kFloat32);
  const auto* f = static_cast<const float*>(px->data);
  EXPECT_NEAR(f[3 * 16], (3 / 255.0f - 0.5f) / 0.25f, 1e-6);
}

TEST(LoaderTest, OutputBytesDoNotDependOnThreadCount) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK(WriteImageDataset(dir.path(), 37));
  std::vector<std::string> reference;
  for (int threads : {1, 2, 8}) {
    SATURATE_ASSERT_OK_AND_ASSIGN(auto loader, Loader::Open(ImageOptions(dir.path(), threads)));
    auto batches = Drain(loader.get());
    ASSERT_EQ(batches.size(), 8u);
    if (reference.empty()) {
      reference = batches;
    } else {
      EXPECT_TRUE(batches == reference) << threads << " threads differ";
    }
  }
}

TEST(LoaderTest, RestoreResumesWithIdenticalBytes) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK(WriteImageDataset(dir.path(), 23));
  SATURATE_ASSERT_OK_AND_ASSIGN(auto full, Loader::Open(ImageOptions(dir.path(), 2)));
  SATURATE_ASSERT_OK(full->SetEpoch(4));
  auto expected = Drain(full.get());
  ASSERT_EQ(expected.size(), 5u);
  std::mt19937 rng(11);
  for (int trial = 0; trial < 6; ++trial) {
    uint64_t k = rng() % (expected.size() + 1);
    SATURATE_ASSERT_OK_AND_ASSIGN(auto first, Loader::Open(ImageOptions(dir.path(), 2)));
    SATURATE_ASSERT_OK(first->SetEpoch(4));
    for (uint64_t i = 0; i < k; ++i) ASSERT_TRUE(first->Next().ok());
    std::string saved = first->state().ToJson();
    first.reset();  // as if the process ended
    SATURATE_ASSERT_OK_AND_ASSIGN(auto resumed, Loader::Open(ImageOptions(dir.path(), 3)));
    SATURATE_ASSERT_OK_AND_ASSIGN(LoaderState state, LoaderState::FromJson(saved));
    EXPECT_EQ(state.batches_done, k);
    SATURATE_ASSERT_OK(resumed->Restore(state));
    auto rest = Drain(resumed.get());
    EXPECT_TRUE(std::equal(rest.begin(), rest.end(), expected.begin() + k, expected.end()))
        << "resume after batch " << k;
    EXPECT_EQ(rest.size(), expected.size() - k);
  }
  LoaderState wrong = full->state();
  wrong.batch_size = 6;
  EXPECT_EQ(full->Restore(wrong).code(), StatusCode::kInvalidArgument);
}

// Waits (up to 10 s) until the workers have completed `n` batches in all.
bool WaitForBatchesReady(const Loader& loader, uint64_t n) {
  for (int i = 0; i < 1000 && loader.stats().batches_ready < n; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return loader.stats().batches_ready >= n;
}

TEST(LoaderTest, ReadsAheadIntoTheNextEpochWithTheSameBytes) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK(WriteArrayDataset(dir.path(), 20));
  LoaderOptions options = ArrayOptions(dir.path());
  options.prefetch = 4;
  options.threads = 2;
  std::vector<std::vector<std::string>> fresh;  // each epoch from a loader of its own
  for (uint64_t e = 0; e < 12; ++e) {
    SATURATE_ASSERT_OK_AND_ASSIGN(auto loader, Loader::Open(options));
    SATURATE_ASSERT_OK(loader->SetEpoch(e));
    fresh.push_back(Drain(loader.get()));
  }
  SATURATE_ASSERT_OK_AND_ASSIGN(auto loader, Loader::Open(options));
  const uint64_t n = loader->batches_per_epoch();  // 3: fewer than prefetch
  ASSERT_EQ(n, 3u);
  EXPECT_TRUE(Drain(loader.get()) == fresh[0]);
  // Epochs in a row: each one's batches are made before its SetEpoch and kept.
  for (uint64_t e = 1; e < 8; ++e) {
    ASSERT_TRUE(WaitForBatchesReady(*loader, (e + 1) * n)) << "epoch " << e << " not read ahead";
    SATURATE_ASSERT_OK(loader->SetEpoch(e));
    EXPECT_TRUE(loader->WaitForNext(std::chrono::nanoseconds(0))) << "epoch " << e;
    EXPECT_TRUE(Drain(loader.get()) == fresh[e]) << "epoch " << e;
  }
  // Any other epoch discards what was read ahead.
  ASSERT_TRUE(WaitForBatchesReady(*loader, 9 * n));
  SATURATE_ASSERT_OK(loader->SetEpoch(11));
  EXPECT_TRUE(Drain(loader.get()) == fresh[11]);
  // As does leaving an epoch before its end.
  SATURATE_ASSERT_OK(loader->SetEpoch(9));
  ASSERT_TRUE(loader->Next().ok());
  SATURATE_ASSERT_OK(loader->SetEpoch(10));
  EXPECT_TRUE(Drain(loader.get()) == fresh[10]);
  EXPECT_EQ(loader->state().epoch, 10u);
}

TEST(LoaderTest, RanksAreDisjointAndCovering) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK(WriteArrayDataset(dir.path(), 50));
  for (uint32_t world : {2u, 3u, 4u}) {
    std::multiset<int64_t> seen;
    for (uint32_t r = 0; r < world; ++r) {
      LoaderOptions o = ArrayOptions(dir.path());
      o.rank = r;
      o.world_size = world;
      o.drop_uneven = true;
      SATURATE_ASSERT_OK_AND_ASSIGN(auto loader, Loader::Open(o));
      while (true) {
        SATURATE_ASSERT_OK_AND_ASSIGN(auto b, loader->Next());
        if (!b) break;
        for (int64_t l : Labels(*b)) seen.insert(l);
      }
    }
    EXPECT_EQ(seen.size(), 50 / world * world);
    EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), seen.size()) << world;
  }
}

// Loaders for every rank of `world`, restored from `state` (nullptr: fresh).
std::vector<std::unique_ptr<Loader>> Ranks(const std::string& dir, uint32_t world, uint64_t batch,
                                           const LoaderState* state) {
  std::vector<std::unique_ptr<Loader>> out;
  for (uint32_t r = 0; r < world; ++r) {
    LoaderOptions o = FixedOptions(dir, 2);
    o.rank = r;
    o.world_size = world;
    o.batch_size = batch;
    auto loader = Loader::Open(o);
    EXPECT_TRUE(loader.ok()) << loader.status().ToString();
    if (state != nullptr) {
      EXPECT_TRUE((*loader)->Restore(*state).ok());
    }
    out.push_back(std::move(*loader));
  }
  return out;
}

// Takes up to `batches` batches from every rank (all when 0); the labels seen.
std::vector<int64_t> Take(std::vector<std::unique_ptr<Loader>>& ranks, uint64_t batches) {
  std::vector<int64_t> labels;
  for (auto& loader : ranks) {
    for (uint64_t i = 0; batches == 0 || i < batches; ++i) {
      auto b = loader->Next();
      EXPECT_TRUE(b.ok()) << b.status().ToString();
      if (!b.ok() || !*b) break;
      for (int64_t l : Labels(**b)) labels.push_back(l);
    }
  }
  return labels;
}

// Saved by 2 ranks at batch size 4, resumed by 3 at batch size 5, saved
// again and resumed by 2: the epoch is read once, and the next epoch is the
// one a fresh run of the new size reads.
TEST(LoaderTest, ElasticResumeAcrossWorldAndBatchSizes) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK(WriteFixedDataset(dir.path(), 50));
  auto two = Ranks(dir.path(), 2, 4, nullptr);
  for (auto& l : two) SATURATE_ASSERT_OK(l->SetEpoch(3));
  std::vector<int64_t> seen = Take(two, 3);  // 24 of 50
  const LoaderState at_two = two[1]->state();
  EXPECT_EQ(at_two.batches_done, 3u);

  auto three = Ranks(dir.path(), 3, 5, &at_two);
  EXPECT_EQ(three[0]->state().epoch_start_sample, 24u);
  std::vector<int64_t> more = Take(three, 1);  // 15 of the other 26
  seen.insert(seen.end(), more.begin(), more.end());
  const LoaderState at_three = three[2]->state();
  SATURATE_ASSERT_OK_AND_ASSIGN(LoaderState parsed, LoaderState::FromJson(at_three.ToJson()));
  EXPECT_EQ(parsed.epoch_start_sample, 24u);

  auto again = Ranks(dir.path(), 2, 4, &parsed);
  EXPECT_EQ(again[0]->state().epoch_start_sample, 39u);
  std::vector<int64_t> rest = Take(again, 0);  // the last 11, padded to 12
  EXPECT_EQ(rest.size(), 12u);
  seen.insert(seen.end(), rest.begin(), rest.end() - 1);
  std::sort(seen.begin(), seen.end());
  std::vector<int64_t> all(50);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(seen, all);  // every record once

  // The next epoch is whole, and the same as a fresh run's.
  for (auto& l : again) SATURATE_ASSERT_OK(l->SetEpoch(4));
  auto fresh = Ranks(dir.path(), 2, 4, nullptr);
  for (auto& l : fresh) SATURATE_ASSERT_OK(l->SetEpoch(4));
  EXPECT_EQ(Take(again, 0), Take(fresh, 0));

  // A state past its epoch's end starts the next epoch.
  LoaderState done = at_two;
  done.batches_done = 7;  // ceil(25 / 4): rank 0 of 2 at the end
  auto after = Ranks(dir.path(), 3, 5, &done);
  EXPECT_EQ(after[0]->state().epoch, 4u);
  done.batches_done = 8;
  LoaderOptions o = FixedOptions(dir.path(), 1);
  o.world_size = 3;
  SATURATE_ASSERT_OK_AND_ASSIGN(auto one, Loader::Open(o));
  EXPECT_EQ(one->Restore(done).code(), StatusCode::kInvalidArgument);
}

// Flips a byte inside record `record`'s payload of the only shard.
void CorruptRecord(const std::string& dir, uint64_t record) {
  const std::string path = dir + "/" + format::ShardFileName(0);
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(f)), {});
  auto bytes = std::as_bytes(std::span(all.data(), all.size()));
  auto footer = format::DecodeFooter(bytes);
  ASSERT_TRUE(footer.ok());
  auto e = format::DecodeIndexEntry(bytes.data() + footer->index_offset + record * 24);
  f.seekp(static_cast<std::streamoff>(e.offset + e.length - 70));
  f.put('\x5a');
}

TEST(LoaderTest, CorruptRecordFailsItsBatchWithContextOrIsSkipped) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK(WriteImageDataset(dir.path(), 20));
  CorruptRecord(dir.path(), 13);
  LoaderOptions o = ImageOptions(dir.path(), 2);
  o.shuffle = false;
  SATURATE_ASSERT_OK_AND_ASSIGN(auto loader, Loader::Open(o));
  std::vector<Status> errors;
  uint64_t batches = 0;
  while (true) {
    auto b = loader->Next();
    if (!b.ok()) {
      errors.push_back(b.status());
      continue;
    }
    if (!*b) break;
    ++batches;
  }
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_TRUE(testing::HasError(errors[0], StatusCode::kCorruption,
                                {"shard-00000.srec: record 13", "checksum", "read"}));
  EXPECT_EQ(batches, 3u);

  o.skip_bad = true;
  SATURATE_ASSERT_OK_AND_ASSIGN(auto skipping, Loader::Open(o));
  uint64_t samples = 0;
  while (true) {
    SATURATE_ASSERT_OK_AND_ASSIGN(auto b, skipping->Next());
    if (!b) break;
    samples += b->size();
    for (int64_t l : Labels(*b)) EXPECT_NE(l, 13);
  }
  EXPECT_EQ(samples, 19u);
  // Skipped in epoch 0, and again if the workers have read that far into epoch 1.
  EXPECT_GE(skipping->stats().skipped, 1u);
  EXPECT_LE(skipping->stats().skipped, 2u);
}

// Counts live buffers, to check the pool bound.
class CountingAllocator : public BatchAllocator {
 public:
  Result<void*> Allocate(size_t bytes) override {
    ++allocations;
    peak = std::max(peak.load(), ++live);
    return HostAllocator()->Allocate(bytes);
  }
  void Free(void* p, size_t bytes) override {
    --live;
    HostAllocator()->Free(p, bytes);
  }
  std::atomic<int> allocations{0}, live{0}, peak{0};
};

// The gather path writes every sample where the per-sample formula says,
// whatever the thread count, and resumes to the same bytes.
TEST(LoaderTest, FixedSizeRecordsAreGatheredIntoTheBatch) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK(WriteFixedDataset(dir.path(), 150));
  const float mul = 1.0f / 255 / 0.353f, add = -0.286f / 0.353f;
  std::vector<std::string> reference;
  for (int threads : {1, 2, 3}) {
    SATURATE_ASSERT_OK_AND_ASSIGN(auto loader, Loader::Open(FixedOptions(dir.path(), threads)));
    SATURATE_ASSERT_OK(loader->SetEpoch(2));
    std::vector<std::string> batches;
    std::set<int64_t> seen;
    while (true) {
      SATURATE_ASSERT_OK_AND_ASSIGN(auto b, loader->Next());
      if (!b) break;
      const auto* px = static_cast<const float*>(b->Find("pixels")->data);
      const std::vector<int64_t> labels = Labels(*b);
      for (size_t s = 0; s < labels.size(); ++s) {
        seen.insert(labels[s]);
        for (size_t k = 0; k < 156; ++k) {
          const float want =
              static_cast<float>(static_cast<uint8_t>(labels[s] * 7 + k)) * mul + add;
          ASSERT_EQ(px[s * 156 + k], want) << "label " << labels[s] << " element " << k;
        }
      }
      std::string bytes;
      for (const TensorView& t : b->tensors()) {
        bytes.append(static_cast<const char*>(t.data), t.bytes());
      }
      batches.push_back(std::move(bytes));
    }
    EXPECT_EQ(seen.size(), 150u);
    if (reference.empty()) {
      reference = batches;
    } else {
      EXPECT_TRUE(batches == reference) << threads << " threads differ";
    }
  }
  SATURATE_ASSERT_OK_AND_ASSIGN(auto first, Loader::Open(FixedOptions(dir.path(), 2)));
  SATURATE_ASSERT_OK(first->SetEpoch(2));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(first->Next().ok());
  const LoaderState state = first->state();
  first.reset();
  SATURATE_ASSERT_OK_AND_ASSIGN(auto resumed, Loader::Open(FixedOptions(dir.path(), 1)));
  SATURATE_ASSERT_OK(resumed->Restore(state));
  auto rest = Drain(resumed.get());
  ASSERT_EQ(rest.size(), reference.size() - 4);
  EXPECT_TRUE(std::equal(rest.begin(), rest.end(), reference.begin() + 4));
}

// Pinned buffers a GPU reads (read_by_device) get the float arrays through
// streaming stores: the same bytes, slots aligned or not (156 floats: every
// other slot starts off a 32-byte boundary).
TEST(LoaderTest, BuffersReadByADeviceGetTheSameBytes) {
  class DeviceRead : public CountingAllocator {
   public:
    bool read_by_device() const override { return true; }
  };
  testing::TempDir dir;
  SATURATE_ASSERT_OK(WriteFixedDataset(dir.path(), 150));
  std::vector<std::string> want, got;
  for (bool device : {false, true}) {
    LoaderOptions o = FixedOptions(dir.path(), 2);
    std::shared_ptr<CountingAllocator> allocator = std::make_shared<CountingAllocator>();
    if (device) allocator = std::make_shared<DeviceRead>();
    o.allocator = allocator;
    SATURATE_ASSERT_OK_AND_ASSIGN(auto loader, Loader::Open(o));
    (device ? got : want) = Drain(loader.get());
    EXPECT_GT(allocator->allocations.load(), 0);
  }
  ASSERT_EQ(got.size(), want.size());
  EXPECT_TRUE(got == want);
}

TEST(LoaderTest, CorruptFixedSizeRecordFailsItsBatchOrIsSkipped) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK(WriteFixedDataset(dir.path(), 40));
  CorruptRecord(dir.path(), 21);
  LoaderOptions o = FixedOptions(dir.path(), 2);
  o.shuffle = false;
  SATURATE_ASSERT_OK_AND_ASSIGN(auto loader, Loader::Open(o));
  std::vector<Status> errors;
  std::vector<uint64_t> sizes;
  while (true) {
    auto b = loader->Next();
    if (!b.ok()) {
      errors.push_back(b.status());
      continue;
    }
    if (!*b) break;
    sizes.push_back((*b)->size());
  }
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_TRUE(testing::HasError(errors[0], StatusCode::kCorruption,
                                {"shard-00000.srec: record 21", "checksum", "read"}));
  EXPECT_EQ(sizes, (std::vector<uint64_t>{16, 8}));  // batch 1 (records 16..31) failed

  o.skip_bad = true;
  SATURATE_ASSERT_OK_AND_ASSIGN(auto skipping, Loader::Open(o));
  std::vector<int64_t> labels;
  while (true) {
    SATURATE_ASSERT_OK_AND_ASSIGN(auto b, skipping->Next());
    if (!b) break;
    for (int64_t l : Labels(*b)) labels.push_back(l);
  }
  EXPECT_EQ(labels.size(), 39u);
  EXPECT_EQ(std::count(labels.begin(), labels.end(), 21), 0);
  EXPECT_EQ(labels[21], 22);  // compacted: the slots after it moved down
}

TEST(LoaderTest, MemoryIsBoundedByThePool) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK(WriteArrayDataset(dir.path(), 200));
  auto counting = std::make_shared<CountingAllocator>();
  LoaderOptions o = ArrayOptions(dir.path());
  o.prefetch = 3;
  o.max_held_batches = 2;
  o.threads = 4;
  o.allocator = counting;
  {
    SATURATE_ASSERT_OK_AND_ASSIGN(auto loader, Loader::Open(o));
    for (int epoch = 0; epoch < 10; ++epoch) {
      SATURATE_ASSERT_OK(loader->SetEpoch(epoch));
      EXPECT_EQ(Drain(loader.get()).size(), 25u);
    }
    EXPECT_LE(counting->peak.load(), 5);  // prefetch + max_held_batches
  }
  EXPECT_EQ(counting->live.load(), 0);  // all returned and freed
}

TEST(LoaderTest, HoldingTooManyBatchesIsAnErrorNotADeadlock) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK(WriteArrayDataset(dir.path(), 100));
  LoaderOptions o = ArrayOptions(dir.path());
  o.prefetch = 1;
  o.max_held_batches = 1;
  SATURATE_ASSERT_OK_AND_ASSIGN(auto loader, Loader::Open(o));
  std::vector<Batch> held;
  Status error;
  for (int i = 0; i < 4 && error.ok(); ++i) {
    auto b = loader->Next();
    if (b.ok()) {
      held.push_back(std::move(**b));
    } else {
      error = b.status();
    }
  }
  EXPECT_TRUE(testing::HasError(error, StatusCode::kInvalidArgument, {"max_held_batches"}));
  held.clear();
  EXPECT_TRUE(loader->Next().ok());  // released: production resumes
}

TEST(LoaderTest, WaitForNextReportsWhenNextWouldNotBlock) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK(WriteArrayDataset(dir.path(), 20));
  LoaderOptions o = ArrayOptions(dir.path());
  o.prefetch = 1;
  o.max_held_batches = 1;
  SATURATE_ASSERT_OK_AND_ASSIGN(auto loader, Loader::Open(o));
  std::vector<Batch> held;
  while (true) {
    ASSERT_TRUE(loader->WaitForNext(std::chrono::seconds(10)));
    auto b = loader->Next();
    if (!b.ok()) break;  // all buffers held: reported ready, then an error
    ASSERT_TRUE(b->has_value());
    held.push_back(std::move(**b));
  }
  EXPECT_EQ(held.size(), 2u);  // prefetch + max_held_batches
  held.clear();
  std::vector<std::string> rest = Drain(loader.get());
  EXPECT_EQ(rest.size(), 1u);                                     // 20 samples = 3 batches of 8
  EXPECT_TRUE(loader->WaitForNext(std::chrono::nanoseconds(0)));  // epoch end is ready
  EXPECT_GT(loader->stats().wait_ns, 0u);
}

TEST(LoaderTest, EarlyDestructionNeverHangsAndBatchesOutliveTheLoader) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK(WriteImageDataset(dir.path(), 40));
  std::optional<Batch> kept;
  for (int i = 0; i < 5; ++i) {
    SATURATE_ASSERT_OK_AND_ASSIGN(auto loader, Loader::Open(ImageOptions(dir.path(), 4)));
    if (i % 2 == 0) {
      SATURATE_ASSERT_OK_AND_ASSIGN(auto b, loader->Next());
      kept = std::move(b);
    }
  }  // destroyed with workers mid-epoch
  ASSERT_TRUE(kept.has_value());
  EXPECT_EQ(kept->Find("image")->shape, (std::vector<int64_t>{5, 3, 32, 32}));
  kept.reset();
}

TEST(LoaderTest, BadOptionsAreClearErrors) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK(WriteArrayDataset(dir.path(), 10));
  LoaderOptions o = ArrayOptions(dir.path());
  o.fields.clear();  // var array without max_length
  EXPECT_TRUE(testing::HasError(Loader::Open(o).status(), StatusCode::kInvalidArgument,
                                {"'tokens'", "max_length"}));
  o = ArrayOptions(dir.path());
  o.fields.push_back(FieldOptions{.field = "nope"});
  EXPECT_EQ(Loader::Open(o).status().code(), StatusCode::kNotFound);
  o = ArrayOptions(dir.path());
  o.rank = 3;
  o.world_size = 2;
  EXPECT_FALSE(Loader::Open(o).ok());
  o = ArrayOptions(dir.path() + "/missing");
  EXPECT_EQ(Loader::Open(o).status().code(), StatusCode::kNotFound);
}

TEST(LoaderTest, TracesWaitsBatchLoadsAndCounters) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK(WriteImageDataset(dir.path(), 40));
  const std::string run = dir.Join("run");
  SATURATE_ASSERT_OK(trace::Start(run));
  {
    SATURATE_ASSERT_OK_AND_ASSIGN(auto loader, Loader::Open(ImageOptions(dir.path(), 2)));
    ASSERT_TRUE(loader->WaitForNext(std::chrono::seconds(10)));  // a wait that starts early
    EXPECT_EQ(Drain(loader.get()).size(), 8u);
  }  // the last counters record
  SATURATE_ASSERT_OK(trace::Stop());

  SATURATE_ASSERT_OK_AND_ASSIGN(
      std::string text, ReadFileToString(run + "/spans-" + std::to_string(getpid()) + ".jsonl"));
  std::istringstream lines(text);
  std::map<int64_t, int64_t> waits;                       // per batch: data_wait spans
  std::map<std::pair<int64_t, int64_t>, int64_t> loaded;  // per (epoch, batch): samples loaded
  std::set<int64_t> consumer_tids, worker_tids;
  std::vector<nlohmann::json> counters;
  for (std::string line; std::getline(lines, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["ph"] == "X" && j["name"] == "data_wait") {
      EXPECT_EQ(j["cat"], "loader");
      EXPECT_GE(j["dur_ns"].get<int64_t>(), 0);
      ++waits[j["args"]["batch"].get<int64_t>()];
      consumer_tids.insert(j["tid"].get<int64_t>());
    } else if (j["ph"] == "X" && j["name"] == "load_batch") {
      EXPECT_EQ(j["cat"], "loader");
      for (const char* key : {"read_ns", "decode_ns", "transform_ns"}) {
        EXPECT_TRUE(j["args"].contains(key)) << key;
      }
      loaded[{j["args"]["epoch"].get<int64_t>(), j["args"]["batch"].get<int64_t>()}] +=
          j["args"]["samples"].get<int64_t>();
      worker_tids.insert(j["tid"].get<int64_t>());
    } else if (j["ph"] == "C" && j["name"] == "loader") {
      counters.push_back(j["args"]);
    }
  }
  ASSERT_EQ(waits.size(), 8u);  // one wait per delivered batch
  for (const auto& [batch, n] : waits) EXPECT_EQ(n, 1) << batch;
  // Epoch 0's eight batches; the workers may have gone on into epoch 1.
  for (int64_t batch = 0; batch < 8; ++batch) EXPECT_EQ((loaded[{0, batch}]), 5) << batch;
  for (const auto& [key, samples] : loaded) {
    EXPECT_LE(key.first, 1) << "more than one epoch ahead";
    EXPECT_LE(samples, 5);
  }
  EXPECT_EQ(consumer_tids.size(), 1u);
  EXPECT_FALSE(worker_tids.empty());
  EXPECT_EQ(worker_tids.count(*consumer_tids.begin()), 0u);  // loads run on the workers
  ASSERT_GE(counters.size(), 2u);  // at the first batch and at destruction
  const nlohmann::json& last = counters.back();
  EXPECT_GE(last["samples"], 40);
  EXPECT_EQ(last["batches_delivered"], 8);
  EXPECT_EQ(last["batch_size"], 5);
  EXPECT_EQ(last["threads"], 2);
  for (const char* key :
       {"prefetch", "skipped", "read_ns", "decode_ns", "transform_ns", "wait_ns"}) {
    EXPECT_TRUE(last.contains(key)) << key;
  }
}

}  // namespace
}  // namespace saturate::feed
