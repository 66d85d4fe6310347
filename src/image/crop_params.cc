// Crop rectangles with torchvision's semantics (RandomResizedCrop,
// CenterCrop, Resize + CenterCrop), declared in transform.h: pure functions
// of the image size (and, for the random crop, the UniformSource).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "image/transform.h"

namespace saturate::image {
namespace {

// Python's round(): half to even (the default FP rounding mode).
int RoundHalfEven(double v) { return static_cast<int>(std::nearbyint(v)); }

// torchvision center_crop's int(round((size - crop) / 2.0)), for size >= crop.
int CenterOffset(int size, int crop) { return RoundHalfEven((size - crop) / 2.0); }

}  // namespace

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

}  // namespace saturate::image
