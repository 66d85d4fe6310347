// The shard file layout, shared by the writer, the reader and verify.
// docs/record-format.md is the specification; this header is its code.
//
//   shard  := header record* index footer
//   header := 64 bytes: magic "SATSHARD", version u32, num_fields u32,
//             schema_fingerprint u64, shard_id u32, alignment u32,
//             24 zero bytes, header_xxh3 u64 (of the 56 bytes before it)
//   record := field_table payloads, padded with zeros to a multiple of 64;
//             field_table := (offset u32, length u32) per field, offsets from
//             the record start; each payload at its field's alignment
//   index  := (offset u64, length u64, xxh3 u64) per record; `length` includes
//             the padding, so records tile [64, index_offset) exactly
//   footer := 40 bytes: index_offset u64, record_count u64, index_xxh3 u64,
//             footer_xxh3 u64 (of the 24 bytes before it), magic "SATSHEND"
//
// Every byte of a shard is covered by exactly one checksum, so any flipped
// byte is caught. All integers are little-endian.
//
// Thread-safety: pure functions over byte spans.
#ifndef SATURATE_FORMAT_SHARD_FORMAT_H_
#define SATURATE_FORMAT_SHARD_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "saturate/base/status.h"
#include "saturate/format/schema.h"

namespace saturate::format {

inline constexpr char kShardMagic[8] = {'S', 'A', 'T', 'S', 'H', 'A', 'R', 'D'};
inline constexpr char kFooterMagic[8] = {'S', 'A', 'T', 'S', 'H', 'E', 'N', 'D'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr uint64_t kHeaderBytes = 64;
inline constexpr uint64_t kFooterBytes = 40;
inline constexpr uint64_t kIndexEntryBytes = 24;
inline constexpr uint64_t kRecordAlign = 64;
inline constexpr uint64_t kFieldEntryBytes = 8;

struct ShardHeader {
  uint32_t version = kShardVersion;
  uint32_t num_fields = 0;
  uint64_t schema_fingerprint = 0;
  uint32_t shard_id = 0;
  uint32_t alignment = kRecordAlign;
};

struct ShardFooter {
  uint64_t index_offset = 0;
  uint64_t record_count = 0;
  uint64_t index_xxh3 = 0;
};

struct IndexEntry {
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t xxh3 = 0;
};

// A field's bytes inside a record: [offset, offset + length) from record start.
struct FieldEntry {
  uint32_t offset = 0;
  uint32_t length = 0;
};

uint64_t Checksum(std::span<const std::byte> bytes);

inline uint64_t AlignUp(uint64_t n, uint64_t align) { return (n + align - 1) / align * align; }

template <typename T>
inline T LoadLE(const std::byte* p) {  // x86-64 and aarch64 Linux are little-endian
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <typename T>
inline void StoreLE(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

void EncodeHeader(const ShardHeader& header, std::byte out[kHeaderBytes]);
void EncodeFooter(const ShardFooter& footer, std::byte out[kFooterBytes]);
void EncodeIndexEntry(const IndexEntry& entry, std::byte out[kIndexEntryBytes]);

// Decoders check magic, version and their own checksum. Messages say what is
// wrong; callers add the file name.
Result<ShardHeader> DecodeHeader(std::span<const std::byte> bytes);
Result<ShardFooter> DecodeFooter(std::span<const std::byte> bytes);
IndexEntry DecodeIndexEntry(const std::byte* p);

// Checks that a footer is consistent with the file size, and that an index
// entry lies inside the record area, is aligned, and follows `expected_offset`.
Status CheckFooterGeometry(const ShardFooter& footer, uint64_t file_size);
Status CheckIndexEntry(const IndexEntry& entry, uint64_t expected_offset, uint64_t index_offset);

// Checks a record's checksum against its index entry.
Status CheckRecordChecksum(std::span<const std::byte> record, const IndexEntry& entry);
// Checks a record's field table against the schema: payloads inside the
// record, aligned, sized as the schema says (cheap; done on every read).
Status CheckFieldTable(std::span<const std::byte> record, const Schema& schema);

inline FieldEntry ReadFieldEntry(const std::byte* record, size_t field) {
  const std::byte* p = record + field * kFieldEntryBytes;
  return FieldEntry{LoadLE<uint32_t>(p), LoadLE<uint32_t>(p + 4)};
}

// "shard-00042.srec"
std::string ShardFileName(uint32_t shard_id);

}  // namespace saturate::format

#endif  // SATURATE_FORMAT_SHARD_FORMAT_H_
