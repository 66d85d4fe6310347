#include "formats/example.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "base/testing.h"
#include "formats/test_util.h"
#include "formats/tfrecord.h"

namespace saturate::formats {
namespace {

using format::FieldKind;
using ::saturate::testing::HasError;

std::span<const std::byte> B(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

std::string Imagenet(int64_t label, std::vector<float> xmin) {
  return SerializeExample({{"image/encoded", {"JPEG" + std::to_string(label)}, {}, {}, 0},
                           {"image/class/label", {}, {label}, {}, 2},
                           {"image/class/text", {"cat"}, {}, {}, 0},
                           {"image/object/bbox/xmin", {}, {}, xmin, 1}});
}

TEST(Example, InfersScalarsAndLists) {
  const std::string a = Imagenet(3, {0.5f}), b = Imagenet(4, {0.1f, 0.2f});
  std::vector<std::span<const std::byte>> probe{B(a), B(b)};
  auto plan = InferExampleFields(probe, "image/encoded", "image/class/label");
  SATURATE_ASSERT_OK(plan.status());
  ASSERT_EQ(plan->schema.fields.size(), 4u);
  EXPECT_EQ(plan->schema.fields[0].kind, FieldKind::kImage);
  EXPECT_EQ(plan->schema.fields[1].name, "label");
  EXPECT_EQ(plan->schema.fields[2].kind, FieldKind::kBytes);
  EXPECT_EQ(plan->schema.fields[3].kind, FieldKind::kVarArray);

  Sample s;
  SATURATE_ASSERT_OK(ExtractExample(B(b), plan->schema, plan->features, &s));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(s.fields[0].data()), s.fields[0].size()),
            "JPEG4");
  int64_t label;
  std::memcpy(&label, s.fields[1].data(), 8);
  EXPECT_EQ(label, 4);
  EXPECT_EQ(s.fields[3].size(), 8u);
}

TEST(Example, MissingKeysAndWrongTypes) {
  const std::string a = Imagenet(3, {});
  std::vector<std::span<const std::byte>> probe{B(a)};
  EXPECT_TRUE(HasError(InferExampleFields(probe, "jpeg", "image/class/label").status(),
                       StatusCode::kInvalidArgument, {"'jpeg'", "image/encoded", "--image-key"}));
  EXPECT_TRUE(HasError(InferExampleFields(probe, "image/encoded", "image/class/text").status(),
                       StatusCode::kInvalidArgument, {"bytes_list", "int64_list"}));
  auto plan = InferExampleFields(probe, "image/encoded", "image/class/label");
  SATURATE_ASSERT_OK(plan.status());
  Sample s;
  const std::string wrong = SerializeExample(
      {{"image/encoded", {"J"}, {}, {}, 0}, {"image/class/label", {}, {}, {1.f}, 1}});
  EXPECT_TRUE(HasError(ExtractExample(B(wrong), plan->schema, plan->features, &s),
                       StatusCode::kCorruption, {"image/class/label", "float_list"}));
  const std::string no_image = SerializeExample({{"image/class/label", {}, {1}, {}, 2}});
  EXPECT_TRUE(HasError(ExtractExample(B(no_image), plan->schema, plan->features, &s),
                       StatusCode::kCorruption, {"image/encoded", "missing"}));
  EXPECT_TRUE(
      HasError(ExtractExample(B(std::string("\xff\xff\xff", 3)), plan->schema, plan->features, &s),
               StatusCode::kCorruption, {"tf.Example"}));
}

// The fields of one record, or its error, by one of the two parsers.
std::string Fields(const Result<Sample>& s) {
  if (!s.ok()) return "error: " + s.status().ToString();
  std::string out;
  for (const auto& f : s->fields) out += std::to_string(f.size()) + ":" + Str(f) + "|";
  return out;
}

template <typename F>
Result<Sample> Extract(F extract, std::span<const std::byte> record, const ExamplePlan& plan) {
  Sample s;
  SATURATE_RETURN_IF_ERROR(extract(record, plan.schema, plan.features, &s));
  return s;
}

// ExtractExample (in place, with the parser as fallback) against the
// generated parser alone: the same fields, or the same error.
void ExpectSameAsParser(std::span<const std::byte> record, const ExamplePlan& plan) {
  EXPECT_EQ(Fields(Extract(ExtractExample, record, plan)),
            Fields(Extract(ExtractExampleParsed, record, plan)));
}

std::string ReadTestFile(const std::string& name) {
  std::ifstream in(std::string(SATURATE_FORMATS_TESTDATA) + "/" + name, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Files written by the reference writers (src/formats/testing/README.md):
// every record is read in place, with the fields the generated parser gives.
TEST(Example, InPlaceEqualsParserOnReferenceWriterFiles) {
  for (const char* name : {"tfrecord_package.tfrecord", "tensorflow.tfrecord"}) {
    SCOPED_TRACE(name);
    const std::string file = ReadTestFile(name);
    ASSERT_FALSE(file.empty());
    SATURATE_ASSERT_OK_AND_ASSIGN(auto spans, ScanTfrecord(B(file)));
    ASSERT_EQ(spans.size(), 6u);
    std::vector<std::span<const std::byte>> records;
    for (size_t r = 0; r < spans.size(); ++r) {
      SATURATE_ASSERT_OK_AND_ASSIGN(auto rec, ReadTfrecord(B(file), spans[r], r, true));
      records.push_back(rec);
    }
    SATURATE_ASSERT_OK_AND_ASSIGN(
        ExamplePlan plan, InferExampleFields(records, "image/encoded", "image/class/label"));
    ASSERT_EQ(plan.schema.fields.size(), 6u);  // image, label, height, ids, xmin, synset
    for (size_t r = 0; r < records.size(); ++r) {
      SCOPED_TRACE(r);
      Sample in_place, parsed;
      ASSERT_TRUE(ExtractExampleInPlace(records[r], plan.schema, plan.features, &in_place));
      SATURATE_ASSERT_OK(ExtractExampleParsed(records[r], plan.schema, plan.features, &parsed));
      ASSERT_EQ(in_place.fields.size(), parsed.fields.size());
      for (size_t i = 0; i < parsed.fields.size(); ++i) {
        EXPECT_EQ(Str(in_place.fields[i]), Str(parsed.fields[i])) << plan.schema.fields[i].name;
      }
      // The image is viewed where it lies in the record: not copied.
      EXPECT_GE(in_place.fields[0].data(), records[r].data());
      EXPECT_LE(in_place.fields[0].data() + in_place.fields[0].size(),
                records[r].data() + records[r].size());
      int64_t label;
      std::memcpy(&label, in_place.fields[1].data(), 8);
      EXPECT_EQ(label, (std::vector<int64_t>{1, -7, int64_t{1} << 40, 0, 999, INT64_MIN}[r]));
    }
    // Every byte changed to a few values, and every truncation: the same
    // fields or the same error as the parser (in place or by the fallback).
    for (const auto record : records) {
      std::string bytes = Str(record);
      for (size_t at = 0; at < bytes.size(); ++at) {
        const char was = bytes[at];
        for (char v : {'\x00', '\x01', '\x0a', '\x12', '\x7f', '\x80', '\xff'}) {
          bytes[at] = v;
          SCOPED_TRACE("byte " + std::to_string(at) + " = " + std::to_string(int(v)));
          ExpectSameAsParser(B(bytes), plan);
        }
        bytes[at] = was;
        ExpectSameAsParser(B(bytes.substr(0, at)), plan);
      }
    }
  }
}

// Layouts protobuf accepts that writers do not produce: the parser reads
// them (in place says no), so the fields still follow protobuf's rules.
TEST(Example, OtherLayoutsFallBackToTheParser) {
  const std::string a = Imagenet(3, {0.5f}), b = Imagenet(4, {0.1f, 0.2f});
  std::vector<std::span<const std::byte>> probe{B(a), B(b)};
  SATURATE_ASSERT_OK_AND_ASSIGN(ExamplePlan plan,
                                InferExampleFields(probe, "image/encoded", "image/class/label"));
  // Example.features twice: the maps merge, the later label wins.
  const std::string twice = a + b;
  // An unpacked int64 list for the label: Int64List{value: 9} as a varint.
  auto field = [](char tag, const std::string& payload) {
    return std::string(1, tag) + std::string(1, static_cast<char>(payload.size())) + payload;
  };
  auto entry = [&](const std::string& key, const std::string& feature) {
    return field('\x0a', field('\x0a', key) + field('\x12', feature));
  };
  const std::string unpacked =
      field('\x0a', entry("image/encoded", field('\x0a', field('\x0a', "JPEG"))) +
                        entry("image/class/label", field('\x1a', std::string("\x08\x09", 2))));
  // An unknown field after the features.
  const std::string unknown = a + std::string("\x10\x05", 2);
  for (const std::string& r : {twice, unpacked, unknown}) {
    Sample s;
    EXPECT_FALSE(ExtractExampleInPlace(B(r), plan.schema, plan.features, &s));
    ExpectSameAsParser(B(r), plan);
  }
  Sample s;
  SATURATE_ASSERT_OK(ExtractExample(B(twice), plan.schema, plan.features, &s));
  int64_t label;
  std::memcpy(&label, s.fields[1].data(), 8);
  EXPECT_EQ(label, 4);
  SATURATE_ASSERT_OK(ExtractExample(B(unpacked), plan.schema, plan.features, &s));
  std::memcpy(&label, s.fields[1].data(), 8);
  EXPECT_EQ(label, 9);
}

}  // namespace
}  // namespace saturate::formats
