// simd: the vector instruction sets of the image loops. SSE2 is baseline
// x86-64, so its loops (and, elsewhere, a portable C++ twin that does the
// same IEEE operations) are always built. The AVX2 loops are compiled per
// function with SATURATE_TARGET_AVX2 and taken at run time when HasAvx2()
// says the CPU has AVX2; SATURATE_RESIZE_NO_AVX2 leaves them out. Plain
// AVX2, no FMA: every AVX2 loop does the same multiplies and adds, in the
// same order, as its 4-lane twin, so every path gives the same bytes.
//
// Thread-safety: HasAvx2 may be called from any thread; the test switch
// (DisableAvx2ResizeForTesting, transform.h) must not race with it.
#ifndef SATURATE_IMAGE_SIMD_H_
#define SATURATE_IMAGE_SIMD_H_

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__SSE2__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(SATURATE_RESIZE_NO_AVX2)
#include <immintrin.h>
#define SATURATE_RESIZE_AVX2 1
#define SATURATE_TARGET_AVX2 __attribute__((target("avx2")))
#endif

namespace saturate::image {

// Whether to take the AVX2 loops: the CPU (and the OS) support AVX2 and the
// test switch has not turned them off. Always false without
// SATURATE_RESIZE_AVX2.
bool HasAvx2();

}  // namespace saturate::image

#endif  // SATURATE_IMAGE_SIMD_H_
