// Readers for IDX files (the MNIST / Fashion-MNIST array format), plain or
// gzip-compressed. Only the unsigned-byte element type (0x08) is supported;
// that is what every image/label set of interest uses.
//
// Layout: two zero bytes, a dtype byte, an ndims byte, ndims big-endian u32
// dimensions, then prod(dims) elements in row-major order and nothing else.
//
// Ownership: IdxArray owns its data. Thread-safety: free functions, no shared
// state; distinct calls may run concurrently.
#ifndef SATURATE_PACK_IDX_H_
#define SATURATE_PACK_IDX_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "saturate/base/status.h"

namespace saturate::pack {

inline constexpr uint8_t kIdxUbyte = 0x08;
// Upper bound on prod(dims) elements, so a hostile header cannot make us
// allocate more than this (4 GiB).
inline constexpr uint64_t kMaxIdxDataBytes = uint64_t{1} << 32;

struct IdxArray {
  uint8_t dtype_code = kIdxUbyte;
  std::vector<uint32_t> dims;
  std::vector<uint8_t> data;  // row-major, prod(dims) elements
};

// Parses a whole IDX file held in memory. `name` is used in error messages.
// Errors: Corruption (bad magic, truncated header or data, trailing bytes,
// dims whose product exceeds kMaxIdxDataBytes), InvalidArgument (dtype other
// than 0x08).
Result<IdxArray> ParseIdx(std::span<const std::byte> bytes, std::string_view name);

// Reads `path` (gzip'd or plain; zlib detects which) and parses it.
// Errors: those of ParseIdx, plus NotFound / IOError when the file cannot be
// read and Corruption when the gzip stream is damaged.
Result<IdxArray> ReadIdx(const std::string& path);

// Checks that `images` is N x H x W ubyte and `labels` is N ubyte, same N.
// Returns InvalidArgument naming both counts / the offending shape otherwise.
Status CheckIdxPair(const IdxArray& images, const IdxArray& labels);

// "60000x28x28", for messages.
std::string IdxShapeString(const IdxArray& array);

}  // namespace saturate::pack

#endif  // SATURATE_PACK_IDX_H_
