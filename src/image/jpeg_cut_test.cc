// Tests of the restart-marker cut (jpeg_cut.cc), directly and through
// DecodeCropResize: a cut decodes to the bytes of the whole restart-marked
// file, whatever the restart interval.
#include "image/jpeg_cut.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "base/testing.h"
#include "image/codec.h"
#include "image/crop_plan.h"
#include "image/test_images.h"
#include "image/transform.h"

namespace saturate::image {
namespace {

using test_images::DecodeCropResizeTest;
using test_images::EncodeJpegRaw;
using test_images::EncodePng;
using test_images::MtSource;
using test_images::PhotoLike;
using test_images::Psnr;
using test_images::Rrc;

using Bytes = std::vector<std::byte>;

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

// The MCU range of a crop is widened to whole segments when a restart
// interval holds whole MCU rows: every column, rows from a segment's first.
TEST(JpegCutTest, RowSegmentsWidenTheRangeToWholeSegments) {
  McuGrid g;
  g.mcu_w = g.mcu_h = 16;
  g.mcus_x = 40, g.mcus_y = 30;  // a 640x480 4:2:0 image
  // Scaled pixels [100, 200) x [70, 300) at 8/8: MCU columns 6..12, rows 4..18.
  McuRange r = RangeAround(g, 640, 480, 8, 0, 100, 200, 70, 300);
  EXPECT_EQ(r.c0, 6);
  EXPECT_EQ(r.c1, 13);
  EXPECT_EQ(r.r0, 4);
  EXPECT_EQ(r.r1, 19);
  EXPECT_EQ(SegmentsThrough(g, r), size_t(18 * 40 + 13));
  EXPECT_TRUE(CutSkipsData(g, r));
  g.rows_per_segment = 4;
  r = RangeAround(g, 640, 480, 8, 0, 100, 200, 70, 300);
  EXPECT_EQ(r.c0, 0);
  EXPECT_EQ(r.c1, 40);
  EXPECT_EQ(r.r0, 4);
  EXPECT_EQ(r.r1, 20);
  EXPECT_EQ(r.width, 640);
  EXPECT_EQ(r.height, 16 * 16);
  EXPECT_EQ(SegmentsThrough(g, r), 5u);
  EXPECT_TRUE(CutSkipsData(g, r));
  // The last segment has only 2 rows (30 = 7 * 4 + 2); a crop in the first
  // segment's rows skips nothing that decoding down to it would read.
  r = RangeAround(g, 640, 480, 8, 0, 0, 640, 470, 480);
  EXPECT_EQ(r.r0, 28);
  EXPECT_EQ(r.r1, 30);
  EXPECT_EQ(SegmentsThrough(g, r), 8u);
  r = RangeAround(g, 640, 480, 8, 0, 300, 400, 0, 50);
  EXPECT_EQ(r.r0, 0);
  EXPECT_FALSE(CutSkipsData(g, r));
}

// A file with a restart marker after every N MCU rows (N = 1, 2, 3, 8) is
// cut to the segments holding the crop's rows, and gives the bytes of
// decoding it whole, which are those of the file with a marker after every
// MCU: the restart interval changes the speed, never the output.
TEST_F(DecodeCropResizeTest, RowRestartIntervalsGiveTheBytesOfEveryMcuMarkers) {
  constexpr int kOddW = 637, kOddH = 479;
  std::vector<uint8_t> odd = PhotoLike(kOddW, kOddH), gray(size_t(kW) * kH);
  for (size_t i = 0; i < gray.size(); ++i) gray[i] = rgb_[3 * i + 1];
  struct Source {
    const char* name;
    Bytes jpeg;
    int w, h;
  };
  const Source sources[] = {
      {"420", jpeg_, kW, kH},
      {"420_odd_size", EncodeJpegRaw(odd.data(), kOddW, kOddH, 3, JCS_RGB), kOddW, kOddH},
      {"422", EncodeJpegRaw(rgb_.data(), kW, kH, 3, JCS_RGB, false, 2, 1), kW, kH},
      {"444", EncodeJpegRaw(rgb_.data(), kW, kH, 3, JCS_RGB, false, 1, 1), kW, kH},
      {"gray", EncodeJpegRaw(gray.data(), kW, kH, 1, JCS_GRAYSCALE), kW, kH},
  };
  const std::pair<int, int> sizes[] = {{224, 224}, {64, 48}, {300, 100}};
  for (const Source& src : sources) {
    SATURATE_ASSERT_OK_AND_ASSIGN(Bytes every_mcu, AddJpegRestartMarkers(src.jpeg));
    for (int rows : {1, 2, 3, 8}) {
      SCOPED_TRACE(std::string(src.name) + ", every " + std::to_string(rows) + " MCU rows");
      SATURATE_ASSERT_OK_AND_ASSIGN(Bytes marked, AddJpegRestartMarkers(src.jpeg, rows));
      DecodeScratch cut, whole, reference;
      whole.set_cut_restart_index(false);
      MtSource rng(rows);
      int cuts = 0;
      for (int i = 0; i < 24; ++i) {
        const CropRect crop = Rrc(src.w, src.h, rng);
        const auto [out_w, out_h] = sizes[i % 3];
        const bool flip = i % 2 == 1;
        std::vector<uint8_t> want(size_t(out_w) * out_h * 3), got(want.size()), all(want.size());
        SATURATE_ASSERT_OK(
            DecodeCropResize(every_mcu, crop, out_w, out_h, flip, want.data(), &reference));
        SATURATE_ASSERT_OK(DecodeCropResize(marked, crop, out_w, out_h, flip, got.data(), &cut));
        SATURATE_ASSERT_OK(DecodeCropResize(marked, crop, out_w, out_h, flip, all.data(), &whole));
        ASSERT_EQ(got, want) << "crop " << crop.width << "x" << crop.height << "+" << crop.x << "+"
                             << crop.y << " to " << out_w << "x" << out_h;
        ASSERT_EQ(all, want);
        EXPECT_EQ(cut.last_decoded_ycc_planes(), reference.last_decoded_ycc_planes());
        EXPECT_FALSE(whole.last_used_restart_index());
        cuts += cut.last_used_restart_index();
      }
      // Crops that start in the first segment's rows are not cut (most with
      // 8-row segments of a 480-row image).
      EXPECT_GE(cuts, rows == 1 ? 10 : 1);
    }
  }
}

// Without restart markers, or with an interval that is neither one MCU nor
// whole MCU rows, nothing is cut: the file takes the RGB path of a plain
// JPEG, and gives its bytes.
TEST_F(DecodeCropResizeTest, OtherRestartIntervalsAreNotCut) {
  SATURATE_ASSERT_OK_AND_ASSIGN(Bytes none, AddJpegRestartMarkers(jpeg_, 0));
  const Bytes five_mcus = EncodeJpegRaw(rgb_.data(), kW, kH, 3, JCS_RGB, false, 2, 2, 0, 5);
  const Bytes plain = EncodeJpegRaw(rgb_.data(), kW, kH, 3, JCS_RGB);
  // Each file with what it must decode like.
  const std::pair<const Bytes*, const Bytes*> files[] = {{&none, &jpeg_}, {&five_mcus, &plain}};
  MtSource rng(3);
  DecodeScratch scratch;
  for (int i = 0; i < 12; ++i) {
    const CropRect crop = Rrc(kW, kH, rng);
    std::vector<uint8_t> want(224 * 224 * 3), got(want.size());
    for (const auto& [marked, original] : files) {
      SATURATE_ASSERT_OK(DecodeCropResize(*original, crop, 224, 224, false, want.data(), &scratch));
      SATURATE_ASSERT_OK(DecodeCropResize(*marked, crop, 224, 224, false, got.data(), &scratch));
      EXPECT_FALSE(scratch.last_used_restart_index());
      EXPECT_FALSE(scratch.last_decoded_ycc_planes());
      ASSERT_EQ(got, want);
    }
  }
  EXPECT_EQ(AddJpegRestartMarkers(jpeg_, -2).status().code(), StatusCode::kInvalidArgument);
}

// CutJpegAroundCrop, the cut a whole-image decoder (nvJPEG) is given: its
// whole decode holds the crop's pixels of the whole file's decode, exactly;
// the CPU path's decode of it at the moved crop gives the whole file's
// bytes up to the resampler's rounding; and it is smaller than the file.
TEST_F(DecodeCropResizeTest, CutAroundCropKeepsTheCropsPixels) {
  std::vector<uint8_t> gray(size_t(kW) * kH);
  for (size_t i = 0; i < gray.size(); ++i) gray[i] = rgb_[3 * i + 1];
  struct Source {
    const char* name;
    Bytes jpeg;
    int restart_rows;
  };
  const Source sources[] = {
      {"420", jpeg_, kRestartEveryMcu},
      {"420_rows", jpeg_, 2},
      {"422", EncodeJpegRaw(rgb_.data(), kW, kH, 3, JCS_RGB, false, 2, 1), kRestartEveryMcu},
      {"444", EncodeJpegRaw(rgb_.data(), kW, kH, 3, JCS_RGB, false, 1, 1), kRestartEveryMcu},
      {"gray", EncodeJpegRaw(gray.data(), kW, kH, 1, JCS_GRAYSCALE), kRestartEveryMcu},
  };
  MtSource rng(11);
  DecodeScratch cutter, scratch;
  for (const Source& src : sources) {
    SCOPED_TRACE(src.name);
    SATURATE_ASSERT_OK_AND_ASSIGN(Bytes indexed, AddJpegRestartMarkers(src.jpeg, src.restart_rows));
    SATURATE_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> whole, DecodeRgb(indexed));
    EXPECT_FALSE(CutJpegAroundCrop(indexed, {0, 0, kW, kH}, &cutter));     // nothing to skip
    EXPECT_FALSE(CutJpegAroundCrop(src.jpeg, {8, 8, 100, 100}, &cutter));  // no markers
    int cuts = 0, max_diff = 0;
    for (int i = 0; i < 40; ++i) {
      const CropRect crop = Rrc(kW, kH, rng);
      const auto cut = CutJpegAroundCrop(indexed, crop, &cutter);
      if (!cut) continue;
      ++cuts;
      EXPECT_LT(cut->jpeg.size(), indexed.size());
      const Bytes cut_jpeg(cut->jpeg.begin(), cut->jpeg.end());
      ImageInfo info;
      SATURATE_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> part, DecodeRgb(cut_jpeg, &info));
      ASSERT_TRUE(CropInside(cut->crop, info.width, info.height));
      EXPECT_EQ(cut->crop.width, crop.width);
      EXPECT_EQ(cut->crop.height, crop.height);
      for (int y = 0; y < crop.height; ++y) {
        const uint8_t* want = &whole[(size_t(crop.y + y) * kW + crop.x) * 3];
        const uint8_t* got = &part[(size_t(cut->crop.y + y) * info.width + cut->crop.x) * 3];
        ASSERT_TRUE(std::equal(got, got + crop.width * 3, want))
            << "row " << y << " of crop " << crop.width << "x" << crop.height << "+" << crop.x
            << "+" << crop.y;
      }
      std::vector<uint8_t> want(224 * 224 * 3), got(want.size());
      SATURATE_ASSERT_OK(DecodeCropResize(indexed, crop, 224, 224, i % 2, want.data(), &scratch));
      SATURATE_ASSERT_OK(
          DecodeCropResize(cut_jpeg, cut->crop, 224, 224, i % 2, got.data(), &scratch));
      for (size_t k = 0; k < want.size(); ++k)
        max_diff = std::max(max_diff, std::abs(want[k] - got[k]));
    }
    // All but the crops (nearly) as large as the image; row segments skip
    // only the rows above, so crops near the top are not cut.
    EXPECT_GE(cuts, src.restart_rows > 0 ? 15 : 30);
    EXPECT_LE(max_diff, 1);
    std::printf(
        "[ cut      ] %-8s %d of 40 crops cut; CPU decode of the cut vs the file: max diff %d\n",
        src.name, cuts, max_diff);
  }
  // Not a JPEG, or a crop outside the image: decoded (and reported) as they are.
  SATURATE_ASSERT_OK_AND_ASSIGN(Bytes indexed, AddJpegRestartMarkers(jpeg_));
  const Bytes junk(300, std::byte{0x42});
  EXPECT_FALSE(CutJpegAroundCrop(junk, {0, 0, 10, 10}, &cutter));
  EXPECT_FALSE(CutJpegAroundCrop(indexed, {kW - 10, 0, 20, 20}, &cutter));
  const Bytes truncated(indexed.begin(), indexed.begin() + 100);
  EXPECT_FALSE(CutJpegAroundCrop(truncated, {0, 0, 10, 10}, &cutter));
  // The decompressor is left ready: the next cut works.
  EXPECT_TRUE(CutJpegAroundCrop(indexed, {300, 200, 64, 64}, &cutter));
}

// PlanJpegForDecoder, the worker's one header read for the GPU path: the
// planner's crop and flip, the file itself when it has no markers, the
// same cut as CutJpegAroundCrop when it has, and nothing for what the CPU
// path must decode.
TEST_F(DecodeCropResizeTest, PlanForDecoderReadsOnceDrawsAndCuts) {
  struct Given : CropPlanner {
    CropRect crop;
    int calls = 0;
    CropRect Plan(int width, int height, bool* hflip) override {
      ++calls;
      EXPECT_EQ(width, kW);
      EXPECT_EQ(height, kH);
      *hflip = true;
      return crop;
    }
  } planner;
  planner.crop = {300, 200, 64, 64};
  DecodeScratch scratch;
  const auto whole = PlanJpegForDecoder(jpeg_, planner, &scratch);
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->jpeg.data(), jpeg_.data());  // No markers: the file as it is.
  EXPECT_EQ(whole->jpeg.size(), jpeg_.size());
  EXPECT_EQ(whole->crop, planner.crop);
  EXPECT_TRUE(whole->hflip);
  EXPECT_FALSE(whole->cut);

  SATURATE_ASSERT_OK_AND_ASSIGN(Bytes indexed, AddJpegRestartMarkers(jpeg_));
  const auto cut = PlanJpegForDecoder(indexed, planner, &scratch);
  ASSERT_TRUE(cut);
  EXPECT_TRUE(cut->cut);
  EXPECT_TRUE(cut->hflip);
  const Bytes cut_bytes(cut->jpeg.begin(), cut->jpeg.end());
  const CropRect moved = cut->crop;
  DecodeScratch other;
  const auto same = CutJpegAroundCrop(indexed, planner.crop, &other);
  ASSERT_TRUE(same);
  EXPECT_EQ(Bytes(same->jpeg.begin(), same->jpeg.end()), cut_bytes);
  EXPECT_EQ(same->crop, moved);
  EXPECT_EQ(planner.calls, 2);

  // What the CPU path decodes and reports: none is handed over.
  std::vector<uint8_t> cmyk(size_t(kW) * kH * 4, 100);
  const Bytes cmyk_jpeg = EncodeJpegRaw(cmyk.data(), kW, kH, 4, JCS_CMYK);
  EXPECT_FALSE(PlanJpegForDecoder(cmyk_jpeg, planner, &scratch));
  EXPECT_FALSE(
      PlanJpegForDecoder(Bytes(indexed.begin(), indexed.begin() + 100), planner, &scratch));
  // Cut short inside the scan: the header reads, no EOI follows.
  EXPECT_FALSE(PlanJpegForDecoder(Bytes(jpeg_.begin(), jpeg_.end() - 200), planner, &scratch));
  EXPECT_FALSE(PlanJpegForDecoder(Bytes(indexed.begin(), indexed.end() - 2), planner, &scratch));
  // Bytes appended after the EOI (camera trailers) leave the image whole.
  Bytes trailer = indexed;
  trailer.insert(trailer.end(), 300, std::byte{0x5A});
  EXPECT_TRUE(PlanJpegForDecoder(trailer, planner, &scratch));
  planner.crop = {kW - 10, 0, 20, 20};  // Outside the image.
  EXPECT_FALSE(PlanJpegForDecoder(indexed, planner, &scratch));
  const Bytes png = EncodePng(rgb_.data(), kW, kH, PNG_FORMAT_RGB);
  EXPECT_FALSE(PlanJpegForDecoder(png, planner, &scratch));
}

}  // namespace
}  // namespace saturate::image
