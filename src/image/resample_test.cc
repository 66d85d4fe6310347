// Tests of the resampler (resample.cc and its SIMD twins) through
// CropResizeRgb.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "image/transform.h"

namespace saturate::image {
namespace {

using Bytes = std::vector<std::byte>;

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

}  // namespace
}  // namespace saturate::image
