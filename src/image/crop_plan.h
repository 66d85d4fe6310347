// crop_plan: what to decode for a crop, decided from sizes alone before any
// pixel is decoded. A JPEG is decoded at the smallest DCT scale s/8 at
// which the crop still covers the output (PlanDctScale); the crop is then
// carried in scaled pixels (ScaleCrop, fractional), and the RGB path
// decodes only the whole scaled pixels it touches (CoveringPixels): rows
// above it are skipped, rows below never decoded, columns cropped.
// (jpeg_cut narrows this further to whole MCUs for restart-marked files.)
// Also the argument checks every decode makes. Thread-safety: pure.
#ifndef SATURATE_IMAGE_CROP_PLAN_H_
#define SATURATE_IMAGE_CROP_PLAN_H_

#include <cstdint>

#include "image/transform.h"
#include "saturate/base/status.h"

namespace saturate::image {

// Whether the crop is non-empty and lies inside a width x height image.
bool CropInside(const CropRect& c, int width, int height);
// InvalidArgument unless CropInside.
Status CheckCrop(const CropRect& crop, int width, int height);
// InvalidArgument for an image over kMaxImagePixels (codec.h).
Status CheckSize(int64_t width, int64_t height);

// Smallest s with the crop, scaled by s/8, still >= out_w x out_h; 8 if
// none. only_fast_scales: only 1/8..4/8 and 8/8 (libjpeg-turbo 2.1's
// 5/8..7/8 IDCTs are scalar and slower than its SIMD 8/8 one: x86-64,
// 1.05x-1.5x the full-size decode time).
int PlanDctScale(const CropRect& crop, int out_w, int out_h, bool only_fast_scales);

// The crop at DCT scale s/8, in scaled pixels (fractional): [x0, x1) x [y0, y1).
struct ScaledCrop {
  double x0, x1, y0, y1;
};
ScaledCrop ScaleCrop(const CropRect& crop, int scale);

// The whole scaled pixels the box [x0, x1) x [y0, y1) touches, inside a
// scaled_w x scaled_h image and at least one each way: columns
// [col0, col0 + cols), rows [row0, row1).
struct PixelWindow {
  int col0 = 0, cols = 0, row0 = 0, row1 = 0;
};
PixelWindow CoveringPixels(double x0, double x1, double y0, double y1, int scaled_w, int scaled_h);

}  // namespace saturate::image

#endif  // SATURATE_IMAGE_CROP_PLAN_H_
