#include "image/transform.h"

#include <jerror.h>
#include <jpeglib.h>
#include <png.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <csetjmp>
#include <cstdint>
#include <cstdio>  // jpeglib.h needs FILE and size_t first.
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "image/codec.h"
#include "image/codec_internal.h"

// The resampler's loops are SSE2 (baseline x86-64) with AVX2 versions
// picked at run time; SATURATE_RESIZE_NO_AVX2 leaves the latter out.
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__SSE2__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(SATURATE_RESIZE_NO_AVX2)
#include <immintrin.h>
#define SATURATE_RESIZE_AVX2 1
#define SATURATE_TARGET_AVX2 __attribute__((target("avx2")))
#endif

namespace saturate::image {
namespace {

// Python's round(): half to even (the default FP rounding mode).
int RoundHalfEven(double v) { return static_cast<int>(std::nearbyint(v)); }

// Grows `v` to at least n elements (never shrinks) and returns its data.
template <typename T>
T* Grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

template <typename T>
size_t CapacityOf(const std::vector<T>& v) {
  return v.capacity() * sizeof(T);
}

// Filter weights for one axis: output pixel i reads source pixels
// [first[i], first[i] + count[i]) with weights[i * stride ...].
struct AxisTaps {
  std::vector<int> first;
  std::vector<int> count;
  std::vector<float> weights;
  int stride = 0;
};

// What a resize reads: the box [x0, x0 + w) x [y0, y0 + h) (fractional, in
// source pixels), with filter taps kept inside [cx0, cx1) x [cy0, cy1).
// The source buffer's first pixel is pixel (ox, oy) of those coordinates:
// the taps are computed where the box is, then moved by it, so a buffer cut
// out of a larger image gets bit for bit the weights of the whole image
// (the rounding of the box's coordinates depends on where it is).
struct SourceBox {
  double x0, w, y0, h;
  int cx0, cx1, cy0, cy1;
  int ox = 0, oy = 0;

  bool operator==(const SourceBox&) const = default;

  // A crop of whole pixels, taps inside it (as PIL crops, then resizes).
  static SourceBox Of(const CropRect& c) {
    return {double(c.x), double(c.width), double(c.y), double(c.height),
            c.x,         c.x + c.width,   c.y,         c.y + c.height};
  }
};

}  // namespace

struct DecodeScratch::Impl {
  Impl() { cinfo.err = InitJpegErrors(&err, /*warnings_are_errors=*/true); }
  ~Impl() {
    if (jpeg_created) jpeg_destroy_decompress(&cinfo);
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  Status JpegError() const { return Status::Corruption(std::string("JPEG: ") + err.message); }

  // Created on first use and kept: jpeg_abort_decompress() after each image
  // (or error) returns it to the state where a new header can be read.
  JpegErrorMgr err;
  jpeg_decompress_struct cinfo{};
  bool jpeg_created = false;

  std::vector<uint8_t> pixels;  // Decoded region (JPEG) or whole image (PNG).
  AxisTaps x_taps, y_taps;
  // Tap weights as 4-float broadcasts (HorizontalTable, VerticalTable).
  std::vector<float> x_table, y_table;
  std::vector<int> x_offset;  // Where each output column's taps start.
  // Horizontal-first: horizontal pass output, rows x out_width x 3.
  // Vertical-first: one row of vertical pass output.
  std::vector<float> mid;
  // Horizontal-first: one source row widened to RGBX floats.
  // Vertical-first: one row of horizontal pass output.
  std::vector<float> quad;
  std::vector<uint8_t> out_row;  // Planar output: one output row as RGB.

  // Restart-indexed JPEGs: where each MCU's entropy-coded bytes start, and
  // the smaller JPEG of the MCUs around the crop that is decoded instead.
  std::vector<uint32_t> mcu_starts;
  std::vector<uint8_t> roi_jpeg;
  // YCbCr JPEGs (DecodeJpegPlanes): the decoded components, libjpeg's row
  // pointers into them, and the resized components.
  std::vector<uint8_t> planes;
  std::vector<JSAMPROW> plane_rows;
  std::vector<uint8_t> ycc;

  int plane_spread = 0;  // ResamplePlane: PlaneTable's spread, kept for same_taps.
  bool cut_restart_index = true;
  bool last_decoded_ycc_planes = false;

  bool only_fast_dct_scales = true;
  bool last_used_restart_index = false;
  int last_dct_scale_eighths = 0;
  int last_decoded_width = 0;
  int last_decoded_height = 0;
};

namespace {

// std::floor to int for |v| < 2^31, without the libm call that baseline
// x86-64 (no SSE4.1 roundsd) makes of std::floor.
inline int FloorToInt(double v) {
  const int i = static_cast<int>(v);  // Truncates toward zero.
  return i - (v < i);
}

// Triangle filter (support 1), as PIL's bilinear_filter.
inline double Triangle(double x) {
  x = std::abs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// PIL's precompute_coeffs for the bilinear filter: the source box
// [box_lo, box_hi) maps onto out_size pixels; taps are limited to source
// pixels [clip_lo, clip_hi). Leading and trailing zero weights are dropped.
// first[] counts from source pixel `origin` (the buffer's first).
void ComputeTaps(double box_lo, double box_hi, int clip_lo, int clip_hi, int origin, int out_size,
                 AxisTaps* taps) {
  const double scale = (box_hi - box_lo) / out_size;
  const double filter_scale = std::max(scale, 1.0);
  const double support = filter_scale;  // Triangle support is 1.
  const int stride = static_cast<int>(std::ceil(support)) * 2 + 1;
  taps->stride = stride;
  int* first = Grow(taps->first, out_size);
  int* count = Grow(taps->count, out_size);
  float* weights = Grow(taps->weights, size_t(out_size) * stride);
  const double inv = 1.0 / filter_scale;
  for (int i = 0; i < out_size; ++i) {
    const double center = box_lo + (i + 0.5) * scale;
    const int lo = std::max(clip_lo, FloorToInt(center - support + 0.5));
    const int hi = std::min(clip_hi, FloorToInt(center + support + 0.5));
    float* w = weights + size_t(i) * stride;
    const int n = std::min(hi - lo, stride);  // hi - lo <= 2 * support + 1 <= stride.
    double total = 0;
    int b = 0, e = 0;  // Nonzero weights are w[b, e).
    for (int k = 0; k < n; ++k) {
      const double v = Triangle((lo + k - center + 0.5) * inv);
      w[k] = static_cast<float>(v);
      total += v;
      if (v > 0) {
        if (e == 0) b = k;
        e = k + 1;
      }
    }
    if (total <= 0) {  // Only if the box lies outside the clip range: nearest pixel.
      first[i] = std::clamp(FloorToInt(center), clip_lo, clip_hi - 1) - origin;
      count[i] = 1;
      w[0] = 1.0f;
      continue;
    }
    first[i] = lo + b - origin;
    count[i] = e - b;
    const double norm = 1.0 / total;  // a multiply per tap: divisions were half this function
    for (int k = b; k < e; ++k) w[k - b] = static_cast<float>(w[k] * norm);
  }
}

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

// Every resampler loop also has an AVX2 (8-lane) version, used if the CPU
// has it (see "Dispatch" below). Plain AVX2, no FMA: every lane does the
// same mul and add as the 4-lane code, in the same order, so all paths give
// the same bytes.
bool g_avx2_disabled = false;  // DisableAvx2ResizeForTesting

#ifdef SATURATE_RESIZE_AVX2
bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");  // Also checks OS YMM support.
  return has && !g_avx2_disabled;
}
#else
bool HasAvx2() { return false; }
#endif

// Largest tap count of an axis.
int MaxTaps(const AxisTaps& t, int out_size) {
  return *std::max_element(t.count.begin(), t.count.begin() + out_size);
}

// Horizontal weight table: every output position has `taps` weights (zero
// past its own count: that makes the tap loop a fixed, unrolled sequence,
// and a zero weight adds an exact +0), each as a 4-float broadcast.
// Positions 2q and 2q + 1 are interleaved tap by tap, so one 8-float load
// holds tap k of both (AVX2); one position's taps are kXTapStride apart.
constexpr int kXTapStride = 8;
inline size_t XTableIndex(int pos, int k, int taps) {
  return ((size_t(pos / 2) * taps + k) * 2 + pos % 2) * 4;
}

// Fills the horizontal table (outputs in reverse order if hflip) and
// offset[pos] = (first source column - col0) * step of the same outputs.
void HorizontalTable(const AxisTaps& t, int out_w, int taps, bool hflip, int col0, int step,
                     float* table, int* offset) {
  for (int pos = 0; pos < out_w; ++pos) {
    const int x = hflip ? out_w - 1 - pos : pos;
    const float* w = t.weights.data() + size_t(x) * t.stride;
    for (int k = 0; k < taps; ++k) {
      const float v = k < t.count[x] ? w[k] : 0.0f;
      float* d = table + XTableIndex(pos, k, taps);
      d[0] = d[1] = d[2] = d[3] = v;
    }
    offset[pos] = (t.first[x] - col0) * step;
  }
}

// Vertical weight table: output row y's weights at (y * taps + k) * 4, each
// as a 4-float broadcast.
void VerticalTable(const AxisTaps& t, int out_h, int taps, float* table) {
  for (int y = 0; y < out_h; ++y) {
    for (int k = 0; k < t.count[y]; ++k) {
      float* d = table + (size_t(y) * taps + k) * 4;
      d[0] = d[1] = d[2] = d[3] = t.weights[size_t(y) * t.stride + k];
    }
  }
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

#ifdef SATURATE_RESIZE_AVX2
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
#endif

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

template <int kStep>
void HorizontalRow(const float* in, const int* offset, const float* table, int taps, int out_w,
                   bool avx2, float* dst) {
  WithTaps(taps, [&]<int kTaps>() {
#ifdef SATURATE_RESIZE_AVX2
    if (avx2) return HorizontalRowNAvx2<kStep, kTaps>(in, offset, table, taps, out_w, dst);
#endif
    HorizontalRowN<kStep, kTaps>(in, offset, table, taps, out_w, dst);
  });
  (void)avx2;
}

// n RGB pixels at p as RGBX floats (X = 0) into quad.
void WidenRow(const uint8_t* p, int n, float* quad) {
  for (int i = 0; i + 1 < n; ++i) Store4(quad + size_t(i) * 4, WidenPixel<false>(p + 3 * i));
  Store4(quad + size_t(n - 1) * 4, WidenPixel<true>(p + 3 * (n - 1)));
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
// for i < len, rows `stride` elements apart (w a VerticalTable row), summed
// in tap order as the scalar code did.

// Bytes (source rows) to floats (the vertical-first intermediate row).
void VerticalBytesToFloats(const uint8_t* first, size_t stride, const float* w, int n, size_t len,
                           float* dst) {
  ForEach16(
      len,
      [&](size_t i) {
        F4 v[4], a[4];
        Widen16(first + i, v);
        const F4 w0 = LoadAligned4(w);
        for (int j = 0; j < 4; ++j) a[j] = Mul(w0, v[j]);
        for (int k = 1; k < n; ++k) {
          Widen16(first + stride * k + i, v);
          const F4 wk = LoadAligned4(w + 4 * k);
          for (int j = 0; j < 4; ++j) a[j] = Add(a[j], Mul(wk, v[j]));
        }
        for (int j = 0; j < 4; ++j) Store4(dst + i + 4 * j, a[j]);
      },
      [&](size_t i) {
        float a = w[0] * first[i];
        for (int k = 1; k < n; ++k) a += w[4 * k] * first[stride * k + i];
        dst[i] = a;
      });
}

#ifdef SATURATE_RESIZE_AVX2
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
#endif

// Floats (horizontal-first intermediate rows) to output bytes.
void VerticalFloatsToBytes(const float* first, size_t stride, const float* w, int n, size_t len,
                           uint8_t* dst) {
  ForEach16(
      len,
      [&](size_t i) {
        F4 a[4];
        const F4 w0 = LoadAligned4(w);
        for (int j = 0; j < 4; ++j) a[j] = Mul(w0, Load4(first + i + 4 * j));
        for (int k = 1; k < n; ++k) {
          const float* row = first + stride * k + i;
          const F4 wk = LoadAligned4(w + 4 * k);
          for (int j = 0; j < 4; ++j) a[j] = Add(a[j], Mul(wk, Load4(row + 4 * j)));
        }
        Store16Bytes(a, dst + i);
      },
      [&](size_t i) {
        float a = w[0] * first[i];
        for (int k = 1; k < n; ++k) a += w[4 * k] * first[stride * k + i];
        dst[i] = ToByte(a);
      });
}

#ifdef SATURATE_RESIZE_AVX2
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
#endif

// ToByte of n floats into dst.
void FloatsToBytes(const float* in, size_t n, uint8_t* dst) {
  ForEach16(
      n,
      [&](size_t i) {
        const F4 v[4] = {Load4(in + i), Load4(in + i + 4), Load4(in + i + 8), Load4(in + i + 12)};
        Store16Bytes(v, dst + i);
      },
      [&](size_t i) { dst[i] = ToByte(in[i]); });
}

// Splits interleaved RGB bytes into three planes.
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

// ---- Dispatch: each step's AVX2 loop if the CPU has it, else its 4-lane
// twin (the same bytes).

void Widen(bool avx2, const uint8_t* p, int n, float* quad) {
#ifdef SATURATE_RESIZE_AVX2
  if (avx2) return WidenRowAvx2(p, n, quad);
#endif
  (void)avx2;
  WidenRow(p, n, quad);
}

void VerticalToFloats(bool avx2, const uint8_t* first, size_t stride, const float* w, int n,
                      size_t len, float* dst) {
#ifdef SATURATE_RESIZE_AVX2
  if (avx2) {
    return WithTaps(
        n, [&]<int kTaps>() { VerticalBytesToFloatsAvx2<kTaps>(first, stride, w, n, len, dst); });
  }
#endif
  (void)avx2;
  VerticalBytesToFloats(first, stride, w, n, len, dst);
}

void VerticalToBytes(bool avx2, const float* first, size_t stride, const float* w, int n,
                     size_t len, uint8_t* dst) {
#ifdef SATURATE_RESIZE_AVX2
  if (avx2) return VerticalFloatsToBytesAvx2(first, stride, w, n, len, dst);
#endif
  (void)avx2;
  VerticalFloatsToBytes(first, stride, w, n, len, dst);
}

// ResampleBox's output rows: interleaved RGB rows, or (plane != 0) rows of
// three planes `plane` bytes apart, which get each row through an RGB
// scratch row.
struct OutRows {
  uint8_t* out;
  int out_w;
  size_t plane;
  uint8_t* scratch;  // out_w * 3 bytes, if plane != 0
  // Where row y's RGB bytes go; Done(y) then moves them into place.
  uint8_t* Rgb(int y) const { return plane != 0 ? scratch : out + size_t(out_w) * 3 * y; }
  // Planar: row y of the R plane (G and B are plane and 2 * plane further).
  uint8_t* PlaneRow(int y) const { return out + size_t(out_w) * y; }
  void Done(int y) const {
    if (plane == 0) return;
    uint8_t* r = PlaneRow(y);
    RgbToPlanes(scratch, size_t(out_w), r, r + plane, r + 2 * plane);
  }
};

// Output row y from a vertical-first float row (RGB, kStep 3): the
// horizontal pass and the conversion to bytes, in one go with AVX2, else
// through `hrow` (out_w * 3 + 1 floats).
void HorizontalToBytes(bool avx2, const float* row, const int* offset, const float* table, int taps,
                       const OutRows& rows, int y, float* hrow) {
  const int out_w = rows.out_w;
#ifdef SATURATE_RESIZE_AVX2
  if (avx2) {
    return WithTaps(taps, [&]<int kTaps>() {
      if (rows.plane != 0) {
        return HorizontalRowBytesAvx2<3, kTaps, true>(row, offset, table, taps, out_w,
                                                      rows.PlaneRow(y), rows.plane);
      }
      HorizontalRowBytesAvx2<3, kTaps, false>(row, offset, table, taps, out_w, rows.Rgb(y), 0);
    });
  }
#endif
  HorizontalRow<3>(row, offset, table, taps, out_w, avx2, hrow);
  FloatsToBytes(hrow, size_t(out_w) * 3, rows.Rgb(y));
  rows.Done(y);
}

// The source rectangle [col_lo, col_hi) x [row_lo, row_hi) that taps read.
struct Reach {
  int row_lo, row_hi, col_lo, col_hi;
};

// Computes the taps of box b into s.x_taps and s.y_taps (unless `keep`:
// they are still those of b) and returns what they read, in the source
// buffer's pixels. Taps are monotonic, so the first and last outputs bound it.
Reach BoxTaps(const SourceBox& b, int out_w, int out_h, bool keep, DecodeScratch::Impl& s) {
  const AxisTaps& xt = s.x_taps;
  const AxisTaps& yt = s.y_taps;
  if (!keep) {
    ComputeTaps(b.x0, b.x0 + b.w, b.cx0, b.cx1, b.ox, out_w, &s.x_taps);
    ComputeTaps(b.y0, b.y0 + b.h, b.cy0, b.cy1, b.oy, out_h, &s.y_taps);
  }
  return {yt.first[0], yt.first[out_h - 1] + yt.count[out_h - 1], xt.first[0],
          xt.first[out_w - 1] + xt.count[out_w - 1]};
}

// Resizes the source box of an RGB8 image to out_w x out_h, interleaved or
// (`planar`) as three planes.
void ResampleBox(const uint8_t* src, size_t src_stride, const SourceBox& b, int out_w, int out_h,
                 bool hflip, uint8_t* out, bool planar, DecodeScratch::Impl& s) {
  const AxisTaps& xt = s.x_taps;
  const AxisTaps& yt = s.y_taps;
  const auto [row_lo, row_hi, col_lo, col_hi] = BoxTaps(b, out_w, out_h, /*keep=*/false, s);
  const int cols = col_hi - col_lo;
  const size_t out_row = size_t(out_w) * 3;
  const bool avx2 = HasAvx2();
  // The horizontal pass is the costlier one per value (a 4th lane idles);
  // run it on whichever side has fewer rows. Either way each output value
  // gets the same sums: hflip only mirrors where a column lands, so flipped
  // output is an exact mirror.
  const bool h_first = row_hi - row_lo <= out_h;
  const int x_taps = MaxTaps(xt, out_w), y_taps = MaxTaps(yt, out_h);
  float* xw = Grow(s.x_table, XTableIndex(out_w + 1, 0, x_taps));
  float* yw = Grow(s.y_table, size_t(out_h) * y_taps * 4);
  int* x_offset = Grow(s.x_offset, out_w);
  HorizontalTable(xt, out_w, x_taps, hflip, col_lo, h_first ? 4 : 3, xw, x_offset);
  VerticalTable(yt, out_h, y_taps, yw);
  const OutRows rows{out, out_w, planar ? size_t(out_w) * out_h : 0,
                     planar ? Grow(s.out_row, out_row) : nullptr};
  // Padded taps read up to x_taps - 1 pixels past col_hi: the rows they
  // read get that many zero pixels of slack (zero weight times a finite
  // value), plus the 4th lane of the last one.
  if (h_first) {
    // Horizontal first: source rows -> mid (float, out_w wide), each row
    // made just before the first output row that needs it (cache reuse).
    float* quad = Grow(s.quad, size_t(cols + x_taps) * 4);
    std::fill(quad + size_t(cols) * 4, quad + size_t(cols + x_taps) * 4, 0.0f);
    // +1: the last pixel's 4-lane store spills a float past its row.
    float* mid = Grow(s.mid, out_row * (row_hi - row_lo) + 1);
    int done = row_lo;
    for (int y = 0; y < out_h; ++y) {
      for (const int need = yt.first[y] + yt.count[y]; done < need; ++done) {
        Widen(avx2, src + src_stride * done + size_t(col_lo) * 3, cols, quad);
        HorizontalRow<4>(quad, x_offset, xw, x_taps, out_w, avx2, mid + out_row * (done - row_lo));
      }
      VerticalToBytes(avx2, mid + out_row * (yt.first[y] - row_lo), out_row,
                      yw + size_t(y) * y_taps * 4, yt.count[y], out_row, rows.Rgb(y));
      rows.Done(y);
    }
    return;
  }
  // Vertical first: per output row, the source rows -> one float row (only
  // the columns the horizontal taps read), then horizontal into another,
  // then to bytes.
  const size_t mid_row = size_t(cols) * 3;
  float* row = Grow(s.mid, mid_row + size_t(x_taps) * 3 + 1);
  std::fill(row + mid_row, row + mid_row + size_t(x_taps) * 3 + 1, 0.0f);
  float* hrow = Grow(s.quad, out_row + 1);
  for (int y = 0; y < out_h; ++y) {
    VerticalToFloats(avx2, src + src_stride * yt.first[y] + size_t(col_lo) * 3, src_stride,
                     yw + size_t(y) * y_taps * 4, yt.count[y], mid_row, row);
    HorizontalToBytes(avx2, row, x_offset, xw, x_taps, rows, y, hrow);
  }
}

// ---- One 8-bit plane (a JPEG component: Y, Cb or Cr) ----------------------------
// The same filter as ResampleBox, one value per pixel. Its horizontal pass
// takes 8 output positions at a time: their taps start at most 15 values
// apart (at most 2x reduction, which DCT scaling ensures for JPEG), so one
// or two 8-float windows per tap, permuted per lane, hold every lane's tap.

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

// Fills the arrays of a PlaneTaps from t (outputs in reverse order if hflip)
// and returns its spread.
int PlaneTable(const AxisTaps& t, int out_w, int taps, bool hflip, int col0, float* weights,
               int* offset, int* lane) {
  for (int pos = 0; pos < out_w; ++pos) {
    const int x = hflip ? out_w - 1 - pos : pos;
    const float* w = t.weights.data() + size_t(x) * t.stride;
    float* d = weights + PlaneWeightIndex(pos, taps);
    for (int k = 0; k < taps; ++k) d[k * kPlaneGroup] = k < t.count[x] ? w[k] : 0.0f;
    offset[pos] = t.first[x] - col0;
  }
  int spread = 0;
  for (int lead = 0; lead < out_w; lead += kPlaneGroup) {
    const int end = std::min(out_w, lead + kPlaneGroup);
    const int base = std::min(offset[lead], offset[end - 1]);  // Offsets are monotonic.
    for (int pos = lead; pos < end; ++pos) {
      lane[pos] = offset[pos] - base;
      spread = std::max(spread, lane[pos]);
    }
  }
  return spread;
}

// Positions [from, out_w) of one plane row: taps summed in order, padded
// (zero) taps included, as the AVX2 loop does.
void PlaneRow(const float* in, const PlaneTaps& t, int from, int out_w, float* dst) {
  for (int pos = from; pos < out_w; ++pos) {
    const float* p = in + t.offset[pos];
    const float* w = t.Weights(pos);
    float sum = w[0] * p[0];
    for (int k = 1; k < t.taps; ++k) sum = sum + w[k * kPlaneGroup] * p[k];
    dst[pos] = sum;
  }
}

#ifdef SATURATE_RESIZE_AVX2
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
#endif

// One plane row's horizontal pass (in: the row as floats, kPlanePad zeros
// past its end).
void PlaneRowAny(bool avx2, const float* in, const PlaneTaps& t, int out_w, float* dst) {
#ifdef SATURATE_RESIZE_AVX2
  if (avx2 && t.spread < 2 * kPlaneGroup) {
    return WithTaps(t.taps, [&]<int kTaps>() {
      if (t.spread < kPlaneGroup) return PlaneRowAvx2<kTaps, false>(in, t, out_w, dst);
      PlaneRowAvx2<kTaps, true>(in, t, out_w, dst);
    });
  }
#endif
  (void)avx2;
  PlaneRow(in, t, 0, out_w, dst);
}

// Resizes the source box of one 8-bit plane to out_w x out_h bytes at out.
// same_taps: the previous call had the same box, size and flip (Cr after
// Cb), so its taps and tables still hold.
void ResamplePlane(const uint8_t* src, size_t src_stride, const SourceBox& b, int out_w, int out_h,
                   bool hflip, bool same_taps, uint8_t* out, DecodeScratch::Impl& s) {
  const AxisTaps& xt = s.x_taps;
  const AxisTaps& yt = s.y_taps;
  const auto [row_lo, row_hi, col_lo, col_hi] = BoxTaps(b, out_w, out_h, same_taps, s);
  const int cols = col_hi - col_lo;
  const bool avx2 = HasAvx2();
  const bool h_first = row_hi - row_lo <= out_h;  // As ResampleBox.
  const int x_taps = MaxTaps(xt, out_w), y_taps = MaxTaps(yt, out_h);
  const int groups = (out_w + kPlaneGroup - 1) / kPlaneGroup;
  float* xw = Grow(s.x_table, size_t(groups) * x_taps * kPlaneGroup);
  float* yw = Grow(s.y_table, size_t(out_h) * y_taps * 4);
  int* x_offset = Grow(s.x_offset, 2 * size_t(out_w));  // Offsets, then lanes.
  if (!same_taps) {
    s.plane_spread = PlaneTable(xt, out_w, x_taps, hflip, col_lo, xw, x_offset, x_offset + out_w);
    VerticalTable(yt, out_h, y_taps, yw);
  }
  const PlaneTaps taps{x_offset, x_offset + out_w, xw, x_taps, s.plane_spread};
  // The row the horizontal pass reads, zero past `cols` (see kPlanePad).
  const size_t line_len = size_t(cols) + x_taps + kPlanePad;
  float* line = Grow(s.quad, line_len);
  std::fill(line + cols, line + line_len, 0.0f);
  if (h_first) {
    float* mid = Grow(s.mid, size_t(out_w) * (row_hi - row_lo));
    int done = row_lo;
    for (int y = 0; y < out_h; ++y) {
      for (const int need = yt.first[y] + yt.count[y]; done < need; ++done) {
        const uint8_t* p = src + src_stride * done + col_lo;
        for (int i = 0; i < cols; ++i) line[i] = p[i];
        PlaneRowAny(avx2, line, taps, out_w, mid + size_t(out_w) * (done - row_lo));
      }
      VerticalToBytes(avx2, mid + size_t(out_w) * (yt.first[y] - row_lo), out_w,
                      yw + size_t(y) * y_taps * 4, yt.count[y], out_w, out + size_t(out_w) * y);
    }
    return;
  }
  float* hrow = Grow(s.mid, out_w);
  for (int y = 0; y < out_h; ++y) {
    VerticalToFloats(avx2, src + src_stride * yt.first[y] + col_lo, src_stride,
                     yw + size_t(y) * y_taps * 4, yt.count[y], cols, line);
    PlaneRowAny(avx2, line, taps, out_w, hrow);
    FloatsToBytes(hrow, out_w, out + size_t(out_w) * y);
  }
}

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

// YccToRgb of all n pixels, with AVX2 if the CPU has it.
void YccToRgbAny(bool avx2, const uint8_t* y, const uint8_t* cb, const uint8_t* cr, size_t n,
                 uint8_t* out, size_t plane) {
#ifdef SATURATE_RESIZE_AVX2
  if (avx2) return YccToRgbAvx2(y, cb, cr, n, out, plane);
#endif
  (void)avx2;
  YccToRgb(y, cb, cr, 0, n, out, plane);
}

bool CropInside(const CropRect& c, int width, int height) {
  return c.width > 0 && c.height > 0 && c.x >= 0 && c.y >= 0 && c.x <= width - c.width &&
         c.y <= height - c.height;
}

std::string RectString(const CropRect& c) {
  return std::to_string(c.width) + "x" + std::to_string(c.height) + "+" + std::to_string(c.x) +
         "+" + std::to_string(c.y);
}

Status CheckCrop(const CropRect& crop, int width, int height) {
  if (CropInside(crop, width, height)) return Status::OK();
  return Status::InvalidArgument("crop " + RectString(crop) + " not inside " +
                                 std::to_string(width) + "x" + std::to_string(height) + " image");
}

Status CheckSize(int64_t width, int64_t height) {
  if (width * height <= kMaxImagePixels) return Status::OK();
  return Status::InvalidArgument("image too large: " + std::to_string(width) + "x" +
                                 std::to_string(height) + " exceeds " +
                                 std::to_string(kMaxImagePixels) + " pixels");
}

// CMYK row (4 bytes/px) to RGB (3 bytes/px); may be in place (writes trail
// reads). Adobe-marker files store CMYK inverted.
void CmykRowToRgb(const uint8_t* cmyk, int n, bool inverted, uint8_t* rgb) {
  for (int i = 0; i < n; ++i) {
    int c = cmyk[4 * i], m = cmyk[4 * i + 1], y = cmyk[4 * i + 2], k = cmyk[4 * i + 3];
    if (!inverted) c = 255 - c, m = 255 - m, y = 255 - y, k = 255 - k;
    rgb[3 * i] = static_cast<uint8_t>((c * k + 127) / 255);
    rgb[3 * i + 1] = static_cast<uint8_t>((m * k + 127) / 255);
    rgb[3 * i + 2] = static_cast<uint8_t>((y * k + 127) / 255);
  }
}

// A JPEG with a restart marker after every MCU (AddJpegRestartMarkers) can
// be cut down to the MCUs around a crop: each MCU's entropy-coded segment
// then decodes on its own (restarts reset the DC predictors), so the MCUs
// above and beside the crop are never Huffman-decoded, which is most of
// libjpeg's time otherwise.
struct McuGrid {
  int mcu_w = 0, mcu_h = 0;    // MCU size in image pixels
  int mcus_x = 0, mcus_y = 0;  // MCUs per row, MCU rows
};

// The MCU grid of a JPEG whose header `c` has read, if it is one scan in
// which every MCU is its own restart interval.
std::optional<McuGrid> RestartGrid(const jpeg_decompress_struct& c) {
  if (c.restart_interval != 1 || c.progressive_mode || c.arith_code ||
      c.comps_in_scan != c.num_components) {
    return std::nullopt;
  }
  McuGrid g;
  int max_h = 1, max_v = 1;
  for (int i = 0; i < c.num_components; ++i) {
    max_h = std::max(max_h, c.comp_info[i].h_samp_factor);
    max_v = std::max(max_v, c.comp_info[i].v_samp_factor);
  }
  // A single-component scan is not interleaved: its MCU is one 8x8 block.
  g.mcu_w = c.comps_in_scan == 1 ? 8 : 8 * max_h;
  g.mcu_h = c.comps_in_scan == 1 ? 8 : 8 * max_v;
  g.mcus_x = static_cast<int>((c.image_width + g.mcu_w - 1) / g.mcu_w);
  g.mcus_y = static_cast<int>((c.image_height + g.mcu_h - 1) / g.mcu_h);
  return g;
}

// The first 0xFF in p[i, size), or size. Markers come every few dozen
// bytes here, so an inline 16-byte scan beats a memchr call per marker.
inline size_t NextFF(const uint8_t* p, size_t i, size_t size) {
#if defined(__SSE2__)
  const __m128i ff = _mm_set1_epi8(static_cast<char>(0xFF));
  for (; i + 16 <= size; i += 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
    const int hits = _mm_movemask_epi8(_mm_cmpeq_epi8(v, ff));
    if (hits != 0) return i + static_cast<size_t>(__builtin_ctz(static_cast<unsigned>(hits)));
  }
#endif
  while (i < size && p[i] != 0xFF) ++i;
  return i;
}

// Records where the entropy-coded segments of MCUs 0..count-1 start (and,
// as entry `count`, the end of the last one plus 2, as if a marker followed).
// False unless the data is a run of segments separated by RST0..RST7 in order.
bool IndexMcus(const uint8_t* p, size_t size, size_t start, size_t count,
               std::vector<uint32_t>* starts) {
  if (size > UINT32_MAX - 2) return false;
  starts->clear();
  starts->push_back(static_cast<uint32_t>(start));
  size_t i = start;
  while (starts->size() <= count) {
    const size_t j = NextFF(p, i, size);
    if (j + 1 >= size) return false;
    const uint8_t marker = p[j + 1];
    if (marker == 0x00) {  // a stuffed 0xFF data byte
      i = j + 2;
      continue;
    }
    const bool rst = marker >= 0xD0 && marker <= 0xD7;
    if (rst && marker != 0xD0 + (starts->size() - 1) % 8) return false;
    if (!rst && starts->size() != count) return false;  // ends early (or fill bytes)
    starts->push_back(static_cast<uint32_t>(j + 2));
    i = j + 2;
  }
  return true;
}

// The offset of the SOF0/SOF1 marker in the header bytes [0, end), or 0
// unless it is there and gives the size libjpeg read (height, width).
size_t FindBaselineSof(const uint8_t* p, size_t end, int width, int height) {
  size_t i = 2;  // after SOI
  while (i + 4 <= end && p[i] == 0xFF) {
    const uint8_t marker = p[i + 1];
    if (marker == 0xFF) {  // fill byte
      ++i;
      continue;
    }
    if (marker == 0xC0 || marker == 0xC1) {
      const bool same = i + 9 <= end && (p[i + 5] << 8 | p[i + 6]) == height &&
                        (p[i + 7] << 8 | p[i + 8]) == width;
      return same ? i : 0;
    }
    i += 2 + (size_t{p[i + 2]} << 8 | p[i + 3]);
  }
  return 0;
}

// MCU columns [c0, c1) and rows [r0, r1) of an McuGrid, and their size in
// pixels (the last MCU column and row may be partial).
struct McuRange {
  int c0 = 0, c1 = 0, r0 = 0, r1 = 0;
  int width = 0, height = 0;
};

// Writes into `out` a JPEG of the MCUs `range` of `jpeg` (a width x height
// image indexed by IndexMcus, header ending at starts[0]): the same header
// with the new size, then the chosen segments, renumbered. Returns its size
// (out only grows), or 0 if the header is not one it can rewrite.
size_t CutMcus(const uint8_t* jpeg, const std::vector<uint32_t>& starts, const McuGrid& g,
               int width, int height, const McuRange& range, std::vector<uint8_t>* out) {
  const size_t header = starts[0];
  const size_t sof = FindBaselineSof(jpeg, header, width, height);
  if (sof == 0) return 0;
  // A row's MCUs are adjacent in the source, each followed by its marker:
  // one copy per row, then the markers renumbered from RST0; the last one
  // becomes the EOI.
  auto first = [&](int r) { return size_t(r) * g.mcus_x + range.c0; };
  auto end = [&](int r) { return size_t(r) * g.mcus_x + range.c1; };
  size_t bytes = header;
  for (int r = range.r0; r < range.r1; ++r) bytes += starts[end(r)] - starts[first(r)];
  uint8_t* dst = Grow(*out, bytes);
  std::memcpy(dst, jpeg, header);
  dst[sof + 5] = static_cast<uint8_t>(range.height >> 8);
  dst[sof + 6] = static_cast<uint8_t>(range.height);
  dst[sof + 7] = static_cast<uint8_t>(range.width >> 8);
  dst[sof + 8] = static_cast<uint8_t>(range.width);
  uint8_t* d = dst + header;
  int n = 0;
  for (int r = range.r0; r < range.r1; ++r) {
    const size_t base = starts[first(r)];
    std::memcpy(d, jpeg + base, starts[end(r)] - base);
    for (size_t k = first(r); k < end(r); ++k, ++n) {
      d[starts[k + 1] - 1 - base] = static_cast<uint8_t>(0xD0 + n % 8);
    }
    d += starts[end(r)] - base;
  }
  d[-1] = 0xD9;  // FF D9: EOI
  return bytes;
}

// The MCUs covering the whole scaled pixels of the crop [fx0, fx1) x
// [fy0, fy1) at DCT scale s/8, plus `margin` scaled pixels on each side.
// Decoding to RGB needs a margin of 1: chroma upsampling makes the outermost
// pixels of a cut image differ from the full decode, so they must not reach
// the filter taps. Components (DecodeJpegPlanes) are exact block by block.
McuRange RangeAround(const McuGrid& g, int width, int height, int scale, int margin, double fx0,
                     double fx1, double fy0, double fy1) {
  const int sw = g.mcu_w * scale / 8, sh = g.mcu_h * scale / 8;  // MCU in scaled pixels
  McuRange r;
  r.c0 = std::max(0, (static_cast<int>(std::floor(fx0)) - margin) / sw);
  r.c1 = std::min(g.mcus_x, (static_cast<int>(std::ceil(fx1)) - 1 + margin) / sw + 1);
  r.r0 = std::max(0, (static_cast<int>(std::floor(fy0)) - margin) / sh);
  r.r1 = std::min(g.mcus_y, (static_cast<int>(std::ceil(fy1)) - 1 + margin) / sh + 1);
  r.width = std::min(width, r.c1 * g.mcu_w) - r.c0 * g.mcu_w;
  r.height = std::min(height, r.r1 * g.mcu_h) - r.r0 * g.mcu_h;
  return r;
}

// Whether DecodeJpegPlanes can take a JPEG whose header `c` has read.
bool HasYccPlanes(const jpeg_decompress_struct& c) {
  return c.num_components == 3 && c.jpeg_color_space == JCS_YCbCr;
}

// Decodes a YCbCr JPEG's components as stored (libjpeg's raw data: chroma
// at its own resolution, no upsampling, no colour conversion) down to the
// crop's last row, resizes each to the output size, and converts only the
// output pixels to RGB. [fx0, fx1) x [fy0, fy1) is the crop in scaled luma
// pixels of the source image, of which `c` reads the MCUs from column
// mcu_x0 and row mcu_y0 on (a cut, CutMcus; 0, 0 if whole). Raw data cannot
// skip rows or columns, so the JPEG should already be cut to the crop. The
// filter taps are computed in the source image's coordinates, so a cut gives
// the bytes of the whole image's decode exactly.
Status DecodeJpegPlanes(jpeg_decompress_struct& c, int scale, double fx0, double fx1, double fy0,
                        double fy1, int mcu_x0, int mcu_y0, bool hflip, int out_w, int out_h,
                        uint8_t* out, bool planar, DecodeScratch::Impl& s) {
  c.raw_data_out = TRUE;
  c.scale_num = static_cast<unsigned>(scale);
  c.scale_denom = 8;
  int rows = 0;  // Scaled luma rows needed.
  if (!Guarded(s.err, [&] {
        jpeg_start_decompress(&c);
        const int luma_y0 = mcu_y0 * c.max_v_samp_factor * c.min_DCT_scaled_size;
        rows = std::clamp(static_cast<int>(std::ceil(fy1)) - luma_y0, 1,
                          static_cast<int>(c.output_height));
      })) {
    return s.JpegError();
  }
  // Each read gives one iMCU row: `lines` luma rows, per_read[i] rows of
  // component i, written as whole blocks (stride[i] wide).
  const int lines = c.max_v_samp_factor * c.min_DCT_scaled_size;
  const int reads = (rows + lines - 1) / lines;
  int per_read[3];
  size_t stride[3], start[3], total = 0;
  for (int i = 0; i < 3; ++i) {
    const jpeg_component_info& k = c.comp_info[i];
    per_read[i] = k.v_samp_factor * k.DCT_scaled_size;
    stride[i] = size_t(k.width_in_blocks) * k.DCT_scaled_size;
    start[i] = total;
    total += stride[i] * per_read[i] * reads;
  }
  uint8_t* px = Grow(s.planes, total);
  JSAMPROW* row_ptrs = Grow(s.plane_rows, size_t(per_read[0] + per_read[1] + per_read[2]));
  JSAMPARRAY arrays[3] = {row_ptrs, row_ptrs + per_read[0], row_ptrs + per_read[0] + per_read[1]};
  if (!Guarded(s.err, [&] {
        for (int n = 0; n < reads; ++n) {
          for (int i = 0; i < 3; ++i) {
            for (int r = 0; r < per_read[i]; ++r) {
              arrays[i][r] = px + start[i] + stride[i] * (size_t(n) * per_read[i] + r);
            }
          }
          if (jpeg_read_raw_data(&c, arrays, static_cast<JDIMENSION>(lines)) !=
              static_cast<JDIMENSION>(lines)) {
            ERREXIT(&c, JERR_INPUT_EOF);
          }
        }
      })) {
    return s.JpegError();
  }
  s.last_dct_scale_eighths = scale;
  s.last_decoded_width = static_cast<int>(c.output_width);
  s.last_decoded_height = rows;
  s.last_decoded_ycc_planes = true;
  const size_t n = size_t(out_w) * out_h;
  uint8_t* ycc = Grow(s.ycc, 3 * n);
  SourceBox last{};
  for (int i = 0; i < 3; ++i) {
    // Component pixels per MCU (nx, ny) and per scaled luma pixel (rx, ry:
    // 1/2 for subsampled chroma).
    const jpeg_component_info& k = c.comp_info[i];
    const int nx = k.h_samp_factor * k.DCT_scaled_size;
    const int ny = k.v_samp_factor * k.DCT_scaled_size;
    const int luma_x = c.max_h_samp_factor * c.min_DCT_scaled_size;  // per MCU
    const int luma_y = c.max_v_samp_factor * c.min_DCT_scaled_size;
    const double rx = double(nx) / luma_x, ry = double(ny) / luma_y;
    // The decoded component pixels, in the source image's: [ox, ox + w) x
    // [oy, oy + h).
    const int ox = mcu_x0 * nx, oy = mcu_y0 * ny;
    const int w = static_cast<int>(k.downsampled_width);
    const int h = std::min(static_cast<int>(k.downsampled_height), per_read[i] * reads);
    // Taps stay within the component pixels under the whole luma pixels
    // the crop touches (exact integer bounds: they must not depend on
    // where the cut starts either).
    const int cx0 = static_cast<int>(std::floor(fx0)) * nx / luma_x;
    const int cx1 = std::min(ox + w, (static_cast<int>(std::ceil(fx1)) * nx + luma_x - 1) / luma_x);
    const int cy0 = static_cast<int>(std::floor(fy0)) * ny / luma_y;
    const int cy1 = std::min(oy + h, (static_cast<int>(std::ceil(fy1)) * ny + luma_y - 1) / luma_y);
    const SourceBox box{
        fx0 * rx, (fx1 - fx0) * rx, fy0 * ry, (fy1 - fy0) * ry, cx0, cx1, cy0, cy1, ox, oy};
    ResamplePlane(px + start[i], stride[i], box, out_w, out_h, hflip, i > 0 && box == last,
                  ycc + i * n, s);
    last = box;
  }
  YccToRgbAny(HasAvx2(), ycc, ycc + n, ycc + 2 * n, n, out, planar ? n : 0);
  return Status::OK();
}

// Decodes the crop's region of a JPEG at a planned DCT scale into s.pixels
// and resizes it into out.
Status DecodeJpegCrop(std::span<const std::byte> encoded, CropPlanner& planner, int out_w,
                      int out_h, uint8_t* out, bool planar, DecodeScratch::Impl& s) {
  jpeg_decompress_struct& c = s.cinfo;
  const auto* data = reinterpret_cast<const unsigned char*>(encoded.data());
  if (!s.jpeg_created) {
    if (!Guarded(s.err, [&] { jpeg_create_decompress(&c); })) return s.JpegError();
    s.jpeg_created = true;
  }
  // Whatever happens below, leave the decompressor ready for the next image.
  struct AbortOnExit {
    jpeg_decompress_struct* c;
    ~AbortOnExit() { jpeg_abort_decompress(c); }
  } abort_on_exit{&c};
  if (!Guarded(s.err, [&] {
        jpeg_mem_src(&c, data, encoded.size());
        jpeg_read_header(&c, TRUE);
      })) {
    return s.JpegError();
  }
  const int width = static_cast<int>(c.image_width);
  const int height = static_cast<int>(c.image_height);
  SATURATE_RETURN_IF_ERROR(CheckSize(width, height));
  bool hflip = false;
  const CropRect crop = planner.Plan(width, height, &hflip);
  SATURATE_RETURN_IF_ERROR(CheckCrop(crop, width, height));

  // Smallest s with the crop, scaled by s/8, still >= the output size.
  // libjpeg-turbo 2.1's 5/8..7/8 IDCTs are scalar and slower than its SIMD
  // 8/8 one (x86-64: 1.05x-1.5x the full-size decode time), so by default
  // they are skipped in favour of 8/8.
  int scale = 8;
  for (int k = 1; k < 8; ++k) {
    if (s.only_fast_dct_scales && k > 4) break;
    if (int64_t{crop.width} * k >= int64_t{out_w} * 8 &&
        int64_t{crop.height} * k >= int64_t{out_h} * 8) {
      scale = k;
      break;
    }
  }
  // The crop in scaled pixels (fractional), in the source image; a cut
  // stream starts at MCU column mcu_x0, row mcu_y0.
  const double f = scale / 8.0;
  double fx0 = crop.x * f, fx1 = (crop.x + crop.width) * f;
  double fy0 = crop.y * f, fy1 = (crop.y + crop.height) * f;
  int mcu_x0 = 0, mcu_y0 = 0;
  double dx = 0, dy = 0;  // Where the cut starts, in scaled pixels (whole ones).
  auto grid = RestartGrid(c);
  bool indexed = grid.has_value();  // No rows or columns to skip: it is cut, or whole.
  if (grid) {
    const int margin = HasYccPlanes(c) ? 0 : 1;
    const McuRange r = RangeAround(*grid, width, height, scale, margin, fx0, fx1, fy0, fy1);
    const bool whole = r.c0 == 0 && r.r0 == 0 && r.c1 == grid->mcus_x && r.r1 == grid->mcus_y;
    const size_t start = encoded.size() - c.src->bytes_in_buffer;  // after SOS
    const size_t mcus_needed = size_t(r.r1 - 1) * grid->mcus_x + r.c1;
    size_t cut_bytes = 0;
    // Cut, unless nothing is to be cut away (or told not to): then it is
    // decoded whole, and still indexed. A failed index falls back to RGB.
    if (!whole && s.cut_restart_index) {
      if (!IndexMcus(data, encoded.size(), start, mcus_needed, &s.mcu_starts) ||
          (cut_bytes = CutMcus(data, s.mcu_starts, *grid, width, height, r, &s.roi_jpeg)) == 0) {
        indexed = false;
      }
    }
    if (cut_bytes > 0) {
      jpeg_abort_decompress(&c);
      if (!Guarded(s.err, [&] {
            jpeg_mem_src(&c, s.roi_jpeg.data(), cut_bytes);
            jpeg_read_header(&c, TRUE);
          })) {
        return s.JpegError();
      }
      mcu_x0 = r.c0, mcu_y0 = r.r0;
      dx = r.c0 * grid->mcu_w * f, dy = r.r0 * grid->mcu_h * f;
      s.last_used_restart_index = true;
    }
  }
  if (indexed && HasYccPlanes(c)) {
    return DecodeJpegPlanes(c, scale, fx0, fx1, fy0, fy1, mcu_x0, mcu_y0, hflip, out_w, out_h, out,
                            planar, s);
  }
  // The RGB path works in the decoded stream's pixels. Its box is relative
  // to the decoded region, which starts at an iMCU boundary as a cut does,
  // so it is the whole image's box (dyadic values, exact), and so are its taps.
  fx0 -= dx, fx1 -= dx, fy0 -= dy, fy1 -= dy;
  const bool cmyk = c.jpeg_color_space == JCS_CMYK || c.jpeg_color_space == JCS_YCCK;
  c.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  c.scale_num = static_cast<unsigned>(scale);
  c.scale_denom = 8;
  JDIMENSION col0 = 0, cols = 0;
  int row0 = 0, row1 = 0, channels = 0;
  if (!Guarded(s.err, [&] {
        jpeg_start_decompress(&c);
        const int scaled_w = static_cast<int>(c.output_width);
        const int scaled_h = static_cast<int>(c.output_height);
        col0 = static_cast<JDIMENSION>(std::floor(fx0));
        const int col1 = std::min(scaled_w, static_cast<int>(std::ceil(fx1)));
        cols = static_cast<JDIMENSION>(std::max(1, col1 - static_cast<int>(col0)));
        row0 = static_cast<int>(std::floor(fy0));
        row1 = std::min(scaled_h, static_cast<int>(std::ceil(fy1)));
        row1 = std::max(row1, row0 + 1);
        // Moves col0 left to an iMCU boundary and widens cols to match.
        if (cols < c.output_width) jpeg_crop_scanline(&c, &col0, &cols);
        channels = c.output_components;
      })) {
    return s.JpegError();
  }
  const size_t row_bytes = size_t(cols) * channels;
  const size_t rgb_row = size_t(cols) * 3;
  uint8_t* px = Grow(s.pixels, row_bytes * (row1 - row0));
  if (!Guarded(s.err, [&] {
        if (row0 > 0) jpeg_skip_scanlines(&c, static_cast<JDIMENSION>(row0));
        while (c.output_scanline < static_cast<JDIMENSION>(row1)) {
          // Rows sit at the RGB stride. A CMYK row (4 bytes/px) spills into
          // the next row's space, which is still unwritten, and is then
          // converted in place; the buffer has room for the last one.
          uint8_t* dst = px + rgb_row * (c.output_scanline - row0);
          JSAMPROW row = dst;
          if (jpeg_read_scanlines(&c, &row, 1) != 1) ERREXIT(&c, JERR_INPUT_EOF);
          if (cmyk) CmykRowToRgb(dst, static_cast<int>(cols), c.saw_Adobe_marker, dst);
        }
      })) {
    return s.JpegError();
  }
  // abort_on_exit ends the decode: rows below the crop are never decoded.

  s.last_dct_scale_eighths = scale;
  s.last_decoded_width = static_cast<int>(cols);
  s.last_decoded_height = row1 - row0;
  const int cw = static_cast<int>(cols), ch = row1 - row0;
  // Box relative to the decoded region; taps stay within the whole scaled
  // pixels the crop touches.
  const double bx0 = fx0 - col0, by0 = fy0 - row0;
  const int cx0 = static_cast<int>(std::floor(bx0)), cy0 = static_cast<int>(std::floor(by0));
  const int cx1 = std::min(cw, static_cast<int>(std::ceil(fx1 - col0)));
  const int cy1 = std::min(ch, static_cast<int>(std::ceil(fy1 - row0)));
  ResampleBox(px, rgb_row, {bx0, fx1 - fx0, by0, fy1 - fy0, cx0, cx1, cy0, cy1}, out_w, out_h,
              hflip, out, planar, s);
  return Status::OK();
}

Status DecodePngCrop(std::span<const std::byte> encoded, CropPlanner& planner, int out_w, int out_h,
                     uint8_t* out, bool planar, DecodeScratch::Impl& s) {
  PngReader r;
  if (!png_image_begin_read_from_memory(&r.image, encoded.data(), encoded.size())) {
    return r.Error();
  }
  const int width = static_cast<int>(r.image.width);
  const int height = static_cast<int>(r.image.height);
  SATURATE_RETURN_IF_ERROR(CheckSize(width, height));
  bool hflip = false;
  const CropRect crop = planner.Plan(width, height, &hflip);
  SATURATE_RETURN_IF_ERROR(CheckCrop(crop, width, height));
  r.image.format = PNG_FORMAT_RGB;
  const size_t bytes = PNG_IMAGE_SIZE(r.image);
  uint8_t* px = Grow(s.pixels, bytes);
  std::memset(px, 0, bytes);  // Alpha composites onto the buffer: black.
  if (!png_image_finish_read(&r.image, /*background=*/nullptr, px, /*row_stride=*/0,
                             /*colormap=*/nullptr)) {
    return r.Error();
  }
  s.last_dct_scale_eighths = 8;
  s.last_decoded_width = width;
  s.last_decoded_height = height;
  ResampleBox(px, size_t(width) * 3, SourceBox::Of(crop), out_w, out_h, hflip, out, planar, s);
  return Status::OK();
}

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

DecodeScratch::DecodeScratch() : impl_(std::make_unique<Impl>()) {}
DecodeScratch::~DecodeScratch() = default;
DecodeScratch::DecodeScratch(DecodeScratch&&) noexcept = default;
DecodeScratch& DecodeScratch::operator=(DecodeScratch&&) noexcept = default;

size_t DecodeScratch::CapacityBytes() const {
  const Impl& s = *impl_;
  return CapacityOf(s.pixels) + CapacityOf(s.x_taps.first) + CapacityOf(s.x_taps.count) +
         CapacityOf(s.x_taps.weights) + CapacityOf(s.y_taps.first) + CapacityOf(s.y_taps.count) +
         CapacityOf(s.y_taps.weights) + CapacityOf(s.x_table) + CapacityOf(s.y_table) +
         CapacityOf(s.x_offset) + CapacityOf(s.mid) + CapacityOf(s.quad) + CapacityOf(s.out_row) +
         CapacityOf(s.mcu_starts) + CapacityOf(s.roi_jpeg) + CapacityOf(s.planes) +
         CapacityOf(s.plane_rows) + CapacityOf(s.ycc);
}
void DecodeScratch::set_only_fast_dct_scales(bool only_fast) {
  impl_->only_fast_dct_scales = only_fast;
}
int DecodeScratch::last_dct_scale_eighths() const { return impl_->last_dct_scale_eighths; }
int DecodeScratch::last_decoded_width() const { return impl_->last_decoded_width; }
int DecodeScratch::last_decoded_height() const { return impl_->last_decoded_height; }
bool DecodeScratch::last_used_restart_index() const { return impl_->last_used_restart_index; }
bool DecodeScratch::last_decoded_ycc_planes() const { return impl_->last_decoded_ycc_planes; }
void DecodeScratch::set_cut_restart_index(bool cut) { impl_->cut_restart_index = cut; }

CropRect RandomResizedCropParams(int width, int height, double scale_min, double scale_max,
                                 double ratio_min, double ratio_max, UniformSource& rng) {
  const double area = static_cast<double>(width) * height;
  const double log_lo = std::log(ratio_min), log_hi = std::log(ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * (scale_min + (scale_max - scale_min) * rng.Uniform());
    const double aspect = std::exp(log_lo + (log_hi - log_lo) * rng.Uniform());
    const int w = RoundHalfEven(std::sqrt(target_area * aspect));
    const int h = RoundHalfEven(std::sqrt(target_area / aspect));
    if (0 < w && w <= width && 0 < h && h <= height) {
      // torch.randint(0, n + 1): inclusive of n.
      const int i = std::min(height - h, static_cast<int>(rng.Uniform() * (height - h + 1)));
      const int j = std::min(width - w, static_cast<int>(rng.Uniform() * (width - w + 1)));
      return {j, i, w, h};
    }
  }
  const double in_ratio = static_cast<double>(width) / height;
  int w = width, h = height;
  if (in_ratio < ratio_min) {
    h = RoundHalfEven(w / ratio_min);
  } else if (in_ratio > ratio_max) {
    w = RoundHalfEven(h * ratio_max);
  }
  return {(width - w) / 2, (height - h) / 2, w, h};
}

namespace {
// torchvision center_crop's int(round((size - crop) / 2.0)), for size >= crop.
int CenterOffset(int size, int crop) { return RoundHalfEven((size - crop) / 2.0); }
}  // namespace

CropRect CenterCropRect(int width, int height, int crop_width, int crop_height) {
  const int w = std::clamp(crop_width, 1, std::max(1, width));
  const int h = std::clamp(crop_height, 1, std::max(1, height));
  return {CenterOffset(width, w), CenterOffset(height, h), w, h};
}

CropRect ResizeThenCenterCropRect(int width, int height, int resize_shorter, int crop_width,
                                  int crop_height) {
  if (width <= 0 || height <= 0 || resize_shorter <= 0) {
    return CenterCropRect(width, height, crop_width, crop_height);
  }
  // torchvision _compute_resized_output_size: the longer side truncates.
  const bool wide = width >= height;
  const int shorter = wide ? height : width, longer = wide ? width : height;
  const int new_long =
      static_cast<int>(static_cast<int64_t>(resize_shorter) * longer / shorter);  // int(S*l/s)
  const int rw = wide ? new_long : resize_shorter;
  const int rh = wide ? resize_shorter : new_long;
  const int cw = std::min(crop_width, rw), ch = std::min(crop_height, rh);
  const int left = CenterOffset(rw, cw), top = CenterOffset(rh, ch);
  const double sx = static_cast<double>(width) / rw, sy = static_cast<double>(height) / rh;
  CropRect r;
  r.x = static_cast<int>(std::lround(left * sx));
  r.y = static_cast<int>(std::lround(top * sy));
  r.width = std::clamp(static_cast<int>(std::lround((left + cw) * sx)) - r.x, 1, width - r.x);
  r.height = std::clamp(static_cast<int>(std::lround((top + ch) * sy)) - r.y, 1, height - r.y);
  return r;
}

Status DecodeCropResize(std::span<const std::byte> encoded, CropPlanner& planner, int out_width,
                        int out_height, uint8_t* out, DecodeScratch* scratch, Layout layout) {
  if (out_width <= 0 || out_height <= 0 || out == nullptr || scratch == nullptr) {
    return Status::InvalidArgument("DecodeCropResize: bad output " + std::to_string(out_width) +
                                   "x" + std::to_string(out_height));
  }
  SATURATE_RETURN_IF_ERROR(CheckSize(out_width, out_height));
  DecodeScratch::Impl& s = scratch->impl();
  s.last_used_restart_index = false;  // Set by the paths that take them.
  s.last_decoded_ycc_planes = false;
  const bool planar = layout == Layout::kCHW;
  switch (SniffFormat(encoded)) {
    case ImageFormat::kJpeg:
      return DecodeJpegCrop(encoded, planner, out_width, out_height, out, planar, s);
    case ImageFormat::kPng:
      return DecodePngCrop(encoded, planner, out_width, out_height, out, planar, s);
    case ImageFormat::kUnknown:
      break;
  }
  // ProbeImage words the "not a JPEG or PNG" message.
  return ProbeImage(encoded).status();
}

Status DecodeCropResize(std::span<const std::byte> encoded, const CropRect& crop, int out_width,
                        int out_height, bool hflip, uint8_t* out, DecodeScratch* scratch,
                        Layout layout) {
  struct Fixed : CropPlanner {
    CropRect rect;
    bool flip;
    CropRect Plan(int, int, bool* hflip_out) override {
      *hflip_out = flip;
      return rect;
    }
  } fixed;
  fixed.rect = crop;
  fixed.flip = hflip;
  return DecodeCropResize(encoded, fixed, out_width, out_height, out, scratch, layout);
}

void CropResizeRgb(const uint8_t* rgb, int width, int height, const CropRect& crop, int out_width,
                   int out_height, bool hflip, uint8_t* out, DecodeScratch* scratch,
                   Layout layout) {
  if (rgb == nullptr || out == nullptr || scratch == nullptr || out_width <= 0 || out_height <= 0 ||
      !CropInside(crop, width, height)) {
    return;
  }
  ResampleBox(rgb, size_t(width) * 3, SourceBox::Of(crop), out_width, out_height, hflip, out,
              layout == Layout::kCHW, scratch->impl());
}

void DisableAvx2ResizeForTesting(bool disable) { g_avx2_disabled = disable; }

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
