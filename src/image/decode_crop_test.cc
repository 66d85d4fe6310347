// Tests of DecodeCropResize (decode_crop.cc): the decode planned from the
// crop (DCT scale, decoded region), flips, PNG, gray/CMYK/progressive
// JPEGs, errors and the steady-state allocation. The restart-marker cut is
// tested in jpeg_cut_test.cc, the component path in jpeg_planes_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "base/testing.h"
#include "image/codec.h"
#include "image/test_images.h"
#include "image/transform.h"

namespace saturate::image {
namespace {

using test_images::DecodeCropResizeTest;
using test_images::EncodeJpegRaw;
using test_images::EncodePng;
using test_images::Psnr;

using Bytes = std::vector<std::byte>;

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

}  // namespace
}  // namespace saturate::image
