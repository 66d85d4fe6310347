#include "image/transform.h"

#include <gtest/gtest.h>
#include <jpeglib.h>
#include <png.h>

#include <cmath>
#include <cstdio>  // jpeglib.h needs FILE and size_t first.
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/testing.h"
#include "image/codec.h"
#include "image/test_images.h"

namespace saturate::image {
namespace {

using test_images::EncodeJpegRaw;
using test_images::EncodePng;
using test_images::Psnr;

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

class MtSource : public UniformSource {
 public:
  explicit MtSource(uint64_t seed) : gen_(seed) {}
  double Uniform() override { return std::uniform_real_distribution<double>(0.0, 1.0)(gen_); }

 private:
  std::mt19937_64 gen_;
};

constexpr double kScaleMin = 0.08, kScaleMax = 1.0, kRatioMin = 3.0 / 4, kRatioMax = 4.0 / 3;

CropRect Rrc(int w, int h, UniformSource& rng) {
  return RandomResizedCropParams(w, h, kScaleMin, kScaleMax, kRatioMin, kRatioMax, rng);
}

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

TEST(CropResizeRgbTest, MatchesPilBilinearWeights) {
  // 4 -> 2 pixels: support 2, weights {3,3,1}/7 and {1,3,3}/7 (PIL's).
  const uint8_t row[] = {0, 0, 0, 70, 70, 70, 140, 140, 140, 210, 210, 210};
  DecodeScratch scratch;
  uint8_t out[6] = {};
  CropResizeRgb(row, 4, 1, {0, 0, 4, 1}, 2, 1, /*hflip=*/false, out, &scratch);
  EXPECT_EQ(out[0], 50);
  EXPECT_EQ(out[3], 160);
  CropResizeRgb(row, 4, 1, {0, 0, 4, 1}, 2, 1, /*hflip=*/true, out, &scratch);
  EXPECT_EQ(out[0], 160);
  EXPECT_EQ(out[3], 50);
  // The same along the vertical axis (taken vertical pass first).
  uint8_t col[2 * 3] = {};
  CropResizeRgb(row, 1, 4, {0, 0, 1, 4}, 1, 2, /*hflip=*/false, col, &scratch);
  EXPECT_EQ(col[0], 50);
  EXPECT_EQ(col[3], 160);
  // Same size is the identity; one output pixel averages everything.
  uint8_t same[12] = {};
  CropResizeRgb(row, 4, 1, {0, 0, 4, 1}, 4, 1, false, same, &scratch);
  EXPECT_EQ(std::memcmp(same, row, sizeof row), 0);
  CropResizeRgb(row, 4, 1, {1, 0, 2, 1}, 1, 1, false, out, &scratch);
  EXPECT_EQ(out[0], 105);
}

// ---- decode planned from the crop ---------------------------------------------

// A smooth photo-like test image: gradients, low-frequency waves and a few
// soft-edged shapes.
std::vector<uint8_t> PhotoLike(int w, int h) {
  std::vector<uint8_t> px(size_t(w) * h * 3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const double u = double(x) / w, v = double(y) / h;
      double rgb[3] = {200 * u + 30 * std::sin(9 * v), 180 * v + 40 * std::cos(7 * u + 2 * v),
                       120 + 60 * std::sin(5 * u * v + 3 * u)};
      auto blend = [&](double alpha, double r, double g, double b) {
        rgb[0] += alpha * (r - rgb[0]);
        rgb[1] += alpha * (g - rgb[1]);
        rgb[2] += alpha * (b - rgb[2]);
      };
      const double d = std::hypot(x - 0.3 * w, y - 0.4 * h) - 0.15 * h;  // Disc.
      blend(std::clamp(0.5 - d / 3, 0.0, 1.0), 230, 60, 40);
      const double bx = std::max(std::abs(x - 0.7 * w) - 60, std::abs(y - 0.6 * h) - 40);  // Box.
      blend(std::clamp(0.5 - bx / 2, 0.0, 1.0), 30, 90, 220);
      const double stripe = std::abs(std::fmod(x + 0.5 * y, 40.0) - 20) - 6;  // Stripes.
      blend(0.5 * std::clamp(0.5 - stripe / 4, 0.0, 1.0) * (v > 0.75), 250, 250, 250);
      for (int c = 0; c < 3; ++c) {
        px[(size_t(y) * w + x) * 3 + c] = uint8_t(std::clamp(std::lround(rgb[c]), 0L, 255L));
      }
    }
  }
  return px;
}

class DecodeCropResizeTest : public ::testing::Test {
 protected:
  static constexpr int kW = 640, kH = 480;

  void SetUp() override {
    rgb_ = PhotoLike(kW, kH);
    auto r = EncodeJpeg(rgb_.data(), kW, kH, 90);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    jpeg_ = std::move(r).value();
    auto full = DecodeRgb(jpeg_);
    ASSERT_TRUE(full.ok()) << full.status().ToString();
    full_ = std::move(full).value();
  }

  // Full decode -> crop -> the same resampler.
  std::vector<uint8_t> Reference(const std::vector<uint8_t>& full, int w, int h,
                                 const CropRect& crop, int out_w, int out_h, bool hflip = false) {
    std::vector<uint8_t> out(size_t(out_w) * out_h * 3);
    DecodeScratch scratch;
    CropResizeRgb(full.data(), w, h, crop, out_w, out_h, hflip, out.data(), &scratch);
    return out;
  }

  std::vector<uint8_t> rgb_;
  Bytes jpeg_;
  std::vector<uint8_t> full_;
};

TEST_F(DecodeCropResizeTest, PlannedDecodeMatchesFullDecode) {
  struct Case {
    const char* name;
    CropRect crop;
    int out_w, out_h;
    int want_scale;  // Eighths.
  };
  const Case cases[] = {
      {"full_image", {0, 0, 640, 480}, 224, 224, 4},          // 480 >= 2 * 224: 1/2.
      {"large_crop_half", {37, 5, 460, 470}, 224, 224, 4},    // Unaligned, 1/2.
      {"crop_quarter", {101, 43, 420, 410}, 100, 100, 2},     // >= 4x: 1/4.
      {"off_center_7_8", {123, 77, 301, 257}, 224, 224, 7},   // Slow scales allowed.
      {"off_center_fast", {123, 77, 301, 257}, 224, 224, 8},  // Default: 7/8 -> 8/8.
      {"third_scale", {11, 3, 600, 470}, 160, 160, 3},
      {"small_upsampled", {333, 211, 150, 120}, 224, 224, 8},
      {"tall_nonsquare_out", {250, 9, 200, 461}, 96, 160, 4},
      {"same_size", {37, 53, 224, 224}, 224, 224, 8},
  };
  SATURATE_ASSERT_OK_AND_ASSIGN(Bytes indexed, AddJpegRestartMarkers(jpeg_));
  DecodeScratch scratch;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    scratch.set_only_fast_dct_scales(c.want_scale <= 4 || c.want_scale == 8);
    std::vector<uint8_t> got(size_t(c.out_w) * c.out_h * 3);
    SATURATE_ASSERT_OK(
        DecodeCropResize(jpeg_, c.crop, c.out_w, c.out_h, false, got.data(), &scratch));
    EXPECT_EQ(scratch.last_dct_scale_eighths(), c.want_scale);
    if (c.crop.width >= 2 * c.out_w && c.crop.height >= 2 * c.out_h) {
      EXPECT_LT(scratch.last_dct_scale_eighths(), 8);
    }
    // The decoded region is about the scaled crop, not the scaled image.
    const double f = scratch.last_dct_scale_eighths() / 8.0;
    EXPECT_LE(scratch.last_decoded_height(), std::ceil(c.crop.height * f) + 1);
    EXPECT_LE(scratch.last_decoded_width(), std::ceil(c.crop.width * f) + 32);
    const double psnr = Psnr(got, Reference(full_, kW, kH, c.crop, c.out_w, c.out_h));
    RecordProperty(std::string("psnr_db_") + c.name, std::to_string(psnr));
    std::printf("[ psnr     ] %-20s scale %d/8, decoded %dx%d: %.2f dB\n", c.name,
                scratch.last_dct_scale_eighths(), scratch.last_decoded_width(),
                scratch.last_decoded_height(), psnr);
    EXPECT_GE(psnr, 30.0);
    // The restart-indexed copy goes the component path (chroma resized as
    // stored, YCbCr -> RGB after the resize).
    std::vector<uint8_t> comp(got.size());
    SATURATE_ASSERT_OK(
        DecodeCropResize(indexed, c.crop, c.out_w, c.out_h, false, comp.data(), &scratch));
    EXPECT_TRUE(scratch.last_decoded_ycc_planes());
    const double comp_psnr = Psnr(comp, Reference(full_, kW, kH, c.crop, c.out_w, c.out_h));
    RecordProperty(std::string("psnr_db_components_") + c.name, std::to_string(comp_psnr));
    std::printf("[ psnr     ] %-20s components (restart-indexed): %.2f dB\n", c.name, comp_psnr);
    EXPECT_GE(comp_psnr, 30.0);
    if (c.want_scale == 8 && c.crop.width == c.out_w) {
      // No scaling, no resampling: only the crop/skip machinery is tested
      // (and for components, chroma upsampling and colour conversion).
      EXPECT_GE(psnr, 50.0);
      EXPECT_GE(comp_psnr, 45.0);
    }
  }
}

// A restart-marked copy (AddJpegRestartMarkers) is cut down to the MCUs
// around each crop before decoding, and gives the very same bytes as
// decoding it whole. A YCbCr one has its components resized as stored
// (chroma at its own resolution), then converted to RGB: that differs from
// the plain JPEG's path (libjpeg's upsampling and conversion of every pixel,
// then the resize) by rounding only.
TEST_F(DecodeCropResizeTest, RestartIndexedJpegCutGivesTheSameBytes) {
  constexpr int kOddW = 637, kOddH = 479;  // partial MCUs at the right and bottom
  std::vector<uint8_t> odd = PhotoLike(kOddW, kOddH), gray(size_t(kW) * kH);
  for (size_t i = 0; i < gray.size(); ++i) gray[i] = rgb_[3 * i + 1];
  struct Source {
    const char* name;
    Bytes jpeg;
    int w, h;
    bool ycc;  // Decoded as YCbCr components.
  };
  const Source sources[] = {
      {"420", jpeg_, kW, kH, true},
      {"420_odd_size", EncodeJpegRaw(odd.data(), kOddW, kOddH, 3, JCS_RGB), kOddW, kOddH, true},
      {"422", EncodeJpegRaw(rgb_.data(), kW, kH, 3, JCS_RGB, false, 2, 1), kW, kH, true},
      {"444", EncodeJpegRaw(rgb_.data(), kW, kH, 3, JCS_RGB, false, 1, 1), kW, kH, true},
      {"gray", EncodeJpegRaw(gray.data(), kW, kH, 1, JCS_GRAYSCALE), kW, kH, false},
      {"progressive", EncodeJpegRaw(rgb_.data(), kW, kH, 3, JCS_RGB, true), kW, kH, true},
  };
  const std::pair<int, int> sizes[] = {{224, 224}, {64, 48}, {300, 100}, {64, 400}};
  MtSource rng(7);
  for (const Source& src : sources) {
    SCOPED_TRACE(src.name);
    SATURATE_ASSERT_OK_AND_ASSIGN(Bytes indexed, AddJpegRestartMarkers(src.jpeg));
    DecodeScratch plain, cut, whole;
    whole.set_cut_restart_index(false);
    int cuts = 0;
    double min_psnr = 99;
    for (int i = 0; i < 60; ++i) {
      const CropRect crop = i == 0 ? CropRect{0, 0, src.w, src.h} : Rrc(src.w, src.h, rng);
      const auto [out_w, out_h] = sizes[i % 4];
      const bool fast = i % 2 == 0, flip = i % 3 == 1;
      for (DecodeScratch* s : {&plain, &cut, &whole}) s->set_only_fast_dct_scales(fast);
      std::vector<uint8_t> want(size_t(out_w) * out_h * 3), got(want.size()), ref(want.size());
      SATURATE_ASSERT_OK(DecodeCropResize(indexed, crop, out_w, out_h, flip, want.data(), &whole));
      SATURATE_ASSERT_OK(DecodeCropResize(indexed, crop, out_w, out_h, flip, got.data(), &cut));
      SATURATE_ASSERT_OK(DecodeCropResize(src.jpeg, crop, out_w, out_h, flip, ref.data(), &plain));
      ASSERT_EQ(got, want) << "crop " << crop.width << "x" << crop.height << "+" << crop.x << "+"
                           << crop.y << " to " << out_w << "x" << out_h;
      EXPECT_FALSE(plain.last_used_restart_index());
      EXPECT_FALSE(whole.last_used_restart_index());
      EXPECT_FALSE(plain.last_decoded_ycc_planes());
      EXPECT_EQ(cut.last_decoded_ycc_planes(), src.ycc);
      EXPECT_EQ(whole.last_decoded_ycc_planes(), src.ycc);
      EXPECT_EQ(cut.last_dct_scale_eighths(), plain.last_dct_scale_eighths());
      if (i == 0) {
        EXPECT_FALSE(cut.last_used_restart_index());  // nothing to cut away
      }
      cuts += cut.last_used_restart_index();
      if (!src.ycc) {
        ASSERT_EQ(got, ref);  // The same RGB path.
      }
      min_psnr = std::min(min_psnr, Psnr(got, ref));
    }
    EXPECT_GE(cuts, 50);  // all but the crops (nearly) as large as the image
    std::printf("[ psnr     ] %-12s components vs RGB path, worst of 60: %.2f dB\n", src.name,
                min_psnr);
    EXPECT_GE(min_psnr, 40.0);
  }
}

// The component path's AVX2 loops (horizontal pass, YCbCr -> RGB) give the
// same bytes as their portable twins, and its CHW output is its HWC output
// split into planes.
TEST_F(DecodeCropResizeTest, YccComponentPathsGiveTheSameBytes) {
  std::vector<uint8_t> odd = PhotoLike(333, 251);
  const Bytes sources[] = {jpeg_, EncodeJpegRaw(odd.data(), 333, 251, 3, JCS_RGB, false, 2, 1)};
  const std::pair<int, int> sizes[] = {{224, 224}, {37, 29}, {300, 100}, {64, 400}, {500, 31}};
  MtSource rng(8);
  DecodeScratch scratch;
  for (const Bytes& jpeg : sources) {
    SATURATE_ASSERT_OK_AND_ASSIGN(Bytes indexed, AddJpegRestartMarkers(jpeg));
    SATURATE_ASSERT_OK_AND_ASSIGN(ImageInfo info, ProbeImage(indexed));
    for (int i = 0; i < 40; ++i) {
      const CropRect crop = Rrc(info.width, info.height, rng);
      const auto [out_w, out_h] = sizes[i % 5];
      const bool flip = i % 2 == 1;
      std::vector<uint8_t> fast(size_t(out_w) * out_h * 3), portable(fast.size()), chw(fast.size()),
          want_chw(fast.size());
      SATURATE_ASSERT_OK(
          DecodeCropResize(indexed, crop, out_w, out_h, flip, fast.data(), &scratch));
      ASSERT_TRUE(scratch.last_decoded_ycc_planes());
      DisableAvx2ResizeForTesting(true);
      SATURATE_ASSERT_OK(
          DecodeCropResize(indexed, crop, out_w, out_h, flip, portable.data(), &scratch));
      DisableAvx2ResizeForTesting(false);
      ASSERT_EQ(fast, portable) << "case " << i;
      SATURATE_ASSERT_OK(
          DecodeCropResize(indexed, crop, out_w, out_h, flip, chw.data(), &scratch, Layout::kCHW));
      ConvertPixels(fast.data(), out_h, out_w, nullptr, nullptr, Layout::kCHW, PixelType::kUInt8,
                    want_chw.data());
      ASSERT_EQ(chw, want_chw) << "case " << i;
    }
  }
}

// The component path's filter taps are computed where the crop lies in the
// whole image, then moved to the cut: computed in the cut's own
// coordinates, a box edge at x = 6.5 (cut) rounded differently from the
// same edge at x = 22.5 (whole), and now and then an output byte came out
// 1 off. Every offset of a few crops, along both axes, must give the whole
// decode's bytes.
TEST_F(DecodeCropResizeTest, RestartIndexedCutMatchesWholeAtEveryOffset) {
  constexpr int kSw = 200, kSh = 40;
  std::vector<uint8_t> px(size_t(kSw) * kSh * 3);
  for (int y = 0; y < kSh; ++y) {
    for (int x = 0; x < kSw; ++x) {
      for (int c = 0; c < 3; ++c) {
        px[(size_t(y) * kSw + x) * 3 + c] = uint8_t(x * (3 + c) + y * 7 + x * x * (c + 1) / 13);
      }
    }
  }
  SATURATE_ASSERT_OK_AND_ASSIGN(Bytes jpeg, EncodeJpeg(px.data(), kSw, kSh, 90));
  SATURATE_ASSERT_OK_AND_ASSIGN(Bytes indexed, AddJpegRestartMarkers(jpeg));
  DecodeScratch cut, whole;
  whole.set_cut_restart_index(false);
  int cuts = 0;
  auto check = [&](const CropRect& crop, int out_w, int out_h, bool flip) {
    std::vector<uint8_t> want(size_t(out_w) * out_h * 3), got(want.size());
    SATURATE_ASSERT_OK(DecodeCropResize(indexed, crop, out_w, out_h, flip, want.data(), &whole));
    SATURATE_ASSERT_OK(DecodeCropResize(indexed, crop, out_w, out_h, flip, got.data(), &cut));
    cuts += cut.last_used_restart_index();
    ASSERT_EQ(got, want) << "crop " << crop.width << "x" << crop.height << "+" << crop.x << "+"
                         << crop.y << " to " << out_w << "x" << out_h << (flip ? " flipped" : "");
  };
  for (int cw : {37, 73, 109, 150}) {
    for (int shrink : {2, 3, 4}) {
      for (int x = 0; x + cw <= kSw; ++x) {
        ASSERT_NO_FATAL_FAILURE(check({x, 0, cw, kSh}, cw / shrink, kSh / shrink, x % 2 == 1));
      }
    }
  }
  for (int ch : {9, 17, 25}) {
    for (int shrink : {2, 3, 4}) {
      for (int y = 0; y + ch <= kSh; ++y) {
        ASSERT_NO_FATAL_FAILURE(check({0, y, kSw, ch}, kSw / shrink, ch / shrink, false));
      }
    }
  }
  EXPECT_GT(cuts, 1000);

  // The input image_fuzz found (fuzz/seeds/image_fuzz/
  // restart_cut_chroma_taps_rounding.jpg): a 122x1 4:2:0 JPEG whose
  // restart-marked copy, cropped to 38x1+45+0 and resized to 9x1, gave G
  // 29 instead of 30 in the last pixel when cut.
  const char* hex =
      "ffd8ffe000104a46494600010100000100010000ffdb00430006040506050406060506070706080a"
      "100a0a09090a140e0f0c100e141818173416161a1d251f1a1b231c1616202c20233627292a29191f"
      "2d302d283025282928ffdb0043012707070a080a130a0a13281a161a282828282828282828282828"
      "28282828282828282828282828282828282828282828282828282828dad7d71e282828282828ffc0"
      "0011080001007a03012200021101031101ffc4001500010100000000000000000000000000000607"
      "ffc4001c10000200070000000000000000000000000005040621222330a1ffc40015010101000000"
      "00000000000000000000000104ffc4001a11000202030000000000000000000000000003fe060521"
      "22ffdd000400efffda000c03010002110311003f0066566acb000005000000000000000000000000"
      "0000000000000000000000000000000000000000000000c09b00000000009d66c9eab626f27fffd9"
      "89504e";
  Bytes fuzz;
  for (const char* p = hex; p[0] != '\0' && p[1] != '\0'; p += 2) {
    fuzz.push_back(std::byte(std::stoi(std::string(p, 2), nullptr, 16)));
  }
  ASSERT_EQ(fuzz.size(), 363u);
  SATURATE_ASSERT_OK_AND_ASSIGN(indexed, AddJpegRestartMarkers(fuzz));
  cuts = 0;
  ASSERT_NO_FATAL_FAILURE(check({45, 0, 38, 1}, 9, 1, false));
  EXPECT_EQ(cuts, 1);
}

TEST_F(DecodeCropResizeTest, HflipMirrorsExactly) {
  DecodeScratch scratch;
  const CropRect crop{123, 77, 301, 257};
  for (int out_w : {224, 97}) {
    std::vector<uint8_t> plain(size_t(out_w) * 120 * 3), flipped(plain.size());
    SATURATE_ASSERT_OK(DecodeCropResize(jpeg_, crop, out_w, 120, false, plain.data(), &scratch));
    SATURATE_ASSERT_OK(DecodeCropResize(jpeg_, crop, out_w, 120, true, flipped.data(), &scratch));
    for (int y = 0; y < 120; ++y) {
      for (int x = 0; x < out_w; ++x) {
        for (int c = 0; c < 3; ++c) {
          ASSERT_EQ(flipped[(size_t(y) * out_w + x) * 3 + c],
                    plain[(size_t(y) * out_w + (out_w - 1 - x)) * 3 + c])
              << x << "," << y;
        }
      }
    }
  }
}

TEST_F(DecodeCropResizeTest, PngIsCroppedFromFullDecode) {
  const Bytes png = EncodePng(rgb_.data(), kW, kH, PNG_FORMAT_RGB);
  const CropRect crop{123, 77, 301, 257};
  DecodeScratch scratch;
  std::vector<uint8_t> got(224 * 224 * 3);
  SATURATE_ASSERT_OK(DecodeCropResize(png, crop, 224, 224, true, got.data(), &scratch));
  EXPECT_EQ(scratch.last_dct_scale_eighths(), 8);
  EXPECT_EQ(got, Reference(rgb_, kW, kH, crop, 224, 224, /*hflip=*/true));
}

TEST_F(DecodeCropResizeTest, GrayAndCmykBecomeRgb) {
  std::vector<uint8_t> gray(size_t(kW) * kH), cmyk(size_t(kW) * kH * 4);
  for (size_t i = 0; i < gray.size(); ++i) {
    gray[i] = uint8_t((rgb_[3 * i] + rgb_[3 * i + 1] + rgb_[3 * i + 2]) / 3);
    for (int c = 0; c < 3; ++c) cmyk[4 * i + c] = uint8_t(255 - rgb_[3 * i + c]);
    cmyk[4 * i + 3] = 200;
  }
  const CropRect crop{101, 43, 420, 410};
  for (const Bytes& jpeg : {EncodeJpegRaw(gray.data(), kW, kH, 1, JCS_GRAYSCALE),
                            EncodeJpegRaw(cmyk.data(), kW, kH, 4, JCS_CMYK)}) {
    SATURATE_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> full, DecodeRgb(jpeg));
    DecodeScratch scratch;
    std::vector<uint8_t> got(160 * 160 * 3);
    SATURATE_ASSERT_OK(DecodeCropResize(jpeg, crop, 160, 160, false, got.data(), &scratch));
    EXPECT_EQ(scratch.last_dct_scale_eighths(), 4);
    EXPECT_GE(Psnr(got, Reference(full, kW, kH, crop, 160, 160)), 30.0);
  }
}

TEST_F(DecodeCropResizeTest, ProgressiveJpeg) {
  const Bytes jpeg = EncodeJpegRaw(rgb_.data(), kW, kH, 3, JCS_RGB, /*progressive=*/true);
  SATURATE_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> full, DecodeRgb(jpeg));
  DecodeScratch scratch;
  for (const CropRect& crop : {CropRect{101, 43, 420, 410}, CropRect{333, 211, 150, 120}}) {
    std::vector<uint8_t> got(224 * 224 * 3);
    SATURATE_ASSERT_OK(DecodeCropResize(jpeg, crop, 224, 224, false, got.data(), &scratch));
    EXPECT_GE(Psnr(got, Reference(full, kW, kH, crop, 224, 224)), 30.0);
  }
}

TEST_F(DecodeCropResizeTest, ErrorsAndRecovery) {
  DecodeScratch scratch;
  std::vector<uint8_t> out(224 * 224 * 3), good(out.size()), again(out.size());
  const CropRect whole{0, 0, kW, kH};
  SATURATE_ASSERT_OK(DecodeCropResize(jpeg_, whole, 224, 224, false, good.data(), &scratch));

  const Bytes cut(jpeg_.begin(), jpeg_.begin() + jpeg_.size() / 2);
  ::testing::internal::CaptureStderr();
  Status s = DecodeCropResize(cut, whole, 224, 224, false, out.data(), &scratch);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");  // libjpeg must not print.
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();

  Bytes flipped = jpeg_;  // Damage entropy-coded data in the upper half.
  for (size_t i = 700; i < 900; ++i) flipped[i] ^= std::byte{0x5A};
  s = DecodeCropResize(flipped, whole, 224, 224, false, out.data(), &scratch);
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();

  const Bytes garbage(100, std::byte{0x42});
  EXPECT_EQ(DecodeCropResize(garbage, whole, 224, 224, false, out.data(), &scratch).code(),
            StatusCode::kCorruption);
  Bytes bad_header(jpeg_.begin(), jpeg_.begin() + 40);
  EXPECT_EQ(DecodeCropResize(bad_header, whole, 224, 224, false, out.data(), &scratch).code(),
            StatusCode::kCorruption);
  const Bytes png = EncodePng(rgb_.data(), kW, kH, PNG_FORMAT_RGB);
  EXPECT_EQ(DecodeCropResize(Bytes(png.begin(), png.begin() + png.size() / 2), whole, 224, 224,
                             false, out.data(), &scratch)
                .code(),
            StatusCode::kCorruption);

  EXPECT_TRUE(testing::HasError(
      DecodeCropResize(jpeg_, {600, 0, 100, 100}, 224, 224, false, out.data(), &scratch),
      StatusCode::kInvalidArgument, {"crop", "640x480"}));
  EXPECT_EQ(DecodeCropResize(jpeg_, {0, 0, 0, 10}, 224, 224, false, out.data(), &scratch).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeCropResize(jpeg_, whole, 0, 224, false, out.data(), &scratch).code(),
            StatusCode::kInvalidArgument);

  // The scratch (and its kept-alive decompressor) still works after errors.
  SATURATE_ASSERT_OK(DecodeCropResize(jpeg_, whole, 224, 224, false, again.data(), &scratch));
  EXPECT_EQ(again, good);
}

TEST_F(DecodeCropResizeTest, SteadyStateDoesNotGrowScratch) {
  DecodeScratch scratch;
  std::vector<uint8_t> out(224 * 224 * 3);
  const CropRect crops[] = {{37, 5, 460, 470}, {50, 60, 300, 300}, {0, 0, 640, 480}};
  for (const CropRect& crop : crops) {  // Warm up: reach the high-water mark.
    SATURATE_ASSERT_OK(DecodeCropResize(jpeg_, crop, 224, 224, false, out.data(), &scratch));
  }
  const size_t capacity = scratch.CapacityBytes();
  EXPECT_GT(capacity, 0u);
  for (int i = 0; i < 3; ++i) {
    for (const CropRect& crop : crops) {
      SATURATE_ASSERT_OK(DecodeCropResize(jpeg_, crop, 224, 224, i % 2 == 0, out.data(), &scratch));
      EXPECT_EQ(scratch.CapacityBytes(), capacity);
    }
  }
}

// ---- ConvertPixels --------------------------------------------------------------

// A 2x2 image: pixel p has channels (10p + c * 100 + 5) for c = 0..2.
std::vector<uint8_t> TinyImage() {
  std::vector<uint8_t> px(12);
  for (int p = 0; p < 4; ++p) {
    for (int c = 0; c < 3; ++c) px[3 * p + c] = uint8_t(10 * p + 100 * c + 5);
  }
  return px;
}

// A random resize: noise pixels, any crop, output size (upscales and
// downscales, odd widths) and flip.
struct ResizeCase {
  int w, h;
  std::vector<uint8_t> rgb;
  CropRect crop;
  int ow, oh;
  bool flip;
  std::string Name() const {
    return std::to_string(w) + "x" + std::to_string(h) + " -> " + std::to_string(ow) + "x" +
           std::to_string(oh);
  }
};

ResizeCase RandomResizeCase(std::mt19937& rng) {
  ResizeCase c;
  c.w = 8 + int(rng() % 400);
  c.h = 8 + int(rng() % 300);
  c.rgb.resize(size_t(c.w) * c.h * 3);
  for (uint8_t& v : c.rgb) v = static_cast<uint8_t>(rng());
  c.crop.width = 1 + int(rng() % c.w);
  c.crop.height = 1 + int(rng() % c.h);
  c.crop.x = int(rng() % (c.w - c.crop.width + 1));
  c.crop.y = int(rng() % (c.h - c.crop.height + 1));
  c.ow = 1 + int(rng() % 300);
  c.oh = 1 + int(rng() % 300);
  c.flip = rng() % 2;
  return c;
}

// The AVX2 and SSE2 loops do the same multiplies and adds in the same order,
// so every crop, size and flip gives the same bytes on any x86-64 CPU.
TEST(CropResizeRgbTest, Avx2AndSse2PathsGiveTheSameBytes) {
  std::mt19937 rng(11);
  DecodeScratch scratch;
  for (int i = 0; i < 300; ++i) {
    const ResizeCase c = RandomResizeCase(rng);
    std::vector<uint8_t> fast(size_t(c.ow) * c.oh * 3), sse2(fast.size());
    CropResizeRgb(c.rgb.data(), c.w, c.h, c.crop, c.ow, c.oh, c.flip, fast.data(), &scratch);
    DisableAvx2ResizeForTesting(true);
    CropResizeRgb(c.rgb.data(), c.w, c.h, c.crop, c.ow, c.oh, c.flip, sse2.data(), &scratch);
    DisableAvx2ResizeForTesting(false);
    ASSERT_EQ(fast, sse2) << "case " << i << ": " << c.Name();
  }
}

// CHW output is the HWC output split into planes, on both paths (the AVX2
// one writes the planes itself), for upscales and downscales.
TEST(CropResizeRgbTest, ChwIsHwcSplitIntoPlanes) {
  std::mt19937 rng(12);
  DecodeScratch scratch;
  for (bool avx2 : {true, false}) {
    DisableAvx2ResizeForTesting(!avx2);
    for (int i = 0; i < 150; ++i) {
      const ResizeCase c = RandomResizeCase(rng);
      std::vector<uint8_t> hwc(size_t(c.ow) * c.oh * 3), want(hwc.size()), chw(hwc.size());
      CropResizeRgb(c.rgb.data(), c.w, c.h, c.crop, c.ow, c.oh, c.flip, hwc.data(), &scratch);
      ConvertPixels(hwc.data(), c.oh, c.ow, nullptr, nullptr, Layout::kCHW, PixelType::kUInt8,
                    want.data());
      CropResizeRgb(c.rgb.data(), c.w, c.h, c.crop, c.ow, c.oh, c.flip, chw.data(), &scratch,
                    Layout::kCHW);
      ASSERT_EQ(chw, want) << (avx2 ? "AVX2" : "SSE2") << " case " << i << ": " << c.Name();
    }
  }
  DisableAvx2ResizeForTesting(false);
}

TEST(ConvertPixelsTest, UInt8Layouts) {
  const std::vector<uint8_t> px = TinyImage();
  std::vector<uint8_t> hwc(12), chw(12);
  ConvertPixels(px.data(), 2, 2, nullptr, nullptr, Layout::kHWC, PixelType::kUInt8, hwc.data());
  EXPECT_EQ(hwc, px);
  ConvertPixels(px.data(), 2, 2, nullptr, nullptr, Layout::kCHW, PixelType::kUInt8, chw.data());
  EXPECT_EQ(chw, (std::vector<uint8_t>{5, 15, 25, 35, 105, 115, 125, 135, 205, 215, 225, 235}));
}

TEST(ConvertPixelsTest, Float32Normalize) {
  const std::vector<uint8_t> px = TinyImage();
  const float mean[3] = {0.485f, 0.456f, 0.406f};
  const float std[3] = {0.229f, 0.224f, 0.225f};
  std::vector<float> hwc(12), chw(12), plain(12);
  ConvertPixels(px.data(), 2, 2, mean, std, Layout::kHWC, PixelType::kFloat32, hwc.data());
  ConvertPixels(px.data(), 2, 2, mean, std, Layout::kCHW, PixelType::kFloat32, chw.data());
  ConvertPixels(px.data(), 2, 2, nullptr, nullptr, Layout::kCHW, PixelType::kFloat32, plain.data());
  for (int p = 0; p < 4; ++p) {
    for (int c = 0; c < 3; ++c) {
      const double x = px[3 * p + c];
      const double want = (x / 255.0 - mean[c]) / std[c];
      EXPECT_NEAR(hwc[3 * p + c], want, 2e-6) << p << "," << c;
      EXPECT_NEAR(chw[4 * c + p], want, 2e-6) << p << "," << c;
      EXPECT_NEAR(plain[4 * c + p], x / 255.0, 1e-7);
    }
  }
  // Spot values: 0 and 255 in the red channel.
  const uint8_t ends[6] = {0, 0, 0, 255, 255, 255};
  float f[6];
  ConvertPixels(ends, 1, 2, mean, std, Layout::kHWC, PixelType::kFloat32, f);
  EXPECT_NEAR(f[0], -0.485 / 0.229, 1e-6);       // -2.1179
  EXPECT_NEAR(f[3], (1 - 0.485) / 0.229, 1e-6);  // 2.2489
}

// CHW is the HWC result transposed, for every dtype, over sizes that cross
// the blocks the CHW path splits its input into.
TEST(ConvertPixelsTest, ChwIsHwcTransposed) {
  std::mt19937 rng(5);
  const float mean[3] = {0.485f, 0.456f, 0.406f};
  const float std[3] = {0.229f, 0.224f, 0.225f};
  for (const auto& [h, w] : {std::pair{37, 53}, std::pair{1, 1}, std::pair{32, 32}}) {
    const size_t n = size_t(h) * w;
    std::vector<uint8_t> px(3 * n);
    for (uint8_t& v : px) v = static_cast<uint8_t>(rng());
    for (PixelType type : {PixelType::kFloat32, PixelType::kFloat16, PixelType::kBFloat16}) {
      const size_t size = PixelTypeSize(type);
      std::vector<uint8_t> hwc(3 * n * size), chw(hwc.size());
      ConvertPixels(px.data(), h, w, mean, std, Layout::kHWC, type, hwc.data());
      ConvertPixels(px.data(), h, w, mean, std, Layout::kCHW, type, chw.data());
      for (size_t p = 0; p < n; ++p) {
        for (int c = 0; c < 3; ++c) {
          ASSERT_EQ(std::memcmp(&chw[(c * n + p) * size], &hwc[(3 * p + c) * size], size), 0)
              << h << "x" << w << " pixel " << p << " channel " << c;
        }
      }
    }
  }
}

TEST(ConvertPixelsTest, HalfBitsExact) {
  EXPECT_EQ(FloatToHalfBits(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalfBits(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalfBits(1.0f), 0x3C00);
  EXPECT_EQ(FloatToHalfBits(0.5f), 0x3800);
  EXPECT_EQ(FloatToHalfBits(-2.0f), 0xC000);
  EXPECT_EQ(FloatToHalfBits(65504.0f), 0x7BFF);  // Largest finite half.
  EXPECT_EQ(FloatToHalfBits(65519.0f), 0x7BFF);  // Rounds down.
  EXPECT_EQ(FloatToHalfBits(65520.0f), 0x7C00);  // Halfway: to even, which is infinity.
  EXPECT_EQ(FloatToHalfBits(1e10f), 0x7C00);
  EXPECT_EQ(FloatToHalfBits(INFINITY), 0x7C00);
  EXPECT_EQ(FloatToHalfBits(-INFINITY), 0xFC00);
  EXPECT_EQ(FloatToHalfBits(NAN) & 0x7FFF, 0x7E00);
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -24)), 0x0001);             // Smallest subnormal.
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -25)), 0x0000);             // Halfway to 0: even.
  EXPECT_EQ(FloatToHalfBits(std::ldexp(3.0f, -25)), 0x0002);             // 1.5 ulp: to even (2).
  EXPECT_EQ(FloatToHalfBits(1e-7f), 0x0002);                             // 1.68 ulp.
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -14)), 0x0400);             // Smallest normal.
  EXPECT_EQ(FloatToHalfBits(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // Tie: even.
  EXPECT_EQ(FloatToHalfBits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // Tie: even.
  EXPECT_EQ(FloatToHalfBits(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3C01);
  EXPECT_EQ(FloatToHalfBits(0.1f), 0x2E66);
}

#ifdef __FLT16_MAX__
// GCC 12 supports _Float16 on x86-64: its conversion is the reference.
TEST(ConvertPixelsTest, HalfBitsMatchCompilerFloat16) {
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 4093) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(bits));
    if (std::isnan(f)) continue;
    const _Float16 h = static_cast<_Float16>(f);
    ASSERT_EQ(FloatToHalfBits(f), std::bit_cast<uint16_t>(h)) << std::hexfloat << f;
  }
}
#endif

TEST(ConvertPixelsTest, Float16MatchesFloat32) {
  const std::vector<uint8_t> px = TinyImage();
  const float mean[3] = {0.485f, 0.456f, 0.406f};
  const float std[3] = {0.229f, 0.224f, 0.225f};
  for (Layout layout : {Layout::kHWC, Layout::kCHW}) {
    std::vector<float> f32(12);
    std::vector<uint16_t> f16(12);
    ConvertPixels(px.data(), 2, 2, mean, std, layout, PixelType::kFloat32, f32.data());
    ConvertPixels(px.data(), 2, 2, mean, std, layout, PixelType::kFloat16, f16.data());
    for (int i = 0; i < 12; ++i) EXPECT_EQ(f16[i], FloatToHalfBits(f32[i])) << i;
  }
  const uint8_t ends[3] = {0, 255, 51};
  uint16_t h[3];
  ConvertPixels(ends, 1, 1, nullptr, nullptr, Layout::kHWC, PixelType::kFloat16, h);
  EXPECT_EQ(h[0], 0x0000);
  EXPECT_EQ(h[1], 0x3C00);
  EXPECT_EQ(h[2], FloatToHalfBits(0.2f));
}

}  // namespace
}  // namespace saturate::image
