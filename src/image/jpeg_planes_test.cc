// Tests of the component path of YCbCr JPEGs (jpeg_planes.cc).
#include "image/jpeg_planes.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "base/testing.h"
#include "image/codec.h"
#include "image/test_images.h"
#include "image/transform.h"

namespace saturate::image {
namespace {

using test_images::DecodeCropResizeTest;
using test_images::EncodeJpegRaw;
using test_images::MtSource;
using test_images::PhotoLike;
using test_images::Rrc;

using Bytes = std::vector<std::byte>;

// The component path's AVX2 loops (horizontal pass, YCbCr -> RGB) give the
// same bytes as their portable twins, and its CHW output is its HWC output
// split into planes.
TEST_F(DecodeCropResizeTest, YccComponentPathsGiveTheSameBytes) {
  std::vector<uint8_t> odd = PhotoLike(333, 251);
  const Bytes sources[] = {jpeg_, EncodeJpegRaw(odd.data(), 333, 251, 3, JCS_RGB, false, 2, 1)};
  const std::pair<int, int> sizes[] = {{224, 224}, {37, 29}, {300, 100}, {64, 400}, {500, 31}};
  MtSource rng(8);
  DecodeScratch scratch;
  for (const Bytes& jpeg : sources) {
    SATURATE_ASSERT_OK_AND_ASSIGN(Bytes indexed, AddJpegRestartMarkers(jpeg));
    SATURATE_ASSERT_OK_AND_ASSIGN(ImageInfo info, ProbeImage(indexed));
    for (int i = 0; i < 40; ++i) {
      const CropRect crop = Rrc(info.width, info.height, rng);
      const auto [out_w, out_h] = sizes[i % 5];
      const bool flip = i % 2 == 1;
      std::vector<uint8_t> fast(size_t(out_w) * out_h * 3), portable(fast.size()), chw(fast.size()),
          want_chw(fast.size());
      SATURATE_ASSERT_OK(
          DecodeCropResize(indexed, crop, out_w, out_h, flip, fast.data(), &scratch));
      ASSERT_TRUE(scratch.last_decoded_ycc_planes());
      DisableAvx2ResizeForTesting(true);
      SATURATE_ASSERT_OK(
          DecodeCropResize(indexed, crop, out_w, out_h, flip, portable.data(), &scratch));
      DisableAvx2ResizeForTesting(false);
      ASSERT_EQ(fast, portable) << "case " << i;
      SATURATE_ASSERT_OK(
          DecodeCropResize(indexed, crop, out_w, out_h, flip, chw.data(), &scratch, Layout::kCHW));
      ConvertPixels(fast.data(), out_h, out_w, nullptr, nullptr, Layout::kCHW, PixelType::kUInt8,
                    want_chw.data());
      ASSERT_EQ(chw, want_chw) << "case " << i;
    }
  }
}

}  // namespace
}  // namespace saturate::image
