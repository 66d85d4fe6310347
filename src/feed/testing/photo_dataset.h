// A dataset of photo-like JPEGs for the GPU decode's tests: smooth shading,
// soft texture and a few hard edges, sizes 200..520 x 160..400 (so crops are
// reduced, as in training), with "label" = i; with `restart_markers`, a
// marker after every MCU, as `saturate pack` writes them. Header-only test
// helper.
// Thread-safety: test helper.
#ifndef SATURATE_FEED_TESTING_PHOTO_DATASET_H_
#define SATURATE_FEED_TESTING_PHOTO_DATASET_H_

#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "image/codec.h"
#include "saturate/base/status.h"
#include "saturate/format/writer.h"

namespace saturate::testing {

// Interleaved RGB8 of a photo-like scene keyed on `seed`.
inline std::vector<uint8_t> PhotoLikeRgb(int width, int height, uint64_t seed) {
  std::vector<uint8_t> rgb(static_cast<size_t>(width) * height * 3);
  const double fx = 0.02 + 0.01 * (seed % 5), fy = 0.015 + 0.01 * (seed % 3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const bool inside = (x - width / 3) * (x - width / 3) + (y - height / 2) * (y - height / 2) <
                          (height / 4) * (height / 4);  // a disc: hard edges
      for (int c = 0; c < 3; ++c) {
        double v = 60 + 120.0 * x / width + 40 * std::sin(fx * x + c) * std::cos(fy * y);
        v += 12 * std::sin(0.3 * x + 0.2 * y + seed);  // fine texture
        if (inside) v = 230 - 60 * c;
        rgb[(static_cast<size_t>(y) * width + x) * 3 + c] =
            static_cast<uint8_t>(std::lround(std::fmin(255, std::fmax(0, v))));
      }
    }
  }
  return rgb;
}

inline Status WritePhotoDataset(const std::string& dir, uint64_t n, bool restart_markers = false) {
  format::Schema schema{{format::FieldSpec{"image", format::FieldKind::kImage},
                         format::FieldSpec{"label", format::FieldKind::kInt64}}};
  SATURATE_ASSIGN_OR_RETURN(auto w, format::DatasetWriter::Create(dir, schema));
  for (uint64_t i = 0; i < n; ++i) {
    const int width = 200 + static_cast<int>(i % 9) * 40;
    const int height = 160 + static_cast<int>(i % 7) * 40;
    std::vector<uint8_t> rgb = PhotoLikeRgb(width, height, i);
    SATURATE_ASSIGN_OR_RETURN(auto jpeg, image::EncodeJpeg(rgb.data(), width, height, 90));
    if (restart_markers) {
      SATURATE_ASSIGN_OR_RETURN(jpeg, image::AddJpegRestartMarkers(jpeg));
    }
    int64_t label = static_cast<int64_t>(i);
    std::vector<std::span<const std::byte>> f{jpeg, format::AsBytes(label)};
    SATURATE_RETURN_IF_ERROR(w->Append(f));
  }
  return w->Finish();
}

}  // namespace saturate::testing

#endif  // SATURATE_FEED_TESTING_PHOTO_DATASET_H_
