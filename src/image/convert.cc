// Layout and type conversion into batch slots: see convert.h and
// ConvertPixels in transform.h.
#include "image/convert.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "image/simd.h"
#include "image/transform.h"

namespace saturate::image {

void RgbToPlanes(const uint8_t* rgb, size_t pixels, uint8_t* r, uint8_t* g, uint8_t* b) {
  size_t i = 0;
#if defined(__SSE2__)
  // 32 pixels at a time. SSE2 has no byte shuffle; five rounds of byte
  // interleaves of register j with j + 3 move byte p of the 96 to position
  // 32p mod 95, i.e. channel c of pixel n to 32c + n (as OpenCV's
  // _mm_deinterleave_epi8).
  for (; i + 32 <= pixels; i += 32) {
    __m128i v[6];
    for (int j = 0; j < 6; ++j) {
      v[j] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rgb + 3 * i + 16 * j));
    }
    for (int round = 0; round < 5; ++round) {
      __m128i t[6];
      for (int j = 0; j < 3; ++j) {
        t[2 * j] = _mm_unpacklo_epi8(v[j], v[j + 3]);
        t[2 * j + 1] = _mm_unpackhi_epi8(v[j], v[j + 3]);
      }
      for (int j = 0; j < 6; ++j) v[j] = t[j];
    }
    uint8_t* planes[3] = {r + i, g + i, b + i};
    for (int j = 0; j < 6; ++j) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(planes[j / 2] + 16 * (j % 2)), v[j]);
    }
  }
#endif
  for (; i < pixels; ++i) {
    r[i] = rgb[3 * i];
    g[i] = rgb[3 * i + 1];
    b[i] = rgb[3 * i + 2];
  }
}

namespace {

// Float -> half, round to nearest even; branch-free so loops vectorize.
// (After Marat Dukhan's FP16 library, fp16_ieee_from_fp32_value.)
inline uint16_t HalfBits(float f) {
  const float scale_to_inf = 0x1.0p+112f;
  const float scale_to_zero = 0x1.0p-110f;
  float base = (std::fabs(f) * scale_to_inf) * scale_to_zero;
  const uint32_t w = std::bit_cast<uint32_t>(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t bias = std::max(shl1_w & 0xFF000000u, 0x71000000u);
  base = std::bit_cast<float>((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = std::bit_cast<uint32_t>(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  const uint32_t mantissa_bits = bits & 0x00000FFFu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  const uint32_t nan_mask = 0u - static_cast<uint32_t>(shl1_w > 0xFF000000u);  // All ones: NaN.
  return static_cast<uint16_t>((sign >> 16) | (nan_mask & 0x7E00u) | (~nan_mask & nonsign));
}

// Float -> bfloat16, round to nearest even (as __float2bfloat16_rn).
inline uint16_t BFloat16Bits(float f) {
  const uint32_t w = std::bit_cast<uint32_t>(f);
  if ((w & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((w >> 16) | 0x0040u);  // NaN
  return static_cast<uint16_t>((w + 0x7FFFu + ((w >> 16) & 1u)) >> 16);
}

// out = x * scale[c] + bias[c], as float or half, in HWC or CHW.
template <typename Out, typename Store>
void ConvertAffine(const uint8_t* hwc, size_t pixels, const float* scale, const float* bias,
                   Layout layout, Out* out, Store store) {
  if (layout == Layout::kHWC) {
    const float s0 = scale[0], s1 = scale[1], s2 = scale[2];
    const float b0 = bias[0], b1 = bias[1], b2 = bias[2];
    for (size_t i = 0; i < pixels; ++i) {
      out[3 * i] = store(hwc[3 * i] * s0 + b0);
      out[3 * i + 1] = store(hwc[3 * i + 1] * s1 + b1);
      out[3 * i + 2] = store(hwc[3 * i + 2] * s2 + b2);
    }
    return;
  }
  // CHW: split a block of pixels into planes first, so that each channel's
  // loop reads contiguous bytes and vectorizes (a stride-3 read does not).
  constexpr size_t kBlock = 1024;
  uint8_t planes[3][kBlock];
  for (size_t start = 0; start < pixels; start += kBlock) {
    const size_t n = std::min(kBlock, pixels - start);
    RgbToPlanes(hwc + 3 * start, n, planes[0], planes[1], planes[2]);
    for (int c = 0; c < 3; ++c) {
      const float sc = scale[c], bc = bias[c];
      Out* o = out + pixels * c + start;
      const uint8_t* in = planes[c];
      for (size_t i = 0; i < n; ++i) o[i] = store(in[i] * sc + bc);
    }
  }
}

}  // namespace

uint16_t FloatToHalfBits(float value) { return HalfBits(value); }

uint16_t FloatToBFloat16Bits(float value) { return BFloat16Bits(value); }

void PixelAffine(const float* mean, const float* std, float scale[3], float bias[3]) {
  for (int c = 0; c < 3; ++c) {
    const double m = mean != nullptr ? mean[c] : 0.0;
    const double sd = std != nullptr ? std[c] : 1.0;
    scale[c] = static_cast<float>(1.0 / (255.0 * sd));
    bias[c] = static_cast<float>(-m / sd);
  }
}

void ConvertPixels(const uint8_t* hwc, int height, int width, const float* mean, const float* std,
                   Layout layout, PixelType type, void* out) {
  if (hwc == nullptr || out == nullptr || height <= 0 || width <= 0) return;
  const size_t pixels = size_t(height) * width;
  if (type == PixelType::kUInt8) {
    auto* o = static_cast<uint8_t*>(out);
    if (layout == Layout::kHWC) {
      std::memcpy(o, hwc, pixels * 3);
    } else {
      RgbToPlanes(hwc, pixels, o, o + pixels, o + 2 * pixels);
    }
    return;
  }
  float scale[3], bias[3];
  PixelAffine(mean, std, scale, bias);
  if (type == PixelType::kFloat32) {
    ConvertAffine(hwc, pixels, scale, bias, layout, static_cast<float*>(out),
                  [](float v) { return v; });
  } else if (type == PixelType::kFloat16) {
    ConvertAffine(hwc, pixels, scale, bias, layout, static_cast<uint16_t*>(out),
                  [](float v) { return HalfBits(v); });
  } else {
    ConvertAffine(hwc, pixels, scale, bias, layout, static_cast<uint16_t*>(out),
                  [](float v) { return BFloat16Bits(v); });
  }
}

}  // namespace saturate::image
