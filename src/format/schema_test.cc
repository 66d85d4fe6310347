#include "saturate/format/schema.h"

#include <gtest/gtest.h>

#include "format/test_util.h"

namespace saturate::format {
namespace {

Manifest SampleManifest() {
  Manifest m;
  m.schema = AllTypesSchema();
  m.class_names = {"cat", "dog"};
  m.shards = {{"shard-00000.srec", 3, 4096}, {"shard-00001.srec", 2, 1024}};
  m.metadata = {{"source", "test"}};
  return m;
}

TEST(SchemaTest, FixedSizesAndAlignment) {
  Schema s = AllTypesSchema();
  EXPECT_EQ(s.fields[0].fixed_bytes(), 0u);
  EXPECT_EQ(s.fields[2].fixed_bytes(), 8u);
  EXPECT_EQ(s.fields[3].fixed_bytes(), 4u);
  EXPECT_EQ(s.fields[4].fixed_bytes(), 6u);
  EXPECT_EQ(s.fields[5].element_bytes(), 4u);
  EXPECT_EQ(s.fields[2].alignment(), 8u);
  EXPECT_EQ(s.fields[4].alignment(), 64u);
  EXPECT_EQ(s.fields[4].ToString(), "grid: uint8[2,3]");
  EXPECT_EQ(s.fields[5].ToString(), "tokens: int32[]");
  EXPECT_EQ(*s.FieldIndex("label"), 2u);
  auto missing = s.FieldIndex("nope");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("fields: text, image"), std::string::npos);
}

TEST(SchemaTest, ValidateRejectsBadSchemas) {
  EXPECT_FALSE(Schema{}.Validate().ok());
  Schema dup{{{"a", FieldKind::kInt64}, {"a", FieldKind::kBytes}}};
  EXPECT_NE(dup.Validate().message().find("duplicate"), std::string::npos);
  Schema bad_shape{{{"x", FieldKind::kArray, DType::kFloat32, {3, 0}}}};
  EXPECT_FALSE(bad_shape.Validate().ok());
  Schema huge{{{"x", FieldKind::kArray, DType::kFloat32, {1 << 30, 1 << 30}}}};
  EXPECT_FALSE(huge.Validate().ok());
  EXPECT_TRUE(AllTypesSchema().Validate().ok());
}

TEST(ManifestTest, RoundTrip) {
  Manifest m = SampleManifest();
  auto parsed = ParseManifest(SerializeManifest(m), "m.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(*parsed, m);
  EXPECT_EQ(parsed->num_records(), 5u);
  EXPECT_EQ(parsed->num_bytes(), 5120u);
}

TEST(ManifestTest, ParseErrorsNameSourceAndKey) {
  auto bad_json = ParseManifest("{not json", "ds/manifest.json");
  EXPECT_EQ(bad_json.status().code(), StatusCode::kCorruption);
  EXPECT_NE(bad_json.status().message().find("ds/manifest.json"), std::string::npos);

  std::string text = SerializeManifest(SampleManifest());
  auto replace = [&](std::string from, std::string to) {
    std::string t = text;
    size_t p = t.find(from);
    EXPECT_NE(p, std::string::npos) << from;
    return t.replace(p, from.size(), to);
  };
  auto version = ParseManifest(replace("\"format_version\": 1", "\"format_version\": 9"), "m");
  EXPECT_NE(version.status().message().find("unsupported format_version 9"), std::string::npos);
  auto count = ParseManifest(replace("\"num_records\": 5", "\"num_records\": 6"), "m");
  EXPECT_NE(count.status().message().find("num_records 6"), std::string::npos);
  auto type = ParseManifest(replace("\"type\": \"int64\"", "\"type\": \"complex\""), "m");
  EXPECT_NE(type.status().message().find("field 'label': unknown type 'complex'"),
            std::string::npos);
  auto real_version =
      ParseManifest(replace("\"format_version\": 1", "\"format_version\": 5.5e35"), "m");
  EXPECT_NE(real_version.status().message().find("'format_version' has the wrong type"),
            std::string::npos);
  auto real_shape = ParseManifest(replace("\"shape\": [\n", "\"shape\": [2.5,\n"), "m");
  EXPECT_EQ(real_shape.status().code(), StatusCode::kCorruption);
  auto negative = ParseManifest(replace("\"records\": 3", "\"records\": -3"), "m");
  EXPECT_NE(negative.status().message().find("'records' has the wrong type"), std::string::npos);
  auto escape = ParseManifest(replace("shard-00001.srec", "../etc/passwd"), "m");
  EXPECT_NE(escape.status().message().find("invalid file name"), std::string::npos);
  auto missing = ParseManifest(replace("\"shards\"", "\"shardz\""), "m");
  EXPECT_NE(missing.status().message().find("missing key 'shards'"), std::string::npos);
}

TEST(ManifestTest, EditedManifestFailsItsChecksum) {
  std::string text = SerializeManifest(SampleManifest());
  size_t p = text.find("\"dog\"");
  ASSERT_NE(p, std::string::npos);
  text.replace(p, 5, "\"dig\"");
  auto edited = ParseManifest(text, "m.json");
  EXPECT_EQ(edited.status().code(), StatusCode::kCorruption);
  EXPECT_NE(edited.status().message().find("m.json: manifest checksum mismatch"),
            std::string::npos);
}

TEST(ManifestTest, FingerprintDependsOnSchema) {
  Schema a = AllTypesSchema();
  Schema b = a;
  b.fields[4].shape = {3, 2};
  EXPECT_EQ(SchemaFingerprint(a), SchemaFingerprint(AllTypesSchema()));
  EXPECT_NE(SchemaFingerprint(a), SchemaFingerprint(b));
}

}  // namespace
}  // namespace saturate::format
