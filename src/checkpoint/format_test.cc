#include "checkpoint/format.h"

#include <gtest/gtest.h>

#include "base/testing.h"

namespace saturate::checkpoint {
namespace {

Manifest Sample() {
  Manifest m;
  m.step = 42;
  m.created_unix_ms = 1700000000000;
  m.metadata_file = "metadata.bin";
  m.files = {{"tensors.bin", 128, 0x0123456789abcdefULL}, {"metadata.bin", 5, 7}};
  m.tensors = {{"w", "float32", {2, 3}, "cpu", "tensors.bin", 0, 24},
               {"b", "bfloat16", {}, "cuda:0", "tensors.bin", 64, 2}};
  return m;
}

TEST(FormatTest, StepDirNames) {
  uint64_t step;
  bool tmp;
  EXPECT_EQ(StepDirName(17), "step-17");
  ASSERT_TRUE(ParseStepDirName("step-17", &step, &tmp));
  EXPECT_EQ(step, 17u);
  EXPECT_FALSE(tmp);
  ASSERT_TRUE(ParseStepDirName("step-0.tmp", &step, &tmp));
  EXPECT_EQ(step, 0u);
  EXPECT_TRUE(tmp);
  for (const char* bad : {"step-", "step-x", "step-1x", "steps-1", "step--1", "step-1.old",
                          "step-99999999999999999999999"}) {
    EXPECT_FALSE(ParseStepDirName(bad, &step, &tmp)) << bad;
  }
}

TEST(FormatTest, LayoutAlignsEveryTensor) {
  std::vector<TensorRef> t = {{"a", nullptr, 3}, {"b", nullptr, 0}, {"c", nullptr, 65}};
  uint64_t total = 0;
  EXPECT_EQ(LayoutTensors(t, &total), (std::vector<uint64_t>{0, 64, 64}));
  EXPECT_EQ(total, 129u);
}

TEST(FormatTest, ManifestRoundTrips) {
  Manifest m = Sample();
  SATURATE_ASSERT_OK_AND_ASSIGN(Manifest back, ParseManifest(SerializeManifest(m), "m.json"));
  EXPECT_EQ(back.step, 42u);
  EXPECT_EQ(back.created_unix_ms, m.created_unix_ms);
  ASSERT_EQ(back.files.size(), 2u);
  EXPECT_EQ(back.files[0].xxh3, 0x0123456789abcdefULL);
  ASSERT_EQ(back.tensors.size(), 2u);
  EXPECT_EQ(back.tensors[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(back.tensors[1].shape.empty());
  EXPECT_EQ(back.tensors[1].device, "cuda:0");
}

TEST(FormatTest, EditedManifestIsCorruption) {
  std::string text = SerializeManifest(Sample());
  std::string edited = text;
  edited.replace(edited.find("\"step\": 42"), 10, "\"step\": 43");
  EXPECT_TRUE(testing::HasError(ParseManifest(edited, "m.json").status(), StatusCode::kCorruption,
                                {"m.json", "checksum mismatch"}));
  EXPECT_TRUE(testing::HasError(ParseManifest("{", "m.json").status(), StatusCode::kCorruption,
                                {"m.json", "not a JSON object"}));
  EXPECT_TRUE(testing::HasError(ParseManifest("{\"format\": 1}", "m.json").status(),
                                StatusCode::kCorruption, {"m.json", "malformed"}));
  // A float where an integer belongs is refused, not converted.
  std::string huge = text;
  huge.replace(huge.find("\"step\": 42"), 10, "\"step\": 1e300");
  EXPECT_TRUE(testing::HasError(ParseManifest(huge, "m.json").status(), StatusCode::kCorruption,
                                {"m.json", "\"step\" is not an integer"}));
}

TEST(FormatTest, TensorOutsideItsFileIsCorruption) {
  Manifest m = Sample();
  m.tensors[1].offset = 127;
  EXPECT_TRUE(testing::HasError(ParseManifest(SerializeManifest(m), "m.json").status(),
                                StatusCode::kCorruption, {"tensor b", "outside"}));
}

TEST(FormatTest, StreamingChecksumEqualsOneShot) {
  std::string data(100000, 'a');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 31);
  StreamingChecksum s;
  s.Update(data.data(), 999);
  s.Update(data.data() + 999, data.size() - 999);
  EXPECT_EQ(s.Digest(), Checksum(std::as_bytes(std::span(data.data(), data.size()))));
}

}  // namespace
}  // namespace saturate::checkpoint
