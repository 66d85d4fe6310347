#include "feed/array_convert.h"

#include <cstring>

#include "image/simd.h"

namespace saturate::feed {
namespace {

using format::DType;

// Elements are loaded with memcpy: fields are 64-byte aligned in the record
// format, but nothing here depends on it.
template <typename Src>
void ScaleLoop(const std::byte* src, uint64_t begin, uint64_t n, float mul, float add, float* dst) {
  for (uint64_t i = begin; i < n; ++i) {
    Src v;
    std::memcpy(&v, src + i * sizeof(Src), sizeof(Src));
    dst[i] = static_cast<float>(v) * mul + add;
  }
}

#if defined(__SSE2__)
// Stores 4 floats; kStream bypasses the caches (dst 16-byte aligned).
template <bool kStream>
void Store4(float* dst, __m128 v) {
  if constexpr (kStream) {
    _mm_stream_ps(dst, v);
  } else {
    _mm_storeu_ps(dst, v);
  }
}

// uint8 -> float32, 16 elements per step: bytes widened to 16 and then 32
// bits by interleaving with zero.
template <bool kStream>
uint64_t ScaleU8Sse2(const std::byte* src, uint64_t n, float mul, float add, float* dst) {
  const __m128 m = _mm_set1_ps(mul), a = _mm_set1_ps(add);
  const __m128i zero = _mm_setzero_si128();
  uint64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m128i lo = _mm_unpacklo_epi8(b, zero), hi = _mm_unpackhi_epi8(b, zero);
    const __m128i w[4] = {_mm_unpacklo_epi16(lo, zero), _mm_unpackhi_epi16(lo, zero),
                          _mm_unpacklo_epi16(hi, zero), _mm_unpackhi_epi16(hi, zero)};
    for (int k = 0; k < 4; ++k) {
      const __m128 f = _mm_add_ps(_mm_mul_ps(_mm_cvtepi32_ps(w[k]), m), a);
      Store4<kStream>(dst + i + 4 * k, f);
    }
  }
  return i;
}
#endif

#ifdef SATURATE_RESIZE_AVX2
// Stores 8 floats; kStream bypasses the caches (dst 32-byte aligned).
template <bool kStream>
SATURATE_TARGET_AVX2 void Store8(float* dst, __m256 v) {
  if constexpr (kStream) {
    _mm256_stream_ps(dst, v);
  } else {
    _mm256_storeu_ps(dst, v);
  }
}

// uint8 -> float32, 32 elements per step.
template <bool kStream>
SATURATE_TARGET_AVX2 uint64_t ScaleU8Avx2(const std::byte* src, uint64_t n, float mul, float add,
                                          float* dst) {
  const __m256 m = _mm256_set1_ps(mul), a = _mm256_set1_ps(add);
  uint64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; ++k) {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + i + 8 * k));
      const __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
      Store8<kStream>(dst + i + 8 * k, _mm256_add_ps(_mm256_mul_ps(f, m), a));
    }
  }
  return i;
}

// int32 -> float32, 8 elements per step.
template <bool kStream>
SATURATE_TARGET_AVX2 uint64_t ScaleI32Avx2(const std::byte* src, uint64_t n, float mul, float add,
                                           float* dst) {
  const __m256 m = _mm256_set1_ps(mul), a = _mm256_set1_ps(add);
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 4 * i));
    Store8<kStream>(dst + i, _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(v), m), a));
  }
  return i;
}

// float32 -> float32, 8 elements per step.
template <bool kStream>
SATURATE_TARGET_AVX2 uint64_t ScaleF32Avx2(const std::byte* src, uint64_t n, float mul, float add,
                                           float* dst) {
  const __m256 m = _mm256_set1_ps(mul), a = _mm256_set1_ps(add);
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(reinterpret_cast<const float*>(src + 4 * i));
    Store8<kStream>(dst + i, _mm256_add_ps(_mm256_mul_ps(v, m), a));
  }
  return i;
}
#endif

// The elements the vector loops converted (a prefix); the caller finishes
// the rest with ScaleLoop.
template <bool kStream>
uint64_t ScaleVector(DType src_dtype, const std::byte* src, uint64_t n, float mul, float add,
                     float* dst) {
#ifdef SATURATE_RESIZE_AVX2
  if (image::HasAvx2()) {
    switch (src_dtype) {
      case DType::kUInt8:
        return ScaleU8Avx2<kStream>(src, n, mul, add, dst);
      case DType::kInt32:
        return ScaleI32Avx2<kStream>(src, n, mul, add, dst);
      case DType::kFloat32:
        return ScaleF32Avx2<kStream>(src, n, mul, add, dst);
      default:
        return 0;
    }
  }
#endif
#if defined(__SSE2__)
  if (src_dtype == DType::kUInt8) return ScaleU8Sse2<kStream>(src, n, mul, add, dst);
#endif
  return 0;
}

// Whether the vector loops may stream to dst: their stores are then
// aligned, 32 bytes apart from an aligned start.
bool CanStream(const float* dst) {
#if defined(__SSE2__)
  return reinterpret_cast<uintptr_t>(dst) % 32 == 0;
#else
  (void)dst;
  return false;
#endif
}

void ScaleTail(DType src_dtype, const std::byte* src, uint64_t begin, uint64_t n, float mul,
               float add, float* dst) {
  switch (src_dtype) {
    case DType::kUInt8:
      return ScaleLoop<uint8_t>(src, begin, n, mul, add, dst);
    case DType::kInt32:
      return ScaleLoop<int32_t>(src, begin, n, mul, add, dst);
    case DType::kInt64:
      return ScaleLoop<int64_t>(src, begin, n, mul, add, dst);
    case DType::kFloat32:
      return ScaleLoop<float>(src, begin, n, mul, add, dst);
    case DType::kFloat16:
    case DType::kBFloat16:
      return;  // refused by CanScaleToFloat
  }
}

}  // namespace

bool CanScaleToFloat(DType src) {
  return src == DType::kUInt8 || src == DType::kInt32 || src == DType::kInt64 ||
         src == DType::kFloat32;
}

void ScaleToFloat(DType src_dtype, const std::byte* src, uint64_t n, float mul, float add,
                  float* dst, Stores stores) {
  const uint64_t done = stores == Stores::kStreaming && CanStream(dst)
                            ? ScaleVector<true>(src_dtype, src, n, mul, add, dst)
                            : ScaleVector<false>(src_dtype, src, n, mul, add, dst);
  ScaleTail(src_dtype, src, done, n, mul, add, dst);
}

void StreamingFence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

void ScaleToFloatScalar(DType src_dtype, const std::byte* src, uint64_t n, float mul, float add,
                        float* dst) {
  ScaleTail(src_dtype, src, 0, n, mul, add, dst);
}

}  // namespace saturate::feed
