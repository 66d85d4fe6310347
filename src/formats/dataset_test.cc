// format::Dataset over a source pattern: the records Get() lays out hold the
// sample's fields at their schema's alignment, as packed records do.
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "base/testing.h"
#include "formats/example.h"
#include "formats/test_util.h"
#include "saturate/format/reader.h"
#include "saturate/formats/source.h"

namespace saturate::formats {
namespace {

using ::saturate::testing::HasError;
using ::saturate::testing::TempDir;

TEST(SourceDataset, RecordsHoldTheSampleFields) {
  TempDir dir;
  ::setenv("SATURATE_INDEX_DIR", dir.Join("cache").c_str(), 1);
  std::vector<std::string> records;
  for (int i = 0; i < 3; ++i) {
    records.push_back(SerializeExample({{"image/encoded", {"JPEG" + std::to_string(i)}, {}, {}, 0},
                                        {"image/class/label", {}, {40 + i}, {}, 2},
                                        {"boxes", {}, {}, std::vector<float>(i, 0.25f), 1}}));
  }
  WriteFile(dir.Join("d-0.tfrecord"), MakeTfrecord(records));
  auto ds = format::Dataset::Open(dir.Join("d-{0..0}.tfrecord"));
  SATURATE_ASSERT_OK(ds.status());
  ASSERT_NE((*ds)->source(), nullptr);
  EXPECT_EQ((*ds)->size(), 3u);
  ASSERT_EQ((*ds)->manifest().shards.size(), 1u);
  EXPECT_EQ((*ds)->manifest().num_records(), 3u);
  const format::Schema& schema = (*ds)->schema();
  ASSERT_EQ(schema.fields.size(), 3u);
  EXPECT_EQ(schema.fields[2].ToString(), "boxes: float32[]");
  for (uint64_t i = 0; i < 3; ++i) {
    (*ds)->Prefetch(i, 64);
    auto rec = (*ds)->Get(i);
    SATURATE_ASSERT_OK(rec.status());
    EXPECT_EQ(Str(rec->field(0)), "JPEG" + std::to_string(i));
    EXPECT_EQ(rec->int64_at(1), 40 + static_cast<int64_t>(i));
    auto boxes = rec->array_at<float>(2);
    ASSERT_EQ(boxes.size(), i);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(boxes.data()) % 64, 0u);
    for (float b : boxes) EXPECT_EQ(b, 0.25f);
  }
  EXPECT_TRUE(HasError((*ds)->Get(3).status(), StatusCode::kInvalidArgument, {"out of range"}));
  ::unsetenv("SATURATE_INDEX_DIR");
}

TEST(SourceDataset, DirectoriesStaySaturateDatasets) {
  TempDir dir;
  std::filesystem::create_directory(dir.Join("looks.tar"));
  EXPECT_TRUE(HasError(format::Dataset::Open(dir.Join("looks.tar")).status(), StatusCode::kNotFound,
                       {"not a saturate dataset"}));
}

}  // namespace
}  // namespace saturate::formats
