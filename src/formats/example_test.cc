#include "formats/example.h"

#include <cstring>

#include "base/testing.h"

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

}  // namespace
}  // namespace saturate::formats
