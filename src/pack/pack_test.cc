#include "saturate/pack/pack.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "base/file.h"
#include "base/testing.h"
#include "format/shard_format.h"
#include "image/codec.h"
#include "saturate/format/reader.h"

namespace saturate::pack {
namespace {

namespace fs = std::filesystem;

std::vector<std::byte> MakeJpeg(int w, int h, int seed) {
  std::vector<uint8_t> rgb(static_cast<size_t>(w) * h * 3);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>((i * 7 + seed * 13) % 251);
  auto jpeg = image::EncodeJpeg(rgb.data(), w, h, 85);
  EXPECT_TRUE(jpeg.ok());
  return *jpeg;
}

void WriteBytes(const std::string& path, std::span<const std::byte> bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

std::string ReadAll(const std::string& path) {
  auto s = ReadFileToString(path);
  return s.ok() ? *s : "";
}

class PackTest : public ::testing::Test {
 protected:
  // ROOT/{b_cat,a_dog}/... with `per_class` images each; returns ROOT.
  std::string MakeFolder(int per_class) {
    std::string root = dir_.Join("images");
    int seed = 0;
    for (const char* cls : {"b_cat", "a_dog"}) {
      for (int i = 0; i < per_class; ++i) {
        WriteBytes(root + "/" + cls + "/" + std::to_string(i) + ".jpg",
                   MakeJpeg(40 + i, 30 + seed, seed));
        ++seed;
      }
    }
    WriteBytes(root + "/a_dog/notes.txt", std::as_bytes(std::span("not an image", 12)));
    return root;
  }
  std::string Out(const std::string& name = "out") { return dir_.Join(name); }

  testing::TempDir dir_;
};

TEST_F(PackTest, ImageFolderLabelsFollowSortedClassNames) {
  std::string root = MakeFolder(3);
  PackOptions options;
  SATURATE_ASSERT_OK_AND_ASSIGN(PackSummary s, PackImageFolder(root, Out(), options));
  EXPECT_EQ(s.records, 6u);
  EXPECT_EQ(s.ignored_files, 1u);
  EXPECT_FALSE(fs::exists(Out() + ".partial"));
  SATURATE_ASSERT_OK_AND_ASSIGN(auto ds, format::Dataset::Open(Out()));
  EXPECT_EQ(ds->manifest().class_names, (std::vector<std::string>{"a_dog", "b_cat"}));
  for (uint64_t i = 0; i < 6; ++i) {
    SATURATE_ASSERT_OK_AND_ASSIGN(auto rec, ds->Get(i));
    EXPECT_EQ(rec.int64_at(1), i < 3 ? 0 : 1);
    std::string file = root + (i < 3 ? "/a_dog/" : "/b_cat/") + std::to_string(i % 3) + ".jpg";
    // Stored losslessly rewritten with restart markers: the same pixels.
    auto img = rec.field(0);
    const std::string given = ReadAll(file);
    SATURATE_ASSERT_OK_AND_ASSIGN(auto marked,
                                  image::AddJpegRestartMarkers(std::as_bytes(std::span(given))));
    EXPECT_TRUE(std::equal(img.begin(), img.end(), marked.begin(), marked.end()));
    SATURATE_ASSERT_OK_AND_ASSIGN(auto want, image::DecodeRgb(std::as_bytes(std::span(given))));
    SATURATE_ASSERT_OK_AND_ASSIGN(auto got, image::DecodeRgb(img));
    EXPECT_EQ(got, want);
  }
}

TEST_F(PackTest, KeepJpegBytesStoresFilesAsGiven) {
  std::string root = MakeFolder(2);
  PackOptions options;
  options.keep_jpeg_bytes = true;
  SATURATE_ASSERT_OK(PackImageFolder(root, Out(), options).status());
  SATURATE_ASSERT_OK_AND_ASSIGN(auto ds, format::Dataset::Open(Out()));
  for (uint64_t i = 0; i < 4; ++i) {
    SATURATE_ASSERT_OK_AND_ASSIGN(auto rec, ds->Get(i));
    std::string file = root + (i < 2 ? "/a_dog/" : "/b_cat/") + std::to_string(i % 2) + ".jpg";
    auto img = rec.field(0);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(img.data()), img.size()), ReadAll(file));
  }
}

// restart_rows picks where the rewrite puts restart markers; every choice
// keeps the pixels. The default is a marker after every MCU, as datasets
// packed before the option existed were stored.
TEST_F(PackTest, RestartRowsChooseTheMarkers) {
  EXPECT_EQ(PackOptions{}.restart_rows, image::kRestartEveryMcu);
  std::string root = MakeFolder(2);
  for (int rows : {image::kRestartEveryMcu, 0, 1, 4}) {
    SCOPED_TRACE(rows);
    PackOptions options;
    options.restart_rows = rows;
    options.force = true;
    SATURATE_ASSERT_OK(PackImageFolder(root, Out(), options).status());
    SATURATE_ASSERT_OK_AND_ASSIGN(auto ds, format::Dataset::Open(Out()));
    for (uint64_t i = 0; i < 4; ++i) {
      SATURATE_ASSERT_OK_AND_ASSIGN(auto rec, ds->Get(i));
      std::string file = root + (i < 2 ? "/a_dog/" : "/b_cat/") + std::to_string(i % 2) + ".jpg";
      const std::string given = ReadAll(file);
      const auto given_bytes = std::as_bytes(std::span(given));
      SATURATE_ASSERT_OK_AND_ASSIGN(auto marked, image::AddJpegRestartMarkers(given_bytes, rows));
      auto img = rec.field(0);
      EXPECT_TRUE(std::equal(img.begin(), img.end(), marked.begin(), marked.end()));
      SATURATE_ASSERT_OK_AND_ASSIGN(auto want, image::DecodeRgb(given_bytes));
      SATURATE_ASSERT_OK_AND_ASSIGN(auto got, image::DecodeRgb(img));
      EXPECT_EQ(got, want);
    }
  }
}

TEST_F(PackTest, OutputDoesNotDependOnThreadCount) {
  std::string root = MakeFolder(20);
  PackOptions one;
  one.threads = 1;
  one.shard_bytes = 16 << 10;
  PackOptions many = one;
  many.threads = 4;
  SATURATE_ASSERT_OK(PackImageFolder(root, Out("one"), one).status());
  SATURATE_ASSERT_OK_AND_ASSIGN(PackSummary s, PackImageFolder(root, Out("many"), many));
  ASSERT_GT(s.shards, 1u);
  for (uint64_t i = 0; i < s.shards; ++i) {
    std::string name = "/" + format::ShardFileName(static_cast<uint32_t>(i));
    EXPECT_EQ(ReadAll(Out("one") + name), ReadAll(Out("many") + name)) << name;
  }
}

TEST_F(PackTest, CorruptImageFailsOrIsSkipped) {
  std::string root = MakeFolder(3);
  std::string bad = root + "/b_cat/1.jpg";
  fs::resize_file(bad, fs::file_size(bad) / 2);
  auto failed = PackImageFolder(root, Out(), {});
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kCorruption);
  EXPECT_NE(failed.status().message().find(bad), std::string::npos) << failed.status().ToString();
  EXPECT_FALSE(fs::exists(Out()));
  EXPECT_FALSE(fs::exists(Out() + ".partial"));

  PackOptions skip;
  skip.skip_bad = true;
  SATURATE_ASSERT_OK_AND_ASSIGN(PackSummary s, PackImageFolder(root, Out(), skip));
  EXPECT_EQ(s.records, 5u);
  EXPECT_EQ(s.skipped, 1u);
  ASSERT_EQ(s.skip_notes.size(), 1u);
  EXPECT_NE(s.skip_notes[0].find(bad), std::string::npos);
}

TEST_F(PackTest, RefusesToOverwriteUnlessForcedAndOnlyDatasets) {
  std::string root = MakeFolder(2);
  SATURATE_ASSERT_OK(PackImageFolder(root, Out(), {}).status());
  auto again = PackImageFolder(root, Out(), {});
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(again.status().message().find("--force"), std::string::npos);
  PackOptions force;
  force.force = true;
  SATURATE_ASSERT_OK(PackImageFolder(root, Out(), force).status());
  EXPECT_TRUE(format::Dataset::Open(Out()).ok());

  std::string precious = Out("precious");
  WriteBytes(precious + "/thesis.txt", std::as_bytes(std::span("words", 5)));
  auto refused = PackImageFolder(root, precious, force);
  EXPECT_EQ(refused.status().code(), StatusCode::kAlreadyExists);
  EXPECT_TRUE(fs::exists(precious + "/thesis.txt"));
}

TEST_F(PackTest, ReplaceKilledMidwayIsRecoveredByTheNextPack) {
  std::string root = MakeFolder(2);
  SATURATE_ASSERT_OK(PackImageFolder(root, Out(), {}).status());
  fs::rename(Out(), Out() + ".old");  // as if killed between the two renames of a --force
  auto again = PackImageFolder(root, Out(), {});
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists);  // old dataset is back
  EXPECT_TRUE(format::Dataset::Open(Out()).ok());
  EXPECT_FALSE(fs::exists(Out() + ".old"));
}

TEST_F(PackTest, EmptyOrMissingInputIsAClearError) {
  fs::create_directories(dir_.Join("empty/cls"));
  auto empty = PackImageFolder(dir_.Join("empty"), Out(), {});
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(empty.status().message().find("no .jpg/.jpeg/.png images"), std::string::npos);
  auto missing = PackImageFolder(dir_.Join("nope"), Out(), {});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(fs::exists(Out()));
}

TEST_F(PackTest, ReencodeCapsTheLongerSide) {
  std::string root = dir_.Join("big");
  WriteBytes(root + "/c/0.jpg", MakeJpeg(400, 300, 1));
  PackOptions options;
  options.reencode_max_side = 100;
  options.reencode_quality = 80;
  SATURATE_ASSERT_OK(PackImageFolder(root, Out(), options).status());
  SATURATE_ASSERT_OK_AND_ASSIGN(auto ds, format::Dataset::Open(Out()));
  SATURATE_ASSERT_OK_AND_ASSIGN(auto rec, ds->Get(0));
  SATURATE_ASSERT_OK_AND_ASSIGN(auto info, image::ProbeImage(rec.field(0)));
  EXPECT_EQ(info.width, 100);
  EXPECT_EQ(info.height, 75);
}

TEST_F(PackTest, TableKeepsExtraColumnsAndMapsClassNames) {
  MakeFolder(2);
  std::string csv = dir_.Join("images/list.csv");
  WriteBytes(csv,
             std::as_bytes(std::span(std::string_view("path,label,weight,count,caption\n"
                                                      "b_cat/0.jpg,cat,0.5,3,\"a cat, sitting\"\n"
                                                      "a_dog/1.jpg,dog,1.5,4,dog\n"))));
  SATURATE_ASSERT_OK_AND_ASSIGN(PackSummary s, PackTable(csv, {}, Out(), {}));
  EXPECT_EQ(s.records, 2u);
  SATURATE_ASSERT_OK_AND_ASSIGN(auto ds, format::Dataset::Open(Out()));
  const auto& schema = ds->schema();
  ASSERT_EQ(schema.fields.size(), 5u);
  EXPECT_EQ(schema.fields[2].ToString(), "weight: float32");
  EXPECT_EQ(schema.fields[3].ToString(), "count: int64");
  EXPECT_EQ(schema.fields[4].ToString(), "caption: bytes");
  EXPECT_EQ(ds->manifest().class_names, (std::vector<std::string>{"cat", "dog"}));
  SATURATE_ASSERT_OK_AND_ASSIGN(auto rec, ds->Get(0));
  EXPECT_EQ(rec.int64_at(1), 0);
  EXPECT_EQ(rec.float32_at(2), 0.5f);
  EXPECT_EQ(rec.int64_at(3), 3);
  auto caption = rec.field(4);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(caption.data()), caption.size()),
            "a cat, sitting");

  TableSpec wrong;
  wrong.path_column = "file";
  auto bad = PackTable(csv, wrong, Out("bad"), {});
  EXPECT_EQ(bad.status().code(), StatusCode::kNotFound);
  EXPECT_NE(bad.status().message().find("unknown column 'file'"), std::string::npos);
}

TEST_F(PackTest, JsonlWithIntegerLabelsAndNoLabel) {
  MakeFolder(1);
  std::string jsonl = dir_.Join("images/list.jsonl");
  WriteBytes(
      jsonl,
      std::as_bytes(std::span(std::string_view("{\"path\": \"b_cat/0.jpg\", \"label\": 7}\n"
                                               "{\"path\": \"a_dog/0.jpg\", \"label\": 2}\n"))));
  SATURATE_ASSERT_OK(PackTable(jsonl, {}, Out(), {}).status());
  SATURATE_ASSERT_OK_AND_ASSIGN(auto ds, format::Dataset::Open(Out()));
  SATURATE_ASSERT_OK_AND_ASSIGN(auto rec, ds->Get(1));
  EXPECT_EQ(rec.int64_at(1), 2);
  EXPECT_TRUE(ds->manifest().class_names.empty());
}

void WriteGzip(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  gzclose(f);
}

TEST_F(PackTest, IdxBecomesFixedShapeArrays) {
  // 3 images of 2x4, labels 0, 2, 1.
  std::vector<uint8_t> images = {0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 4};
  for (int i = 0; i < 24; ++i) images.push_back(static_cast<uint8_t>(i));
  WriteGzip(dir_.Join("img.gz"), images);
  WriteGzip(dir_.Join("lbl.gz"), {0, 0, 8, 1, 0, 0, 0, 3, 0, 2, 1});
  IdxSpec spec{dir_.Join("img.gz"), dir_.Join("lbl.gz"), {"zero", "one", "two"}};
  SATURATE_ASSERT_OK(PackIdx(spec, Out(), {}).status());
  SATURATE_ASSERT_OK_AND_ASSIGN(auto ds, format::Dataset::Open(Out()));
  EXPECT_EQ(ds->schema().fields[0].ToString(), "image: uint8[2,4]");
  SATURATE_ASSERT_OK_AND_ASSIGN(auto rec, ds->Get(1));
  auto px = rec.array_at<uint8_t>(0);
  EXPECT_EQ(std::vector<uint8_t>(px.begin(), px.end()),
            (std::vector<uint8_t>{8, 9, 10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(rec.int64_at(1), 2);

  spec.class_names = {"zero", "one"};  // label 2 has no name
  auto short_names = PackIdx(spec, Out("short"), {});
  EXPECT_EQ(short_names.status().code(), StatusCode::kInvalidArgument);
  spec = {dir_.Join("lbl.gz"), dir_.Join("img.gz"), {}};  // swapped
  EXPECT_FALSE(PackIdx(spec, Out("swapped"), {}).ok());
  EXPECT_FALSE(fs::exists(Out("swapped")));
}

TEST_F(PackTest, StreamChecksImagesAndSkipsBadRecordsInOrder) {
  // Records 0..9 with label i; record 3 is marked bad by its reader, record 6's
  // image does not decode.
  auto make_next = [](int* i) {
    return [i](StreamRecord* r) -> Result<bool> {
      if (*i == 10) return false;
      const int64_t label = *i;
      r->name = "src: row " + std::to_string(*i);
      if (*i == 3) {
        r->status = Status::Corruption(r->name + ": column 'image': no image (null)");
      } else {
        std::vector<std::byte> image = MakeJpeg(24, 16, *i);
        if (*i == 6) image.resize(image.size() / 2);
        const auto* p = reinterpret_cast<const std::byte*>(&label);
        r->fields = {image, std::vector<std::byte>(p, p + sizeof(label))};
      }
      ++*i;
      return true;
    };
  };
  StreamSpec spec;
  spec.schema =
      format::Schema{{{"image", format::FieldKind::kImage}, {"label", format::FieldKind::kInt64}}};
  spec.source = "test";
  spec.records_total = 10;
  int i = 0;
  auto failed = PackStream(spec, make_next(&i), Out(), {});
  EXPECT_TRUE(testing::HasError(failed.status(), StatusCode::kCorruption, {"src: row 3"}));
  EXPECT_FALSE(fs::exists(Out()));

  PackOptions options;
  options.skip_bad = true;
  options.threads = 3;
  i = 0;
  SATURATE_ASSERT_OK_AND_ASSIGN(PackSummary s, PackStream(spec, make_next(&i), Out(), options));
  EXPECT_EQ(s.records, 8u);
  EXPECT_EQ(s.skipped, 2u);
  ASSERT_EQ(s.skip_notes.size(), 2u);
  EXPECT_NE(s.skip_notes[1].find("src: row 6: field 'image'"), std::string::npos);
  SATURATE_ASSERT_OK_AND_ASSIGN(auto ds, format::Dataset::Open(Out()));
  std::vector<int64_t> labels;
  for (uint64_t r = 0; r < ds->size(); ++r) {
    SATURATE_ASSERT_OK_AND_ASSIGN(auto rec, ds->Get(r));
    labels.push_back(rec.int64_at(1));
  }
  EXPECT_EQ(labels, (std::vector<int64_t>{0, 1, 2, 4, 5, 7, 8, 9}));
}

}  // namespace
}  // namespace saturate::pack
