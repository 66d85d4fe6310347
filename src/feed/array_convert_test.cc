#include "feed/array_convert.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <random>
#include <vector>

#include "image/transform.h"

namespace saturate::feed {
namespace {

using format::DType;

// n elements of `dtype` with values over the type's interesting range,
// placed `misalign` bytes past an aligned start.
std::vector<std::byte> Elements(DType dtype, uint64_t n, size_t misalign, std::mt19937* rng) {
  const size_t size = format::DTypeSize(dtype);
  std::vector<std::byte> out(misalign + n * size);
  for (uint64_t i = 0; i < n; ++i) {
    std::byte* p = out.data() + misalign + i * size;
    const uint32_t r = (*rng)();
    switch (dtype) {
      case DType::kUInt8: {
        const uint8_t v = static_cast<uint8_t>(r);
        std::memcpy(p, &v, 1);
        break;
      }
      case DType::kInt32: {
        const int32_t v = static_cast<int32_t>(r) >> (r % 24);
        std::memcpy(p, &v, 4);
        break;
      }
      case DType::kInt64: {
        const int64_t v = (static_cast<int64_t>(r) << 20) - (int64_t{1} << 40);
        std::memcpy(p, &v, 8);
        break;
      }
      default: {
        const float v = static_cast<float>(static_cast<int32_t>(r)) / 65536.0f;
        std::memcpy(p, &v, 4);
        break;
      }
    }
  }
  return out;
}

// Every source type, length (vector bodies, tails, empty), alignment and
// scale/normalize setting gives the scalar reference's bytes, with the AVX2
// loops on and off (the SSE2 ones then).
TEST(ScaleToFloatTest, EveryPathGivesTheScalarReferenceBytes) {
  struct Affine {
    float mul, add;
  };
  const Affine settings[] = {{1.0f, 0.0f},                                 // plain cast
                             {1.0f / 255, 0.0f},                           // ToTensor
                             {1.0f / 255 / 0.3530f, -0.2860f / 0.3530f}};  // + Normalize
  std::mt19937 rng(7);
  for (bool avx2_off : {false, true}) {
    image::DisableAvx2ResizeForTesting(avx2_off);
    for (DType dtype : {DType::kUInt8, DType::kInt32, DType::kInt64, DType::kFloat32}) {
      for (uint64_t n : {0, 1, 7, 8, 15, 16, 17, 31, 32, 33, 100, 784, 3072}) {
        for (size_t misalign : {0, 1, 3}) {
          const auto src = Elements(dtype, n, misalign, &rng);
          for (const Affine& a : settings) {
            std::vector<float> got(n + 1, -7.0f), want(n + 1, -7.0f);
            ScaleToFloat(dtype, src.data() + misalign, n, a.mul, a.add, got.data());
            ScaleToFloatScalar(dtype, src.data() + misalign, n, a.mul, a.add, want.data());
            ASSERT_EQ(std::memcmp(got.data(), want.data(), (n + 1) * sizeof(float)), 0)
                << format::DTypeName(dtype) << " n=" << n << " misalign=" << misalign
                << " mul=" << a.mul << " avx2_off=" << avx2_off;
          }
        }
      }
    }
  }
  image::DisableAvx2ResizeForTesting(false);
}

// Streaming stores give the same bytes: at a 32-byte-aligned destination
// (the vector loops stream) and off it (they store through the caches).
TEST(ScaleToFloatTest, StreamingStoresGiveTheSameBytes) {
  std::mt19937 rng(11);
  const float mul = 1.0f / 255 / 0.3530f, add = -0.2860f / 0.3530f;
  for (bool avx2_off : {false, true}) {
    image::DisableAvx2ResizeForTesting(avx2_off);
    for (DType dtype : {DType::kUInt8, DType::kInt32, DType::kInt64, DType::kFloat32}) {
      for (uint64_t n : {0, 5, 16, 33, 784, 3072}) {
        const auto src = Elements(dtype, n, 0, &rng);
        for (size_t offset : {0, 1, 4}) {  // in floats: aligned, then 4 and 16 bytes off
          alignas(64) static float got[3072 + 8], want[3072 + 8];
          std::fill(std::begin(got), std::end(got), -7.0f);
          std::fill(std::begin(want), std::end(want), -7.0f);
          ScaleToFloat(dtype, src.data(), n, mul, add, got + offset, Stores::kStreaming);
          StreamingFence();
          ScaleToFloatScalar(dtype, src.data(), n, mul, add, want + offset);
          ASSERT_EQ(std::memcmp(got, want, sizeof(got)), 0)
              << format::DTypeName(dtype) << " n=" << n << " offset=" << offset
              << " avx2_off=" << avx2_off;
        }
      }
    }
  }
  image::DisableAvx2ResizeForTesting(false);
}

TEST(ScaleToFloatTest, ReferenceIsMultiplyThenAdd) {
  const uint8_t src[3] = {0, 128, 255};
  const float mul = 1.0f / 255 / 0.5f, add = -0.5f / 0.5f;
  float dst[3];
  ScaleToFloatScalar(DType::kUInt8, reinterpret_cast<const std::byte*>(src), 3, mul, add, dst);
  EXPECT_EQ(dst[0], -1.0f);
  EXPECT_EQ(dst[1], 128.0f * mul + add);
  EXPECT_NEAR(dst[2], 1.0f, 1e-6);
}

TEST(ScaleToFloatTest, HalfPrecisionSourcesAreRefused) {
  EXPECT_TRUE(CanScaleToFloat(DType::kUInt8));
  EXPECT_TRUE(CanScaleToFloat(DType::kInt64));
  EXPECT_FALSE(CanScaleToFloat(DType::kFloat16));
  EXPECT_FALSE(CanScaleToFloat(DType::kBFloat16));
}

}  // namespace
}  // namespace saturate::feed
