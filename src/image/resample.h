// resample: the loader's resize, an antialiased bilinear (triangle)
// filter whose support widens with the reduction factor, computed in float:
// PIL's Image.resize(BILINEAR) and torchvision's resize(antialias=True).
// ResampleBox resizes interleaved RGB8 (to RGB rows or to three planes),
// ResamplePlane one 8-bit plane (a JPEG component); both can mirror the
// output left-right (an exact mirror: the same sums, placed mirrored).
//
// Contract: the taps of a SourceBox are computed where the box lies in the
// whole image, then moved to the buffer's origin, so a buffer cut out of a
// larger image resizes to the bytes of the whole (jpeg_cut relies on it).
// Each pass has an AVX2 loop (resample_avx2.h) and a 4-lane twin
// (resample_kernels.h) that give the same bytes. Allocation: only in the
// ResampleScratch, whose buffers grow to a high-water mark.
//
// Thread-safety: a ResampleScratch is used by one thread at a time.
#ifndef SATURATE_IMAGE_RESAMPLE_H_
#define SATURATE_IMAGE_RESAMPLE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "image/transform.h"

namespace saturate::image {

// Filter weights for one axis: output pixel i reads source pixels
// [first[i], first[i] + count[i]) with weights[i * stride ...].
struct AxisTaps {
  std::vector<int> first;
  std::vector<int> count;
  std::vector<float> weights;
  int stride = 0;
};

// What a resize reads: the box [x0, x0 + w) x [y0, y0 + h) (fractional, in
// source pixels), with filter taps kept inside [cx0, cx1) x [cy0, cy1).
// The source buffer's first pixel is pixel (ox, oy) of those coordinates:
// the taps are computed where the box is, then moved by it, so a buffer cut
// out of a larger image gets bit for bit the weights of the whole image
// (the rounding of the box's coordinates depends on where it is).
struct SourceBox {
  double x0, w, y0, h;
  int cx0, cx1, cy0, cy1;
  int ox = 0, oy = 0;

  bool operator==(const SourceBox&) const = default;

  // A crop of whole pixels, taps inside it (as PIL crops, then resizes).
  static SourceBox Of(const CropRect& c) {
    return {double(c.x), double(c.width), double(c.y), double(c.height),
            c.x,         c.x + c.width,   c.y,         c.y + c.height};
  }
};

// The resampler's reusable buffers (one per worker, in DecodeScratch).
struct ResampleScratch {
  AxisTaps x_taps, y_taps;
  // Tap weights as 4-float broadcasts (HorizontalTable, VerticalTable).
  std::vector<float> x_table, y_table;
  std::vector<int> x_offset;  // Where each output column's taps start.
  // Horizontal-first: horizontal pass output, rows x out_width x 3.
  // Vertical-first: one row of vertical pass output.
  std::vector<float> mid;
  // Horizontal-first: one source row widened to RGBX floats.
  // Vertical-first: one row of horizontal pass output.
  std::vector<float> quad;
  std::vector<uint8_t> out_row;  // Planar output: one output row as RGB.
  int plane_spread = 0;          // ResamplePlane: PlaneTable's spread, kept for same_taps.

  size_t CapacityBytes() const;
};

// Resizes the source box of an RGB8 image (rows src_stride bytes apart) to
// out_w x out_h, mirrored if hflip, as interleaved RGB rows or (`planar`)
// as three planes of out_w * out_h bytes at out.
void ResampleBox(const uint8_t* src, size_t src_stride, const SourceBox& b, int out_w, int out_h,
                 bool hflip, uint8_t* out, bool planar, ResampleScratch& s);

// Resizes the source box of one 8-bit plane to out_w x out_h bytes at out.
// same_taps: the previous call had the same box, size and flip (Cr after
// Cb), so its taps and tables still hold.
void ResamplePlane(const uint8_t* src, size_t src_stride, const SourceBox& b, int out_w, int out_h,
                   bool hflip, bool same_taps, uint8_t* out, ResampleScratch& s);

}  // namespace saturate::image

#endif  // SATURATE_IMAGE_RESAMPLE_H_
