// What to decode for a crop: see crop_plan.h.
#include "image/crop_plan.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "image/codec.h"

namespace saturate::image {
namespace {

std::string RectString(const CropRect& c) {
  return std::to_string(c.width) + "x" + std::to_string(c.height) + "+" + std::to_string(c.x) +
         "+" + std::to_string(c.y);
}

}  // namespace

bool CropInside(const CropRect& c, int width, int height) {
  return c.width > 0 && c.height > 0 && c.x >= 0 && c.y >= 0 && c.x <= width - c.width &&
         c.y <= height - c.height;
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

int PlanDctScale(const CropRect& crop, int out_w, int out_h, bool only_fast_scales) {
  for (int k = 1; k < 8; ++k) {
    if (only_fast_scales && k > 4) break;
    if (int64_t{crop.width} * k >= int64_t{out_w} * 8 &&
        int64_t{crop.height} * k >= int64_t{out_h} * 8) {
      return k;
    }
  }
  return 8;
}

ScaledCrop ScaleCrop(const CropRect& crop, int scale) {
  const double f = scale / 8.0;
  return {crop.x * f, (crop.x + crop.width) * f, crop.y * f, (crop.y + crop.height) * f};
}

PixelWindow CoveringPixels(double x0, double x1, double y0, double y1, int scaled_w, int scaled_h) {
  PixelWindow w;
  w.col0 = static_cast<int>(std::floor(x0));
  const int col1 = std::min(scaled_w, static_cast<int>(std::ceil(x1)));
  w.cols = std::max(1, col1 - w.col0);
  w.row0 = static_cast<int>(std::floor(y0));
  w.row1 = std::min(scaled_h, static_cast<int>(std::ceil(y1)));
  w.row1 = std::max(w.row1, w.row0 + 1);
  return w;
}

}  // namespace saturate::image
