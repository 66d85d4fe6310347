#include "image/transform.h"

#include <jerror.h>
#include <jpeglib.h>
#include <png.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <csetjmp>
#include <cstdio>  // jpeglib.h needs FILE and size_t first.
#include <cstring>
#include <string>
#include <vector>

#include "image/codec.h"
#include "image/codec_internal.h"

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
  std::vector<float> mid;   // Horizontal pass output, rows x out_width x 3.
  std::vector<float> quad;  // One source row widened to RGBX floats for the horizontal pass.
  std::vector<float> acc;   // One output row being accumulated.

  bool only_fast_dct_scales = true;
  int last_dct_scale_eighths = 0;
  int last_decoded_width = 0;
  int last_decoded_height = 0;
};

namespace {

// Triangle filter (support 1), as PIL's bilinear_filter.
inline double Triangle(double x) {
  x = std::abs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// PIL's precompute_coeffs for the bilinear filter: the source box
// [box_lo, box_hi) maps onto out_size pixels; taps are limited to source
// pixels [clip_lo, clip_hi). Leading and trailing zero weights are dropped.
void ComputeTaps(double box_lo, double box_hi, int clip_lo, int clip_hi, int out_size,
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
    const int lo = std::max(clip_lo, static_cast<int>(std::floor(center - support + 0.5)));
    const int hi = std::min(clip_hi, static_cast<int>(std::floor(center + support + 0.5)));
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
      first[i] = std::clamp(static_cast<int>(std::floor(center)), clip_lo, clip_hi - 1);
      count[i] = 1;
      w[0] = 1.0f;
      continue;
    }
    first[i] = lo + b;
    count[i] = e - b;
    for (int k = b; k < e; ++k) w[k - b] = static_cast<float>(w[k] / total);
  }
}

inline uint8_t ToByte(float v) { return static_cast<uint8_t>(std::clamp(v + 0.5f, 0.0f, 255.0f)); }

// One row of the horizontal pass: out_w RGB sums of `in` (uint8 or float;
// in[0] is source column col0) into `dst`, mirrored if hflip.
template <typename T>
void HorizontalRow(const T* in, int col0, const AxisTaps& xt, int out_w, bool hflip, float* quad,
                   float* dst) {
  // Widen the columns the taps read to 4 floats per pixel (RGB + pad), so the
  // tap loop below is one 4-wide multiply-add per tap and vectorizes.
  const int lo = xt.first[0], hi = xt.first[out_w - 1] + xt.count[out_w - 1];
  for (int c = lo; c < hi; ++c) {
    const T* p = in + size_t(c - col0) * 3;
    float* q = quad + size_t(c - lo) * 4;
    q[0] = p[0];
    q[1] = p[1];
    q[2] = p[2];
    q[3] = 0;
  }
  for (int x = 0; x < out_w; ++x) {
    const float* w = xt.weights.data() + size_t(x) * xt.stride;
    const float* p = quad + size_t(xt.first[x] - lo) * 4;
    // Two accumulators halve the add-latency chain that bounds this loop.
    float even[4] = {0, 0, 0, 0}, odd[4] = {0, 0, 0, 0};
    const int n = xt.count[x];
    int k = 0;
    for (; k + 1 < n; k += 2) {
      for (int c = 0; c < 4; ++c) even[c] += w[k] * p[4 * k + c];
      for (int c = 0; c < 4; ++c) odd[c] += w[k + 1] * p[4 * k + 4 + c];
    }
    if (k < n) {
      for (int c = 0; c < 4; ++c) even[c] += w[k] * p[4 * k + c];
    }
    float* d = dst + 3 * size_t(hflip ? out_w - 1 - x : x);
    d[0] = even[0] + odd[0];
    d[1] = even[1] + odd[1];
    d[2] = even[2] + odd[2];
  }
}

// One output row of the vertical pass: the weighted sum of the rows
// first, first + stride, ... (taps of output row y), `len` values each.
template <typename T>
void VerticalRow(const T* first, size_t stride, const AxisTaps& yt, int y, size_t len, float* dst) {
  const float* w = yt.weights.data() + size_t(y) * yt.stride;
  const float w0 = w[0];
  for (size_t i = 0; i < len; ++i) dst[i] = w0 * first[i];
  for (int k = 1, n = yt.count[y]; k < n; ++k) {
    const T* row = first + stride * k;
    const float wk = w[k];
    for (size_t i = 0; i < len; ++i) dst[i] += wk * row[i];
  }
}

// Resizes the source box [bx0, bx0 + bw) x [by0, by0 + bh) (fractional,
// in pixels of `src`) of an RGB8 image to out_w x out_h. Taps stay inside
// [cx0, cx1) x [cy0, cy1).
void ResampleBox(const uint8_t* src, size_t src_stride, double bx0, double bw, double by0,
                 double bh, int cx0, int cx1, int cy0, int cy1, int out_w, int out_h, bool hflip,
                 uint8_t* out, DecodeScratch::Impl& s) {
  AxisTaps& xt = s.x_taps;
  AxisTaps& yt = s.y_taps;
  ComputeTaps(bx0, bx0 + bw, cx0, cx1, out_w, &xt);
  ComputeTaps(by0, by0 + bh, cy0, cy1, out_h, &yt);
  // Taps are monotonic, so [row_lo, row_hi) x [col_lo, col_hi) covers all.
  const int row_lo = yt.first[0];
  const int row_hi = yt.first[out_h - 1] + yt.count[out_h - 1];
  const int col_lo = xt.first[0];
  const int col_hi = xt.first[out_w - 1] + xt.count[out_w - 1];
  const size_t out_row = size_t(out_w) * 3;
  float* quad = Grow(s.quad, size_t(col_hi - col_lo) * 4);
  // The horizontal pass (RGB taps) does not vectorize, the vertical one
  // (whole rows) does; run the horizontal one on whichever side has fewer
  // rows. Either way each output value gets the same sums: hflip only
  // mirrors where a column lands, so flipped output is an exact mirror.
  if (row_hi - row_lo <= out_h) {
    // Horizontal first: source rows -> mid (float, out_w wide).
    float* mid = Grow(s.mid, out_row * (row_hi - row_lo));
    for (int y = row_lo; y < row_hi; ++y) {
      HorizontalRow(src + src_stride * y, 0, xt, out_w, hflip, quad, mid + out_row * (y - row_lo));
    }
    float* acc = Grow(s.acc, out_row);
    for (int y = 0; y < out_h; ++y) {
      VerticalRow(mid + out_row * (yt.first[y] - row_lo), out_row, yt, y, out_row, acc);
      uint8_t* o = out + out_row * y;
      for (size_t i = 0; i < out_row; ++i) o[i] = ToByte(acc[i]);
    }
    return;
  }
  // Vertical first: source rows -> mid (float, one row per output row, only
  // the columns the horizontal taps read), then horizontal into `out`.
  const size_t mid_row = size_t(col_hi - col_lo) * 3;
  float* mid = Grow(s.mid, mid_row * out_h);
  float* acc = Grow(s.acc, out_row);
  for (int y = 0; y < out_h; ++y) {
    VerticalRow(src + src_stride * yt.first[y] + size_t(col_lo) * 3, src_stride, yt, y, mid_row,
                mid + mid_row * y);
    HorizontalRow(mid + mid_row * y, col_lo, xt, out_w, hflip, quad, acc);
    uint8_t* o = out + out_row * y;
    for (size_t i = 0; i < out_row; ++i) o[i] = ToByte(acc[i]);
  }
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

// Decodes the crop's region of a JPEG at a planned DCT scale into s.pixels
// and resizes it into out_rgb.
Status DecodeJpegCrop(std::span<const std::byte> encoded, CropPlanner& planner, int out_w,
                      int out_h, uint8_t* out_rgb, DecodeScratch::Impl& s) {
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
  const bool cmyk = c.jpeg_color_space == JCS_CMYK || c.jpeg_color_space == JCS_YCCK;
  c.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  c.scale_num = static_cast<unsigned>(scale);
  c.scale_denom = 8;

  // The crop in scaled pixels (fractional), and the whole pixels covering it.
  const double f = scale / 8.0;
  const double fx0 = crop.x * f, fx1 = (crop.x + crop.width) * f;
  const double fy0 = crop.y * f, fy1 = (crop.y + crop.height) * f;
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
  ResampleBox(px, rgb_row, bx0, fx1 - fx0, by0, fy1 - fy0, cx0, cx1, cy0, cy1, out_w, out_h, hflip,
              out_rgb, s);
  return Status::OK();
}

Status DecodePngCrop(std::span<const std::byte> encoded, CropPlanner& planner, int out_w, int out_h,
                     uint8_t* out_rgb, DecodeScratch::Impl& s) {
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
  ResampleBox(px, size_t(width) * 3, crop.x, crop.width, crop.y, crop.height, crop.x,
              crop.x + crop.width, crop.y, crop.y + crop.height, out_w, out_h, hflip, out_rgb, s);
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
  for (int c = 0; c < 3; ++c) {
    const float sc = scale[c], bc = bias[c];
    Out* o = out + pixels * c;
    const uint8_t* in = hwc + c;
    for (size_t i = 0; i < pixels; ++i) o[i] = store(in[3 * i] * sc + bc);
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
         CapacityOf(s.y_taps.weights) + CapacityOf(s.mid) + CapacityOf(s.quad) + CapacityOf(s.acc);
}
void DecodeScratch::set_only_fast_dct_scales(bool only_fast) {
  impl_->only_fast_dct_scales = only_fast;
}
int DecodeScratch::last_dct_scale_eighths() const { return impl_->last_dct_scale_eighths; }
int DecodeScratch::last_decoded_width() const { return impl_->last_decoded_width; }
int DecodeScratch::last_decoded_height() const { return impl_->last_decoded_height; }

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
                        int out_height, uint8_t* out_rgb, DecodeScratch* scratch) {
  if (out_width <= 0 || out_height <= 0 || out_rgb == nullptr || scratch == nullptr) {
    return Status::InvalidArgument("DecodeCropResize: bad output " + std::to_string(out_width) +
                                   "x" + std::to_string(out_height));
  }
  SATURATE_RETURN_IF_ERROR(CheckSize(out_width, out_height));
  DecodeScratch::Impl& s = scratch->impl();
  switch (SniffFormat(encoded)) {
    case ImageFormat::kJpeg:
      return DecodeJpegCrop(encoded, planner, out_width, out_height, out_rgb, s);
    case ImageFormat::kPng:
      return DecodePngCrop(encoded, planner, out_width, out_height, out_rgb, s);
    case ImageFormat::kUnknown:
      break;
  }
  // ProbeImage words the "not a JPEG or PNG" message.
  return ProbeImage(encoded).status();
}

Status DecodeCropResize(std::span<const std::byte> encoded, const CropRect& crop, int out_width,
                        int out_height, bool hflip, uint8_t* out_rgb, DecodeScratch* scratch) {
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
  return DecodeCropResize(encoded, fixed, out_width, out_height, out_rgb, scratch);
}

void CropResizeRgb(const uint8_t* rgb, int width, int height, const CropRect& crop, int out_width,
                   int out_height, bool hflip, uint8_t* out_rgb, DecodeScratch* scratch) {
  if (rgb == nullptr || out_rgb == nullptr || scratch == nullptr || out_width <= 0 ||
      out_height <= 0 || !CropInside(crop, width, height)) {
    return;
  }
  ResampleBox(rgb, size_t(width) * 3, crop.x, crop.width, crop.y, crop.height, crop.x,
              crop.x + crop.width, crop.y, crop.y + crop.height, out_width, out_height, hflip,
              out_rgb, scratch->impl());
}

uint16_t FloatToHalfBits(float value) { return HalfBits(value); }

void ConvertPixels(const uint8_t* hwc, int height, int width, const float* mean, const float* std,
                   Layout layout, PixelType type, void* out) {
  if (hwc == nullptr || out == nullptr || height <= 0 || width <= 0) return;
  const size_t pixels = size_t(height) * width;
  if (type == PixelType::kUInt8) {
    auto* o = static_cast<uint8_t*>(out);
    if (layout == Layout::kHWC) {
      std::memcpy(o, hwc, pixels * 3);
    } else {
      for (int c = 0; c < 3; ++c) {
        for (size_t i = 0; i < pixels; ++i) o[pixels * c + i] = hwc[3 * i + c];
      }
    }
    return;
  }
  // (x/255 - mean) / std == x * (1 / (255 std)) + (-mean / std).
  float scale[3], bias[3];
  for (int c = 0; c < 3; ++c) {
    const double m = mean != nullptr ? mean[c] : 0.0;
    const double sd = std != nullptr ? std[c] : 1.0;
    scale[c] = static_cast<float>(1.0 / (255.0 * sd));
    bias[c] = static_cast<float>(-m / sd);
  }
  if (type == PixelType::kFloat32) {
    ConvertAffine(hwc, pixels, scale, bias, layout, static_cast<float*>(out),
                  [](float v) { return v; });
  } else {
    ConvertAffine(hwc, pixels, scale, bias, layout, static_cast<uint16_t*>(out),
                  [](float v) { return HalfBits(v); });
  }
}

}  // namespace saturate::image
