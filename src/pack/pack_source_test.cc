// pack::PackSource: WebDataset shards and TFRecord files (plain and gzip'd)
// into a dataset whose records hold the samples' fields; bad samples fail
// the pack or are skipped and counted.
#include <zlib.h>

#include <cstring>
#include <filesystem>

#include "base/testing.h"
#include "formats/example.h"
#include "formats/test_util.h"
#include "image/codec.h"
#include "saturate/format/reader.h"
#include "saturate/formats/source.h"
#include "saturate/pack/pack.h"

namespace saturate::pack {
namespace {

using ::saturate::testing::HasError;
using ::saturate::testing::TempDir;

std::string Jpeg(int seed) {
  std::vector<uint8_t> rgb(32 * 24 * 3);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>(i * 7 + seed * 31);
  auto jpeg = image::EncodeJpeg(rgb.data(), 32, 24, 90);
  EXPECT_TRUE(jpeg.ok());
  return std::string(reinterpret_cast<const char*>(jpeg->data()), jpeg->size());
}

std::string Str(std::span<const std::byte> b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

void Gzip(const std::string& from, const std::string& to) {
  const std::string data = ::saturate::testing::ReadFileOrFail(from);
  gzFile f = gzopen(to.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  gzwrite(f, data.data(), static_cast<unsigned>(data.size()));
  gzclose(f);
}

PackOptions Options() {
  PackOptions o;
  o.threads = 2;
  o.keep_jpeg_bytes = true;
  return o;
}

formats::SourceOptions NoIndexFiles(const TempDir& dir) {
  formats::SourceOptions o;
  o.index_dir = dir.Join("cache");
  return o;
}

TEST(PackSource, WebDatasetShardsPlainAndGzipped) {
  TempDir dir;
  for (int s = 0; s < 2; ++s) {
    std::vector<std::pair<std::string, std::string>> members;
    for (int i = 0; i < 3; ++i) {
      const std::string key = std::to_string(s) + "-" + std::to_string(i);
      members.push_back({key + ".jpg", Jpeg(3 * s + i)});
      members.push_back({key + ".cls", std::to_string(3 * s + i)});
      members.push_back({key + ".txt", "caption " + key});
    }
    formats::WriteFile(dir.Join("w-" + std::to_string(s) + ".tar"), formats::MakeTar(members));
    Gzip(dir.Join("w-" + std::to_string(s) + ".tar"),
         dir.Join("g-" + std::to_string(s) + ".tar.gz"));
  }
  for (const std::string pattern : {"w-{0..1}.tar", "g-*.tar.gz"}) {
    const std::string out = dir.Join(pattern.substr(0, 1) + ".sat");
    auto summary = PackSource({dir.Join(pattern)}, NoIndexFiles(dir), out, Options());
    SATURATE_ASSERT_OK(summary.status());
    EXPECT_EQ(summary->records, 6u);
    EXPECT_FALSE(std::filesystem::exists(out + ".unpack"));
    auto ds = format::Dataset::Open(out);
    SATURATE_ASSERT_OK(ds.status());
    ASSERT_EQ((*ds)->schema().fields.size(), 4u);  // key, image, label, txt
    for (uint64_t i = 0; i < 6; ++i) {
      auto rec = (*ds)->Get(i);
      SATURATE_ASSERT_OK(rec.status());
      EXPECT_EQ(Str(rec->field(1)), Jpeg(static_cast<int>(i)));
      EXPECT_EQ(rec->int64_at(2), static_cast<int64_t>(i));
      EXPECT_EQ(Str(rec->field(3)), "caption " + Str(rec->field(0)));
    }
  }
}

TEST(PackSource, TfrecordBadSamplesFailOrAreSkipped) {
  TempDir dir;
  std::vector<std::string> records;
  for (int i = 0; i < 4; ++i) {
    records.push_back(formats::SerializeExample(
        {{"image/encoded", {i == 2 ? std::string("not a jpeg") : Jpeg(i)}, {}, {}, 0},
         {"image/class/label", {}, {i}, {}, 2}}));
  }
  formats::WriteFile(dir.Join("t.tfrecord"), formats::MakeTfrecord(records));
  EXPECT_TRUE(
      HasError(PackSource({dir.Join("t.tfrecord")}, NoIndexFiles(dir), dir.Join("a.sat"), Options())
                   .status(),
               StatusCode::kCorruption, {"t.tfrecord: record 2", "field 'image'"}));
  EXPECT_FALSE(std::filesystem::exists(dir.Join("a.sat")));
  PackOptions skip = Options();
  skip.skip_bad = true;
  auto summary = PackSource({dir.Join("t.tfrecord")}, NoIndexFiles(dir), dir.Join("a.sat"), skip);
  SATURATE_ASSERT_OK(summary.status());
  EXPECT_EQ(summary->records, 3u);
  EXPECT_EQ(summary->skipped, 1u);
  EXPECT_TRUE(HasError(PackSource({dir.Join("t.tfrecord"), dir.Join("*.tar")}, NoIndexFiles(dir),
                                  dir.Join("b.sat"), Options())
                           .status(),
                       StatusCode::kNotFound, {"*.tar"}));
}

}  // namespace
}  // namespace saturate::pack
