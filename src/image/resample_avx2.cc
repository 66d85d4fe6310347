// The AVX2 passes of the resampler: see resample_avx2.h.
#include "image/resample_avx2.h"

#include <algorithm>
#include <cstring>

#ifdef SATURATE_RESIZE_AVX2
namespace saturate::image {
namespace {

// Tap k of positions pos (lanes 0-3) and pos + 1 (lanes 4-7), weighted.
// (No lambdas in the AVX2 code: they would not inherit the target.)
template <int kStep>
SATURATE_TARGET_AVX2 inline __m256 TapPair(const float* p0, const float* p1, const float* w,
                                           int k) {
  const __m256 px = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(p0 + kStep * k)),
                                         _mm_loadu_ps(p1 + kStep * k), 1);
  return _mm256_mul_ps(_mm256_loadu_ps(w + kXTapStride * k), px);
}

// TapSum of positions pos (lanes 0-3) and pos + 1 (lanes 4-7), whose taps
// start at p0 and p1, with the pair's weights w.
template <int kStep, int kTaps>
SATURATE_TARGET_AVX2 inline __m256 PairSum(const float* p0, const float* p1, const float* w,
                                           int taps) {
  const int n = kTaps > 0 ? kTaps : taps;
  __m256 sum = TapPair<kStep>(p0, p1, w, 0);
  if (n == 1) return sum;
  __m256 even = sum, odd = TapPair<kStep>(p0, p1, w, 1);
  int k = 2;
  for (; k + 1 < n; k += 2) {
    even = _mm256_add_ps(even, TapPair<kStep>(p0, p1, w, k));
    odd = _mm256_add_ps(odd, TapPair<kStep>(p0, p1, w, k + 1));
  }
  if (k < n) even = _mm256_add_ps(even, TapPair<kStep>(p0, p1, w, k));
  return _mm256_add_ps(even, odd);
}

// HorizontalRowN two positions at a time.
template <int kStep, int kTaps>
SATURATE_TARGET_AVX2 void HorizontalRowNAvx2(const float* in, const int* offset, const float* table,
                                             int taps, int out_w, float* dst) {
  const size_t pair = size_t(taps) * kXTapStride;
  const float* w = table;
  int pos = 0;
  for (; pos + 1 < out_w; pos += 2, w += pair) {
    const __m256 sum = PairSum<kStep, kTaps>(in + offset[pos], in + offset[pos + 1], w, taps);
    _mm_storeu_ps(dst + 3 * pos, _mm256_castps256_ps128(sum));
    _mm_storeu_ps(dst + 3 * pos + 3, _mm256_extractf128_ps(sum, 1));
  }
  if (pos < out_w) Store4(dst + 3 * pos, TapSum<kStep, kTaps>(in + offset[pos], w, taps));
}

// ToInt on 8 lanes.
SATURATE_TARGET_AVX2 inline __m256i ToInt8(__m256 v) {
  return _mm256_cvttps_epi32(
      _mm256_min_ps(_mm256_add_ps(v, _mm256_set1_ps(0.5f)), _mm256_set1_ps(255.0f)));
}

// ToByte of 32 values (a[0] first) as 32 bytes in the same order. The packs
// work per 128-bit half, leaving the 4-byte groups in the order
// 0 2 4 6 1 3 5 7; the permute restores it.
SATURATE_TARGET_AVX2 inline __m256i PackBytes(const __m256 a[4]) {
  const __m256i bytes = _mm256_packus_epi16(_mm256_packs_epi32(ToInt8(a[0]), ToInt8(a[1])),
                                            _mm256_packs_epi32(ToInt8(a[2]), ToInt8(a[3])));
  return _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// HorizontalRowNAvx2 followed by FloatsToBytes, without the float row in
// between: 8 positions (4 pairs) at a time are packed to 24 bytes, written
// as RGB at dst, or if kPlanar as R, G and B at dst, dst + plane and
// dst + 2 * plane.
template <int kStep, int kTaps, bool kPlanar>
SATURATE_TARGET_AVX2 void HorizontalRowBytesAvx2(const float* in, const int* offset,
                                                 const float* table, int taps, int out_w,
                                                 uint8_t* dst, size_t plane) {
  const size_t pair = size_t(taps) * kXTapStride;
  // The packed 8 pixels are RGBX bytes, 4 per 128-bit half. RGB: `compact`
  // drops the Xs within each half. Planar: `transpose` makes each half
  // R R R R G G G G B B B B, and 32-bit interleaves of the two halves give
  // each channel's 8 bytes in pixel order.
  const __m256i compact = _mm256_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1,
                                           0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
  const __m256i transpose = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,
                                             0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  int pos = 0;
  for (; pos + 8 <= out_w; pos += 8) {
    __m256 sums[4];
    for (int j = 0; j < 4; ++j) {
      const int p = pos + 2 * j;
      sums[j] = PairSum<kStep, kTaps>(in + offset[p], in + offset[p + 1],
                                      table + size_t(p / 2) * pair, taps);
    }
    const __m256i bytes = PackBytes(sums);
    if constexpr (kPlanar) {
      const __m256i t = _mm256_shuffle_epi8(bytes, transpose);
      const __m128i lo = _mm256_castsi256_si128(t), hi = _mm256_extracti128_si256(t, 1);
      const __m128i rg = _mm_unpacklo_epi32(lo, hi), b = _mm_unpackhi_epi32(lo, hi);
      _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + pos), rg);
      _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + plane + pos), _mm_srli_si128(rg, 8));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + 2 * plane + pos), b);
      continue;
    }
    const __m256i rgb = _mm256_shuffle_epi8(bytes, compact);
    uint8_t* d = dst + 3 * pos;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d), _mm256_castsi256_si128(rgb));
    // The second half's 4 spare bytes land on the next pixels, which are
    // written after; they must not land past the row.
    const __m128i hi = _mm256_extracti128_si256(rgb, 1);
    if (3 * (pos + 8) + 4 <= 3 * out_w) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 12), hi);
    } else {
      alignas(16) uint8_t last[16];
      _mm_store_si128(reinterpret_cast<__m128i*>(last), hi);
      std::memcpy(d + 12, last, 12);
    }
  }
  for (; pos < out_w; ++pos) {
    alignas(16) float v[4];
    const float* w = table + size_t(pos / 2) * pair + (pos % 2) * 4;
    Store4(v, TapSum<kStep, kTaps>(in + offset[pos], w, taps));
    for (int c = 0; c < 3; ++c) {
      (kPlanar ? dst[c * plane + pos] : dst[3 * pos + c]) = ToByte(v[c]);
    }
  }
}

// 8 bytes at p as floats.
SATURATE_TARGET_AVX2 inline __m256 Widen8Avx2(const uint8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// Weight k of a vertical tap row: from registers (wk) when the count is a
// compile-time kTaps, else broadcast from w.
template <int kTaps>
SATURATE_TARGET_AVX2 inline __m256 TapWeight(const __m256* wk, const float* w, int k) {
  if constexpr (kTaps > 0) return wk[k];
  return _mm256_broadcast_ss(w + 4 * k);
}

// VerticalBytesToFloats, 32 values at a time. A tap count known at compile
// time (kTaps > 0) keeps the weights in registers: dst may alias w, so the
// compiler would otherwise load them again for every 32 values.
template <int kTaps>
SATURATE_TARGET_AVX2 void VerticalBytesToFloatsAvx2(const uint8_t* first, size_t stride,
                                                    const float* w, int taps, size_t len,
                                                    float* dst) {
  const int n = kTaps > 0 ? kTaps : taps;
  if (len < 32) return VerticalBytesToFloats(first, stride, w, n, len, dst);
  __m256 wk[kTaps > 0 ? kTaps : 1];
  if constexpr (kTaps > 0) {
    for (int k = 0; k < kTaps; ++k) wk[k] = _mm256_broadcast_ss(w + 4 * k);
  }
  for (size_t i = 0;; i += 32) {
    i = std::min(i, len - 32);  // A ragged end is redone as the last 32.
    __m256 a[4];
    const __m256 w0 = TapWeight<kTaps>(wk, w, 0);
    for (int j = 0; j < 4; ++j) a[j] = _mm256_mul_ps(w0, Widen8Avx2(first + i + 8 * j));
    for (int k = 1; k < n; ++k) {
      const __m256 weight = TapWeight<kTaps>(wk, w, k);
      const uint8_t* row = first + stride * k + i;
      for (int j = 0; j < 4; ++j) {
        a[j] = _mm256_add_ps(a[j], _mm256_mul_ps(weight, Widen8Avx2(row + 8 * j)));
      }
    }
    for (int j = 0; j < 4; ++j) _mm256_storeu_ps(dst + i + 8 * j, a[j]);
    if (i + 32 == len) break;
  }
}

// PlaneRow, 8 positions at a time. kWide: a spread up to 15 (two windows),
// else up to 7 (one).
template <int kTaps, bool kWide>
SATURATE_TARGET_AVX2 void PlaneRowAvx2(const float* in, const PlaneTaps& t, int out_w, float* dst) {
  const int n = kTaps > 0 ? kTaps : t.taps;
  int pos = 0;
  for (; pos + kPlaneGroup <= out_w; pos += kPlaneGroup) {
    const __m256i lane = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.lane + pos));
    const __m256 upper = _mm256_castsi256_ps(_mm256_cmpgt_epi32(lane, _mm256_set1_epi32(7)));
    const float* p = in + (t.offset[pos] - t.lane[pos]);
    const float* w = t.Weights(pos);
    __m256 sum = _mm256_setzero_ps();
    for (int k = 0; k < n; ++k) {
      __m256 v = _mm256_permutevar8x32_ps(_mm256_loadu_ps(p + k), lane);
      if constexpr (kWide) {
        v = _mm256_blendv_ps(v, _mm256_permutevar8x32_ps(_mm256_loadu_ps(p + k + 8), lane), upper);
      }
      const __m256 term = _mm256_mul_ps(_mm256_loadu_ps(w + k * kPlaneGroup), v);
      sum = k == 0 ? term : _mm256_add_ps(sum, term);
    }
    _mm256_storeu_ps(dst + pos, sum);
  }
  PlaneRow(in, t, pos, out_w, dst);
}

}  // namespace

template <int kStep>
void HorizontalRowAvx2(const float* in, const int* offset, const float* table, int taps, int out_w,
                       float* dst) {
  WithTaps(taps, [&]<int kTaps>() {
    HorizontalRowNAvx2<kStep, kTaps>(in, offset, table, taps, out_w, dst);
  });
}
template void HorizontalRowAvx2<3>(const float*, const int*, const float*, int, int, float*);
template void HorizontalRowAvx2<4>(const float*, const int*, const float*, int, int, float*);

void HorizontalRowBytesAvx2(const float* in, const int* offset, const float* table, int taps,
                            int out_w, uint8_t* dst, size_t plane) {
  WithTaps(taps, [&]<int kTaps>() {
    if (plane != 0) {
      return HorizontalRowBytesAvx2<3, kTaps, true>(in, offset, table, taps, out_w, dst, plane);
    }
    HorizontalRowBytesAvx2<3, kTaps, false>(in, offset, table, taps, out_w, dst, 0);
  });
}

// WidenRow, 4 pixels at a time (16-byte loads that stay within the row).
SATURATE_TARGET_AVX2 void WidenRowAvx2(const uint8_t* p, int n, float* quad) {
  const __m128i spread = _mm_setr_epi8(0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1);
  int i = 0;
  for (; i + 5 < n; i += 4) {  // 3 * i + 16 <= 3 * n
    const __m128i rgbx =
        _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 3 * i)), spread);
    float* d = quad + size_t(i) * 4;
    _mm256_storeu_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(rgbx)));
    _mm256_storeu_ps(d + 8, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(rgbx, 8))));
  }
  if (i < n) WidenRow(p + 3 * i, n - i, quad + size_t(i) * 4);
}

// VerticalFloatsToBytes, 32 values at a time.
SATURATE_TARGET_AVX2 void VerticalFloatsToBytesAvx2(const float* first, size_t stride,
                                                    const float* w, int n, size_t len,
                                                    uint8_t* dst) {
  if (len < 32) return VerticalFloatsToBytes(first, stride, w, n, len, dst);
  for (size_t i = 0;; i += 32) {
    i = std::min(i, len - 32);  // A ragged end is redone as the last 32.
    const __m256 w0 = _mm256_broadcast_ss(w);
    __m256 a[4];
    for (int j = 0; j < 4; ++j) a[j] = _mm256_mul_ps(w0, _mm256_loadu_ps(first + i + 8 * j));
    for (int k = 1; k < n; ++k) {
      const float* row = first + stride * k + i;
      const __m256 wk = _mm256_broadcast_ss(w + 4 * k);
      for (int j = 0; j < 4; ++j) {
        a[j] = _mm256_add_ps(a[j], _mm256_mul_ps(wk, _mm256_loadu_ps(row + 8 * j)));
      }
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), PackBytes(a));
    if (i + 32 == len) break;
  }
}

void VerticalBytesToFloatsAvx2(const uint8_t* first, size_t stride, const float* w, int n,
                               size_t len, float* dst) {
  WithTaps(n,
           [&]<int kTaps>() { VerticalBytesToFloatsAvx2<kTaps>(first, stride, w, n, len, dst); });
}

void PlaneRowAvx2(const float* in, const PlaneTaps& t, int out_w, float* dst) {
  WithTaps(t.taps, [&]<int kTaps>() {
    if (t.spread < kPlaneGroup) return PlaneRowAvx2<kTaps, false>(in, t, out_w, dst);
    PlaneRowAvx2<kTaps, true>(in, t, out_w, dst);
  });
}

}  // namespace saturate::image
#endif  // SATURATE_RESIZE_AVX2
