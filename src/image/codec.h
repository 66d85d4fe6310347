// Image codec: sniff, probe, validate, decode and (re-)encode JPEG and PNG
// held in memory, on top of libjpeg(-turbo) and libpng.
//
// Errors: bytes that are not a JPEG/PNG, or that fail to decode, give
// Corruption with the codec's own message ("Premature end of JPEG file").
// Decoding is strict: libjpeg *warnings* (truncation, corrupt entropy data)
// are errors too, so a file that decodes OK decodes to what was written.
// Nothing here prints; libjpeg/libpng messages only travel in the Status.
//
// Ownership: inputs are borrowed for the duration of the call; outputs are
// returned by value. Thread-safety: every function is reentrant (no shared
// state), so any number of threads may call them at once.
#ifndef SATURATE_IMAGE_CODEC_H_
#define SATURATE_IMAGE_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "saturate/base/status.h"

namespace saturate::image {

enum class ImageFormat { kUnknown, kJpeg, kPng };

// Images with more pixels are refused (InvalidArgument) before any pixel
// buffer is allocated, so a hostile header cannot ask for gigabytes.
inline constexpr int64_t kMaxImagePixels = int64_t{1} << 28;  // 268 Mpx, 805 MB as RGB8

struct ImageInfo {
  int width = 0;
  int height = 0;
  int channels = 0;  // As stored: 1 gray, 2 gray+alpha, 3 RGB/YCbCr, 4 RGBA/CMYK.
  ImageFormat format = ImageFormat::kUnknown;
};

// Identifies the format from the magic bytes only.
ImageFormat SniffFormat(std::span<const std::byte> bytes);

// Reads only the header (cheap): dimensions and channel count.
Result<ImageInfo> ProbeImage(std::span<const std::byte> bytes);

// Decodes the whole image (discarding pixels) to prove it is not corrupt.
// JPEG entropy data is decoded in full; the IDCT runs at 1/8 scale (faster,
// and it cannot detect anything).
Result<ImageInfo> ValidateImage(std::span<const std::byte> bytes);

// Decodes to interleaved RGB8, row-major, width * height * 3 bytes. Gray and
// CMYK JPEGs are converted; PNG alpha is composited onto black; 16-bit PNG is
// reduced to 8 bits. `info` (optional) receives the stored image's info.
Result<std::vector<uint8_t>> DecodeRgb(std::span<const std::byte> bytes, ImageInfo* info = nullptr);

// Encodes interleaved RGB8 (width * height * 3 bytes) as a baseline JPEG with
// 4:2:0 chroma subsampling. quality is 1..100.
Result<std::vector<std::byte>> EncodeJpeg(const uint8_t* rgb, int width, int height, int quality);

// Decodes a JPEG or PNG, shrinks it so the longer side is at most max_side
// (aspect ratio kept; max_side <= 0 keeps the size; never enlarges) and
// encodes it with EncodeJpeg at `quality`. Large reductions use libjpeg's
// DCT scaling first, then an area-averaging resize for the exact size.
Result<std::vector<std::byte>> ReencodeJpeg(std::span<const std::byte> bytes, int max_side,
                                            int quality);

// Where AddJpegRestartMarkers puts restart markers: after every MCU
// (kRestartEveryMcu), after every N MCU rows (N > 0), or nowhere (0).
inline constexpr int kRestartEveryMcu = -1;

// Losslessly rewrites a JPEG as a baseline JPEG with optimized Huffman
// tables and restart markers as `restart_rows` says (by default after every
// MCU, as `jpegtran -optimize -restart 1B`; N > 0 as `-restart N`), keeping
// its APPn and COM markers. The DCT coefficients are copied, so it decodes
// to exactly the same pixels; DecodeCropResize (transform.h) then
// entropy-decodes only the MCUs around a crop (a marker after every MCU) or
// the rows of intervals that hold it (every N rows) instead of every row
// above it. A marker after every MCU grows a file by about 2.5 bytes per
// MCU less what the optimized tables save (+5% on the benchmark photos).
// Errors: Corruption for a bad or non-JPEG input, InvalidArgument for one
// over kMaxImagePixels or a restart_rows below -1, Unimplemented for a
// progressive JPEG whose scans leave coefficients out (libjpeg smooths
// those; a baseline copy would decode differently): store it as it is.
Result<std::vector<std::byte>> AddJpegRestartMarkers(std::span<const std::byte> jpeg,
                                                     int restart_rows = kRestartEveryMcu);

// Area-averaging (box filter) resize of interleaved RGB8; meant for
// shrinking. Exposed for tests and callers that already hold pixels.
std::vector<uint8_t> ResizeRgb(const uint8_t* rgb, int width, int height, int out_width,
                               int out_height);

}  // namespace saturate::image

#endif  // SATURATE_IMAGE_CODEC_H_
