// jpeg_entries: entry points into the entropy-coded data of a JPEG without
// restart markers, so that it can be cut around a crop as jpeg_cut cuts a
// restart-marked one, without rewriting the file. A scan (once, when a
// dataset's sidecar index is built) Huffman-decodes the file and records,
// at every `every`-th MCU of each MCU row and at the end of the scan, where
// the next MCU's bits start and the DC predictors there. SpliceMcus then
// writes a JPEG of MCU columns [c0, c1) and rows [r0, r1) on those entries:
// the header with the new size, then each row's run of bits as it is,
// except the DC differences of its first MCU, re-encoded against where the
// previous run left the predictors. The cut holds the whole file's
// coefficients for its blocks, so it decodes to the same pixels a restart
// cut does.
//
// Baseline (SOF0/SOF1), 8-bit, Huffman-coded files of one scan holding every
// component, without restart markers; anything else is refused (false, 0),
// as is a stream that does not parse, and the caller then decodes the file
// as it is.
//
// The table (little-endian), built by ScanEntries and read from disk:
//   magic "SJE1" | every u16 | components u16 | mcus_x u16 | mcus_y u16 |
//   scan_start u32 | jpeg_size u32 | jpeg_xxh3 u64 | entry[mcus_y * per_row + 1]
//   entry := bit u32 | dc_pred i16[components]
// per_row = ceil(mcus_x / every); `bit` counts the scan's bits without its
// stuffed zero bytes. Tables come from disk: ParseEntries checks that it is
// the file's, SpliceMcus every offset it reads.
// Thread-safety: pure functions.
#ifndef SATURATE_IMAGE_JPEG_ENTRIES_H_
#define SATURATE_IMAGE_JPEG_ENTRIES_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "image/codec_internal.h"  // jpeglib.h, in order
#include "image/jpeg_cut.h"

namespace saturate::image {

// A parsed entry table (a view into its bytes).
struct JpegEntries {
  McuGrid grid;  // rows_per_segment 0: cut to MCU columns and rows
  int every = 0;
  int components = 0;
  size_t scan_start = 0;
  std::span<const uint8_t> table;  // the entries

  int PerRow() const { return (grid.mcus_x + every - 1) / every; }
  // The range widened to whole entries: c0 down, c1 up to an entry or the row's end.
  McuRange Align(const McuRange& r, int width, int height) const;
  // Whether decoding `r` as a cut skips anything decoding the file down to
  // its last row reads: MCU rows above it or columns beside it.
  bool CutSkipsData(const McuRange& r) const;
};

// Appends the entry table of the JPEG `p` (size bytes), whose header `c`
// has read (the scan's data starts at scan_start), an entry every `every`
// MCUs (0: about six per MCU row). False, appending nothing, for a file it
// cannot serve.
bool ScanEntries(const uint8_t* p, size_t size, const jpeg_decompress_struct& c, size_t scan_start,
                 int every, std::vector<uint8_t>* out);

// The table, if it is that of the JPEG `p` (size bytes; its XXH3 is in the
// table) whose header `c` has read, with the scan's data at scan_start.
std::optional<JpegEntries> ParseEntries(std::span<const uint8_t> table, const uint8_t* p,
                                        size_t size, const jpeg_decompress_struct& c,
                                        size_t scan_start);

// Writes into `out` a JPEG of the MCUs `range` (aligned by Align) of the
// width x height JPEG `p`: its header with the new size, then the range's
// rows spliced as above. Returns its size (out only grows), or 0 if an
// entry or the data does not hold. `bits` is scratch space (only grows).
size_t SpliceMcus(const uint8_t* p, size_t size, const jpeg_decompress_struct& c,
                  const JpegEntries& e, int width, int height, const McuRange& range,
                  std::vector<uint8_t>* bits, std::vector<uint8_t>* out);

}  // namespace saturate::image

#endif  // SATURATE_IMAGE_JPEG_ENTRIES_H_
