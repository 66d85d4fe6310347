#include "saturate/format/verify.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "base/testing.h"
#include "format/shard_format.h"
#include "format/test_util.h"

namespace saturate::format {
namespace {

namespace fs = std::filesystem;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

TEST(VerifyTest, CleanDatasetPasses) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK(WriteAllTypesDataset(dir.path(), 100, 4096));
  SATURATE_ASSERT_OK_AND_ASSIGN(VerifyReport r, VerifyDataset(dir.path()));
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.records_checked, 100u);
  EXPECT_EQ(r.bytes_checked, r.manifest.num_bytes());
}

TEST(VerifyTest, EveryFlippedByteIsReported) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK(WriteAllTypesDataset(dir.path(), 30, 1 << 20));
  const std::string shard = dir.Join(ShardFileName(0));
  const std::string clean = ReadAll(shard);
  std::mt19937_64 rng(1234);
  // Every byte of a small shard, plus random ones with random bit patterns.
  for (size_t trial = 0; trial < clean.size() + 200; ++trial) {
    size_t pos = trial < clean.size() ? trial : rng() % clean.size();
    std::string bytes = clean;
    bytes[pos] = static_cast<char>(bytes[pos] ^ (trial < clean.size() ? 0x01 : 1 + rng() % 255));
    WriteAll(shard, bytes);
    SATURATE_ASSERT_OK_AND_ASSIGN(VerifyReport r, VerifyDataset(dir.path()));
    ASSERT_FALSE(r.ok()) << "flip at offset " << pos << " not reported";
    EXPECT_EQ(r.problems[0].file, "shard-00000.srec");
  }
}

TEST(VerifyTest, ProblemNamesRecordAndOffset) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK(WriteAllTypesDataset(dir.path(), 10, 1 << 20));
  const std::string shard = dir.Join(ShardFileName(0));
  std::string bytes = ReadAll(shard);
  // Find record 4's offset from the index, then flip a byte inside its payload.
  auto all = std::as_bytes(std::span(bytes.data(), bytes.size()));
  auto footer = DecodeFooter(all);
  ASSERT_TRUE(footer.ok());
  IndexEntry e = DecodeIndexEntry(all.data() + footer->index_offset + 4 * kIndexEntryBytes);
  bytes[e.offset + 60] ^= 0x10;
  WriteAll(shard, bytes);
  SATURATE_ASSERT_OK_AND_ASSIGN(VerifyReport r, VerifyDataset(dir.path()));
  ASSERT_EQ(r.problem_count, 1u);
  EXPECT_EQ(r.problems[0].record, 4);
  EXPECT_EQ(r.problems[0].offset, static_cast<int64_t>(e.offset));
  EXPECT_NE(r.problems[0].ToString().find("shard-00000.srec: record 4 at offset " +
                                          std::to_string(e.offset) + ": record checksum mismatch"),
            std::string::npos)
      << r.problems[0].ToString();
  EXPECT_EQ(r.records_checked, 10u);  // keeps going after a bad record
}

TEST(VerifyTest, TruncatedMissingAndExtraFiles) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK(WriteAllTypesDataset(dir.path(), 50, 2048));
  fs::resize_file(dir.Join(ShardFileName(1)), 100);
  fs::remove(dir.Join(ShardFileName(2)));
  SATURATE_ASSERT_OK_AND_ASSIGN(VerifyReport r, VerifyDataset(dir.path()));
  ASSERT_EQ(r.problem_count, 3u);  // shard 1: size + footer; shard 2: missing
  EXPECT_EQ(r.problems[0].file, ShardFileName(1));
  EXPECT_NE(r.problems[0].what.find("differs from manifest"), std::string::npos);
  EXPECT_EQ(r.problems[2].file, ShardFileName(2));
  EXPECT_NE(r.problems[2].what.find("no such file"), std::string::npos);
}

TEST(VerifyTest, MissingOrCorruptManifest) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK_AND_ASSIGN(VerifyReport none, VerifyDataset(dir.path()));
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.problems[0].what.find("not a complete dataset"), std::string::npos);
  SATURATE_ASSERT_OK(WriteAllTypesDataset(dir.path(), 5));
  WriteAll(dir.Join("manifest.json"), "{\"format\": 3}");
  SATURATE_ASSERT_OK_AND_ASSIGN(VerifyReport bad, VerifyDataset(dir.path()));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.problems[0].file, "manifest.json");
  EXPECT_FALSE(VerifyDataset(dir.Join("nope")).ok());
}

TEST(VerifyTest, MaxProblemsCapsTheListNotTheCount) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK(WriteAllTypesDataset(dir.path(), 60, 1024));
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    if (entry.path().extension() == ".srec") fs::resize_file(entry.path(), 10);
  }
  SATURATE_ASSERT_OK_AND_ASSIGN(VerifyReport r, VerifyDataset(dir.path(), {.max_problems = 3}));
  EXPECT_EQ(r.problems.size(), 3u);
  EXPECT_GT(r.problem_count, 3u);
}

}  // namespace
}  // namespace saturate::format
