#include "image/test_images.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

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
                    bool progressive, int h_samp, int v_samp, int max_scans) {
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

}  // namespace saturate::image::test_images
