// jpeg_planes: the component path of a YCbCr JPEG. Its components are
// decoded as stored (libjpeg raw data: chroma at its own resolution, no
// upsampling, no colour conversion), each is resized to the output size
// (ResamplePlane), and only the output pixels are converted to RGB (color.h).
// Raw data cannot skip rows or columns, so the stream should already be cut
// to the crop (jpeg_cut); the taps are computed in the source image's
// coordinates, so a cut gives exactly the bytes of the whole image's
// decode. The bytes differ from the RGB path's (upsample, convert, then
// resize) by rounding only (40+ dB PSNR).
// Thread-safety: one DecodeScratch per thread.
#ifndef SATURATE_IMAGE_JPEG_PLANES_H_
#define SATURATE_IMAGE_JPEG_PLANES_H_

#include <cstdint>

#include "image/scratch.h"
#include "saturate/base/status.h"

namespace saturate::image {

// Whether DecodeJpegPlanes can take a JPEG whose header `c` has read.
inline bool HasYccPlanes(const jpeg_decompress_struct& c) {
  return c.num_components == 3 && c.jpeg_color_space == JCS_YCbCr;
}

// Decodes the components of the JPEG whose header `c` has read (down to
// the crop's last row), resizes them to out_w x out_h (mirrored if hflip)
// and converts them into `out` (RGB, or three planes if `planar`).
// [fx0, fx1) x [fy0, fy1) is the crop in scaled luma pixels of the source
// image at DCT scale scale/8, of which `c` reads the MCUs from column
// mcu_x0 and row mcu_y0 on (a cut; 0, 0 if whole).
Status DecodeJpegPlanes(jpeg_decompress_struct& c, int scale, double fx0, double fx1, double fy0,
                        double fy1, int mcu_x0, int mcu_y0, bool hflip, int out_w, int out_h,
                        uint8_t* out, bool planar, DecodeScratch::Impl& s);

}  // namespace saturate::image

#endif  // SATURATE_IMAGE_JPEG_PLANES_H_
