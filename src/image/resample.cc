// The resampler's taps, weight tables and passes in order: see resample.h.
#include "image/resample.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "image/buffer.h"
#include "image/convert.h"
#include "image/crop_plan.h"
#include "image/resample_avx2.h"
#include "image/resample_kernels.h"
#include "image/scratch.h"
#include "image/simd.h"

namespace saturate::image {
namespace {

bool g_avx2_disabled = false;  // DisableAvx2ResizeForTesting

}  // namespace

#ifdef SATURATE_RESIZE_AVX2
bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");  // Also checks OS YMM support.
  return has && !g_avx2_disabled;
}
#else
bool HasAvx2() { return false; }
#endif

void DisableAvx2ResizeForTesting(bool disable) { g_avx2_disabled = disable; }

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

// Largest tap count of an axis.
int MaxTaps(const AxisTaps& t, int out_size) {
  return *std::max_element(t.count.begin(), t.count.begin() + out_size);
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

// ---- Dispatch: each step's AVX2 loop if the CPU has it, else its 4-lane
// twin (the same bytes).

template <int kStep>
void HorizontalRow(const float* in, const int* offset, const float* table, int taps, int out_w,
                   bool avx2, float* dst) {
#ifdef SATURATE_RESIZE_AVX2
  if (avx2) return HorizontalRowAvx2<kStep>(in, offset, table, taps, out_w, dst);
#endif
  (void)avx2;
  WithTaps(taps,
           [&]<int kTaps>() { HorizontalRowN<kStep, kTaps>(in, offset, table, taps, out_w, dst); });
}

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
  if (avx2) return VerticalBytesToFloatsAvx2(first, stride, w, n, len, dst);
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
    return HorizontalRowBytesAvx2(row, offset, table, taps, out_w,
                                  rows.plane != 0 ? rows.PlaneRow(y) : rows.Rgb(y), rows.plane);
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
Reach BoxTaps(const SourceBox& b, int out_w, int out_h, bool keep, ResampleScratch& s) {
  const AxisTaps& xt = s.x_taps;
  const AxisTaps& yt = s.y_taps;
  if (!keep) {
    ComputeTaps(b.x0, b.x0 + b.w, b.cx0, b.cx1, b.ox, out_w, &s.x_taps);
    ComputeTaps(b.y0, b.y0 + b.h, b.cy0, b.cy1, b.oy, out_h, &s.y_taps);
  }
  return {yt.first[0], yt.first[out_h - 1] + yt.count[out_h - 1], xt.first[0],
          xt.first[out_w - 1] + xt.count[out_w - 1]};
}

// ---- One 8-bit plane (a JPEG component: Y, Cb or Cr) ----------------------------
// The same filter as ResampleBox, one value per pixel (see PlaneTaps in
// resample_kernels.h for its horizontal pass).

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

// One plane row's horizontal pass (in: the row as floats, kPlanePad zeros
// past its end).
void PlaneRowAny(bool avx2, const float* in, const PlaneTaps& t, int out_w, float* dst) {
#ifdef SATURATE_RESIZE_AVX2
  if (avx2 && t.spread < 2 * kPlaneGroup) return PlaneRowAvx2(in, t, out_w, dst);
#endif
  (void)avx2;
  PlaneRow(in, t, 0, out_w, dst);
}

}  // namespace

size_t ResampleScratch::CapacityBytes() const {
  return CapacityOf(x_taps.first) + CapacityOf(x_taps.count) + CapacityOf(x_taps.weights) +
         CapacityOf(y_taps.first) + CapacityOf(y_taps.count) + CapacityOf(y_taps.weights) +
         CapacityOf(x_table) + CapacityOf(y_table) + CapacityOf(x_offset) + CapacityOf(mid) +
         CapacityOf(quad) + CapacityOf(out_row);
}

// Resizes the source box of an RGB8 image to out_w x out_h, interleaved or
// (`planar`) as three planes.
void ResampleBox(const uint8_t* src, size_t src_stride, const SourceBox& b, int out_w, int out_h,
                 bool hflip, uint8_t* out, bool planar, ResampleScratch& s) {
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

void ResamplePlane(const uint8_t* src, size_t src_stride, const SourceBox& b, int out_w, int out_h,
                   bool hflip, bool same_taps, uint8_t* out, ResampleScratch& s) {
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

void CropResizeRgb(const uint8_t* rgb, int width, int height, const CropRect& crop, int out_width,
                   int out_height, bool hflip, uint8_t* out, DecodeScratch* scratch,
                   Layout layout) {
  if (rgb == nullptr || out == nullptr || scratch == nullptr || out_width <= 0 || out_height <= 0 ||
      !CropInside(crop, width, height)) {
    return;
  }
  ResampleBox(rgb, size_t(width) * 3, SourceBox::Of(crop), out_width, out_height, hflip, out,
              layout == Layout::kCHW, scratch->impl().resample);
}

}  // namespace saturate::image
