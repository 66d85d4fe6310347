// Tests of the torchvision crop rectangles (crop_params.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "image/test_images.h"
#include "image/transform.h"

namespace saturate::image {
namespace {

using test_images::MtSource;
using test_images::Rrc;

using Bytes = std::vector<std::byte>;

// Returns the scripted values in order; fails the test if they run out.
class ScriptedSource : public UniformSource {
 public:
  explicit ScriptedSource(std::vector<double> values, bool repeat_last = false)
      : values_(std::move(values)), repeat_last_(repeat_last) {}
  double Uniform() override {
    if (next_ < values_.size()) return values_[next_++];
    EXPECT_TRUE(repeat_last_) << "ScriptedSource exhausted";
    ++next_;
    return values_.empty() ? 0.0 : values_.back();
  }
  size_t draws() const { return next_; }

 private:
  std::vector<double> values_;
  bool repeat_last_;
  size_t next_ = 0;
};

constexpr double kScaleMin = 0.08, kScaleMax = 1.0, kRatioMin = 3.0 / 4, kRatioMax = 4.0 / 3;

// Values computed by hand following torchvision's get_params.
TEST(RandomResizedCropTest, MatchesTorchvisionForScriptedDraws) {
  {  // area = 0.54 * 640*480, aspect 1 -> 407x407; i = floor(.25*74), j = floor(.75*234).
    ScriptedSource rng({0.5, 0.5, 0.25, 0.75});
    EXPECT_EQ(Rrc(640, 480, rng), (CropRect{175, 18, 407, 407}));
    EXPECT_EQ(rng.draws(), 4u);
  }
  {  // First attempt 478x637 is too tall; the second succeeds as above.
    ScriptedSource rng({0.99, 0.0, 0.5, 0.5, 0.25, 0.75});
    EXPECT_EQ(Rrc(640, 480, rng), (CropRect{175, 18, 407, 407}));
    EXPECT_EQ(rng.draws(), 6u);
  }
  {  // Extremes: the last position (randint's inclusive upper end).
    ScriptedSource rng({0.0, 0.5, 0.999999, 0.999999});
    // area = 0.08 * 307200 = 24576 -> 157x157 (156.77).
    EXPECT_EQ(Rrc(640, 480, rng), (CropRect{640 - 157, 480 - 157, 157, 157}));
  }
  {  // Wide 1000x100: every attempt too tall; fallback h = 100, w = round(133.3).
    ScriptedSource rng({0.9}, /*repeat_last=*/true);
    EXPECT_EQ(Rrc(1000, 100, rng), (CropRect{433, 0, 133, 100}));
    EXPECT_EQ(rng.draws(), 20u);
  }
  {  // Tall 100x1000: fallback w = 100, h = round(100 / 0.75) = 133.
    ScriptedSource rng({0.9}, /*repeat_last=*/true);
    EXPECT_EQ(Rrc(100, 1000, rng), (CropRect{0, 433, 100, 133}));
  }
  {  // 640x480 is within the ratio range: fallback is the whole image.
    ScriptedSource always({0.999}, /*repeat_last=*/true);
    // Area fraction 1.5 never fits, so every attempt fails.
    EXPECT_EQ(RandomResizedCropParams(640, 480, 1.5, 1.5, kRatioMin, kRatioMax, always),
              (CropRect{0, 0, 640, 480}));
  }
  {  // Python rounds half to even: 5x100 with ratio [2, 3] -> h = round(2.5) = 2.
    ScriptedSource rng({0.5}, /*repeat_last=*/true);
    EXPECT_EQ(RandomResizedCropParams(5, 100, kScaleMin, kScaleMax, 2.0, 3.0, rng),
              (CropRect{0, 49, 5, 2}));
  }
}

TEST(RandomResizedCropTest, StatisticsStayInRange) {
  MtSource rng(42);
  const int sizes[][2] = {{640, 480}, {480, 640}, {500, 375}, {100, 1000}, {1000, 100}};
  for (const auto& size : sizes) {
    const int w = size[0], h = size[1];
    double area_sum = 0;
    for (int n = 0; n < 10000; ++n) {
      const CropRect c = Rrc(w, h, rng);
      ASSERT_GT(c.width, 0);
      ASSERT_GT(c.height, 0);
      ASSERT_GE(c.x, 0);
      ASSERT_GE(c.y, 0);
      ASSERT_LE(c.x + c.width, w);
      ASSERT_LE(c.y + c.height, h);
      const double area = double(c.width) * c.height / (double(w) * h);
      const double aspect = double(c.width) / c.height;
      area_sum += area;
      // Rounding w and h to whole pixels moves area and aspect slightly.
      const double tol = 1.0 / std::min(c.width, c.height) + 1e-9;
      EXPECT_GE(area, kScaleMin * (1 - 2 * tol)) << w << "x" << h;
      EXPECT_LE(area, 1.0);
      const bool fallback = c.width == w || c.height == h;
      if (!fallback) {
        EXPECT_GE(aspect, kRatioMin * (1 - 2 * tol)) << c.width << "x" << c.height;
        EXPECT_LE(aspect, kRatioMax * (1 + 2 * tol)) << c.width << "x" << c.height;
      }
    }
    if (w == 640) {
      // Mean area fraction for 640x480: most attempts succeed, about 0.5.
      EXPECT_NEAR(area_sum / 10000, 0.5, 0.1);
    }
  }
}

TEST(CropGeometryTest, CenterCropRoundsLikeTorchvision) {
  EXPECT_EQ(CenterCropRect(640, 480, 224, 224), (CropRect{208, 128, 224, 224}));
  EXPECT_EQ(CenterCropRect(5, 5, 2, 2), (CropRect{2, 2, 2, 2}));            // round(1.5) = 2
  EXPECT_EQ(CenterCropRect(3, 3, 2, 2), (CropRect{0, 0, 2, 2}));            // round(0.5) = 0
  EXPECT_EQ(CenterCropRect(100, 50, 200, 20), (CropRect{0, 15, 100, 20}));  // Clamped.
}

TEST(CropGeometryTest, ResizeThenCenterCrop) {
  // Resize(256): 640x480 -> 341x256 (int(341.33)); CenterCrop(224) at
  // left round(58.5) = 58, top 16; mapped back by 640/341 and 480/256.
  EXPECT_EQ(ResizeThenCenterCropRect(640, 480, 256, 224, 224), (CropRect{109, 30, 420, 420}));
  EXPECT_EQ(ResizeThenCenterCropRect(480, 640, 256, 224, 224), (CropRect{30, 109, 420, 420}));
  // Square 256 -> 256x256 is a plain center crop scaled by 1.
  EXPECT_EQ(ResizeThenCenterCropRect(256, 256, 256, 224, 224), (CropRect{16, 16, 224, 224}));
  // 500x375 (ImageNet-typical): Resize(256) -> 341x256, scale 375/256.
  const CropRect r = ResizeThenCenterCropRect(500, 375, 256, 224, 224);
  EXPECT_NEAR(r.width, 224 * 375.0 / 256, 1.0);
  EXPECT_NEAR(r.height, 224 * 375.0 / 256, 1.0);
  EXPECT_NEAR(r.x + r.width / 2.0, 250, 1.0);
  EXPECT_NEAR(r.y + r.height / 2.0, 187.5, 1.0);
}

}  // namespace
}  // namespace saturate::image
