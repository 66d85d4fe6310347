// Test helpers for image code: encoders for inputs that EncodeJpeg does not
// write (gray, CMYK, progressive JPEG; PNG), a PSNR measure, a photo-like
// test image, seeded random crops, and the fixture of the decode tests.
// Thread-safety: pure functions; an MtSource or fixture per thread.
#ifndef SATURATE_IMAGE_TEST_IMAGES_H_
#define SATURATE_IMAGE_TEST_IMAGES_H_

// clang-format off
#include <cstdio>  // jpeglib.h needs size_t and FILE declared first.
#include <jpeglib.h>
// clang-format on

#include <gtest/gtest.h>
#include <png.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "image/transform.h"

namespace saturate::image::test_images {

using Bytes = std::vector<std::byte>;

// Plain libjpeg at quality 95, `components` channels of `space`; for YCbCr
// the luma sampling factors are h_samp x v_samp (2x2: 4:2:0, 2x1: 4:2:2,
// 1x1: 4:4:4). A progressive file keeps only its first `max_scans` scans
// when that is > 0 (a legal file whose coefficients are partly missing).
// restart_mcus > 0 puts a restart marker after every that many MCUs.
Bytes EncodeJpegRaw(const uint8_t* px, int w, int h, int components, J_COLOR_SPACE space,
                    bool progressive = false, int h_samp = 2, int v_samp = 2, int max_scans = 0,
                    int restart_mcus = 0);
// libpng's simplified API; `format` e.g. PNG_FORMAT_RGB or PNG_FORMAT_GRAY.
Bytes EncodePng(const uint8_t* px, int w, int h, png_uint_32 format);
// Peak signal-to-noise ratio of two equal-size 8-bit buffers (dB; 99 when equal).
double Psnr(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b);

// A smooth photo-like RGB image: gradients, low-frequency waves and a few
// soft-edged shapes.
std::vector<uint8_t> PhotoLike(int w, int h);

class MtSource : public UniformSource {
 public:
  explicit MtSource(uint64_t seed) : gen_(seed) {}
  double Uniform() override { return std::uniform_real_distribution<double>(0.0, 1.0)(gen_); }

 private:
  std::mt19937_64 gen_;
};

// RandomResizedCropParams with torchvision's defaults (scale 0.08-1, ratio 3/4-4/3).
CropRect Rrc(int w, int h, UniformSource& rng);

// A 640x480 PhotoLike (rgb_), its quality-90 JPEG (jpeg_) and that JPEG's
// full decode (full_), for the tests of the decode planned from a crop.
class DecodeCropResizeTest : public ::testing::Test {
 protected:
  static constexpr int kW = 640, kH = 480;

  void SetUp() override;

  // Full decode -> crop -> the same resampler.
  std::vector<uint8_t> Reference(const std::vector<uint8_t>& full, int w, int h,
                                 const CropRect& crop, int out_w, int out_h, bool hflip = false);

  std::vector<uint8_t> rgb_;
  Bytes jpeg_;
  std::vector<uint8_t> full_;
};

}  // namespace saturate::image::test_images

#endif  // SATURATE_IMAGE_TEST_IMAGES_H_
