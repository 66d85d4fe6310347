// The GPU crop-resize-flip's arithmetic (jpeg_resize_math.h), run on the
// host: it must give image::CropResizeRgb's bytes (the CPU path's resize),
// up to one level of float rounding, for reductions, enlargements, mixed
// axes, one-pixel crops and mirroring.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "device/cuda/jpeg_resize_math.h"
#include "image/transform.h"

namespace saturate::device::cuda {
namespace {

TEST(JpegResizeMathTest, MatchesTheCpuResampler) {
  const int width = 400, height = 300;
  std::vector<uint8_t> rgb(size_t(width) * height * 3);
  for (size_t i = 0; i < rgb.size(); ++i)
    rgb[i] = static_cast<uint8_t>((i * 7 + i / 1200 * 3) % 256);
  struct Case {
    image::CropRect crop;
    int out_w, out_h;
  };
  const Case cases[] = {{{0, 0, 400, 300}, 96, 80},   {{37, 21, 250, 190}, 224, 224},
                        {{300, 200, 64, 50}, 96, 80}, {{10, 0, 40, 300}, 96, 80},
                        {{399, 299, 1, 1}, 8, 8},     {{0, 0, 400, 300}, 400, 300},
                        {{1, 2, 397, 295}, 113, 57},  {{5, 7, 3, 2}, 16, 16}};
  image::DecodeScratch scratch;
  for (const Case& c : cases) {
    for (bool flip : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << c.crop.x << "," << c.crop.y << " " << c.crop.width << "x" << c.crop.height
                   << " -> " << c.out_w << "x" << c.out_h << (flip ? " flipped" : ""));
      std::vector<uint8_t> want(size_t(c.out_w) * c.out_h * 3), got(want.size());
      image::CropResizeRgb(rgb.data(), width, height, c.crop, c.out_w, c.out_h, flip, want.data(),
                           &scratch);
      CropResizeArgs a;
      a.src = rgb.data();
      a.src_pitch = width * 3;
      a.crop_x = c.crop.x;
      a.crop_y = c.crop.y;
      a.crop_w = c.crop.width;
      a.crop_h = c.crop.height;
      a.dst = got.data();
      a.out_w = c.out_w;
      a.out_h = c.out_h;
      a.hflip = flip;
      for (int y = 0; y < c.out_h; ++y) {
        for (int x = 0; x < c.out_w; ++x) CropResizePixel(a, x, y);
      }
      int worst = 0;
      for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
      EXPECT_LE(worst, 1);
    }
  }
}

}  // namespace
}  // namespace saturate::device::cuda
