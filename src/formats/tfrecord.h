// TFRecord framing, as TensorFlow's TFRecordWriter writes it:
//
//   file   := record*
//   record := length u64 | masked_crc32c(length) u32 | data[length] |
//             masked_crc32c(data) u32
//   masked_crc32c(x) := ((c >> 15) | (c << 17)) + 0xa282ead8, c = CRC-32C(x)
//
// All integers little-endian. ScanTfrecord walks the length fields only (the
// data checksum is checked when a record is read); ReadTfrecord checks both.
// Errors are Corruption and name the record number and byte offset; callers
// add the file name.
//
// Thread-safety: pure functions over byte spans.
#ifndef SATURATE_FORMATS_TFRECORD_H_
#define SATURATE_FORMATS_TFRECORD_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "saturate/base/status.h"

namespace saturate::formats {

inline constexpr uint64_t kTfrecordHeaderBytes = 12;  // length + its crc
inline constexpr uint64_t kTfrecordFooterBytes = 4;   // crc of the data

// CRC-32C with the CPU's crc32 instruction where it has one (x86-64 SSE4.2),
// else boost::crc_optimal; Crc32cPortable is always the latter (tests).
uint32_t Crc32c(std::span<const std::byte> bytes);
uint32_t Crc32cPortable(std::span<const std::byte> bytes);
uint32_t MaskedCrc32c(std::span<const std::byte> bytes);

// Where one record's data lies in the file.
struct TfrecordSpan {
  uint64_t offset = 0;  // of the record's first (length) byte
  uint64_t length = 0;  // data bytes
};

// Every record of a whole file: lengths and their checksums checked, and the
// records must tile the file exactly (a truncated last record is an error).
Result<std::vector<TfrecordSpan>> ScanTfrecord(std::span<const std::byte> file);

// The data of the record at `span` (an entry of ScanTfrecord) inside `file`,
// both checksums checked unless `verify` is false. `record` numbers it in errors.
Result<std::span<const std::byte>> ReadTfrecord(std::span<const std::byte> file,
                                                const TfrecordSpan& span, uint64_t record,
                                                bool verify);

// Appends one framed record to `out` (tests and fuzz seeds).
void AppendTfrecord(std::span<const std::byte> data, std::vector<std::byte>* out);

}  // namespace saturate::formats

#endif  // SATURATE_FORMATS_TFRECORD_H_
