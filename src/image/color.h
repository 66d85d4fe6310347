// color: colour conversions to RGB8 with libjpeg's arithmetic. YCbCr uses
// libjpeg's own 16-bit fixed point (jdcolor.c: rounded, then clamped), so
// components resized as stored and converted afterwards (jpeg_planes) get
// the conversion libjpeg would have applied to the same values. CMYK is
// composited as libjpeg's users do (Adobe files store it inverted).
// Thread-safety: pure functions.
#ifndef SATURATE_IMAGE_COLOR_H_
#define SATURATE_IMAGE_COLOR_H_

#include <cstddef>
#include <cstdint>

namespace saturate::image {

// n pixels of the planes y, cb and cr to RGB at out: three planes r, g, b
// (`plane` bytes apart) or, if plane == 0, interleaved. AVX2 when `avx2`
// (HasAvx2()), else scalar: the same bytes.
void YccToRgbAny(bool avx2, const uint8_t* y, const uint8_t* cb, const uint8_t* cr, size_t n,
                 uint8_t* out, size_t plane);

// CMYK row (4 bytes/px) to RGB (3 bytes/px); may be in place (writes trail
// reads). Adobe-marker files store CMYK inverted.
void CmykRowToRgb(const uint8_t* cmyk, int n, bool inverted, uint8_t* rgb);

}  // namespace saturate::image

#endif  // SATURATE_IMAGE_COLOR_H_
