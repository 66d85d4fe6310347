// Test helpers for image code: encoders for inputs that EncodeJpeg does not
// write (gray, CMYK, progressive JPEG; PNG) and a PSNR measure.
// Thread-safety: pure functions.
#ifndef SATURATE_IMAGE_TEST_IMAGES_H_
#define SATURATE_IMAGE_TEST_IMAGES_H_

// clang-format off
#include <cstdio>  // jpeglib.h needs size_t and FILE declared first.
#include <jpeglib.h>
// clang-format on

#include <png.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace saturate::image::test_images {

using Bytes = std::vector<std::byte>;

// Plain libjpeg at quality 95, `components` channels of `space`; for YCbCr
// the luma sampling factors are h_samp x v_samp (2x2: 4:2:0, 2x1: 4:2:2,
// 1x1: 4:4:4). A progressive file keeps only its first `max_scans` scans
// when that is > 0 (a legal file whose coefficients are partly missing).
Bytes EncodeJpegRaw(const uint8_t* px, int w, int h, int components, J_COLOR_SPACE space,
                    bool progressive = false, int h_samp = 2, int v_samp = 2, int max_scans = 0);
// libpng's simplified API; `format` e.g. PNG_FORMAT_RGB or PNG_FORMAT_GRAY.
Bytes EncodePng(const uint8_t* px, int w, int h, png_uint_32 format);
// Peak signal-to-noise ratio of two equal-size 8-bit buffers (dB; 99 when equal).
double Psnr(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b);

}  // namespace saturate::image::test_images

#endif  // SATURATE_IMAGE_TEST_IMAGES_H_
