#include "image/test_images.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "image/codec.h"

namespace saturate::image::test_images {

double Psnr(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  double se = 0;
  for (size_t i = 0; i < a.size(); ++i) se += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return se == 0 ? 99.0 : 10.0 * std::log10(255.0 * 255.0 * a.size() / se);
}

Bytes EncodePng(const uint8_t* px, int w, int h, png_uint_32 format) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = w;
  image.height = h;
  image.format = format;
  png_alloc_size_t size = 0;
  EXPECT_TRUE(png_image_write_get_memory_size(image, size, 0, px, 0, nullptr));
  Bytes out(size);
  EXPECT_TRUE(png_image_write_to_memory(&image, out.data(), &size, 0, px, 0, nullptr))
      << image.message;
  out.resize(size);
  return out;
}

Bytes EncodeJpegRaw(const uint8_t* px, int w, int h, int components, J_COLOR_SPACE space,
                    bool progressive, int h_samp, int v_samp, int max_scans, int restart_mcus) {
  jpeg_compress_struct c{};
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = w;
  c.image_height = h;
  c.input_components = components;
  c.in_color_space = space;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 95, TRUE);
  if (c.jpeg_color_space == JCS_YCbCr) {
    c.comp_info[0].h_samp_factor = h_samp;
    c.comp_info[0].v_samp_factor = v_samp;
  }
  c.restart_interval = static_cast<unsigned>(restart_mcus);
  if (progressive) jpeg_simple_progression(&c);
  if (progressive && max_scans > 0) c.num_scans = std::min(c.num_scans, max_scans);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(px + size_t(c.next_scanline) * w * components);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  Bytes out(reinterpret_cast<std::byte*>(buf), reinterpret_cast<std::byte*>(buf) + size);
  std::free(buf);
  return out;
}

// A smooth photo-like test image: gradients, low-frequency waves and a few
// soft-edged shapes.
std::vector<uint8_t> PhotoLike(int w, int h) {
  std::vector<uint8_t> px(size_t(w) * h * 3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const double u = double(x) / w, v = double(y) / h;
      double rgb[3] = {200 * u + 30 * std::sin(9 * v), 180 * v + 40 * std::cos(7 * u + 2 * v),
                       120 + 60 * std::sin(5 * u * v + 3 * u)};
      auto blend = [&](double alpha, double r, double g, double b) {
        rgb[0] += alpha * (r - rgb[0]);
        rgb[1] += alpha * (g - rgb[1]);
        rgb[2] += alpha * (b - rgb[2]);
      };
      const double d = std::hypot(x - 0.3 * w, y - 0.4 * h) - 0.15 * h;  // Disc.
      blend(std::clamp(0.5 - d / 3, 0.0, 1.0), 230, 60, 40);
      const double bx = std::max(std::abs(x - 0.7 * w) - 60, std::abs(y - 0.6 * h) - 40);  // Box.
      blend(std::clamp(0.5 - bx / 2, 0.0, 1.0), 30, 90, 220);
      const double stripe = std::abs(std::fmod(x + 0.5 * y, 40.0) - 20) - 6;  // Stripes.
      blend(0.5 * std::clamp(0.5 - stripe / 4, 0.0, 1.0) * (v > 0.75), 250, 250, 250);
      for (int c = 0; c < 3; ++c) {
        px[(size_t(y) * w + x) * 3 + c] = uint8_t(std::clamp(std::lround(rgb[c]), 0L, 255L));
      }
    }
  }
  return px;
}

CropRect Rrc(int w, int h, UniformSource& rng) {
  return RandomResizedCropParams(w, h, 0.08, 1.0, 3.0 / 4, 4.0 / 3, rng);
}

void DecodeCropResizeTest::SetUp() {
  rgb_ = PhotoLike(kW, kH);
  auto r = EncodeJpeg(rgb_.data(), kW, kH, 90);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  jpeg_ = std::move(r).value();
  auto full = DecodeRgb(jpeg_);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  full_ = std::move(full).value();
}

std::vector<uint8_t> DecodeCropResizeTest::Reference(const std::vector<uint8_t>& full, int w, int h,
                                                     const CropRect& crop, int out_w, int out_h,
                                                     bool hflip) {
  std::vector<uint8_t> out(size_t(out_w) * out_h * 3);
  DecodeScratch scratch;
  CropResizeRgb(full.data(), w, h, crop, out_w, out_h, hflip, out.data(), &scratch);
  return out;
}

}  // namespace saturate::image::test_images
