#include "base/file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "base/testing.h"

namespace saturate {
namespace {

namespace fs = std::filesystem;

TEST(WritableFileTest, NothingVisibleUntilCommit) {
  testing::TempDir dir;
  std::string path = dir.Join("a.bin");
  SATURATE_ASSERT_OK_AND_ASSIGN(auto f, WritableFile::Create(path));
  SATURATE_ASSERT_OK(f->Append(std::string_view("hello")));
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(fs::exists(path + ".tmp"));
  SATURATE_ASSERT_OK(f->PadTo(64));
  EXPECT_EQ(f->size(), 64u);
  SATURATE_ASSERT_OK(f->Commit());
  EXPECT_TRUE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_EQ(fs::file_size(path), 64u);
}

TEST(WritableFileTest, AbandonedWriterRemovesTempFile) {
  testing::TempDir dir;
  std::string path = dir.Join("b.bin");
  {
    SATURATE_ASSERT_OK_AND_ASSIGN(auto f, WritableFile::Create(path));
    SATURATE_ASSERT_OK(f->Append(std::string_view("partial")));
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(WritableFileTest, SecondWriterIsRefused) {
  testing::TempDir dir;
  std::string path = dir.Join("c.bin");
  SATURATE_ASSERT_OK_AND_ASSIGN(auto f, WritableFile::Create(path));
  auto g = WritableFile::Create(path);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kAlreadyExists);
}

TEST(FileTest, AtomicWriteAndReadBack) {
  testing::TempDir dir;
  std::string path = dir.Join("m.json");
  SATURATE_ASSERT_OK(WriteFileAtomic(path, "{\"a\":1}"));
  SATURATE_ASSERT_OK(WriteFileAtomic(path, "{\"a\":2}"));  // replaces
  SATURATE_ASSERT_OK_AND_ASSIGN(std::string s, ReadFileToString(path));
  EXPECT_EQ(s, "{\"a\":2}");
  auto missing = ReadFileToString(dir.Join("nope"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope"), std::string::npos);
}

class ReadOnlyFileTest : public ::testing::TestWithParam<bool> {};

TEST_P(ReadOnlyFileTest, ReadsRangesAndRejectsOutOfBounds) {
  testing::TempDir dir;
  std::string path = dir.Join("r.bin");
  SATURATE_ASSERT_OK(WriteFileAtomic(path, "0123456789"));
  SATURATE_ASSERT_OK_AND_ASSIGN(auto f, ReadOnlyFile::Open(path, /*allow_mmap=*/GetParam()));
  EXPECT_EQ(f->mapped(), GetParam());
  EXPECT_EQ(f->size(), 10u);
  std::vector<std::byte> scratch;
  SATURATE_ASSERT_OK_AND_ASSIGN(auto view, f->Read(3, 4, &scratch));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(view.data()), view.size()), "3456");
  auto bad = f->Read(8, 3, &scratch);
  EXPECT_EQ(bad.status().code(), StatusCode::kCorruption);
  EXPECT_FALSE(f->Read(~0ull, 2, &scratch).ok());  // no overflow
}

INSTANTIATE_TEST_SUITE_P(MmapAndPread, ReadOnlyFileTest, ::testing::Bool());

}  // namespace
}  // namespace saturate
