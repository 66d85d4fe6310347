#include "saturate/checkpoint/checkpointer.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "base/file.h"
#include "base/testing.h"
#include "checkpoint/buffer_pool.h"
#include "checkpoint/format.h"
#include "saturate/remote/objects.h"

namespace saturate::checkpoint {
namespace {

namespace fs = std::filesystem;

// A float tensor named `name` filled with `value`, and its TensorRef.
struct Tensor {
  std::string name;
  std::vector<float> values;
  TensorRef ref() const {
    return {name,
            values.data(),
            values.size() * sizeof(float),
            "float32",
            {static_cast<int64_t>(values.size())},
            "cpu"};
  }
};

Tensor Filled(std::string name, size_t n, float value) {
  return {std::move(name), std::vector<float>(n, value)};
}

Result<bool> SaveTensors(Checkpointer& c, uint64_t step, const std::vector<Tensor>& tensors,
                         std::string_view metadata = "meta") {
  std::vector<TensorRef> refs;
  for (const Tensor& t : tensors) refs.push_back(t.ref());
  return c.Save(step, refs, metadata);
}

// The values of tensor `name` in checkpoint `path`, read back through the manifest.
std::vector<float> ReadTensor(const std::string& path, const Manifest& m, const std::string& name) {
  for (const TensorEntry& t : m.tensors) {
    if (t.name != name) continue;
    auto file = ReadOnlyFile::Open(path + "/" + t.file);
    EXPECT_TRUE(file.ok());
    std::vector<std::byte> scratch;
    auto bytes = (*file)->Read(t.offset, t.bytes, &scratch);
    EXPECT_TRUE(bytes.ok());
    std::vector<float> out(t.bytes / sizeof(float));
    std::memcpy(out.data(), bytes->data(), t.bytes);
    return out;
  }
  ADD_FAILURE() << "no tensor " << name;
  return {};
}

void FlipByte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0xff);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

TEST(CheckpointerTest, SaveCommitsAndLoadReturnsTheSameBytes) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK_AND_ASSIGN(auto ckpt, Checkpointer::Open(dir.path()));
  std::vector<Tensor> tensors = {Filled("model/w", 1000, 1.5f), Filled("model/b", 3, -2.0f),
                                 Filled("empty", 0, 0)};
  SATURATE_ASSERT_OK_AND_ASSIGN(bool saved, SaveTensors(*ckpt, 7, tensors, "pickled"));
  EXPECT_TRUE(saved);
  SATURATE_ASSERT_OK(ckpt->Wait());

  EXPECT_TRUE(fs::is_directory(dir.Join("step-7")));
  EXPECT_FALSE(fs::exists(dir.Join("step-7.tmp")));
  SATURATE_ASSERT_OK_AND_ASSIGN(LoadResult r, LoadNewest(dir.path()));
  ASSERT_TRUE(r.found);
  EXPECT_TRUE(r.warnings.empty());
  EXPECT_EQ(r.path, dir.Join("step-7"));
  EXPECT_EQ(r.manifest.step, 7u);
  ASSERT_EQ(r.manifest.tensors.size(), 3u);
  EXPECT_EQ(r.manifest.tensors[0].dtype, "float32");
  EXPECT_EQ(r.manifest.tensors[0].shape, std::vector<int64_t>{1000});
  EXPECT_EQ(r.manifest.tensors[1].offset % kTensorAlignment, 0u);
  EXPECT_EQ(ReadTensor(r.path, r.manifest, "model/w"), tensors[0].values);
  EXPECT_EQ(ReadTensor(r.path, r.manifest, "model/b"), tensors[1].values);
  SATURATE_ASSERT_OK_AND_ASSIGN(std::string meta, ReadFileToString(r.path + "/metadata.bin"));
  EXPECT_EQ(meta, "pickled");

  CheckpointStats s = ckpt->stats();
  EXPECT_EQ(s.saves, 1u);
  EXPECT_EQ(s.commits, 1u);
  EXPECT_GT(s.last_blocking_ns, 0);
  EXPECT_GT(s.bytes_written, 4000u);
  EXPECT_TRUE(s.has_committed);
  EXPECT_EQ(s.last_committed_step, 7u);
  SATURATE_ASSERT_OK(ckpt->Close());
}

TEST(CheckpointerTest, KeepsTheLastN) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK_AND_ASSIGN(auto ckpt, Checkpointer::Open(dir.path(), {.keep = 2}));
  for (uint64_t step = 1; step <= 5; ++step) {
    SATURATE_ASSERT_OK(SaveTensors(*ckpt, step * 10, {Filled("x", 16, float(step))}).status());
  }
  SATURATE_ASSERT_OK(ckpt->Wait());
  SATURATE_ASSERT_OK_AND_ASSIGN(auto all, List(dir.path()));
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].step, 50u);
  EXPECT_EQ(all[1].step, 40u);
}

TEST(CheckpointerTest, RetentionNeverRemovesTheCheckpointJustCommitted) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK_AND_ASSIGN(auto ckpt, Checkpointer::Open(dir.path(), {.keep = 1}));
  SATURATE_ASSERT_OK(SaveTensors(*ckpt, 100, {Filled("x", 4, 1)}).status());
  SATURATE_ASSERT_OK(SaveTensors(*ckpt, 50, {Filled("x", 4, 2)}).status());  // after a resume
  SATURATE_ASSERT_OK(ckpt->Wait());
  SATURATE_ASSERT_OK_AND_ASSIGN(auto all, List(dir.path()));
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].step, 50u);
}

TEST(CheckpointerTest, SavingTheSameStepAgainReplacesIt) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK_AND_ASSIGN(auto ckpt, Checkpointer::Open(dir.path()));
  SATURATE_ASSERT_OK(SaveTensors(*ckpt, 3, {Filled("x", 8, 1)}).status());
  SATURATE_ASSERT_OK(SaveTensors(*ckpt, 3, {Filled("x", 8, 2)}).status());
  SATURATE_ASSERT_OK(ckpt->Wait());
  SATURATE_ASSERT_OK_AND_ASSIGN(LoadResult r, LoadNewest(dir.path()));
  EXPECT_EQ(ReadTensor(r.path, r.manifest, "x"), std::vector<float>(8, 2));
  EXPECT_FALSE(fs::exists(dir.Join("step-3.tmp")));
}

TEST(CheckpointerTest, TensorsModifiedRightAfterSaveAreNotWritten) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK_AND_ASSIGN(auto ckpt, Checkpointer::Open(dir.path()));
  // Large enough that the write is still running when the caller scribbles.
  Tensor big = Filled("big", 16 << 20, 1.0f);
  SATURATE_ASSERT_OK(SaveTensors(*ckpt, 1, {big}).status());
  std::fill(big.values.begin(), big.values.end(), 2.0f);
  SATURATE_ASSERT_OK(ckpt->Wait());
  SATURATE_ASSERT_OK_AND_ASSIGN(LoadResult r, LoadNewest(dir.path()));
  std::vector<float> back = ReadTensor(r.path, r.manifest, "big");
  ASSERT_EQ(back.size(), big.values.size());
  EXPECT_TRUE(std::all_of(back.begin(), back.end(), [](float v) { return v == 1.0f; }));
}

TEST(CheckpointerTest, CorruptOrIncompleteCheckpointsAreSkippedWithAWarning) {
  // Each damage is applied to the newest of two checkpoints; load must fall
  // back to the older one and name the damaged one.
  struct Damage {
    std::string what;
    std::function<void(const std::string&)> apply;
  };
  std::vector<Damage> damages = {
      {"flipped tensor byte", [](const std::string& p) { FlipByte(p + "/tensors.bin", 100); }},
      {"flipped metadata byte", [](const std::string& p) { FlipByte(p + "/metadata.bin", 0); }},
      {"flipped manifest byte", [](const std::string& p) { FlipByte(p + "/manifest.json", 40); }},
      {"truncated tensors", [](const std::string& p) { fs::resize_file(p + "/tensors.bin", 10); }},
      {"missing manifest", [](const std::string& p) { fs::remove(p + "/manifest.json"); }},
      {"missing tensors", [](const std::string& p) { fs::remove(p + "/tensors.bin"); }},
  };
  for (const Damage& d : damages) {
    SCOPED_TRACE(d.what);
    testing::TempDir dir;
    {
      SATURATE_ASSERT_OK_AND_ASSIGN(auto ckpt, Checkpointer::Open(dir.path()));
      SATURATE_ASSERT_OK(SaveTensors(*ckpt, 1, {Filled("x", 64, 1)}, "old").status());
      SATURATE_ASSERT_OK(SaveTensors(*ckpt, 2, {Filled("x", 64, 2)}, "new").status());
      SATURATE_ASSERT_OK(ckpt->Close());
    }
    d.apply(dir.Join("step-2"));
    SATURATE_ASSERT_OK_AND_ASSIGN(LoadResult r, LoadNewest(dir.path()));
    EXPECT_EQ(r.manifest.step, 1u);
    ASSERT_EQ(r.warnings.size(), 1u);
    EXPECT_NE(r.warnings[0].find(dir.Join("step-2")), std::string::npos) << r.warnings[0];
    auto verify = Verify(dir.Join("step-2"));
    EXPECT_EQ(verify.status().code(), StatusCode::kCorruption) << verify.status().ToString();
  }
}

TEST(CheckpointerTest, InterruptedSaveIsNamedAndIgnored) {
  testing::TempDir dir;
  {
    SATURATE_ASSERT_OK_AND_ASSIGN(auto ckpt, Checkpointer::Open(dir.path()));
    SATURATE_ASSERT_OK(SaveTensors(*ckpt, 1, {Filled("x", 4, 1)}).status());
  }
  fs::create_directory(dir.Join("step-2.tmp"));  // as a kill -9 mid-write leaves it
  SATURATE_ASSERT_OK_AND_ASSIGN(LoadResult r, LoadNewest(dir.path()));
  EXPECT_EQ(r.manifest.step, 1u);
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("step-2.tmp"), std::string::npos);
  // The next run's Open() clears it.
  SATURATE_ASSERT_OK_AND_ASSIGN(auto again, Checkpointer::Open(dir.path()));
  EXPECT_FALSE(fs::exists(dir.Join("step-2.tmp")));
}

TEST(CheckpointerTest, NoCheckpointIsAFreshStartAndAllCorruptIsAnError) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK_AND_ASSIGN(LoadResult none, LoadNewest(dir.path()));
  EXPECT_FALSE(none.found);
  EXPECT_EQ(LoadNewest(dir.Join("missing")).status().code(), StatusCode::kNotFound);
  {
    SATURATE_ASSERT_OK_AND_ASSIGN(auto ckpt, Checkpointer::Open(dir.path()));
    SATURATE_ASSERT_OK(SaveTensors(*ckpt, 4, {Filled("x", 4, 1)}).status());
  }
  FlipByte(dir.Join("step-4/tensors.bin"), 0);
  EXPECT_TRUE(testing::HasError(LoadNewest(dir.path()).status(), StatusCode::kCorruption,
                                {"no checkpoint", "step-4", "checksum mismatch"}));
}

// RLIMIT_FSIZE makes write() fail with EFBIG (tests run as root, so a
// read-only mode would not stop them).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    getrlimit(RLIMIT_FSIZE, &old_);
    rlimit limit = old_;
    limit.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit old_;
  void (*old_handler_)(int);
};

TEST(CheckpointerTest, FailedWriteIsReportedAndLeavesThePreviousIntact) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK_AND_ASSIGN(auto ckpt, Checkpointer::Open(dir.path()));
  SATURATE_ASSERT_OK(SaveTensors(*ckpt, 1, {Filled("x", 1024, 1)}).status());
  SATURATE_ASSERT_OK(ckpt->Wait());
  {
    FileSizeLimit limit(1 << 20);
    SATURATE_ASSERT_OK(SaveTensors(*ckpt, 2, {Filled("x", 1 << 20, 2)}).status());
    EXPECT_TRUE(testing::HasError(ckpt->Wait(), StatusCode::kIOError,
                                  {"checkpoint step 2", "step-2.tmp/tensors.bin"}));
  }
  EXPECT_FALSE(fs::exists(dir.Join("step-2.tmp")));
  EXPECT_FALSE(fs::exists(dir.Join("step-2")));
  SATURATE_ASSERT_OK_AND_ASSIGN(LoadResult r, LoadNewest(dir.path()));
  EXPECT_EQ(r.manifest.step, 1u);
  EXPECT_EQ(ReadTensor(r.path, r.manifest, "x"), std::vector<float>(1024, 1));
  EXPECT_EQ(ckpt->stats().failed, 1u);
  // Reported once; later saves work again.
  SATURATE_ASSERT_OK(SaveTensors(*ckpt, 3, {Filled("x", 4, 3)}).status());
  SATURATE_ASSERT_OK(ckpt->Close());
}

TEST(CheckpointerTest, FailureIsReportedByTheNextSave) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK_AND_ASSIGN(auto ckpt, Checkpointer::Open(dir.path()));
  {
    FileSizeLimit limit(1 << 16);
    SATURATE_ASSERT_OK(SaveTensors(*ckpt, 1, {Filled("x", 1 << 16, 2)}).status());
    ckpt->WaitFor(int64_t{10} * 1000 * 1000 * 1000);
  }
  EXPECT_EQ(SaveTensors(*ckpt, 2, {Filled("x", 4, 1)}).status().code(), StatusCode::kIOError);
  SATURATE_EXPECT_OK(ckpt->Wait());
}

TEST(CheckpointerTest, UnwritableDirectoryIsAClearError) {
  testing::TempDir dir;
  std::ofstream(dir.Join("file")) << "x";
  auto under_file = Checkpointer::Open(dir.Join("file/ckpt"));
  EXPECT_EQ(under_file.status().code(), StatusCode::kIOError);
  EXPECT_NE(under_file.status().message().find("file/ckpt"), std::string::npos);
  auto is_file = Checkpointer::Open(dir.Join("file"));
  EXPECT_TRUE(
      testing::HasError(is_file.status(), StatusCode::kIOError, {"file", "ot a directory"}));
  EXPECT_EQ(Checkpointer::Open(dir.path(), {.keep = 0}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(CheckpointerTest, SkipWhenBusyCountsAndSavesNothing) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK_AND_ASSIGN(auto ckpt,
                                Checkpointer::Open(dir.path(), {.on_busy = OnBusy::kSkip}));
  Tensor t = Filled("x", 4, 1);
  std::vector<TensorRef> refs = {t.ref()};
  // A begun snapshot holds the only slot, as a write in flight does.
  SATURATE_ASSERT_OK_AND_ASSIGN(auto pending, ckpt->Begin(1, refs));
  ASSERT_FALSE(pending->skipped());
  SATURATE_ASSERT_OK_AND_ASSIGN(bool saved, ckpt->Save(2, refs, ""));
  EXPECT_FALSE(saved);
  EXPECT_EQ(ckpt->stats().skipped, 1u);
  SATURATE_ASSERT_OK(ckpt->Commit(std::move(pending), ""));
  SATURATE_ASSERT_OK(ckpt->Wait());
  SATURATE_ASSERT_OK_AND_ASSIGN(saved, ckpt->Save(3, refs, ""));
  EXPECT_TRUE(saved);
  SATURATE_ASSERT_OK(ckpt->Wait());
  SATURATE_ASSERT_OK_AND_ASSIGN(auto all, List(dir.path()));
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].step, 3u);
  EXPECT_EQ(all[1].step, 1u);
}

TEST(CheckpointerTest, WaitWhenBusyBlocksUntilASlotIsFree) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK_AND_ASSIGN(auto ckpt, Checkpointer::Open(dir.path()));
  Tensor t = Filled("x", 4, 1);
  std::vector<TensorRef> refs = {t.ref()};
  SATURATE_ASSERT_OK_AND_ASSIGN(auto pending, ckpt->Begin(1, refs));
  std::atomic<bool> committed{false}, saved_after_commit{false};
  std::thread second([&] {
    auto saved = ckpt->Save(2, refs, "");
    saved_after_commit = committed.load() && saved.ok() && *saved;
  });
  committed = true;  // set before the slot is given back, so the order is observable
  SATURATE_ASSERT_OK(ckpt->Commit(std::move(pending), ""));
  second.join();
  EXPECT_TRUE(saved_after_commit);
  SATURATE_ASSERT_OK(ckpt->Wait());
  EXPECT_EQ(ckpt->stats().commits, 2u);
  EXPECT_EQ(ckpt->stats().skipped, 0u);
}

TEST(CheckpointerTest, BeginLeavesDeviceTensorsToTheCaller) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK_AND_ASSIGN(auto ckpt, Checkpointer::Open(dir.path()));
  Tensor host = Filled("host", 8, 1);
  std::vector<TensorRef> refs = {host.ref(),
                                 {"gpu", nullptr, 8 * sizeof(float), "float32", {8}, "cuda:0"}};
  SATURATE_ASSERT_OK_AND_ASSIGN(auto pending, ckpt->Begin(5, refs));
  std::vector<float> fill(8, 9.0f);
  std::memcpy(pending->destination(1), fill.data(), 8 * sizeof(float));  // the D2H copy
  SATURATE_ASSERT_OK(ckpt->Commit(std::move(pending), ""));
  SATURATE_ASSERT_OK(ckpt->Wait());
  SATURATE_ASSERT_OK_AND_ASSIGN(LoadResult r, LoadNewest(dir.path()));
  EXPECT_EQ(ReadTensor(r.path, r.manifest, "gpu"), fill);
  EXPECT_EQ(r.manifest.tensors[1].device, "cuda:0");
  EXPECT_EQ(ReadTensor(r.path, r.manifest, "host"), host.values);
  // Save() refuses a tensor without data.
  EXPECT_EQ(ckpt->Save(6, refs, "").status().code(), StatusCode::kInvalidArgument);
}

TEST(CheckpointerTest, AbandonedBeginGivesItsSlotBack) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK_AND_ASSIGN(auto ckpt,
                                Checkpointer::Open(dir.path(), {.on_busy = OnBusy::kSkip}));
  Tensor t = Filled("x", 4, 1);
  std::vector<TensorRef> refs = {t.ref()};
  { SATURATE_ASSERT_OK_AND_ASSIGN(auto pending, ckpt->Begin(1, refs)); }
  SATURATE_ASSERT_OK_AND_ASSIGN(bool saved, ckpt->Save(2, refs, ""));
  EXPECT_TRUE(saved);
}

TEST(CheckpointerTest, ClosedCheckpointerRefusesToSave) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK_AND_ASSIGN(auto ckpt, Checkpointer::Open(dir.path()));
  SATURATE_ASSERT_OK(ckpt->Close());
  SATURATE_ASSERT_OK(ckpt->Close());
  EXPECT_TRUE(testing::HasError(SaveTensors(*ckpt, 1, {Filled("x", 4, 1)}).status(),
                                StatusCode::kInvalidArgument, {"closed"}));
}

TEST(CheckpointerTest, ParallelSnapshotCopyIsExact) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK_AND_ASSIGN(auto ckpt, Checkpointer::Open(dir.path(), {.copy_threads = 3}));
  std::vector<Tensor> tensors;
  for (int i = 0; i < 5; ++i) {
    Tensor t{"t" + std::to_string(i), std::vector<float>(3'000'001 + i)};
    for (size_t j = 0; j < t.values.size(); ++j) t.values[j] = float(j % 977) + float(i);
    tensors.push_back(std::move(t));
  }
  SATURATE_ASSERT_OK(SaveTensors(*ckpt, 1, tensors).status());
  SATURATE_ASSERT_OK(ckpt->Wait());
  SATURATE_ASSERT_OK_AND_ASSIGN(LoadResult r, LoadNewest(dir.path()));
  for (const Tensor& t : tensors) EXPECT_EQ(ReadTensor(r.path, r.manifest, t.name), t.values);
}

// ---- Prepare ----------------------------------------------------------------------

// Counts what the pool asks of the allocator, and the most it held at once.
class CountingAllocator final : public HostAllocator {
 public:
  Result<void*> Allocate(size_t bytes) override {
    if (fail) return Status::IOError("no memory for the test");
    ++allocations;
    live += bytes;
    peak = std::max(peak.load(), live.load());
    return PageAllocator()->Allocate(bytes);
  }
  void Free(void* ptr, size_t bytes) override {
    live -= bytes;
    PageAllocator()->Free(ptr, bytes);
  }
  std::atomic<uint64_t> allocations{0}, live{0}, peak{0};
  std::atomic<bool> fail{false};
};

constexpr uint64_t kMiB = uint64_t{1} << 20;

// Pages of [data, data + bytes) not in memory (mincore).
size_t PagesNotResident(const void* data, size_t bytes) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident((bytes + page - 1) / page);
  EXPECT_EQ(::mincore(const_cast<void*>(data), bytes, resident.data()), 0);
  return static_cast<size_t>(std::count_if(resident.begin(), resident.end(),
                                           [](unsigned char r) { return (r & 1) == 0; }));
}

// The pool buffer a Save() of `tensors` would copy into, looked at without
// copying anything (data cleared: Begin() then only zeroes the padding).
size_t PoolPagesNotResident(Checkpointer& c, const std::vector<Tensor>& tensors) {
  std::vector<TensorRef> refs;
  for (const Tensor& t : tensors) {
    refs.push_back(t.ref());
    refs.back().data = nullptr;
  }
  auto pending = c.Begin(1, refs);
  EXPECT_TRUE(pending.ok());
  if (!pending.ok()) return SIZE_MAX;
  return PagesNotResident((*pending)->buffer(), (*pending)->buffer_bytes());
}

std::vector<uint64_t> Sizes(const std::vector<Tensor>& tensors) {
  std::vector<uint64_t> out;
  for (const Tensor& t : tensors) out.push_back(t.values.size() * sizeof(float));
  return out;
}

TEST(CheckpointerPrepareTest, AllocatesAndFaultsInThePoolBeforeAnySave) {
  testing::TempDir dir;
  auto counting = std::make_shared<CountingAllocator>();
  SATURATE_ASSERT_OK_AND_ASSIGN(auto ckpt, Checkpointer::Open(dir.path(), {.allocator = counting}));
  // 5 MiB + 1 MiB + 4 bytes round up to one 8 MiB buffer.
  std::vector<Tensor> tensors = {Filled("w", 5 * kMiB / 4, 1), Filled("b", kMiB / 4 + 1, 2)};
  EXPECT_EQ(ckpt->stats().pool_bytes, 0u);
  SATURATE_ASSERT_OK(ckpt->Prepare(Sizes(tensors)));
  CheckpointStats s = ckpt->stats();
  EXPECT_EQ(s.pool_bytes, 8 * kMiB);
  EXPECT_EQ(s.pool_allocations, 1u);
  EXPECT_EQ(counting->allocations, 1u);
  EXPECT_EQ(s.saves, 0u);
  EXPECT_EQ(PoolPagesNotResident(*ckpt, tensors), 0u);
  EXPECT_EQ(counting->allocations, 1u);
}

TEST(CheckpointerPrepareTest, WithoutPrepareTheFirstSaveFaultsThePoolIn) {
  // The control for the test above: a fresh buffer is not in memory.
  testing::TempDir dir;
  SATURATE_ASSERT_OK_AND_ASSIGN(auto ckpt, Checkpointer::Open(dir.path()));
  std::vector<Tensor> tensors = {Filled("w", 3 * kMiB / 4, 1), Filled("b", kMiB / 4, 2)};
  EXPECT_GT(PoolPagesNotResident(*ckpt, tensors), 1000u);
  EXPECT_EQ(ckpt->stats().pool_allocations, 1u);
}

TEST(CheckpointerPrepareTest, SavesOfThePreparedSizesAllocateNothing) {
  testing::TempDir dir;
  auto counting = std::make_shared<CountingAllocator>();
  SATURATE_ASSERT_OK_AND_ASSIGN(auto ckpt, Checkpointer::Open(dir.path(), {.allocator = counting}));
  std::vector<Tensor> tensors = {Filled("w", 3 * kMiB / 4, 1), Filled("b", 1000, 2),
                                 Filled("empty", 0, 0)};
  SATURATE_ASSERT_OK(ckpt->Prepare(Sizes(tensors)));
  for (uint64_t step = 1; step <= 3; ++step) {
    tensors[1].values.assign(1000, float(step));
    SATURATE_ASSERT_OK(SaveTensors(*ckpt, step, tensors).status());
    SATURATE_ASSERT_OK(ckpt->Wait());
  }
  EXPECT_EQ(counting->allocations, 1u);
  EXPECT_EQ(ckpt->stats().pool_allocations, 1u);
  EXPECT_EQ(ckpt->stats().pool_bytes, 4 * kMiB);
  SATURATE_ASSERT_OK_AND_ASSIGN(LoadResult r, LoadNewest(dir.path()));
  EXPECT_EQ(r.manifest.step, 3u);
  EXPECT_EQ(ReadTensor(r.path, r.manifest, "w"), tensors[0].values);
  EXPECT_EQ(ReadTensor(r.path, r.manifest, "b"), tensors[1].values);
}

TEST(CheckpointerPrepareTest, PreparesOneBufferPerSnapshotSlot) {
  testing::TempDir dir;
  auto counting = std::make_shared<CountingAllocator>();
  SATURATE_ASSERT_OK_AND_ASSIGN(
      auto ckpt, Checkpointer::Open(dir.path(), {.max_in_flight = 2, .allocator = counting}));
  std::vector<Tensor> tensors = {Filled("w", 3 * kMiB / 4, 1)};
  SATURATE_ASSERT_OK(ckpt->Prepare(Sizes(tensors)));
  EXPECT_EQ(ckpt->stats().pool_bytes, 8 * kMiB);
  EXPECT_EQ(counting->allocations, 2u);
  // Two snapshots at once, both in prepared memory.
  std::vector<TensorRef> refs = {tensors[0].ref()};
  SATURATE_ASSERT_OK_AND_ASSIGN(auto first, ckpt->Begin(1, refs));
  SATURATE_ASSERT_OK_AND_ASSIGN(auto second, ckpt->Begin(2, refs));
  EXPECT_NE(first->buffer(), second->buffer());
  EXPECT_EQ(PagesNotResident(second->buffer(), second->buffer_bytes()), 0u);
  SATURATE_ASSERT_OK(ckpt->Commit(std::move(first), ""));
  SATURATE_ASSERT_OK(ckpt->Commit(std::move(second), ""));
  SATURATE_ASSERT_OK(ckpt->Wait());
  // Preparing again finds both buffers in the pool.
  SATURATE_ASSERT_OK(ckpt->Prepare(Sizes(tensors)));
  EXPECT_EQ(counting->allocations, 2u);
  EXPECT_EQ(ckpt->stats().pool_bytes, 8 * kMiB);
}

TEST(CheckpointerPrepareTest, SmallerSavesReuseThePreparedBuffer) {
  testing::TempDir dir;
  auto counting = std::make_shared<CountingAllocator>();
  SATURATE_ASSERT_OK_AND_ASSIGN(auto ckpt, Checkpointer::Open(dir.path(), {.allocator = counting}));
  SATURATE_ASSERT_OK(ckpt->Prepare(std::vector<uint64_t>{8 * kMiB}));
  std::vector<Tensor> small = {Filled("w", kMiB / 4, 3)};
  SATURATE_ASSERT_OK(SaveTensors(*ckpt, 1, small).status());
  SATURATE_ASSERT_OK(ckpt->Wait());
  EXPECT_EQ(counting->allocations, 1u);
  EXPECT_EQ(ckpt->stats().pool_bytes, 8 * kMiB);
  // Preparing smaller sizes keeps the buffer that fits them.
  SATURATE_ASSERT_OK(ckpt->Prepare(Sizes(small)));
  EXPECT_EQ(counting->allocations, 1u);
  EXPECT_EQ(ckpt->stats().pool_bytes, 8 * kMiB);
}

TEST(CheckpointerPrepareTest, LargerSavesReplaceThePreparedBufferWithoutHoldingBoth) {
  testing::TempDir dir;
  auto counting = std::make_shared<CountingAllocator>();
  SATURATE_ASSERT_OK_AND_ASSIGN(auto ckpt, Checkpointer::Open(dir.path(), {.allocator = counting}));
  SATURATE_ASSERT_OK(ckpt->Prepare(std::vector<uint64_t>{kMiB}));
  EXPECT_EQ(ckpt->stats().pool_bytes, 2 * kMiB);
  std::vector<Tensor> big = {Filled("w", 5 * kMiB / 4, 4)};
  SATURATE_ASSERT_OK(SaveTensors(*ckpt, 1, big).status());
  SATURATE_ASSERT_OK(ckpt->Wait());
  EXPECT_EQ(counting->allocations, 2u);
  EXPECT_EQ(ckpt->stats().pool_bytes, 6 * kMiB);
  EXPECT_EQ(counting->peak, 6 * kMiB);  // the 2 MiB buffer was freed before the 6 MiB one came
  // Preparing larger still: the same, ahead of the save.
  SATURATE_ASSERT_OK(ckpt->Prepare(std::vector<uint64_t>{9 * kMiB}));
  EXPECT_EQ(counting->allocations, 3u);
  EXPECT_EQ(ckpt->stats().pool_bytes, 10 * kMiB);
  EXPECT_EQ(counting->peak, 10 * kMiB);
  SATURATE_ASSERT_OK_AND_ASSIGN(LoadResult r, LoadNewest(dir.path()));
  EXPECT_EQ(ReadTensor(r.path, r.manifest, "w"), big[0].values);
}

TEST(CheckpointerPrepareTest, OpenPreparesTheGivenSizes) {
  testing::TempDir dir;
  auto counting = std::make_shared<CountingAllocator>();
  SATURATE_ASSERT_OK_AND_ASSIGN(
      auto ckpt, Checkpointer::Open(
                     dir.path(), {.allocator = counting, .prepare_tensor_bytes = {3 * kMiB, 100}}));
  EXPECT_EQ(ckpt->stats().pool_bytes, 4 * kMiB);
  EXPECT_EQ(counting->allocations, 1u);
  std::vector<Tensor> tensors = {Filled("w", 3 * kMiB / 4, 1), Filled("b", 25, 2)};
  EXPECT_EQ(PoolPagesNotResident(*ckpt, tensors), 0u);
  SATURATE_ASSERT_OK(SaveTensors(*ckpt, 1, tensors).status());
  SATURATE_ASSERT_OK(ckpt->Close());
  EXPECT_EQ(counting->allocations, 1u);
}

TEST(CheckpointerPrepareTest, FailuresAreReported) {
  testing::TempDir dir;
  auto counting = std::make_shared<CountingAllocator>();
  counting->fail = true;
  auto opened =
      Checkpointer::Open(dir.path(), {.allocator = counting, .prepare_tensor_bytes = {kMiB}});
  EXPECT_TRUE(testing::HasError(opened.status(), StatusCode::kIOError, {"prepare", "no memory"}));
  counting->fail = false;
  SATURATE_ASSERT_OK_AND_ASSIGN(auto ckpt, Checkpointer::Open(dir.path(), {.allocator = counting}));
  SATURATE_ASSERT_OK(ckpt->Close());
  EXPECT_TRUE(testing::HasError(ckpt->Prepare(std::vector<uint64_t>{kMiB}),
                                StatusCode::kInvalidArgument, {"closed"}));
  EXPECT_EQ(counting->live, 0u);
}

TEST(BufferPoolTest, PrefaultMapsEveryPageOfAnUnalignedSpan) {
  // Memory the allocator hook returns need not be page-aligned: the fallback
  // touches it page by page.
  auto* raw = static_cast<std::byte*>(
      ::mmap(nullptr, 8 * kMiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(raw, MAP_FAILED);
  HostBuffer b{raw + 100, 4 * kMiB};
  Prefault(b, 3);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  EXPECT_EQ(PagesNotResident(raw, 4 * kMiB + page), 0u);
  EXPECT_GT(PagesNotResident(raw + 5 * kMiB, 2 * kMiB), 0u);
  ::munmap(raw, 8 * kMiB);
}

TEST(YoungIntervalTest, IsTheSquareRootOfTwiceCostTimesMtbf) {
  EXPECT_DOUBLE_EQ(YoungIntervalSeconds(2.0, 3600.0), 120.0);
  EXPECT_EQ(YoungIntervalSeconds(0, 3600), 0);
  EXPECT_EQ(YoungIntervalSeconds(1, -1), 0);
}

}  // namespace
}  // namespace saturate::checkpoint

// ---- object storage (an in-memory store; tests/python cover a real S3 server) ----

namespace saturate::checkpoint {
namespace {

std::shared_ptr<remote::ObjectStore> MemoryStore() {
  return remote::NewMemoryStore(remote::ObjectUrl{remote::Scheme::kS3, "bucket", "ckpt", ""});
}

TEST(RemoteCheckpointer, UploadsFilesThenManifestAndKeepsTheNewest) {
  auto store = MemoryStore();
  CheckpointOptions options;
  options.keep = 2;
  options.store = store;
  auto ckpt = Checkpointer::Open("s3://bucket/ckpt", options);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  for (uint64_t step : {1, 2, 3}) {
    ASSERT_TRUE(
        SaveTensors(**ckpt, step, {Filled("w", 1000, float(step)), Filled("b", 3, 7)}).ok());
    ASSERT_TRUE((*ckpt)->Wait().ok());
  }
  ASSERT_TRUE((*ckpt)->Close().ok());
  // keep = 2: step 1 removed, manifest and data alike.
  EXPECT_EQ(*store->List(),
            (std::vector<std::string>{"step-2/manifest.json", "step-2/metadata.bin",
                                      "step-2/tensors.bin", "step-3/manifest.json",
                                      "step-3/metadata.bin", "step-3/tensors.bin"}));
  auto text = store->Get("step-3/manifest.json");
  ASSERT_TRUE(text.ok());
  auto m = ParseManifest(*text, "step-3/manifest.json");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->step, 3u);
  auto tensors = store->Get("step-3/tensors.bin");
  ASSERT_TRUE(tensors.ok());
  for (const FileEntry& f : m->files) {
    auto bytes = store->Get("step-3/" + f.name);
    ASSERT_TRUE(bytes.ok());
    EXPECT_EQ(bytes->size(), f.bytes);
    EXPECT_EQ(Checksum(std::as_bytes(std::span(bytes->data(), bytes->size()))), f.xxh3);
  }
  float first;
  std::memcpy(&first, tensors->data() + m->tensors[0].offset, sizeof first);
  EXPECT_EQ(first, 3.0f);
}

TEST(RemoteCheckpointer, ResavingAStepDeletesItsManifestFirst) {
  auto store = MemoryStore();
  CheckpointOptions options;
  options.store = store;
  auto ckpt = Checkpointer::Open("s3://bucket/ckpt", options);
  ASSERT_TRUE(ckpt.ok());
  ASSERT_TRUE(SaveTensors(**ckpt, 5, {Filled("w", 10, 1)}).ok());
  ASSERT_TRUE((*ckpt)->Wait().ok());
  const uint64_t puts_before = store->stats().requests;
  ASSERT_TRUE(SaveTensors(**ckpt, 5, {Filled("w", 10, 2)}).ok());
  ASSERT_TRUE((*ckpt)->Close().ok());
  EXPECT_GT(store->stats().requests, puts_before);
  auto m = ParseManifest(*store->Get("step-5/manifest.json"), "m");
  ASSERT_TRUE(m.ok());
  auto tensors = *store->Get("step-5/tensors.bin");
  EXPECT_EQ(m->files[0].xxh3, Checksum(std::as_bytes(std::span(tensors.data(), tensors.size()))));
}

TEST(RemoteCheckpointer, HttpLocationsAreRefused) {
  auto ckpt = Checkpointer::Open("http://127.0.0.1:1/ckpt");
  ASSERT_FALSE(ckpt.ok());
  EXPECT_NE(ckpt.status().message().find("s3://"), std::string::npos);
}

}  // namespace
}  // namespace saturate::checkpoint
