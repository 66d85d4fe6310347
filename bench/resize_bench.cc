// resize_bench: the loader's per-image resize work without the JPEG decode.
//
//   resize/crop_resize          CropResizeRgb of 64 RandomResizedCrop crops
//                               (scale 0.08-1, ratio 3/4-4/3, as the loader
//                               draws them) of a 500x375 RGB image to 224x224,
//                               every other one mirrored.
//   resize/crop_resize_to_chw   the same, then ConvertPixels to CHW uint8 (the
//                               loader's default tensor layout).
//   resize/to_chw_uint8         ConvertPixels of a 224x224 image to CHW uint8.
//
// The Time columns cover all 64 crops; per_image is the time per image and
// items_per_second images/s. The image (a smooth pattern plus noise) and
// the crops are fixed by seeds, so runs compare.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "image/transform.h"

namespace {

using saturate::image::CropRect;
using saturate::image::CropResizeRgb;
using saturate::image::DecodeScratch;

constexpr int kSrcW = 500, kSrcH = 375, kOut = 224, kCrops = 64;

class MtSource : public saturate::image::UniformSource {
 public:
  explicit MtSource(uint64_t seed) : gen_(seed) {}
  double Uniform() override { return std::uniform_real_distribution<double>(0.0, 1.0)(gen_); }

 private:
  std::mt19937_64 gen_;
};

const std::vector<uint8_t>& SourceImage() {
  static const std::vector<uint8_t> px = [] {
    std::vector<uint8_t> v(size_t(kSrcW) * kSrcH * 3);
    std::mt19937 gen(1234);
    std::normal_distribution<double> noise(0.0, 12.0);
    for (int y = 0; y < kSrcH; ++y) {
      for (int x = 0; x < kSrcW; ++x) {
        const double u = double(x) / kSrcW, w = double(y) / kSrcH;
        const double base[3] = {128 + 100 * std::sin(7 * u + 3 * w), 60 + 150 * w * u,
                                128 + 90 * std::cos(11 * w - 4 * u)};
        for (int c = 0; c < 3; ++c) {
          const double p = std::round(base[c] + noise(gen));
          v[(size_t(y) * kSrcW + x) * 3 + c] = uint8_t(std::clamp(p, 0.0, 255.0));
        }
      }
    }
    return v;
  }();
  return px;
}

const std::vector<CropRect>& Crops() {
  static const std::vector<CropRect> crops = [] {
    std::vector<CropRect> v;
    MtSource rng(20240611);
    for (int i = 0; i < kCrops; ++i) {
      v.push_back(
          saturate::image::RandomResizedCropParams(kSrcW, kSrcH, 0.08, 1.0, 3.0 / 4, 4.0 / 3, rng));
    }
    return v;
  }();
  return crops;
}

void Resize(benchmark::State& state, bool to_chw) {
  const std::vector<uint8_t>& src = SourceImage();
  const std::vector<CropRect>& crops = Crops();
  std::vector<uint8_t> rgb(size_t(kOut) * kOut * 3), chw(rgb.size());
  DecodeScratch scratch;
  for (auto _ : state) {
    for (int i = 0; i < kCrops; ++i) {
      CropResizeRgb(src.data(), kSrcW, kSrcH, crops[i], kOut, kOut, i % 2 == 1, rgb.data(),
                    &scratch);
      if (to_chw) {
        saturate::image::ConvertPixels(rgb.data(), kOut, kOut, nullptr, nullptr,
                                       saturate::image::Layout::kCHW,
                                       saturate::image::PixelType::kUInt8, chw.data());
      }
      benchmark::DoNotOptimize(rgb.data());
      benchmark::DoNotOptimize(chw.data());
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kCrops);
  // Images/s inverted: seconds per image (printed with a unit, e.g. 542us).
  state.counters["per_image"] = benchmark::Counter(
      kCrops, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void BM_CropResize(benchmark::State& state) { Resize(state, false); }
void BM_CropResizeToChw(benchmark::State& state) { Resize(state, true); }

void BM_ToChwUint8(benchmark::State& state) {
  std::vector<uint8_t> rgb(size_t(kOut) * kOut * 3), chw(rgb.size());
  std::mt19937 gen(7);
  for (uint8_t& b : rgb) b = uint8_t(gen());
  for (auto _ : state) {
    saturate::image::ConvertPixels(rgb.data(), kOut, kOut, nullptr, nullptr,
                                   saturate::image::Layout::kCHW,
                                   saturate::image::PixelType::kUInt8, chw.data());
    benchmark::DoNotOptimize(chw.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
}

BENCHMARK(BM_CropResize)->Name("resize/crop_resize")->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CropResizeToChw)->Name("resize/crop_resize_to_chw")->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ToChwUint8)->Name("resize/to_chw_uint8")->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
