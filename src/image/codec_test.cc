#include "image/codec.h"

#include <gtest/gtest.h>
#include <jpeglib.h>
#include <png.h>

#include <algorithm>
#include <cmath>
#include <cstdio>  // jpeglib.h needs FILE and size_t first.
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>

#include "base/testing.h"
#include "image/test_images.h"

namespace saturate::image {
namespace {

using test_images::EncodeJpegRaw;
using test_images::EncodePng;
using test_images::Psnr;

using Bytes = std::vector<std::byte>;

// Channel values of a smooth gradient at (possibly fractional) pixel (x, y).
// Linear, so an area average equals the value at the area's centre.
void GradientAt(double x, double y, int w, int h, double rgb[3]) {
  rgb[0] = 255.0 * x / (w - 1);
  rgb[1] = 255.0 * y / (h - 1);
  rgb[2] = 0.5 * (rgb[0] + (255.0 - rgb[1]));
}

std::vector<uint8_t> Gradient(int w, int h) {
  std::vector<uint8_t> px(size_t(w) * h * 3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      double v[3];
      GradientAt(x, y, w, h, v);
      for (int c = 0; c < 3; ++c) px[(size_t(y) * w + x) * 3 + c] = uint8_t(std::lround(v[c]));
    }
  }
  return px;
}

Bytes MustEncodeJpeg(const std::vector<uint8_t>& rgb, int w, int h, int quality = 90) {
  auto r = EncodeJpeg(rgb.data(), w, h, quality);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : Bytes();
}

Bytes Prefix(const Bytes& b, size_t n) { return Bytes(b.begin(), b.begin() + n); }

// Offset just past the SOS header: where entropy-coded data starts.
size_t ScanDataOffset(const Bytes& jpeg) {
  for (size_t i = 0; i + 3 < jpeg.size(); ++i) {
    if (jpeg[i] == std::byte{0xFF} && jpeg[i + 1] == std::byte{0xDA}) {
      return i + 2 + ((size_t(jpeg[i + 2]) << 8) | size_t(jpeg[i + 3]));
    }
  }
  return 0;
}

class CodecTest : public ::testing::Test {
 protected:
  static constexpr int kW = 300, kH = 200;
  std::vector<uint8_t> rgb_ = Gradient(kW, kH);
  Bytes jpeg_ = MustEncodeJpeg(rgb_, kW, kH);
  Bytes png_ = EncodePng(rgb_.data(), kW, kH, PNG_FORMAT_RGB);
};

TEST_F(CodecTest, SniffFormat) {
  EXPECT_EQ(SniffFormat(jpeg_), ImageFormat::kJpeg);
  EXPECT_EQ(SniffFormat(png_), ImageFormat::kPng);
  EXPECT_EQ(SniffFormat(Prefix(jpeg_, 2)), ImageFormat::kUnknown);
  EXPECT_EQ(SniffFormat({}), ImageFormat::kUnknown);
  EXPECT_EQ(SniffFormat(std::as_bytes(std::span("GIF89a", 6))), ImageFormat::kUnknown);
}

TEST_F(CodecTest, ProbeReadsDimensions) {
  SATURATE_ASSERT_OK_AND_ASSIGN(ImageInfo j, ProbeImage(jpeg_));
  EXPECT_EQ(j.width, kW);
  EXPECT_EQ(j.height, kH);
  EXPECT_EQ(j.channels, 3);
  EXPECT_EQ(j.format, ImageFormat::kJpeg);
  SATURATE_ASSERT_OK_AND_ASSIGN(ImageInfo p, ProbeImage(png_));
  EXPECT_EQ(p.width, kW);
  EXPECT_EQ(p.height, kH);
  EXPECT_EQ(p.channels, 3);
  EXPECT_EQ(p.format, ImageFormat::kPng);
}

TEST_F(CodecTest, ValidateAcceptsGoodImages) {
  SATURATE_ASSERT_OK_AND_ASSIGN(ImageInfo j, ValidateImage(jpeg_));
  EXPECT_EQ(j.width, kW);
  SATURATE_ASSERT_OK_AND_ASSIGN(ImageInfo p, ValidateImage(png_));
  EXPECT_EQ(p.height, kH);
}

TEST_F(CodecTest, TruncatedJpegIsCorruptionButProbes) {
  Bytes cut = Prefix(jpeg_, jpeg_.size() / 2);
  SATURATE_EXPECT_OK(ProbeImage(cut).status());  // Header only: cheap, not a check.
  ::testing::internal::CaptureStderr();
  Result<ImageInfo> r = ValidateImage(cut);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");  // libjpeg must not print.
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_NE(r.status().message().find("Premature end of JPEG file"), std::string::npos)
      << r.status().message();
  EXPECT_EQ(DecodeRgb(cut).status().code(), StatusCode::kCorruption);
}

TEST_F(CodecTest, TruncatedPngIsCorruption) {
  Result<ImageInfo> r = ValidateImage(Prefix(png_, png_.size() / 2));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << r.status().ToString();
}

TEST_F(CodecTest, EoiMarkerInsideScanDataIsCorruption) {
  const size_t start = ScanDataOffset(jpeg_);
  ASSERT_GT(start, 0u);
  Bytes bad = jpeg_;
  const size_t mid = start + (bad.size() - start) / 2;
  bad[mid] = std::byte{0xFF};
  bad[mid + 1] = std::byte{0xD9};
  Result<ImageInfo> r = ValidateImage(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_NE(r.status().message().find("Corrupt JPEG data"), std::string::npos)
      << r.status().message();
}

TEST_F(CodecTest, GarbageIsAnError) {
  std::mt19937 rng(42);
  Bytes garbage(4096);
  for (auto& b : garbage) b = std::byte(rng() & 0xFF);
  EXPECT_FALSE(ValidateImage(garbage).ok());
  EXPECT_FALSE(ProbeImage(garbage).ok());
  // The right magic followed by garbage must fail inside the codecs.
  Bytes fake_jpeg = garbage, fake_png = garbage;
  std::memcpy(fake_jpeg.data(), jpeg_.data(), 3);
  std::memcpy(fake_png.data(), png_.data(), 8);
  EXPECT_EQ(ValidateImage(fake_jpeg).status().code(), StatusCode::kCorruption);
  EXPECT_EQ(ValidateImage(fake_png).status().code(), StatusCode::kCorruption);
  EXPECT_FALSE(ReencodeJpeg(fake_jpeg, 64, 90).ok());
}

// Exercises the error paths (longjmp, png_image_free) under the sanitizers.
TEST_F(CodecTest, RandomMutationsNeverCrash) {
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    Bytes bad = i % 2 ? jpeg_ : png_;
    for (int k = 0; k < 4; ++k) bad[rng() % bad.size()] = std::byte(rng() & 0xFF);
    if (i % 3 == 0) bad.resize(rng() % bad.size());
    (void)ProbeImage(bad);
    (void)ValidateImage(bad);
    (void)DecodeRgb(bad);
    (void)ReencodeJpeg(bad, 64, 75);
  }
}

TEST_F(CodecTest, NonImageBytesGiveClearError) {
  const std::string text = "name,label\ncat.jpg,3\n";
  auto bytes = std::as_bytes(std::span(text));
  EXPECT_EQ(SniffFormat(bytes), ImageFormat::kUnknown);
  Result<ImageInfo> r = ValidateImage(bytes);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(r.status().message(), "not a JPEG or PNG image (starts with 6e 61 6d 65 2c 6c 61 62)");
  EXPECT_FALSE(ProbeImage({}).ok());
  EXPECT_FALSE(DecodeRgb(bytes).ok());
}

TEST_F(CodecTest, GrayJpegDecodesToRgb) {
  std::vector<uint8_t> gray(size_t(kW) * kH);
  for (size_t i = 0; i < gray.size(); ++i) gray[i] = rgb_[3 * i];
  Bytes jpeg = EncodeJpegRaw(gray.data(), kW, kH, 1, JCS_GRAYSCALE);
  ImageInfo info;
  SATURATE_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> px, DecodeRgb(jpeg, &info));
  EXPECT_EQ(info.channels, 1);
  ASSERT_EQ(px.size(), size_t(kW) * kH * 3);
  std::vector<uint8_t> expect(px.size());
  for (size_t i = 0; i < gray.size(); ++i) {
    EXPECT_EQ(px[3 * i], px[3 * i + 1]);
    EXPECT_EQ(px[3 * i], px[3 * i + 2]);
    expect[3 * i] = expect[3 * i + 1] = expect[3 * i + 2] = gray[i];
  }
  EXPECT_GT(Psnr(px, expect), 35.0);
}

TEST_F(CodecTest, CmykJpegDecodesToRgb) {
  // Adobe-style inverted CMYK (libjpeg writes the Adobe marker) for pure orange
  // (255, 128, 0): C=0, M=127, Y=255, K=0 stored inverted.
  const int w = 32, h = 16;
  std::vector<uint8_t> cmyk;
  for (int i = 0; i < w * h; ++i) cmyk.insert(cmyk.end(), {255, 128, 0, 255});
  Bytes jpeg = EncodeJpegRaw(cmyk.data(), w, h, 4, JCS_CMYK);
  SATURATE_ASSERT_OK_AND_ASSIGN(ImageInfo info, ValidateImage(jpeg));
  EXPECT_EQ(info.channels, 4);
  SATURATE_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> px, DecodeRgb(jpeg));
  ASSERT_EQ(px.size(), size_t(w) * h * 3);
  EXPECT_NEAR(px[0], 255, 3);
  EXPECT_NEAR(px[1], 128, 3);
  EXPECT_NEAR(px[2], 0, 3);
}

TEST_F(CodecTest, ReencodeShrinksLongerSideAndKeepsPixels) {
  SATURATE_ASSERT_OK_AND_ASSIGN(Bytes small, ReencodeJpeg(jpeg_, 64, 90));
  ImageInfo info;
  SATURATE_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> px, DecodeRgb(small, &info));
  EXPECT_EQ(info.width, 64);
  EXPECT_NEAR(info.height, 43, 1);
  // Reference: the gradient sampled at each output pixel's source-area centre.
  std::vector<uint8_t> ref(px.size());
  for (int y = 0; y < info.height; ++y) {
    for (int x = 0; x < info.width; ++x) {
      double v[3];
      GradientAt((x + 0.5) * kW / info.width - 0.5, (y + 0.5) * kH / info.height - 0.5, kW, kH, v);
      for (int c = 0; c < 3; ++c) {
        ref[(size_t(y) * info.width + x) * 3 + c] =
            uint8_t(std::clamp(std::lround(v[c]), 0L, 255L));
      }
    }
  }
  EXPECT_GT(Psnr(px, ref), 25.0);
}

TEST_F(CodecTest, ReencodePortraitAndPng) {
  std::vector<uint8_t> tall = Gradient(kH, kW);
  Bytes png = EncodePng(tall.data(), kH, kW, PNG_FORMAT_RGB);
  SATURATE_ASSERT_OK_AND_ASSIGN(Bytes out, ReencodeJpeg(png, 64, 85));
  SATURATE_ASSERT_OK_AND_ASSIGN(ImageInfo info, ProbeImage(out));
  EXPECT_EQ(info.format, ImageFormat::kJpeg);
  EXPECT_EQ(info.width, 43);
  EXPECT_EQ(info.height, 64);
}

TEST_F(CodecTest, ReencodeNeverEnlarges) {
  for (int max_side : {0, -1, 300, 1000}) {
    SATURATE_ASSERT_OK_AND_ASSIGN(Bytes out, ReencodeJpeg(jpeg_, max_side, 90));
    SATURATE_ASSERT_OK_AND_ASSIGN(ImageInfo info, ProbeImage(out));
    EXPECT_EQ(info.width, kW) << max_side;
    EXPECT_EQ(info.height, kH) << max_side;
  }
  EXPECT_EQ(ReencodeJpeg(jpeg_, 64, 0).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(CodecTest, PngRoundTripIsExact) {
  ImageInfo info;
  SATURATE_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> px, DecodeRgb(png_, &info));
  EXPECT_EQ(info.width, kW);
  EXPECT_EQ(info.height, kH);
  EXPECT_EQ(px, rgb_);
}

TEST_F(CodecTest, GrayPngExpandsToRgb) {
  const std::vector<uint8_t> gray = {0, 50, 100, 150, 200, 255};
  SATURATE_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> px,
                                DecodeRgb(EncodePng(gray.data(), 3, 2, PNG_FORMAT_GRAY)));
  ASSERT_EQ(px.size(), 18u);
  for (size_t i = 0; i < gray.size(); ++i) {
    EXPECT_EQ(px[3 * i], gray[i]);
    EXPECT_EQ(px[3 * i + 2], gray[i]);
  }
}

TEST_F(CodecTest, EncodeJpegRejectsBadArguments) {
  EXPECT_EQ(EncodeJpeg(rgb_.data(), 0, kH, 90).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeJpeg(nullptr, kW, kH, 90).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeJpeg(rgb_.data(), kW, kH, 101).status().code(), StatusCode::kInvalidArgument);
  SATURATE_EXPECT_OK(EncodeJpeg(rgb_.data(), 1, 1, 1).status());
}

// The restart-marked copy decodes to the same pixels, and is restart-marked.
TEST_F(CodecTest, RestartMarkersAreLossless) {
  std::vector<uint8_t> gray(size_t(kW) * kH), cmyk(size_t(kW) * kH * 4);
  for (size_t i = 0; i < gray.size(); ++i) {
    gray[i] = rgb_[3 * i + 1];
    for (int c = 0; c < 4; ++c) cmyk[4 * i + c] = uint8_t(rgb_[3 * i + c % 3] ^ (c * 40));
  }
  const Bytes inputs[] = {
      jpeg_,
      EncodeJpegRaw(rgb_.data(), kW, kH, 3, JCS_RGB, /*progressive=*/true),
      EncodeJpegRaw(rgb_.data(), kW, kH, 3, JCS_RGB, false, /*h_samp=*/1, /*v_samp=*/1),
      EncodeJpegRaw(gray.data(), kW, kH, 1, JCS_GRAYSCALE),
      EncodeJpegRaw(cmyk.data(), kW, kH, 4, JCS_CMYK),
  };
  for (const Bytes& in : inputs) {
    SATURATE_ASSERT_OK_AND_ASSIGN(Bytes out, AddJpegRestartMarkers(in));
    SATURATE_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> want, DecodeRgb(in));
    SATURATE_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> got, DecodeRgb(out));
    EXPECT_EQ(got, want);
    // A DRI segment (FF DD, length 4) with an interval of 1 MCU.
    const uint8_t dri[] = {0xFF, 0xDD, 0x00, 0x04, 0x00, 0x01};
    EXPECT_NE(std::search(out.begin(), out.end(), reinterpret_cast<const std::byte*>(dri),
                          reinterpret_cast<const std::byte*>(dri) + sizeof dri),
              out.end());
  }
}

TEST_F(CodecTest, RestartMarkersKeepMarkersAndRejectBadInput) {
  // A COM marker inserted after SOI survives.
  Bytes with_com(jpeg_.begin(), jpeg_.begin() + 2);
  const char comment[] = "saturate-test";
  const uint8_t head[] = {0xFF, 0xFE, 0x00, uint8_t(2 + sizeof comment - 1)};
  for (uint8_t b : head) with_com.push_back(std::byte{b});
  for (size_t i = 0; i + 1 < sizeof comment; ++i) with_com.push_back(std::byte(comment[i]));
  with_com.insert(with_com.end(), jpeg_.begin() + 2, jpeg_.end());
  SATURATE_ASSERT_OK_AND_ASSIGN(Bytes out, AddJpegRestartMarkers(with_com));
  const std::string text(reinterpret_cast<const char*>(out.data()), out.size());
  EXPECT_NE(text.find(comment), std::string::npos);

  // Only the DC scan of a progressive file: libjpeg smooths the missing AC
  // coefficients, which no baseline file can reproduce.
  const Bytes dc_only = EncodeJpegRaw(rgb_.data(), kW, kH, 3, JCS_RGB, true, 2, 2, /*max_scans=*/1);
  SATURATE_EXPECT_OK(ValidateImage(dc_only).status());
  EXPECT_EQ(AddJpegRestartMarkers(dc_only).status().code(), StatusCode::kUnimplemented);

  EXPECT_EQ(AddJpegRestartMarkers(png_).status().code(), StatusCode::kCorruption);
  EXPECT_EQ(AddJpegRestartMarkers(Prefix(jpeg_, jpeg_.size() / 2)).status().code(),
            StatusCode::kCorruption);
  EXPECT_EQ(AddJpegRestartMarkers(Prefix(jpeg_, 40)).status().code(), StatusCode::kCorruption);
}

TEST(ResizeRgbTest, AveragesAreas) {
  // 4x2 -> 2x1: each output pixel is the mean of a 2x2 block.
  const std::vector<uint8_t> in = {0,  0,  0,  10, 10, 10, 100, 0, 0, 200, 0, 0,
                                   20, 20, 20, 30, 30, 30, 100, 0, 0, 200, 0, 0};
  EXPECT_EQ(ResizeRgb(in.data(), 4, 2, 2, 1), (std::vector<uint8_t>{15, 15, 15, 150, 0, 0}));
  // 3 -> 2: the middle pixel is split half and half.
  const std::vector<uint8_t> row = {0, 0, 0, 90, 90, 90, 180, 180, 180};
  EXPECT_EQ(ResizeRgb(row.data(), 3, 1, 2, 1), (std::vector<uint8_t>{30, 30, 30, 150, 150, 150}));
}

TEST_F(CodecTest, ConcurrentCallsAreIndependent) {
  Bytes cut = Prefix(jpeg_, jpeg_.size() / 2);
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        if (!ValidateImage(jpeg_).ok() || ValidateImage(cut).ok() ||
            !ReencodeJpeg(png_, 50, 80).ok()) {
          ++failures[t];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures, std::vector<int>(4, 0));
}

}  // namespace
}  // namespace saturate::image
