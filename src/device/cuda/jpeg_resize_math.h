// The per-pixel arithmetic of the GPU crop-resize-flip (jpeg_resize.cu),
// compiled for both the device and the host so that it is tested against
// image::CropResizeRgb on machines without a GPU (jpeg_resize_test.cc).
// PIL's precompute_coeffs for the bilinear filter, as image/resample.cc's
// ComputeTaps computes them (double, normalized, stored as float), summed
// horizontally then vertically in float, rounded as ToByte. Pure.
#ifndef SATURATE_DEVICE_CUDA_JPEG_RESIZE_MATH_H_
#define SATURATE_DEVICE_CUDA_JPEG_RESIZE_MATH_H_

#include <cmath>
#include <cstdint>

#include "device/cuda/jpeg_resize.h"

#ifdef __CUDACC__
#define SATURATE_HD __host__ __device__
#else
#define SATURATE_HD
#endif

namespace saturate::device::cuda {

// Taps [lo, lo + n) of output pixel i over the crop [c0, c0 + len).
struct ResizeTaps {
  int lo = 0, n = 0;
  double center = 0, inv = 1, norm = 1;
};

SATURATE_HD inline ResizeTaps AxisTaps(int c0, int len, int out_size, int i) {
  ResizeTaps t;
  const double scale = double(len) / out_size;
  const double filter_scale = scale > 1.0 ? scale : 1.0;
  const double support = filter_scale;
  t.inv = 1.0 / filter_scale;
  t.center = c0 + (i + 0.5) * scale;
  int lo = static_cast<int>(floor(t.center - support + 0.5));
  int hi = static_cast<int>(floor(t.center + support + 0.5));
  lo = lo > c0 ? lo : c0;
  hi = hi < c0 + len ? hi : c0 + len;
  const int stride = static_cast<int>(ceil(support)) * 2 + 1;
  t.lo = lo;
  t.n = hi - lo < stride ? hi - lo : stride;
  double total = 0;
  for (int k = 0; k < t.n; ++k) {
    const double x = fabs((lo + k - t.center + 0.5) * t.inv);
    total += x < 1.0 ? 1.0 - x : 0.0;
  }
  if (total <= 0) {  // outside the clip range: the nearest pixel
    int c = static_cast<int>(floor(t.center));
    c = c < c0 ? c0 : (c > c0 + len - 1 ? c0 + len - 1 : c);
    t.lo = c;
    t.n = 1;
    t.inv = 0;  // weight Triangle(0) = 1
    t.center = c + 0.5;
    t.norm = 1;
    return t;
  }
  t.norm = 1.0 / total;
  return t;
}

SATURATE_HD inline float TapWeight(const ResizeTaps& t, int k) {
  const double x = fabs((t.lo + k - t.center + 0.5) * t.inv);
  return static_cast<float>((x < 1.0 ? 1.0 - x : 0.0) * t.norm);
}

// Output pixel (ox, oy) of `a` (ox < out_w, oy < out_h).
SATURATE_HD inline void CropResizePixel(const CropResizeArgs& a, int ox, int oy) {
  const ResizeTaps tx = AxisTaps(a.crop_x, a.crop_w, a.out_w, ox);
  const ResizeTaps ty = AxisTaps(a.crop_y, a.crop_h, a.out_h, oy);
  float sum[3] = {0, 0, 0};
  for (int ky = 0; ky < ty.n; ++ky) {
    const float wy = TapWeight(ty, ky);
    const uint8_t* row = a.src + (ty.lo + ky) * a.src_pitch;
    float h[3] = {0, 0, 0};
    for (int kx = 0; kx < tx.n; ++kx) {
      const float wx = TapWeight(tx, kx);
      const uint8_t* p = row + (tx.lo + kx) * 3;
      h[0] += wx * p[0];
      h[1] += wx * p[1];
      h[2] += wx * p[2];
    }
    sum[0] += wy * h[0];
    sum[1] += wy * h[1];
    sum[2] += wy * h[2];
  }
  const int dx = a.hflip ? a.out_w - 1 - ox : ox;
  uint8_t* out = a.dst + (static_cast<int64_t>(oy) * a.out_w + dx) * 3;
  for (int c = 0; c < 3; ++c) {
    const float v = fminf(fmaxf(sum[c] + 0.5f, 0.0f), 255.0f);
    out[c] = static_cast<uint8_t>(v);
  }
}

}  // namespace saturate::device::cuda

#undef SATURATE_HD

#endif  // SATURATE_DEVICE_CUDA_JPEG_RESIZE_MATH_H_
