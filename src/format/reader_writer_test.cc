#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "base/testing.h"
#include "format/shard_format.h"
#include "format/test_util.h"
#include "saturate/format/reader.h"
#include "saturate/format/writer.h"

namespace saturate::format {
namespace {

namespace fs = std::filesystem;

void ExpectRecordEquals(const Record& rec, uint64_t i) {
  AllTypesRecord want = MakeAllTypesRecord(i);
  auto text = rec.field(0);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(text.data()), text.size()), want.text);
  auto image = rec.field(1);
  ASSERT_EQ(image.size(), want.image.size());
  EXPECT_TRUE(std::equal(image.begin(), image.end(), want.image.begin()));
  EXPECT_EQ(rec.int64_at(2), want.label);
  EXPECT_EQ(rec.float32_at(3), want.weight);
  auto grid = rec.array_at<uint8_t>(4);
  EXPECT_EQ(std::vector<uint8_t>(grid.begin(), grid.end()), want.grid);
  auto tokens = rec.array_at<int32_t>(5);
  EXPECT_EQ(std::vector<int32_t>(tokens.begin(), tokens.end()), want.tokens);
  // Arrays are viewed in place: payloads must be aligned for their type.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(rec.field(5).data()) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(rec.field(2).data()) % 8, 0u);
}

class ReaderWriterTest : public ::testing::TestWithParam<bool> {
 protected:
  ReaderOptions Options() const { return ReaderOptions{.use_mmap = GetParam()}; }
  testing::TempDir dir_;
};

TEST_P(ReaderWriterTest, RoundTripsEveryFieldTypeAcrossShards) {
  SATURATE_ASSERT_OK(WriteAllTypesDataset(dir_.path(), 200, /*shard_bytes=*/4096));
  SATURATE_ASSERT_OK_AND_ASSIGN(auto ds, Dataset::Open(dir_.path(), Options()));
  EXPECT_EQ(ds->mapped(), GetParam());
  EXPECT_EQ(ds->size(), 200u);
  EXPECT_GT(ds->manifest().shards.size(), 5u);  // rolled at the size target
  EXPECT_EQ(ds->manifest().class_names, (std::vector<std::string>{"cat", "dog"}));
  for (const ShardInfo& s : ds->manifest().shards) {
    EXPECT_EQ(fs::file_size(dir_.Join(s.file)), s.bytes);
  }
  for (uint64_t i = 0; i < ds->size(); ++i) {
    SATURATE_ASSERT_OK_AND_ASSIGN(Record rec, ds->Get(i));
    EXPECT_EQ(rec.index(), i);
    ExpectRecordEquals(rec, i);
  }
}

TEST_P(ReaderWriterTest, RandomAccessInAnyOrder) {
  SATURATE_ASSERT_OK(WriteAllTypesDataset(dir_.path(), 500, 8192));
  SATURATE_ASSERT_OK_AND_ASSIGN(auto ds, Dataset::Open(dir_.path(), Options()));
  std::mt19937_64 rng(42);
  for (int k = 0; k < 2000; ++k) {
    uint64_t i = rng() % ds->size();
    ds->Prefetch(rng() % ds->size(), 4096);  // a hint: changes no bytes
    SATURATE_ASSERT_OK_AND_ASSIGN(Record rec, ds->Get(i));
    ExpectRecordEquals(rec, i);
  }
  auto out = ds->Get(500);
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  // Out of range, a prefetch does nothing (ASan checks it reads no index
  // entry past the end).
  ds->Prefetch(500, 4096);
  ds->Prefetch(UINT64_MAX, UINT64_MAX);
}

TEST_P(ReaderWriterTest, ConcurrentReadersSeeTheSameBytes) {
  SATURATE_ASSERT_OK(WriteAllTypesDataset(dir_.path(), 300, 8192));
  SATURATE_ASSERT_OK_AND_ASSIGN(auto ds, Dataset::Open(dir_.path(), Options()));
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t i = t; i < ds->size(); i += 2) {
        auto rec = ds->Get(i);
        if (!rec.ok() || rec->int64_at(2) != MakeAllTypesRecord(i).label) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST_P(ReaderWriterTest, EmptyAndSingleRecordDatasets) {
  SATURATE_ASSERT_OK(WriteAllTypesDataset(dir_.path(), 0));
  SATURATE_ASSERT_OK_AND_ASSIGN(auto empty, Dataset::Open(dir_.path(), Options()));
  EXPECT_EQ(empty->size(), 0u);
  EXPECT_TRUE(empty->manifest().shards.empty());
  EXPECT_FALSE(empty->Get(0).ok());

  testing::TempDir one_dir;
  SATURATE_ASSERT_OK(WriteAllTypesDataset(one_dir.path(), 1));
  SATURATE_ASSERT_OK_AND_ASSIGN(auto one, Dataset::Open(one_dir.path(), Options()));
  ASSERT_EQ(one->size(), 1u);
  SATURATE_ASSERT_OK_AND_ASSIGN(Record rec, one->Get(0));
  ExpectRecordEquals(rec, 0);
}

TEST_P(ReaderWriterTest, FlippedByteIsNeverHandedOutAsData) {
  SATURATE_ASSERT_OK(WriteAllTypesDataset(dir_.path(), 40, 1 << 20));  // one shard
  const std::string shard = dir_.Join(ShardFileName(0));
  std::string clean;
  {
    std::ifstream in(shard, std::ios::binary);
    clean.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    std::string bytes = clean;
    size_t pos = rng() % bytes.size();
    bytes[pos] = static_cast<char>(bytes[pos] ^ (1 + rng() % 255));
    { std::ofstream(shard, std::ios::binary | std::ios::trunc) << bytes; }

    auto ds = Dataset::Open(dir_.path(), Options());
    if (!ds.ok()) {
      EXPECT_EQ(ds.status().code(), StatusCode::kCorruption) << ds.status().ToString();
      continue;
    }
    // Twice: the second epoch reads records checked once (not re-hashed),
    // and the corrupt one, which never passed, fails again.
    for (int epoch = 0; epoch < 2; ++epoch) {
      int bad = 0;
      for (uint64_t i = 0; i < (*ds)->size(); ++i) {
        auto rec = (*ds)->Get(i);
        if (!rec.ok()) {
          ++bad;
          EXPECT_NE(rec.status().message().find("shard-00000.srec: record " + std::to_string(i)),
                    std::string::npos)
              << rec.status().ToString();
        } else {
          ExpectRecordEquals(*rec, i);
        }
      }
      EXPECT_EQ(bad, 1) << "flip at offset " << pos << " went unnoticed in epoch " << epoch;
    }
  }
}

TEST_P(ReaderWriterTest, TruncatedShardIsRejectedAtOpen) {
  SATURATE_ASSERT_OK(WriteAllTypesDataset(dir_.path(), 20, 1 << 20));
  const std::string shard = dir_.Join(ShardFileName(0));
  fs::resize_file(shard, fs::file_size(shard) - 100);
  auto ds = Dataset::Open(dir_.path(), Options());
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kCorruption);
  EXPECT_NE(ds.status().message().find("shard-00000.srec"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(MmapAndPread, ReaderWriterTest, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "mmap" : "pread"; });

// Patches `n` bytes at `offset` of a shard and re-seals the header checksum,
// so the test reaches the version check behind it.
void PatchHeader(const std::string& path, size_t offset, uint32_t value) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  std::byte header[kHeaderBytes];
  f.read(reinterpret_cast<char*>(header), kHeaderBytes);
  StoreLE<uint32_t>(header + offset, value);
  StoreLE<uint64_t>(header + 56, Checksum(std::span<const std::byte>(header, 56)));
  f.seekp(0);
  f.write(reinterpret_cast<const char*>(header), kHeaderBytes);
}

TEST(ReaderTest, BadMagicAndVersionAreNamed) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK(WriteAllTypesDataset(dir.path(), 3));
  const std::string shard = dir.Join(ShardFileName(0));
  PatchHeader(shard, 8, 99);
  auto ds = Dataset::Open(dir.path());
  EXPECT_NE(ds.status().message().find("unsupported shard version 99"), std::string::npos)
      << ds.status().ToString();
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.write("NOTASHRD", 8);
  }
  ds = Dataset::Open(dir.path());
  EXPECT_NE(ds.status().message().find("bad magic"), std::string::npos);
}

TEST(ReaderTest, MissingManifestIsNotADataset) {
  testing::TempDir dir;
  auto ds = Dataset::Open(dir.path());
  EXPECT_EQ(ds.status().code(), StatusCode::kNotFound);
  EXPECT_NE(ds.status().message().find("not a saturate dataset"), std::string::npos);
}

TEST(WriterTest, AbandonedWriteLeavesNoManifest) {
  testing::TempDir dir;
  {
    SATURATE_ASSERT_OK_AND_ASSIGN(
        auto w, DatasetWriter::Create(dir.path(), AllTypesSchema(), {.shard_bytes = 2048}));
    for (uint64_t i = 0; i < 50; ++i) {
      auto r = MakeAllTypesRecord(i);
      SATURATE_ASSERT_OK(w->Append(r.Fields()));
    }
    EXPECT_GT(w->bytes_written(), 2048u);
  }  // no Finish(): like a pack that was killed
  EXPECT_FALSE(fs::exists(dir.Join("manifest.json")));
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    EXPECT_NE(entry.path().extension(), ".tmp") << entry.path();
  }
  EXPECT_FALSE(Dataset::Open(dir.path()).ok());
}

TEST(WriterTest, RejectsWrongSizesAndExistingDataset) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK_AND_ASSIGN(auto w, DatasetWriter::Create(dir.path(), AllTypesSchema()));
  auto r = MakeAllTypesRecord(3);
  auto fields = r.Fields();
  int32_t small = 1;
  fields[2] = AsBytes(small);  // int64 field given 4 bytes
  Status s = w->Append(fields);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("record 0: field 'label'"), std::string::npos) << s.ToString();
  fields = r.Fields();
  fields[5] = fields[5].first(3);  // not a whole int32
  EXPECT_FALSE(w->Append(fields).ok());
  fields.pop_back();
  EXPECT_FALSE(w->Append(fields).ok());
  SATURATE_ASSERT_OK(w->Append(r.Fields()));
  SATURATE_ASSERT_OK(w->Finish());
  auto again = DatasetWriter::Create(dir.path(), AllTypesSchema());
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists);
}

}  // namespace
}  // namespace saturate::format
