// scratch: DecodeScratch::Impl, everything one worker keeps between images
// (transform.h): a long-lived libjpeg decompressor, the decoded pixels,
// the resampler's buffers, the restart-index and cut buffers, the YCbCr
// component buffers, the options and what the last decode did. Buffers
// only grow (buffer.h). Thread-safety: one thread at a time, as DecodeScratch.
#ifndef SATURATE_IMAGE_SCRATCH_H_
#define SATURATE_IMAGE_SCRATCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "image/codec_internal.h"
#include "image/resample.h"
#include "image/transform.h"

namespace saturate::image {

struct DecodeScratch::Impl {
  Impl() { cinfo.err = InitJpegErrors(&err, /*warnings_are_errors=*/true); }
  ~Impl() {
    if (jpeg_created) jpeg_destroy_decompress(&cinfo);
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  Status JpegError() const { return Status::Corruption(std::string("JPEG: ") + err.message); }

  // Created on first use and kept: jpeg_abort_decompress() after each image
  // (or error) returns it to the state where a new header can be read.
  JpegErrorMgr err;
  jpeg_decompress_struct cinfo{};
  bool jpeg_created = false;

  std::vector<uint8_t> pixels;  // Decoded region (JPEG) or whole image (PNG).
  ResampleScratch resample;

  // Restart-indexed JPEGs: where each MCU's entropy-coded bytes start, and
  // the smaller JPEG of the MCUs around the crop that is decoded instead.
  std::vector<uint32_t> mcu_starts;
  std::vector<uint8_t> roi_jpeg;
  std::vector<uint8_t> splice_bits;  // A JPEG cut on an entry table: a run's unstuffed bits.
  // YCbCr JPEGs (DecodeJpegPlanes): the decoded components, libjpeg's row
  // pointers into them, and the resized components.
  std::vector<uint8_t> planes;
  std::vector<JSAMPROW> plane_rows;
  std::vector<uint8_t> ycc;

  bool cut_restart_index = true;
  bool last_decoded_ycc_planes = false;

  bool only_fast_dct_scales = true;
  bool last_used_restart_index = false;
  int last_dct_scale_eighths = 0;
  int last_decoded_width = 0;
  int last_decoded_height = 0;
};

}  // namespace saturate::image

#endif  // SATURATE_IMAGE_SCRATCH_H_
