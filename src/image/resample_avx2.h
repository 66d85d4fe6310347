// resample_avx2: the AVX2 twins of the resampler's passes
// (resample_kernels.h): 8 lanes, two output positions per vector in the
// horizontal passes, the same multiplies and adds in the same order, so the
// same bytes. Callers check HasAvx2() (simd.h) first. Declared only when
// built with SATURATE_RESIZE_AVX2. Thread-safety: pure functions.
#ifndef SATURATE_IMAGE_RESAMPLE_AVX2_H_
#define SATURATE_IMAGE_RESAMPLE_AVX2_H_

#include <cstddef>
#include <cstdint>

#include "image/resample_kernels.h"
#include "image/simd.h"

#ifdef SATURATE_RESIZE_AVX2
namespace saturate::image {

// HorizontalRowN (kStep 3 or 4) two positions at a time.
template <int kStep>
void HorizontalRowAvx2(const float* in, const int* offset, const float* table, int taps, int out_w,
                       float* dst);

// HorizontalRowAvx2<3> followed by FloatsToBytes, without the float row in
// between: RGB at dst if plane == 0, else the R, G and B planes at dst,
// dst + plane and dst + 2 * plane.
void HorizontalRowBytesAvx2(const float* in, const int* offset, const float* table, int taps,
                            int out_w, uint8_t* dst, size_t plane);

// WidenRow, 4 pixels at a time.
SATURATE_TARGET_AVX2 void WidenRowAvx2(const uint8_t* p, int n, float* quad);

// VerticalBytesToFloats and VerticalFloatsToBytes, 32 values at a time.
void VerticalBytesToFloatsAvx2(const uint8_t* first, size_t stride, const float* w, int n,
                               size_t len, float* dst);
SATURATE_TARGET_AVX2 void VerticalFloatsToBytesAvx2(const float* first, size_t stride,
                                                    const float* w, int n, size_t len,
                                                    uint8_t* dst);

// PlaneRow from position 0, 8 positions at a time; t.spread must be < 16.
void PlaneRowAvx2(const float* in, const PlaneTaps& t, int out_w, float* dst);

}  // namespace saturate::image
#endif  // SATURATE_RESIZE_AVX2

#endif  // SATURATE_IMAGE_RESAMPLE_AVX2_H_
