// Golden output of the image transforms: a fixed set of inputs decoded,
// cropped, resized, flipped and converted through the public API
// (transform.h) with fixed seeds and options, each output reduced to a
// 64-bit FNV-1a hash and compared with the hash recorded before src/image
// was split into one file per idea (issue 26). A refactoring of the
// transforms must leave every hash as it is; a change that is meant to
// alter the bytes has to say so and re-record them (the failure message
// prints the new table).
//
// The inputs are synthesized with integer arithmetic only (no libm), then
// encoded with the libjpeg/libpng found at build time, so the hashes hold
// for the libjpeg-turbo version they were recorded with (checked below).
#include <gtest/gtest.h>

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>  // jpeglib.h needs FILE and size_t first.
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/testing.h"
#include "image/codec.h"
#include "image/test_images.h"
#include "image/transform.h"

namespace saturate::image {
namespace {

using test_images::EncodeJpegRaw;
using test_images::EncodePng;
using Bytes = std::vector<std::byte>;

uint64_t Fnv1a(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ull) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

// splitmix64: the same numbers on every platform and standard library.
class Rng : public UniformSource {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double Uniform() override { return double(Next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

// A photo-like RGB image from integers only: gradients, a disc, a box,
// diagonal stripes and a little noise, so that JPEG has texture to code.
std::vector<uint8_t> Synthetic(int w, int h, uint64_t seed) {
  std::vector<uint8_t> px(size_t(w) * h * 3);
  Rng noise(seed);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      int rgb[3] = {30 + 200 * x / w, 20 + 180 * y / h, 120 + 60 * ((x + 2 * y) % 97) / 97};
      const int dx = x - 3 * w / 10, dy = y - 2 * h / 5, r = 3 * h / 20;
      if (dx * dx + dy * dy < r * r) rgb[0] = 230, rgb[1] = 60, rgb[2] = 40;
      if (x > 6 * w / 10 && x < 8 * w / 10 && y > h / 2 && y < 7 * h / 10) {
        rgb[0] = 30, rgb[1] = 90, rgb[2] = 220;
      }
      if (y > 3 * h / 4 && (x + y / 2) % 40 < 6) rgb[0] = rgb[1] = rgb[2] = 250;
      const int n = int(noise.Next() % 9) - 4;
      for (int c = 0; c < 3; ++c) {
        px[(size_t(y) * w + x) * 3 + c] = uint8_t(std::clamp(rgb[c] + n, 0, 255));
      }
    }
  }
  return px;
}

// RandomResizedCrop (scale 0.08-1, ratio 3/4-4/3) and a coin flip, as the
// loader plans them after the header.
class RrcPlanner : public CropPlanner {
 public:
  explicit RrcPlanner(uint64_t seed) : rng_(seed) {}
  CropRect Plan(int width, int height, bool* hflip) override {
    const CropRect r = RandomResizedCropParams(width, height, 0.08, 1.0, 3.0 / 4, 4.0 / 3, rng_);
    *hflip = rng_.Uniform() < 0.5;
    return r;
  }

 private:
  Rng rng_;
};

struct Input {
  std::string name;
  Bytes bytes;
};

std::vector<Input> Inputs() {
  constexpr int kW = 640, kH = 480, kOddW = 637, kOddH = 479;
  const std::vector<uint8_t> rgb = Synthetic(kW, kH, 1), odd = Synthetic(kOddW, kOddH, 2);
  std::vector<uint8_t> gray(size_t(kW) * kH), cmyk(size_t(kW) * kH * 4);
  for (size_t i = 0; i < gray.size(); ++i) {
    gray[i] = rgb[3 * i + 1];
    for (int c = 0; c < 3; ++c) cmyk[4 * i + c] = uint8_t(255 - rgb[3 * i + c]);
    cmyk[4 * i + 3] = uint8_t(200 + rgb[3 * i] % 56);
  }
  std::vector<Input> in;
  auto add = [&](std::string name, Result<Bytes> bytes) {
    EXPECT_TRUE(bytes.ok()) << name << ": " << bytes.status().ToString();
    if (bytes.ok()) in.push_back({std::move(name), std::move(bytes).value()});
  };
  add("420", EncodeJpeg(rgb.data(), kW, kH, 90));
  add("420_odd", EncodeJpegRaw(odd.data(), kOddW, kOddH, 3, JCS_RGB));
  add("422", EncodeJpegRaw(rgb.data(), kW, kH, 3, JCS_RGB, false, 2, 1));
  add("444", EncodeJpegRaw(rgb.data(), kW, kH, 3, JCS_RGB, false, 1, 1));
  add("gray", EncodeJpegRaw(gray.data(), kW, kH, 1, JCS_GRAYSCALE));
  add("cmyk", EncodeJpegRaw(cmyk.data(), kW, kH, 4, JCS_CMYK));
  add("progressive", EncodeJpegRaw(rgb.data(), kW, kH, 3, JCS_RGB, true));
  add("png", EncodePng(rgb.data(), kW, kH, PNG_FORMAT_RGB));
  // Restart-marked copies (as packing stores JPEGs): cut to the crop.
  for (const char* name : {"420", "420_odd", "422", "444", "gray", "progressive"}) {
    for (size_t i = 0; i < in.size(); ++i) {
      if (in[i].name == name) add(in[i].name + "_rst", AddJpegRestartMarkers(in[i].bytes));
    }
  }
  return in;
}

constexpr float kMean[3] = {0.485f, 0.456f, 0.406f};
constexpr float kStd[3] = {0.229f, 0.224f, 0.225f};

// One output per case, converted to every pixel type the batch slots take.
uint64_t HashConverted(const std::vector<uint8_t>& hwc, int w, int h) {
  uint64_t hash = Fnv1a(hwc.data(), hwc.size());
  const size_t n = size_t(w) * h * 3;
  std::vector<uint8_t> u8(n);
  std::vector<float> f32(n);
  std::vector<uint16_t> f16(n);
  ConvertPixels(hwc.data(), h, w, nullptr, nullptr, Layout::kCHW, PixelType::kUInt8, u8.data());
  hash = Fnv1a(u8.data(), n, hash);
  ConvertPixels(hwc.data(), h, w, kMean, kStd, Layout::kCHW, PixelType::kFloat32, f32.data());
  hash = Fnv1a(f32.data(), n * 4, hash);
  ConvertPixels(hwc.data(), h, w, kMean, kStd, Layout::kHWC, PixelType::kFloat32, f32.data());
  hash = Fnv1a(f32.data(), n * 4, hash);
  ConvertPixels(hwc.data(), h, w, nullptr, nullptr, Layout::kCHW, PixelType::kFloat32, f32.data());
  hash = Fnv1a(f32.data(), n * 4, hash);
  ConvertPixels(hwc.data(), h, w, kMean, kStd, Layout::kCHW, PixelType::kFloat16, f16.data());
  hash = Fnv1a(f16.data(), n * 2, hash);
  ConvertPixels(hwc.data(), h, w, kMean, kStd, Layout::kHWC, PixelType::kBFloat16, f16.data());
  return Fnv1a(f16.data(), n * 2, hash);
}

// Hashes of every case, by name. Each JPEG/PNG case hashes a run of
// decodes, each of which also records the DCT scale and decoded size.
std::map<std::string, uint64_t> ComputeHashes() {
  std::map<std::string, uint64_t> out;
  const std::vector<Input> inputs = Inputs();
  const std::pair<int, int> sizes[] = {{224, 224}, {96, 160}, {300, 100}};
  for (const Input& in : inputs) {
    for (bool fast_scales : {true, false}) {
      for (bool cut : {true, false}) {
        if (!cut && in.name.find("_rst") == std::string::npos) continue;
        for (Layout layout : {Layout::kHWC, Layout::kCHW}) {
          // CHW once per input: it is HWC split into planes (tested apart).
          if (layout == Layout::kCHW && !(fast_scales && cut)) continue;
          const std::string suffix = std::string(fast_scales ? "" : "/all_scales") +
                                     (cut ? "" : "/whole") +
                                     (layout == Layout::kCHW ? "/chw" : "/hwc");
          DecodeScratch scratch;
          scratch.set_only_fast_dct_scales(fast_scales);
          scratch.set_cut_restart_index(cut);
          auto state = [&](uint64_t h) {
            const int v[] = {scratch.last_dct_scale_eighths(), scratch.last_decoded_width(),
                             scratch.last_decoded_height(), scratch.last_used_restart_index(),
                             scratch.last_decoded_ycc_planes()};
            return Fnv1a(v, sizeof v, h);
          };
          // RandomResizedCrop + flip: 18 draws over three output sizes.
          uint64_t rrc = 0xcbf29ce484222325ull;
          RrcPlanner planner(42);
          for (int i = 0; i < 18; ++i) {
            const auto [w, h] = sizes[i % 3];
            std::vector<uint8_t> px(size_t(w) * h * 3);
            SATURATE_EXPECT_OK(
                DecodeCropResize(in.bytes, planner, w, h, px.data(), &scratch, layout));
            rrc = state(Fnv1a(px.data(), px.size(), rrc));
          }
          out[in.name + "/rrc" + suffix] = rrc;
          // Resize(256) + CenterCrop(224), plain and mirrored, and a
          // centre crop kept at its own size (no resampling).
          auto info = ProbeImage(in.bytes);
          EXPECT_TRUE(info.ok());
          if (!info.ok()) continue;
          uint64_t center = 0xcbf29ce484222325ull;
          const CropRect crops[] = {
              ResizeThenCenterCropRect(info->width, info->height, 256, 224, 224),
              CenterCropRect(info->width, info->height, 224, 224)};
          for (const CropRect& crop : crops) {
            for (bool flip : {false, true}) {
              std::vector<uint8_t> px(224 * 224 * 3);
              SATURATE_EXPECT_OK(
                  DecodeCropResize(in.bytes, crop, 224, 224, flip, px.data(), &scratch, layout));
              center = state(Fnv1a(px.data(), px.size(), center));
            }
          }
          out[in.name + "/center" + suffix] = center;
        }
      }
    }
    // The batch-slot conversions of one RRC output (HWC, all scales fast).
    DecodeScratch scratch;
    RrcPlanner planner(7);
    std::vector<uint8_t> px(224 * 224 * 3);
    SATURATE_EXPECT_OK(DecodeCropResize(in.bytes, planner, 224, 224, px.data(), &scratch));
    out[in.name + "/convert"] = HashConverted(px, 224, 224);
  }
  // CropResizeRgb from pixels: upscales and downscales, both SIMD widths.
  const std::vector<uint8_t> rgb = Synthetic(500, 375, 3);
  for (bool avx2 : {true, false}) {
    DisableAvx2ResizeForTesting(!avx2);
    Rng rng(99);
    uint64_t h = 0xcbf29ce484222325ull;
    DecodeScratch scratch;
    for (int i = 0; i < 40; ++i) {
      const CropRect crop = RandomResizedCropParams(500, 375, 0.01, 1.0, 0.5, 2.0, rng);
      const int ow = 1 + int(rng.Next() % 300), oh = 1 + int(rng.Next() % 300);
      const bool flip = rng.Next() % 2 == 1;
      const Layout layout = rng.Next() % 2 == 1 ? Layout::kCHW : Layout::kHWC;
      std::vector<uint8_t> px(size_t(ow) * oh * 3);
      CropResizeRgb(rgb.data(), 500, 375, crop, ow, oh, flip, px.data(), &scratch, layout);
      h = Fnv1a(px.data(), px.size(), h);
    }
    out[std::string("pixels/crop_resize") + (avx2 ? "" : "/no_avx2")] = h;
  }
  DisableAvx2ResizeForTesting(false);
  uint64_t h = 0xcbf29ce484222325ull;
  for (float v : {0.0f, 1e-8f, -2.5f, 65504.0f, 65520.0f, 3.14159f, -1e30f, 0.33333334f}) {
    const uint16_t bits[2] = {FloatToHalfBits(v), FloatToBFloat16Bits(v)};
    h = Fnv1a(bits, sizeof bits, h);
  }
  out["scalars/half_bfloat16"] = h;
  return out;
}

// Recorded before the split, at commit 39e6d08 (src/image/transform.cc in
// one piece), with libjpeg-turbo 2.1.5 (Debian 12).
constexpr long kRecordedWithLibjpegTurbo = 2001005;
const std::map<std::string, uint64_t>& Recorded() {
  static const std::map<std::string, uint64_t> recorded = {
      {"420/center/all_scales/hwc", 0x93ee76ff8e771953ull},
      {"420/center/chw", 0xeb327f017f983505ull},
      {"420/center/hwc", 0x26d6129b70497291ull},
      {"420/convert", 0x065a10741aa97b31ull},
      {"420/rrc/all_scales/hwc", 0xc9cc41e5733e1abdull},
      {"420/rrc/chw", 0x0939d3c9e8152f42ull},
      {"420/rrc/hwc", 0x9a8382e27a425cb8ull},
      {"420_odd/center/all_scales/hwc", 0x609dcd7228f5839full},
      {"420_odd/center/chw", 0xca9fa15e51f3c2edull},
      {"420_odd/center/hwc", 0xe216bd430b5b9f45ull},
      {"420_odd/convert", 0x7c1d9057ca568acfull},
      {"420_odd/rrc/all_scales/hwc", 0xd0cdedb1cf4ffe23ull},
      {"420_odd/rrc/chw", 0xf66a2e74e3525444ull},
      {"420_odd/rrc/hwc", 0xb16836f318278a40ull},
      {"420_odd_rst/center/all_scales/hwc", 0x9cf459e104f1e2a5ull},
      {"420_odd_rst/center/all_scales/whole/hwc", 0x300665d1cbde6d95ull},
      {"420_odd_rst/center/chw", 0xf281aaebb2ceeb05ull},
      {"420_odd_rst/center/hwc", 0x0659448af04a6ce1ull},
      {"420_odd_rst/center/whole/hwc", 0x4d610be7a83f0355ull},
      {"420_odd_rst/convert", 0x56773094312c6d98ull},
      {"420_odd_rst/rrc/all_scales/hwc", 0xceb3d4bd0dfa9363ull},
      {"420_odd_rst/rrc/all_scales/whole/hwc", 0x8ab9fc6eadf53befull},
      {"420_odd_rst/rrc/chw", 0x474b2bb49207ba60ull},
      {"420_odd_rst/rrc/hwc", 0x3437facbfe151e4eull},
      {"420_odd_rst/rrc/whole/hwc", 0x036a34cc4a4dfec7ull},
      {"420_rst/center/all_scales/hwc", 0x5f56a23078ace385ull},
      {"420_rst/center/all_scales/whole/hwc", 0x76b2d5fc01983b91ull},
      {"420_rst/center/chw", 0x0e9f2262585b7df9ull},
      {"420_rst/center/hwc", 0x9210fa467423e495ull},
      {"420_rst/center/whole/hwc", 0x8d1be5d12fbfb5b9ull},
      {"420_rst/convert", 0x0d209715a2da0a4aull},
      {"420_rst/rrc/all_scales/hwc", 0xba50782113cd4679ull},
      {"420_rst/rrc/all_scales/whole/hwc", 0x36ca139a60b8970cull},
      {"420_rst/rrc/chw", 0xf49e19d3d1e03552ull},
      {"420_rst/rrc/hwc", 0x37db6aca0f9fee58ull},
      {"420_rst/rrc/whole/hwc", 0x5c5f2b86397c8089ull},
      {"422/center/all_scales/hwc", 0x8d9c64fa382d1e9bull},
      {"422/center/chw", 0x55776c63b94ba845ull},
      {"422/center/hwc", 0xf618dc6f27076701ull},
      {"422/convert", 0xd5a9abd667ef7351ull},
      {"422/rrc/all_scales/hwc", 0xcacff2b5251eae24ull},
      {"422/rrc/chw", 0x23f196c9bd48629cull},
      {"422/rrc/hwc", 0x7f2625d558dad2d4ull},
      {"422_rst/center/all_scales/hwc", 0x40d7016965dcbad3ull},
      {"422_rst/center/all_scales/whole/hwc", 0x9a016a4ed394f6abull},
      {"422_rst/center/chw", 0x1e587977d82e7dfbull},
      {"422_rst/center/hwc", 0x8f796bf3fdf9c7cbull},
      {"422_rst/center/whole/hwc", 0xc83e02377c69a1f7ull},
      {"422_rst/convert", 0x805a0cc2989f5895ull},
      {"422_rst/rrc/all_scales/hwc", 0xc338400892b72cbcull},
      {"422_rst/rrc/all_scales/whole/hwc", 0x14aaf58bcdbfbd18ull},
      {"422_rst/rrc/chw", 0xa9a738bbe51bf3d7ull},
      {"422_rst/rrc/hwc", 0xcef34ec16a928483ull},
      {"422_rst/rrc/whole/hwc", 0xcf3a11e647f81791ull},
      {"444/center/all_scales/hwc", 0xbe20fd2ad6f1b021ull},
      {"444/center/chw", 0x378ea00cd18d6ca5ull},
      {"444/center/hwc", 0x26e7c919effbffa1ull},
      {"444/convert", 0xaa9a3f537e219795ull},
      {"444/rrc/all_scales/hwc", 0x6e55fcbb13c10eefull},
      {"444/rrc/chw", 0xf095e036dce73d1bull},
      {"444/rrc/hwc", 0x59d8595384e2e01full},
      {"444_rst/center/all_scales/hwc", 0xa21474563fdac0cbull},
      {"444_rst/center/all_scales/whole/hwc", 0x7d620521e0d9d2cbull},
      {"444_rst/center/chw", 0xa37d11666d83e515ull},
      {"444_rst/center/hwc", 0x2146c8310aefee85ull},
      {"444_rst/center/whole/hwc", 0x53b5b9dbbe28eefdull},
      {"444_rst/convert", 0xf67f831645797e64ull},
      {"444_rst/rrc/all_scales/hwc", 0xc7acee87f9e0d0b6ull},
      {"444_rst/rrc/all_scales/whole/hwc", 0x685655259c7a0cfdull},
      {"444_rst/rrc/chw", 0xed44bddd91cb0e5bull},
      {"444_rst/rrc/hwc", 0xc1a55f6720794191ull},
      {"444_rst/rrc/whole/hwc", 0xe5cbe1aeba9d40a1ull},
      {"cmyk/center/all_scales/hwc", 0x9addc0f0e74d97e5ull},
      {"cmyk/center/chw", 0xfb4a7530b198e62dull},
      {"cmyk/center/hwc", 0x998ff905c3ae0f75ull},
      {"cmyk/convert", 0x1e3da2c612bd65d6ull},
      {"cmyk/rrc/all_scales/hwc", 0x2056455bc3e90583ull},
      {"cmyk/rrc/chw", 0x8e7f49a9fe25d696ull},
      {"cmyk/rrc/hwc", 0x4e2aa250d53b6a6cull},
      {"gray/center/all_scales/hwc", 0x70bd8eeb0529fd53ull},
      {"gray/center/chw", 0x7d6ffcab386d1547ull},
      {"gray/center/hwc", 0xfcb6e8df9e4020f7ull},
      {"gray/convert", 0x87b75e69d59c3d3bull},
      {"gray/rrc/all_scales/hwc", 0x7097a47f12ecabe4ull},
      {"gray/rrc/chw", 0x0095902f528a9659ull},
      {"gray/rrc/hwc", 0x7378b206277f600full},
      {"gray_rst/center/all_scales/hwc", 0x883ca8bc3452b5dfull},
      {"gray_rst/center/all_scales/whole/hwc", 0x70bd8eeb0529fd53ull},
      {"gray_rst/center/chw", 0x1d0b096b2bae404full},
      {"gray_rst/center/hwc", 0x5563f242376dd1ebull},
      {"gray_rst/center/whole/hwc", 0xfcb6e8df9e4020f7ull},
      {"gray_rst/convert", 0x87b75e69d59c3d3bull},
      {"gray_rst/rrc/all_scales/hwc", 0xc3db3d5eb62b9868ull},
      {"gray_rst/rrc/all_scales/whole/hwc", 0x7097a47f12ecabe4ull},
      {"gray_rst/rrc/chw", 0x6b8e367bbbced789ull},
      {"gray_rst/rrc/hwc", 0x3c73221fdd40c0d7ull},
      {"gray_rst/rrc/whole/hwc", 0x7378b206277f600full},
      {"pixels/crop_resize", 0x3ef7ed084061e21aull},
      {"pixels/crop_resize/no_avx2", 0x3ef7ed084061e21aull},
      {"png/center/all_scales/hwc", 0xa6e9f92f37db7f6full},
      {"png/center/chw", 0x0c1767284ecaeff7ull},
      {"png/center/hwc", 0xa6e9f92f37db7f6full},
      {"png/convert", 0x92b6a39be5939109ull},
      {"png/rrc/all_scales/hwc", 0x41b53e05eac8304cull},
      {"png/rrc/chw", 0x5a85a7e937bf8b98ull},
      {"png/rrc/hwc", 0x41b53e05eac8304cull},
      {"progressive/center/all_scales/hwc", 0xea517af5e21b1423ull},
      {"progressive/center/chw", 0xebc3b3475a276757ull},
      {"progressive/center/hwc", 0xb1f2b918ed1f922full},
      {"progressive/convert", 0xbcd73113097f6076ull},
      {"progressive/rrc/all_scales/hwc", 0x6dd77419e73aeb49ull},
      {"progressive/rrc/chw", 0x84548446185cae8aull},
      {"progressive/rrc/hwc", 0xb517a1451dc2aa72ull},
      {"progressive_rst/center/all_scales/hwc", 0x9e7cf9194991ededull},
      {"progressive_rst/center/all_scales/whole/hwc", 0x0fe678605d80302dull},
      {"progressive_rst/center/chw", 0x7775fefdee0f984dull},
      {"progressive_rst/center/hwc", 0x66e0feec62585331ull},
      {"progressive_rst/center/whole/hwc", 0x3870a5aa8d94d7edull},
      {"progressive_rst/convert", 0x455c9fb28447b4a5ull},
      {"progressive_rst/rrc/all_scales/hwc", 0xa1963696f5562e06ull},
      {"progressive_rst/rrc/all_scales/whole/hwc", 0x2921c5f771473a23ull},
      {"progressive_rst/rrc/chw", 0xf5adfbb212059cb1ull},
      {"progressive_rst/rrc/hwc", 0xfa4a01f903ed6c8full},
      {"progressive_rst/rrc/whole/hwc", 0xa3542a194ca99846ull},
      {"scalars/half_bfloat16", 0x77b94bbd85f915afull},
  };
  return recorded;
}

TEST(GoldenTest, OutputBytesAreThoseRecordedBeforeTheSplit) {
#if defined(LIBJPEG_TURBO_VERSION_NUMBER)
  if (LIBJPEG_TURBO_VERSION_NUMBER != kRecordedWithLibjpegTurbo) {
    GTEST_SKIP() << "hashes recorded with libjpeg-turbo " << kRecordedWithLibjpegTurbo
                 << ", this is " << LIBJPEG_TURBO_VERSION_NUMBER;
  }
#endif
  const std::map<std::string, uint64_t> got = ComputeHashes();
  std::string table;
  for (const auto& [name, hash] : got) {
    char line[160];
    std::snprintf(line, sizeof line, "      {\"%s\", 0x%016" PRIx64 "ull},\n", name.c_str(), hash);
    table += line;
  }
  if (std::getenv("SATURATE_PRINT_GOLDEN") != nullptr) std::printf("%s", table.c_str());
  const auto& want = Recorded();
  int wrong = 0;
  for (const auto& [name, hash] : got) {
    auto it = want.find(name);
    if (it == want.end() || it->second != hash) {
      ++wrong;
      ADD_FAILURE() << name << ": " << (it == want.end() ? "not recorded" : "hash changed");
    }
  }
  EXPECT_EQ(got.size(), want.size());
  if (wrong > 0 || got.size() != want.size()) {
    std::printf("The current table (set SATURATE_PRINT_GOLDEN=1 to print it always):\n%s",
                table.c_str());
  }
}

}  // namespace
}  // namespace saturate::image
