// YCbCr and CMYK to RGB: see color.h.
#include "image/color.h"

#include <algorithm>

#include "image/simd.h"

namespace saturate::image {
namespace {

// ---- YCbCr -> RGB -----------------------------------------------------------------
// libjpeg's own conversion (jdcolor.c: 16-bit fixed point, rounded, then
// clamped), applied to the resized planes instead of every decoded pixel.
constexpr int kYccShift = 16;
constexpr int kYccHalf = 1 << (kYccShift - 1);
constexpr int kCrToR = 91881;   // FIX(1.40200)
constexpr int kCbToG = -22554;  // -FIX(0.34414)
constexpr int kCrToG = -46802;  // -FIX(0.71414)
constexpr int kCbToB = 116130;  // FIX(1.77200)

inline uint8_t Clamp255(int v) { return static_cast<uint8_t>(std::clamp(v, 0, 255)); }

// Pixels [from, n) of three planes to RGB: planes r, g, b (`plane` bytes
// apart from out) or, if plane == 0, interleaved.
void YccToRgb(const uint8_t* y, const uint8_t* cb, const uint8_t* cr, size_t from, size_t n,
              uint8_t* out, size_t plane) {
  for (size_t i = from; i < n; ++i) {
    const int l = y[i], b = cb[i] - 128, r = cr[i] - 128;
    const uint8_t rgb[3] = {Clamp255(l + ((kCrToR * r + kYccHalf) >> kYccShift)),
                            Clamp255(l + ((kCbToG * b + kCrToG * r + kYccHalf) >> kYccShift)),
                            Clamp255(l + ((kCbToB * b + kYccHalf) >> kYccShift))};
    for (int c = 0; c < 3; ++c) (plane != 0 ? out[c * plane + i] : out[3 * i + c]) = rgb[c];
  }
}

#ifdef SATURATE_RESIZE_AVX2
// ((c * x) + 2^15) >> 16 for 16 int16 lanes x in [-128, 127], c in int16:
// mulhi of 2x gives floor(c * x / 2^15), and (m + 1) >> 1 of that is the
// rounded floor(c * x / 2^16 + 1/2) (as libjpeg-turbo's SIMD does).
SATURATE_TARGET_AVX2 inline __m256i RoundedProduct(__m256i twice_x, int16_t c) {
  const __m256i m = _mm256_mulhi_epi16(twice_x, _mm256_set1_epi16(c));
  return _mm256_srai_epi16(_mm256_add_epi16(m, _mm256_set1_epi16(1)), 1);
}

// ((a * x + b * y) + 2^15) >> 16 for 16 int16 lanes, in 32-bit sums. The
// 16-bit interleaves and the signed pack both work per 128-bit half, so the
// lanes come back in order.
SATURATE_TARGET_AVX2 inline __m256i RoundedSum(__m256i x, __m256i y, int16_t a, int16_t b) {
  const __m256i ab = _mm256_set1_epi32(int32_t(uint16_t(a)) | int32_t(uint32_t(uint16_t(b)) << 16));
  const __m256i half = _mm256_set1_epi32(kYccHalf);
  __m256i sums[2] = {_mm256_unpacklo_epi16(x, y), _mm256_unpackhi_epi16(x, y)};
  for (__m256i& xy : sums) {
    xy = _mm256_srai_epi32(_mm256_add_epi32(_mm256_madd_epi16(xy, ab), half), kYccShift);
  }
  return _mm256_packs_epi32(sums[0], sums[1]);
}

// 16 bytes at p as int16 lanes.
SATURATE_TARGET_AVX2 inline __m256i Widen16Shorts(const uint8_t* p) {
  return _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// 2 x 16 int16 lanes saturated to [0, 255] (the clamp), as 32 bytes in order.
SATURATE_TARGET_AVX2 inline __m256i PackShorts(__m256i lo, __m256i hi) {
  return _mm256_permute4x64_epi64(_mm256_packus_epi16(lo, hi), 0xD8);
}

// YccToRgb, 32 pixels at a time in int16 lanes: the same integers, from
// 91881 = 2^16 + 26345, 116130 = 2^17 - 14942 and -46802 = -2^16 + 18734
// (each second term fits int16):
//   R = Y + Cr' + round(26345 Cr'), B = Y + 2 Cb' + round(-14942 Cb'),
//   G = Y - Cr' + round(-22554 Cb' + 18734 Cr'), round(x) = (x + 2^15) >> 16.
SATURATE_TARGET_AVX2 void YccToRgbAvx2(const uint8_t* y, const uint8_t* cb, const uint8_t* cr,
                                       size_t n, uint8_t* out, size_t plane) {
  static_assert(kCrToR == 65536 + 26345 && kCbToB == 131072 - 14942 && kCrToG == -65536 + 18734);
  const __m256i c128 = _mm256_set1_epi16(128);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i r[2], g[2], b[2];
    for (int j = 0; j < 2; ++j) {
      const size_t at = i + 16 * j;
      const __m256i l = Widen16Shorts(y + at);
      const __m256i u = _mm256_sub_epi16(Widen16Shorts(cb + at), c128);
      const __m256i v = _mm256_sub_epi16(Widen16Shorts(cr + at), c128);
      const __m256i u2 = _mm256_add_epi16(u, u), v2 = _mm256_add_epi16(v, v);
      r[j] = _mm256_add_epi16(_mm256_add_epi16(l, v), RoundedProduct(v2, 26345));
      b[j] = _mm256_add_epi16(_mm256_add_epi16(l, u2), RoundedProduct(u2, -14942));
      g[j] = _mm256_add_epi16(_mm256_sub_epi16(l, v), RoundedSum(u, v, kCbToG, 18734));
    }
    const __m256i rgb[3] = {PackShorts(r[0], r[1]), PackShorts(g[0], g[1]), PackShorts(b[0], b[1])};
    if (plane != 0) {
      for (int c = 0; c < 3; ++c) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + c * plane + i), rgb[c]);
      }
      continue;
    }
    alignas(32) uint8_t bytes[3][32];
    for (int c = 0; c < 3; ++c) _mm256_store_si256(reinterpret_cast<__m256i*>(bytes[c]), rgb[c]);
    uint8_t* d = out + 3 * i;
    for (int p = 0; p < 32; ++p) {
      for (int c = 0; c < 3; ++c) d[3 * p + c] = bytes[c][p];
    }
  }
  YccToRgb(y, cb, cr, i, n, out, plane);
}
#endif

}  // namespace

// YccToRgb of all n pixels, with AVX2 if the CPU has it.
void YccToRgbAny(bool avx2, const uint8_t* y, const uint8_t* cb, const uint8_t* cr, size_t n,
                 uint8_t* out, size_t plane) {
#ifdef SATURATE_RESIZE_AVX2
  if (avx2) return YccToRgbAvx2(y, cb, cr, n, out, plane);
#endif
  (void)avx2;
  YccToRgb(y, cb, cr, 0, n, out, plane);
}

void CmykRowToRgb(const uint8_t* cmyk, int n, bool inverted, uint8_t* rgb) {
  for (int i = 0; i < n; ++i) {
    int c = cmyk[4 * i], m = cmyk[4 * i + 1], y = cmyk[4 * i + 2], k = cmyk[4 * i + 3];
    if (!inverted) c = 255 - c, m = 255 - m, y = 255 - y, k = 255 - k;
    rgb[3 * i] = static_cast<uint8_t>((c * k + 127) / 255);
    rgb[3 * i + 1] = static_cast<uint8_t>((m * k + 127) / 255);
    rgb[3 * i + 2] = static_cast<uint8_t>((y * k + 127) / 255);
  }
}

}  // namespace saturate::image
