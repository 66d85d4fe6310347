#include <gtest/gtest.h>

#include "base/testing.h"
#include "saturate/feed/loader.h"

namespace saturate::feed {
namespace {

TEST(ParseFieldOptionsTest, ImageTrainingAndEvalTransforms) {
  SATURATE_ASSERT_OK_AND_ASSIGN(
      FieldOptions f,
      ParseFieldOptions(
          "image:crop=random,size=224,area=0.25..1,flip=0.5,dtype=float16,normalize"));
  EXPECT_EQ(f.field, "image");
  EXPECT_EQ(f.image.crop, ImageTransform::Crop::kRandomResized);
  EXPECT_EQ(f.image.height, 224);
  EXPECT_EQ(f.image.width, 224);
  EXPECT_EQ(f.image.scale_min, 0.25);
  EXPECT_EQ(f.image.dtype, DType::kFloat16);
  EXPECT_TRUE(f.image.normalize);
  EXPECT_FLOAT_EQ(f.image.mean[0], 0.485f);

  SATURATE_ASSERT_OK_AND_ASSIGN(
      FieldOptions eval, ParseFieldOptions("img:crop=center,resize=256,size=160x192,layout=hwc,"
                                           "dtype=float32,mean=0.5/0.5/0.5,std=0.2/0.3/0.4"));
  EXPECT_EQ(eval.image.crop, ImageTransform::Crop::kCenter);
  EXPECT_EQ(eval.image.resize_shorter, 256);
  EXPECT_EQ(eval.image.height, 160);
  EXPECT_EQ(eval.image.width, 192);
  EXPECT_EQ(eval.image.layout, Layout::kHWC);
  EXPECT_FLOAT_EQ(eval.image.std[2], 0.4f);
}

TEST(ParseFieldOptionsTest, ArraysAndVarArrays) {
  SATURATE_ASSERT_OK_AND_ASSIGN(
      FieldOptions a,
      ParseFieldOptions("image:to-float,scale=0.00392156862,mean=0.2860,std=0.3530"));
  EXPECT_TRUE(a.array.to_float);
  EXPECT_FLOAT_EQ(a.array.mean, 0.2860f);
  EXPECT_FLOAT_EQ(a.array.std, 0.3530f);
  SATURATE_ASSERT_OK_AND_ASSIGN(FieldOptions v,
                                ParseFieldOptions("tokens:max-length=512,truncate,pad=-1"));
  EXPECT_EQ(v.var_array.max_length, 512u);
  EXPECT_TRUE(v.var_array.truncate);
  EXPECT_EQ(v.var_array.pad_value, -1);
}

TEST(ParseFieldOptionsTest, ErrorsNameTheOption) {
  struct Case {
    const char* spec;
    const char* message;
  };
  for (const Case& c :
       {Case{"image", "expected FIELD:OPTION"}, Case{"image:size=abc", "option 'size'"},
        Case{"image:crop=diagonal", "option 'crop'"}, Case{"image:flip=2", "option 'flip'"},
        Case{"image:area=0.1", "MIN..MAX"}, Case{"image:dtype=int8", "option 'dtype'"},
        Case{"image:mean=1/2", "R/G/B"}, Case{"image:sharpen", "unknown option 'sharpen'"},
        Case{"tokens:max-length=0", "max-length"}, Case{"image:size", "needs a value"}}) {
    EXPECT_TRUE(testing::HasError(ParseFieldOptions(c.spec).status(), StatusCode::kInvalidArgument,
                                  {c.message}))
        << c.spec;
  }
}

}  // namespace
}  // namespace saturate::feed
