// jpeg_cut: decoding only the MCUs around a crop. A JPEG with restart
// markers (AddJpegRestartMarkers, codec.h) can be cut down to the restart
// intervals around a crop: each interval's entropy-coded segment decodes on
// its own (restarts reset the DC predictors), so the segments above (and,
// with a marker after every MCU, beside) the crop are never
// Huffman-decoded, which is most of libjpeg's time otherwise. Two kinds of
// interval can be cut: one MCU (cut to MCU columns and rows), or N whole
// MCU rows (cut to rows, N at a time). The cut is a valid JPEG (the same
// header with the new size, the chosen segments renumbered) whose pixels
// are those of the whole image's decode, block for block.
//
// Input is untrusted: IndexMcus and CutMcus check what they read and say
// no (false, 0) rather than cut a stream they do not understand; the
// caller then decodes the file whole. Thread-safety: pure functions.
#ifndef SATURATE_IMAGE_JPEG_CUT_H_
#define SATURATE_IMAGE_JPEG_CUT_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "image/codec_internal.h"  // jpeglib.h, in order
#include "image/simd.h"

namespace saturate::image {

// The first 0xFF in p[i, size), or size. Markers come every few dozen
// bytes in a restart-marked file, so an inline 16-byte scan beats a memchr
// call per marker.
inline size_t NextFF(const uint8_t* p, size_t i, size_t size) {
#if defined(__SSE2__)
  const __m128i ff = _mm_set1_epi8(static_cast<char>(0xFF));
  for (; i + 16 <= size; i += 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
    const int hits = _mm_movemask_epi8(_mm_cmpeq_epi8(v, ff));
    if (hits != 0) return i + static_cast<size_t>(__builtin_ctz(static_cast<unsigned>(hits)));
  }
#endif
  while (i < size && p[i] != 0xFF) ++i;
  return i;
}

struct McuGrid {
  int mcu_w = 0, mcu_h = 0;    // MCU size in image pixels
  int mcus_x = 0, mcus_y = 0;  // MCUs per row, MCU rows
  // What one restart interval (entropy-coded segment) holds: one MCU (0),
  // or this many whole MCU rows (the last segment may have fewer).
  int rows_per_segment = 0;

  // Segments side by side in a row of segments, and its height in MCU rows.
  int SegmentCols() const { return rows_per_segment == 0 ? mcus_x : 1; }
  int SegmentRows() const { return rows_per_segment == 0 ? 1 : rows_per_segment; }
};

// The MCU grid of a JPEG whose header `c` has read, if it is one
// sequential Huffman-coded scan holding every component.
std::optional<McuGrid> ScanGrid(const jpeg_decompress_struct& c);

// As ScanGrid, if the scan's restart interval is one MCU or a whole number
// of MCU rows.
std::optional<McuGrid> RestartGrid(const jpeg_decompress_struct& c);

// Records where entropy-coded segments 0..count-1 start (and, as entry
// `count`, the end of the last one plus 2, as if a marker followed).
// False unless the data is a run of segments separated by RST0..RST7 in order.
bool IndexSegments(const uint8_t* p, size_t size, size_t start, size_t count,
                   std::vector<uint32_t>* starts);

// MCU columns [c0, c1) and rows [r0, r1) of an McuGrid, and their size in
// pixels (the last MCU column and row may be partial).
struct McuRange {
  int c0 = 0, c1 = 0, r0 = 0, r1 = 0;
  int width = 0, height = 0;
};

// How many segments, from the first, hold the MCUs of `r` (whole segments,
// see RangeAround): the count to give IndexSegments.
size_t SegmentsThrough(const McuGrid& g, const McuRange& r);

// Whether cutting to `r` skips any entropy-coded data that decoding down
// to the range's last row would read: MCUs beside it (one-MCU segments) or
// segments above it. A range that starts at the top of a file with row
// segments is decoded as it is.
bool CutSkipsData(const McuGrid& g, const McuRange& r);

// Writes into `out` a JPEG of the MCUs `range` of `jpeg` (a width x height
// image indexed by IndexSegments, header ending at starts[0]; the range in
// whole segments): the same header with the new size, then the chosen
// segments, renumbered. Returns its size (out only grows), or 0 if the
// header is not one it can rewrite.
size_t CutMcus(const uint8_t* jpeg, const std::vector<uint32_t>& starts, const McuGrid& g,
               int width, int height, const McuRange& range, std::vector<uint8_t>* out);

// Starts a cut of `range` of the width x height JPEG `jpeg`, whose header
// (up to its scan's data) is `header` bytes, in `out` (grown to `bytes`):
// the header with the range's size. Returns where the scan's data goes, or
// nullptr if the header is not one it can rewrite (no baseline SOF of that size).
uint8_t* StartCut(const uint8_t* jpeg, size_t header, int width, int height, const McuRange& range,
                  size_t bytes, std::vector<uint8_t>* out);

// The MCUs covering the whole scaled pixels of the crop [fx0, fx1) x
// [fy0, fy1) at DCT scale s/8, plus `margin` scaled pixels on each side.
// Decoding to RGB needs a margin of 1: chroma upsampling makes the outermost
// pixels of a cut image differ from the full decode, so they must not reach
// the filter taps. Components (DecodeJpegPlanes) are exact block by block.
// With row segments, the range is widened to whole segments: all columns,
// and rows from a segment's first to a segment's last (or the image's).
McuRange RangeAround(const McuGrid& g, int width, int height, int scale, int margin, double fx0,
                     double fx1, double fy0, double fy1);

}  // namespace saturate::image

#endif  // SATURATE_IMAGE_JPEG_CUT_H_
