// The component path of a YCbCr JPEG: see jpeg_planes.h.
#include "image/jpeg_planes.h"

#include <algorithm>
#include <cmath>

#include "image/buffer.h"
#include "image/color.h"
#include "image/resample.h"
#include "image/simd.h"

namespace saturate::image {

Status DecodeJpegPlanes(jpeg_decompress_struct& c, int scale, double fx0, double fx1, double fy0,
                        double fy1, int mcu_x0, int mcu_y0, bool hflip, int out_w, int out_h,
                        uint8_t* out, bool planar, DecodeScratch::Impl& s) {
  c.raw_data_out = TRUE;
  c.scale_num = static_cast<unsigned>(scale);
  c.scale_denom = 8;
  int rows = 0;  // Scaled luma rows needed.
  if (!Guarded(s.err, [&] {
        jpeg_start_decompress(&c);
        const int luma_y0 = mcu_y0 * c.max_v_samp_factor * c.min_DCT_scaled_size;
        rows = std::clamp(static_cast<int>(std::ceil(fy1)) - luma_y0, 1,
                          static_cast<int>(c.output_height));
      })) {
    return s.JpegError();
  }
  // Each read gives one iMCU row: `lines` luma rows, per_read[i] rows of
  // component i, written as whole blocks (stride[i] wide).
  const int lines = c.max_v_samp_factor * c.min_DCT_scaled_size;
  const int reads = (rows + lines - 1) / lines;
  int per_read[3];
  size_t stride[3], start[3], total = 0;
  for (int i = 0; i < 3; ++i) {
    const jpeg_component_info& k = c.comp_info[i];
    per_read[i] = k.v_samp_factor * k.DCT_scaled_size;
    stride[i] = size_t(k.width_in_blocks) * k.DCT_scaled_size;
    start[i] = total;
    total += stride[i] * per_read[i] * reads;
  }
  uint8_t* px = Grow(s.planes, total);
  JSAMPROW* row_ptrs = Grow(s.plane_rows, size_t(per_read[0] + per_read[1] + per_read[2]));
  JSAMPARRAY arrays[3] = {row_ptrs, row_ptrs + per_read[0], row_ptrs + per_read[0] + per_read[1]};
  if (!Guarded(s.err, [&] {
        for (int n = 0; n < reads; ++n) {
          for (int i = 0; i < 3; ++i) {
            for (int r = 0; r < per_read[i]; ++r) {
              arrays[i][r] = px + start[i] + stride[i] * (size_t(n) * per_read[i] + r);
            }
          }
          if (jpeg_read_raw_data(&c, arrays, static_cast<JDIMENSION>(lines)) !=
              static_cast<JDIMENSION>(lines)) {
            ERREXIT(&c, JERR_INPUT_EOF);
          }
        }
      })) {
    return s.JpegError();
  }
  s.last_dct_scale_eighths = scale;
  s.last_decoded_width = static_cast<int>(c.output_width);
  s.last_decoded_height = rows;
  s.last_decoded_ycc_planes = true;
  const size_t n = size_t(out_w) * out_h;
  uint8_t* ycc = Grow(s.ycc, 3 * n);
  SourceBox last{};
  for (int i = 0; i < 3; ++i) {
    // Component pixels per MCU (nx, ny) and per scaled luma pixel (rx, ry:
    // 1/2 for subsampled chroma).
    const jpeg_component_info& k = c.comp_info[i];
    const int nx = k.h_samp_factor * k.DCT_scaled_size;
    const int ny = k.v_samp_factor * k.DCT_scaled_size;
    const int luma_x = c.max_h_samp_factor * c.min_DCT_scaled_size;  // per MCU
    const int luma_y = c.max_v_samp_factor * c.min_DCT_scaled_size;
    const double rx = double(nx) / luma_x, ry = double(ny) / luma_y;
    // The decoded component pixels, in the source image's: [ox, ox + w) x
    // [oy, oy + h).
    const int ox = mcu_x0 * nx, oy = mcu_y0 * ny;
    const int w = static_cast<int>(k.downsampled_width);
    const int h = std::min(static_cast<int>(k.downsampled_height), per_read[i] * reads);
    // Taps stay within the component pixels under the whole luma pixels
    // the crop touches (exact integer bounds: they must not depend on
    // where the cut starts either).
    const int cx0 = static_cast<int>(std::floor(fx0)) * nx / luma_x;
    const int cx1 = std::min(ox + w, (static_cast<int>(std::ceil(fx1)) * nx + luma_x - 1) / luma_x);
    const int cy0 = static_cast<int>(std::floor(fy0)) * ny / luma_y;
    const int cy1 = std::min(oy + h, (static_cast<int>(std::ceil(fy1)) * ny + luma_y - 1) / luma_y);
    const SourceBox box{
        fx0 * rx, (fx1 - fx0) * rx, fy0 * ry, (fy1 - fy0) * ry, cx0, cx1, cy0, cy1, ox, oy};
    ResamplePlane(px + start[i], stride[i], box, out_w, out_h, hflip, i > 0 && box == last,
                  ycc + i * n, s.resample);
    last = box;
  }
  YccToRgbAny(HasAvx2(), ycc, ycc + n, ycc + 2 * n, n, out, planar ? n : 0);
  return Status::OK();
}

}  // namespace saturate::image
