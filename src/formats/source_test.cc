#include "saturate/formats/source.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "base/testing.h"
#include "formats/example.h"
#include "formats/side_index.h"
#include "formats/test_util.h"
#include "image/codec.h"

namespace saturate::formats {
namespace {

using ::saturate::testing::HasError;
using ::saturate::testing::TempDir;

int64_t Int(std::span<const std::byte> b) {
  int64_t v = 0;
  std::memcpy(&v, b.data(), std::min<size_t>(8, b.size()));
  return v;
}

SourceOptions Local(const TempDir& dir) {
  SourceOptions o;
  o.index_dir = dir.Join("cache");
  return o;
}

TEST(Source, Patterns) {
  EXPECT_TRUE(IsSourcePattern("shards-{000..009}.tar"));
  EXPECT_TRUE(IsSourcePattern("x.TAR.GZ"));
  EXPECT_TRUE(IsSourcePattern("train-*.tfrecord?image_key=jpg"));
  EXPECT_TRUE(IsSourcePattern("tfrecord:train-*-of-01024"));
  EXPECT_FALSE(IsSourcePattern("data/train.sat"));
}

TEST(Source, WebDatasetShardsAndIndexReuse) {
  TempDir dir;
  for (int s = 0; s < 2; ++s) {
    std::vector<std::pair<std::string, std::string>> members;
    for (int i = 0; i < 3; ++i) {
      const std::string key = "s" + std::to_string(s) + "_" + std::to_string(i);
      members.push_back({key + ".jpg", "IMG" + key});
      members.push_back({key + ".cls", std::to_string(10 * s + i) + "\n"});
      members.push_back({key + ".json", "{\"i\":" + std::to_string(i) + "}"});
    }
    WriteFile(dir.Join("shard-" + std::to_string(s) + ".tar"), MakeTar(members));
  }
  auto src = Source::Open(dir.Join("shard-{0..1}.tar"), Local(dir));
  SATURATE_ASSERT_OK(src.status());
  ASSERT_EQ((*src)->size(), 6u);
  EXPECT_EQ((*src)->indexes_built(), 2u);
  ASSERT_EQ((*src)->schema().fields.size(), 4u);  // key, image, label, json
  Sample s;
  SATURATE_ASSERT_OK((*src)->Read(4, &s));
  EXPECT_EQ(Str(s.fields[0]), "s1_1");
  EXPECT_EQ(Str(s.fields[1]), "IMGs1_1");
  EXPECT_EQ(Int(s.fields[2]), 11);
  EXPECT_EQ(Str(s.fields[3]), "{\"i\":1}");
  EXPECT_TRUE(std::filesystem::exists(dir.Join("shard-0.tar.satidx")));
  auto again = Source::Open(dir.Join("shard-*.tar"), Local(dir));
  SATURATE_ASSERT_OK(again.status());
  EXPECT_EQ((*again)->indexes_built(), 0u);
  EXPECT_EQ((*again)->Describe(5), dir.Join("shard-1.tar") + ": sample 's1_2'");
}

TEST(Source, IndexGoesToTheCacheDirWhenItCannotBeWrittenBeside) {
  TempDir dir;
  WriteFile(dir.Join("a.tar"), MakeTar({{"x.jpg", "IMG"}, {"x.cls", "1"}}));
  // Tests run as root, which writes anywhere: a directory in the index's place
  // stands in for a read-only folder (the rename onto it fails).
  std::filesystem::create_directory(dir.Join("a.tar.satidx"));
  auto src = Source::Open(dir.Join("a.tar"), Local(dir));
  SATURATE_ASSERT_OK(src.status());
  EXPECT_EQ((*src)->indexes_built(), 1u);
  size_t cached = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.Join("cache"))) {
    cached += e.path().string().ends_with("-a.tar.satidx");
  }
  EXPECT_EQ(cached, 1u);
  auto again = Source::Open(dir.Join("a.tar"), Local(dir));
  SATURATE_ASSERT_OK(again.status());
  EXPECT_EQ((*again)->indexes_built(), 0u);
}

TEST(Source, StaleIndexIsRebuilt) {
  TempDir dir;
  WriteFile(dir.Join("a.tar"), MakeTar({{"x.jpg", "IMG"}, {"x.cls", "1"}}));
  SATURATE_ASSERT_OK(Source::Open(dir.Join("a.tar"), Local(dir)).status());
  WriteFile(dir.Join("a.tar"),
            MakeTar({{"x.jpg", "IMG"}, {"x.cls", "1"}, {"y.jpg", "IMG2"}, {"y.cls", "2"}}));
  auto src = Source::Open(dir.Join("a.tar"), Local(dir));
  SATURATE_ASSERT_OK(src.status());
  EXPECT_EQ((*src)->indexes_built(), 1u);
  EXPECT_EQ((*src)->size(), 2u);
  // A damaged index is rebuilt too, never trusted.
  std::string idx = ::saturate::testing::ReadFileOrFail(dir.Join("a.tar.satidx"));
  idx[idx.size() / 2] ^= 1;
  WriteFile(dir.Join("a.tar.satidx"), idx);
  auto again = Source::Open(dir.Join("a.tar"), Local(dir));
  SATURATE_ASSERT_OK(again.status());
  EXPECT_EQ((*again)->indexes_built(), 1u);
  EXPECT_EQ((*again)->size(), 2u);
}

TEST(Source, WebDatasetBadSamples) {
  TempDir dir;
  WriteFile(dir.Join("bad.tar"), MakeTar({{"a.jpg", "IMG"},
                                          {"a.cls", "1"},
                                          {"b.cls", "2"},  // no image
                                          {"c.jpg", "IMG"},
                                          {"c.cls", "seven"}}));
  auto src = Source::Open(dir.Join("bad.tar"), Local(dir));
  SATURATE_ASSERT_OK(src.status());
  Sample s;
  SATURATE_ASSERT_OK((*src)->Read(0, &s));
  EXPECT_TRUE(HasError((*src)->Read(1, &s), StatusCode::kCorruption,
                       {"bad.tar", "sample 'b'", ".jpg", "field 'image'"}));
  EXPECT_TRUE(HasError((*src)->Read(2, &s), StatusCode::kCorruption,
                       {"sample 'c'", "c.cls", "not an integer", "field 'label'"}));
  WriteFile(dir.Join("x.tar.gz"), "not really");
  EXPECT_TRUE(HasError(Source::Open(dir.Join("x.tar.gz"), Local(dir)).status(),
                       StatusCode::kInvalidArgument, {"gzip", "saturate pack webdataset"}));
}

TEST(Source, TfrecordReadAndBadCrc) {
  TempDir dir;
  std::vector<std::string> records;
  for (int i = 0; i < 5; ++i) {
    records.push_back(SerializeExample({{"image/encoded", {"JPEG" + std::to_string(i)}, {}, {}, 0},
                                        {"image/class/label", {}, {i}, {}, 2},
                                        {"weight", {}, {}, {0.5f * i}, 1}}));
  }
  std::string file = MakeTfrecord(records);
  WriteFile(dir.Join("train-0.tfrecord"), file);
  auto src = Source::Open(dir.Join("train-*.tfrecord"), Local(dir));
  SATURATE_ASSERT_OK(src.status());
  ASSERT_EQ((*src)->size(), 5u);
  ASSERT_EQ((*src)->schema().fields.size(), 3u);
  Sample s;
  SATURATE_ASSERT_OK((*src)->Read(3, &s));
  EXPECT_EQ(Str(s.fields[0]), "JPEG3");
  EXPECT_EQ(Int(s.fields[1]), 3);
  float w;
  std::memcpy(&w, s.fields[2].data(), 4);
  EXPECT_EQ(w, 1.5f);
  // Flip one byte inside record 4's data: its CRC no longer holds.
  file[file.size() - 8] ^= 1;
  WriteFile(dir.Join("bad.tfrecord"), file);
  auto bad = Source::Open(dir.Join("bad.tfrecord"), Local(dir));
  SATURATE_ASSERT_OK(bad.status());
  EXPECT_TRUE(HasError((*bad)->Read(4, &s), StatusCode::kCorruption,
                       {"bad.tfrecord", "record 4 at offset", "CRC-32C"}));
  SATURATE_ASSERT_OK((*bad)->Read(3, &s));
  auto keys = Source::Open(dir.Join("train-0.tfrecord?image_key=nope"), Local(dir));
  EXPECT_TRUE(HasError(keys.status(), StatusCode::kInvalidArgument, {"'nope'", "--image-key"}));
}

// A small baseline JPEG of a gradient, as a string (a tar member's bytes).
std::string GradientJpeg(int seed) {
  std::vector<uint8_t> px(64 * 48 * 3);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i * (seed + 3) / 7);
  auto jpeg = image::EncodeJpeg(px.data(), 64, 48, 90);
  EXPECT_TRUE(jpeg.ok());
  return std::string(reinterpret_cast<const char*>(jpeg->data()), jpeg->size());
}

// Each sample's JPEG entry table is made with the index, saved in it and
// read back; an index without tables gets them; jpeg_index=0 neither makes
// nor hands them out. A member that is no baseline JPEG has none.
TEST(Source, JpegTablesAreMadeWithTheIndexAndKept) {
  TempDir dir;
  WriteFile(dir.Join("a.tar"), MakeTar({{"x.jpg", GradientJpeg(1)},
                                        {"x.cls", "1"},
                                        {"y.jpg", "not a JPEG"},
                                        {"y.cls", "2"},
                                        {"z.jpg", GradientJpeg(2)},
                                        {"z.cls", "3"}}));
  auto tables = [&](const Source& src) {
    std::vector<size_t> sizes;
    Sample s;
    for (uint64_t i = 0; i < src.size(); ++i) {
      EXPECT_TRUE(src.Read(i, &s).ok());
      sizes.push_back(s.image_entries.size());
    }
    return sizes;
  };
  auto src = Source::Open(dir.Join("a.tar"), Local(dir));
  SATURATE_ASSERT_OK(src.status());
  const std::vector<size_t> made = tables(**src);
  ASSERT_EQ(made.size(), 3u);
  EXPECT_GT(made[0], 0u);
  EXPECT_EQ(made[1], 0u);
  EXPECT_GT(made[2], 0u);
  std::string bytes = ::saturate::testing::ReadFileOrFail(dir.Join("a.tar.satidx"));
  SATURATE_ASSERT_OK_AND_ASSIGN(
      FileIndex saved, DecodeFileIndex(std::as_bytes(std::span(bytes.data(), bytes.size())), "x"));
  EXPECT_TRUE(saved.has_jpeg_tables);
  EXPECT_EQ(saved.JpegTable(2).size(), made[2]);

  auto again = Source::Open(dir.Join("a.tar"), Local(dir));
  SATURATE_ASSERT_OK(again.status());
  EXPECT_EQ((*again)->indexes_built(), 0u);
  EXPECT_EQ(tables(**again), made);

  // The offsets alone (as a version-1 index holds them): the tables are
  // made and the index saved again with them.
  saved.has_jpeg_tables = false;
  saved.jpeg_tables = {};
  saved.jpeg_table_starts.clear();
  ASSERT_TRUE(SaveFileIndex(saved, {dir.Join("a.tar.satidx")}));
  auto upgraded = Source::Open(dir.Join("a.tar"), Local(dir));
  SATURATE_ASSERT_OK(upgraded.status());
  EXPECT_EQ((*upgraded)->indexes_built(), 0u);
  EXPECT_EQ(tables(**upgraded), made);
  bytes = ::saturate::testing::ReadFileOrFail(dir.Join("a.tar.satidx"));
  SATURATE_ASSERT_OK_AND_ASSIGN(
      saved, DecodeFileIndex(std::as_bytes(std::span(bytes.data(), bytes.size())), "x"));
  EXPECT_TRUE(saved.has_jpeg_tables);

  auto off = Source::Open(dir.Join("a.tar?jpeg_index=0"), Local(dir));
  SATURATE_ASSERT_OK(off.status());
  EXPECT_EQ(tables(**off), std::vector<size_t>(3, 0));
}

// Two JPEG shards, for the tests of opening at once.
std::string TwoJpegShards(const TempDir& dir) {
  for (int s = 0; s < 2; ++s) {
    std::vector<std::pair<std::string, std::string>> members;
    for (int i = 0; i < 4; ++i) {
      const std::string key = "s" + std::to_string(s) + "_" + std::to_string(i);
      members.push_back({key + ".jpg", GradientJpeg(4 * s + i)});
      members.push_back({key + ".cls", std::to_string(i)});
    }
    WriteFile(dir.Join("j-" + std::to_string(s) + ".tar"), MakeTar(members));
  }
  return dir.Join("j-{0..1}.tar");
}

// While another process makes the indexes (it holds the lock), an opener
// waits instead of scanning the files too.
TEST(Source, MissingIndexesWaitForTheProcessMakingThem) {
  TempDir dir;
  const std::string pattern = TwoJpegShards(dir);
  auto other = IndexBuildLock::Acquire(IndexCandidates(dir.Join("j-0.tar"), dir.Join("cache")));
  ASSERT_TRUE(other.held());
  std::atomic<bool> done{false};
  Result<std::unique_ptr<Source>> src = Status::Internal("not opened");
  std::thread opener([&] {
    src = Source::Open(pattern, Local(dir));
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(done.load());
  other = IndexBuildLock();  // the other process ends without saving anything
  opener.join();
  SATURATE_ASSERT_OK(src.status());
  EXPECT_EQ((*src)->indexes_built(), 2u);  // so this one made them itself
  EXPECT_EQ((*src)->size(), 8u);
}

// Two ranks opening at once: the second waits for the first one's JPEG
// tables and takes them from its index instead of decoding every image.
TEST(Source, AWaitingOpenerTakesTheTablesTheFirstOneSaved) {
  TempDir dir;
  const std::string pattern = TwoJpegShards(dir);
  std::atomic<bool> building{false}, second_started{false};
  std::atomic<int> first_calls{0}, second_calls{0};
  SourceOptions first_options = Local(dir);
  first_options.progress = [&](uint64_t, uint64_t) {
    if (first_calls++ > 0) return;
    building = true;  // offsets saved, tables being made, the lock held
    while (!second_started) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the second reaches the lock
  };
  SourceOptions second_options = Local(dir);
  second_options.progress = [&](uint64_t, uint64_t) { ++second_calls; };
  Result<std::unique_ptr<Source>> first = Status::Internal("not opened");
  Result<std::unique_ptr<Source>> second = Status::Internal("not opened");
  std::thread a([&] { first = Source::Open(pattern, first_options); });
  while (!building) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::thread b([&] {
    second_started = true;
    second = Source::Open(pattern, second_options);
  });
  a.join();
  b.join();
  SATURATE_ASSERT_OK(first.status());
  SATURATE_ASSERT_OK(second.status());
  EXPECT_EQ((*first)->indexes_built(), 2u);
  EXPECT_EQ((*second)->indexes_built(), 0u);
  EXPECT_GT(first_calls.load(), 0);
  EXPECT_EQ(second_calls.load(), 0);  // it made no table
  Sample x, y;
  for (uint64_t i = 0; i < 8; ++i) {
    SATURATE_ASSERT_OK((*first)->Read(i, &x));
    SATURATE_ASSERT_OK((*second)->Read(i, &y));
    ASSERT_FALSE(y.image_entries.empty()) << i;
    EXPECT_TRUE(std::equal(x.image_entries.begin(), x.image_entries.end(), y.image_entries.begin(),
                           y.image_entries.end()))
        << i;
  }
}

// Tables whose starts do not add up are refused, never used.
TEST(SideIndex, JpegTablesRoundTripAndBadStartsAreRefused) {
  FileIndex index{1, 100, 5, {{"a.jpg", 0, 10}, {"b.jpg", 20, 10}}};
  index.has_jpeg_tables = true;
  const std::byte blob[] = {std::byte{1}, std::byte{2}, std::byte{3}};
  index.jpeg_tables = blob;
  index.jpeg_table_starts = {0, 2, 3};
  const std::string bytes = EncodeFileIndex(index);
  SATURATE_ASSERT_OK_AND_ASSIGN(
      FileIndex back, DecodeFileIndex(std::as_bytes(std::span(bytes.data(), bytes.size())), "i"));
  EXPECT_EQ(back.JpegTable(0).size(), 2u);
  EXPECT_EQ(back.JpegTable(1)[0], std::byte{3});
  EXPECT_TRUE(back.JpegTable(2).empty());
  index.jpeg_table_starts = {0, 3, 2};
  const std::string bad = EncodeFileIndex(index);
  EXPECT_TRUE(
      HasError(DecodeFileIndex(std::as_bytes(std::span(bad.data(), bad.size())), "i").status(),
               StatusCode::kCorruption, {"JPEG table 1 ends before it starts"}));
}

}  // namespace
}  // namespace saturate::formats
