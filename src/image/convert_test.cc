// Tests of the conversion into batch slots (convert.cc): ConvertPixels,
// FloatToHalfBits.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "image/transform.h"

namespace saturate::image {
namespace {

using Bytes = std::vector<std::byte>;

// A 2x2 image: pixel p has channels (10p + c * 100 + 5) for c = 0..2.
std::vector<uint8_t> TinyImage() {
  std::vector<uint8_t> px(12);
  for (int p = 0; p < 4; ++p) {
    for (int c = 0; c < 3; ++c) px[3 * p + c] = uint8_t(10 * p + 100 * c + 5);
  }
  return px;
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
