// resample_kernels: the resampler's passes 4 floats at a time (SSE2 on
// x86-64, a portable struct elsewhere: see "4-lane float arithmetic"), and
// the table layouts they read. They are the reference for the AVX2 twins
// (resample_avx2.h), which also call them for ragged ends.
//
// A horizontal pass reads a weight table (HorizontalTable, PlaneTable in
// resample.cc) and sums `taps` source values per output position; a
// vertical pass sums `n` rows with one weight each (VerticalTable). Sums go
// in tap order. Thread-safety: pure functions of their arguments.
#ifndef SATURATE_IMAGE_RESAMPLE_KERNELS_H_
#define SATURATE_IMAGE_RESAMPLE_KERNELS_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "image/simd.h"

namespace saturate::image {

inline uint8_t ToByte(float v) { return static_cast<uint8_t>(std::clamp(v + 0.5f, 0.0f, 255.0f)); }

// ---- 4-lane float arithmetic ----------------------------------------------------
// The resampler works on 4 floats at a time: one pixel (RGB + a lane that is
// never stored) in the horizontal pass, 4 channel values in the vertical one.
// GCC does not vectorize the 3-channel tap loops by itself, so on x86-64 these
// are SSE2 intrinsics (part of the baseline ISA); elsewhere a portable struct
// does the same IEEE operations in the same order, giving the same bytes.
#if defined(__SSE2__)
using F4 = __m128;
inline F4 Load4(const float* p) { return _mm_loadu_ps(p); }
// For the weight tables, so the load folds into mulps: offsets are multiples
// of 4 floats into vectors, whose storage operator new aligns to 16.
static_assert(__STDCPP_DEFAULT_NEW_ALIGNMENT__ >= 16);
inline F4 LoadAligned4(const float* p) { return _mm_load_ps(p); }
inline void Store4(float* p, F4 v) { _mm_storeu_ps(p, v); }
inline F4 Add(F4 a, F4 b) { return _mm_add_ps(a, b); }
inline F4 Mul(F4 a, F4 b) { return _mm_mul_ps(a, b); }

// The 3 bytes at p as floats, lane 3 = 0. Reads p[3] (ignored) unless kLast.
template <bool kLast>
inline F4 WidenPixel(const uint8_t* p) {
  uint32_t v = 0;
  std::memcpy(&v, p, kLast ? 3 : 4);
  const __m128i z = _mm_setzero_si128();
  const __m128i b = _mm_cvtsi32_si128(static_cast<int>(v & 0xFFFFFFu));  // Little endian.
  return _mm_cvtepi32_ps(_mm_unpacklo_epi16(_mm_unpacklo_epi8(b, z), z));
}

// 16 bytes at p as 4 x 4 floats.
inline void Widen16(const uint8_t* p, F4 out[4]) {
  const __m128i z = _mm_setzero_si128();
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i lo = _mm_unpacklo_epi8(b, z), hi = _mm_unpackhi_epi8(b, z);
  out[0] = _mm_cvtepi32_ps(_mm_unpacklo_epi16(lo, z));
  out[1] = _mm_cvtepi32_ps(_mm_unpackhi_epi16(lo, z));
  out[2] = _mm_cvtepi32_ps(_mm_unpacklo_epi16(hi, z));
  out[3] = _mm_cvtepi32_ps(_mm_unpackhi_epi16(hi, z));
}

// ToByte per lane up to the int conversion; the saturating packs that follow
// supply the lower clamp (min first keeps huge values from wrapping).
inline __m128i ToInt(F4 v) {
  return _mm_cvttps_epi32(_mm_min_ps(_mm_add_ps(v, _mm_set1_ps(0.5f)), _mm_set1_ps(255.0f)));
}

// ToByte of 16 values into dst[0, 16).
inline void Store16Bytes(const F4 v[4], uint8_t* dst) {
  const __m128i lo = _mm_packs_epi32(ToInt(v[0]), ToInt(v[1]));
  const __m128i hi = _mm_packs_epi32(ToInt(v[2]), ToInt(v[3]));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm_packus_epi16(lo, hi));
}
#else
struct F4 {
  float v[4];
};
inline F4 Load4(const float* p) {
  F4 r;
  std::memcpy(r.v, p, sizeof r.v);
  return r;
}
inline F4 LoadAligned4(const float* p) { return Load4(p); }
inline void Store4(float* p, F4 v) { std::memcpy(p, v.v, sizeof v.v); }
inline F4 Add(F4 a, F4 b) {
  for (int i = 0; i < 4; ++i) a.v[i] += b.v[i];
  return a;
}
inline F4 Mul(F4 a, F4 b) {
  for (int i = 0; i < 4; ++i) a.v[i] *= b.v[i];
  return a;
}
template <bool kLast>
inline F4 WidenPixel(const uint8_t* p) {
  return F4{{float(p[0]), float(p[1]), float(p[2]), 0.0f}};
}
inline void Widen16(const uint8_t* p, F4 out[4]) {
  for (int i = 0; i < 16; ++i) out[i / 4].v[i % 4] = p[i];
}
inline void Store16Bytes(const F4 v[4], uint8_t* dst) {
  for (int i = 0; i < 16; ++i) dst[i] = ToByte(v[i / 4].v[i % 4]);
}
#endif

// Horizontal weight table: every output position has `taps` weights (zero
// past its own count: that makes the tap loop a fixed, unrolled sequence,
// and a zero weight adds an exact +0), each as a 4-float broadcast.
// Positions 2q and 2q + 1 are interleaved tap by tap, so one 8-float load
// holds tap k of both (AVX2); one position's taps are kXTapStride apart.
constexpr int kXTapStride = 8;
inline size_t XTableIndex(int pos, int k, int taps) {
  return ((size_t(pos / 2) * taps + k) * 2 + pos % 2) * 4;
}

// The weighted sum of one output pixel: p is its first tap's pixel (pixels
// kStep floats apart: 4 for RGBX rows, 3 for RGB rows, where lane 3 reads
// the next pixel and is never stored), w its weights (kXTapStride apart).
// Even and odd taps have separate sums (it halves the add-latency chain),
// added at the end, as the scalar code did. kTaps == 0: `taps` at run time.
template <int kStep, int kTaps>
inline F4 TapSum(const float* p, const float* w, int taps) {
  constexpr int s = kXTapStride;
  const int n = kTaps > 0 ? kTaps : taps;
  F4 even = Mul(LoadAligned4(w), Load4(p));
  if (n == 1) return even;
  F4 odd = Mul(LoadAligned4(w + s), Load4(p + kStep));
  int k = 2;
  for (; k + 1 < n; k += 2) {
    even = Add(even, Mul(LoadAligned4(w + s * k), Load4(p + kStep * k)));
    odd = Add(odd, Mul(LoadAligned4(w + s * (k + 1)), Load4(p + kStep * (k + 1))));
  }
  if (k < n) even = Add(even, Mul(LoadAligned4(w + s * k), Load4(p + kStep * k)));
  return Add(even, odd);
}

// One row of the horizontal pass into dst (out_w RGB floats): position pos
// sums `taps` pixels from in + offset[pos] (see HorizontalTable). Positions
// go up: each 4-lane store's 4th float is overwritten by the next pixel;
// the last one's lands on dst[3 * out_w], which must exist.
template <int kStep, int kTaps>
void HorizontalRowN(const float* in, const int* offset, const float* table, int taps, int out_w,
                    float* dst) {
  const size_t pair = size_t(taps) * kXTapStride;  // Table floats per pair of positions.
  const float* w = table;
  int pos = 0;
  for (; pos + 1 < out_w; pos += 2, w += pair) {
    Store4(dst + 3 * pos, TapSum<kStep, kTaps>(in + offset[pos], w, taps));
    Store4(dst + 3 * pos + 3, TapSum<kStep, kTaps>(in + offset[pos + 1], w + 4, taps));
  }
  if (pos < out_w) Store4(dst + 3 * pos, TapSum<kStep, kTaps>(in + offset[pos], w, taps));
}

// Calls fn.template operator()<n>() with n = taps for 1-5 (mild downscales
// and upscales, unrolled), else n = 0 (taps at run time).
template <typename Fn>
void WithTaps(int taps, Fn fn) {
  switch (taps) {
    case 1:
      return fn.template operator()<1>();
    case 2:
      return fn.template operator()<2>();
    case 3:
      return fn.template operator()<3>();
    case 4:
      return fn.template operator()<4>();
    case 5:
      return fn.template operator()<5>();
    default:
      return fn.template operator()<0>();
  }
}

// Runs chunk(i) over [0, len) 16 values at a time; a ragged end is redone
// as the last 16 (chunks only write, so the values are the same); len < 16
// goes to scalar(i) one value at a time.
template <typename Chunk, typename Scalar>
inline void ForEach16(size_t len, Chunk chunk, Scalar scalar) {
  if (len < 16) {
    for (size_t i = 0; i < len; ++i) scalar(i);
    return;
  }
  size_t i = 0;
  for (; i + 16 <= len; i += 16) chunk(i);
  if (i < len) chunk(len - 16);
}

// The vertical passes: out[i] = sum over taps k < n of w[k] * rows[k][i]

// n RGB pixels at p as RGBX floats (X = 0) into quad.
void WidenRow(const uint8_t* p, int n, float* quad);

// The vertical passes: out[i] = sum over taps k < n of w[k] * rows[k][i]
// for i < len, rows `stride` elements apart (w a VerticalTable row), summed
// in tap order as the scalar code did.

// Bytes (source rows) to floats (the vertical-first intermediate row).
void VerticalBytesToFloats(const uint8_t* first, size_t stride, const float* w, int n, size_t len,
                           float* dst);

// Floats (horizontal-first intermediate rows) to output bytes.
void VerticalFloatsToBytes(const float* first, size_t stride, const float* w, int n, size_t len,
                           uint8_t* dst);

// ToByte of n floats into dst.
void FloatsToBytes(const float* in, size_t n, uint8_t* dst);

// ---- One 8-bit plane (ResamplePlane) ------------------------------------------------
// Its horizontal pass takes 8 output positions at a time: their taps start
// at most 15 values apart (at most 2x reduction, which DCT scaling ensures
// for JPEG), so one or two 8-float windows per tap, permuted per lane, hold
// every lane's tap (resample_avx2.cc).

constexpr int kPlaneGroup = 8;  // Output positions per table group.
constexpr int kPlanePad = 16;   // Zero floats past a row's end: the windows' overreach.

// A plane's horizontal taps: position pos reads `taps` values from
// offset[pos] (its first source column - col0) with weights tap k of
// positions 8g..8g+7 at weights[(g * taps + k) * 8], zero past each
// position's own count. lane[pos] = offset[pos] - the group's smallest
// offset, at most `spread`.
inline size_t PlaneWeightIndex(int pos, int taps) {
  return size_t(pos / kPlaneGroup) * taps * kPlaneGroup + pos % kPlaneGroup;
}

struct PlaneTaps {
  const int* offset;
  const int* lane;
  const float* weights;
  int taps;
  int spread;
  const float* Weights(int pos) const { return weights + PlaneWeightIndex(pos, taps); }
};

// Positions [from, out_w) of one plane row: taps summed in order, padded
// (zero) taps included, as the AVX2 loop does.
void PlaneRow(const float* in, const PlaneTaps& t, int from, int out_w, float* dst);

}  // namespace saturate::image

#endif  // SATURATE_IMAGE_RESAMPLE_KERNELS_H_
