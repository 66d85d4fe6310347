#include "format/shard_format.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstdio>

namespace saturate::format {
namespace {

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

uint64_t Checksum(std::span<const std::byte> bytes) {
  return XXH3_64bits(bytes.data(), bytes.size());
}

void EncodeHeader(const ShardHeader& h, std::byte out[kHeaderBytes]) {
  std::memset(out, 0, kHeaderBytes);
  std::memcpy(out, kShardMagic, 8);
  StoreLE<uint32_t>(out + 8, h.version);
  StoreLE<uint32_t>(out + 12, h.num_fields);
  StoreLE<uint64_t>(out + 16, h.schema_fingerprint);
  StoreLE<uint32_t>(out + 24, h.shard_id);
  StoreLE<uint32_t>(out + 28, h.alignment);
  StoreLE<uint64_t>(out + 56, Checksum(std::span<const std::byte>(out, 56)));
}

void EncodeFooter(const ShardFooter& f, std::byte out[kFooterBytes]) {
  StoreLE<uint64_t>(out, f.index_offset);
  StoreLE<uint64_t>(out + 8, f.record_count);
  StoreLE<uint64_t>(out + 16, f.index_xxh3);
  StoreLE<uint64_t>(out + 24, Checksum(std::span<const std::byte>(out, 24)));
  std::memcpy(out + 32, kFooterMagic, 8);
}

void EncodeIndexEntry(const IndexEntry& e, std::byte out[kIndexEntryBytes]) {
  StoreLE<uint64_t>(out, e.offset);
  StoreLE<uint64_t>(out + 8, e.length);
  StoreLE<uint64_t>(out + 16, e.xxh3);
}

Result<ShardHeader> DecodeHeader(std::span<const std::byte> b) {
  if (b.size() < kHeaderBytes) return Status::Corruption("shard shorter than its 64-byte header");
  if (std::memcmp(b.data(), kShardMagic, 8) != 0) {
    return Status::Corruption("bad magic at offset 0 (not a saturate shard)");
  }
  uint64_t stored = LoadLE<uint64_t>(b.data() + 56);
  if (stored != Checksum(b.first(56)))
    return Status::Corruption("header checksum mismatch at offset 0");
  ShardHeader h;
  h.version = LoadLE<uint32_t>(b.data() + 8);
  h.num_fields = LoadLE<uint32_t>(b.data() + 12);
  h.schema_fingerprint = LoadLE<uint64_t>(b.data() + 16);
  h.shard_id = LoadLE<uint32_t>(b.data() + 24);
  h.alignment = LoadLE<uint32_t>(b.data() + 28);
  if (h.version != kShardVersion) {
    return Status::Corruption("unsupported shard version " + std::to_string(h.version) +
                              " (this build reads version " + std::to_string(kShardVersion) + ")");
  }
  if (h.alignment != kRecordAlign) {
    return Status::Corruption("unsupported record alignment " + std::to_string(h.alignment));
  }
  return h;
}

Result<ShardFooter> DecodeFooter(std::span<const std::byte> b) {
  if (b.size() < kFooterBytes) return Status::Corruption("shard shorter than its footer");
  const std::byte* p = b.data() + b.size() - kFooterBytes;
  uint64_t footer_offset = b.size() - kFooterBytes;
  if (std::memcmp(p + 32, kFooterMagic, 8) != 0) {
    return Status::Corruption("bad footer magic at offset " + std::to_string(footer_offset + 32) +
                              " (truncated or incomplete shard)");
  }
  if (LoadLE<uint64_t>(p + 24) != Checksum(std::span<const std::byte>(p, 24))) {
    return Status::Corruption("footer checksum mismatch at offset " +
                              std::to_string(footer_offset));
  }
  return ShardFooter{LoadLE<uint64_t>(p), LoadLE<uint64_t>(p + 8), LoadLE<uint64_t>(p + 16)};
}

IndexEntry DecodeIndexEntry(const std::byte* p) {
  return IndexEntry{LoadLE<uint64_t>(p), LoadLE<uint64_t>(p + 8), LoadLE<uint64_t>(p + 16)};
}

Status CheckFooterGeometry(const ShardFooter& f, uint64_t file_size) {
  // Division first so a huge record_count cannot overflow the product.
  if (f.index_offset < kHeaderBytes || f.index_offset % kRecordAlign != 0 ||
      f.index_offset > file_size || f.record_count > file_size / kIndexEntryBytes ||
      f.index_offset + f.record_count * kIndexEntryBytes + kFooterBytes != file_size) {
    return Status::Corruption("footer geometry does not match file size " +
                              std::to_string(file_size) + " (index_offset " +
                              std::to_string(f.index_offset) + ", records " +
                              std::to_string(f.record_count) + ")");
  }
  return Status::OK();
}

Status CheckIndexEntry(const IndexEntry& e, uint64_t expected_offset, uint64_t index_offset) {
  if (e.offset != expected_offset || e.length == 0 || e.length % kRecordAlign != 0 ||
      e.length > index_offset - e.offset) {
    return Status::Corruption("bad index entry (offset " + std::to_string(e.offset) + ", length " +
                              std::to_string(e.length) + ", expected offset " +
                              std::to_string(expected_offset) + ")");
  }
  return Status::OK();
}

Status CheckRecordChecksum(std::span<const std::byte> record, const IndexEntry& entry) {
  uint64_t actual = Checksum(record);
  if (actual != entry.xxh3) {
    return Status::Corruption("record checksum mismatch (stored " + Hex(entry.xxh3) +
                              ", computed " + Hex(actual) + ")");
  }
  return Status::OK();
}

Status CheckFieldTable(std::span<const std::byte> record, const Schema& schema) {
  const size_t n = schema.fields.size();
  const uint64_t table_bytes = n * kFieldEntryBytes;
  if (record.size() < table_bytes) return Status::Corruption("record shorter than field table");
  for (size_t i = 0; i < n; ++i) {
    const FieldSpec& spec = schema.fields[i];
    FieldEntry f = ReadFieldEntry(record.data(), i);
    auto bad = [&](std::string_view what) {
      return Status::Corruption("field '" + spec.name + "': " + std::string(what) + " (offset " +
                                std::to_string(f.offset) + ", length " + std::to_string(f.length) +
                                ")");
    };
    if (f.offset < table_bytes || uint64_t{f.offset} + f.length > record.size()) {
      return bad("payload outside the record");
    }
    if (f.offset % spec.alignment() != 0) return bad("misaligned payload");
    if (spec.fixed_bytes() != 0 && f.length != spec.fixed_bytes()) {
      return bad("size differs from schema " + std::to_string(spec.fixed_bytes()));
    }
    if (f.length % spec.element_bytes() != 0) return bad("not a whole number of elements");
  }
  return Status::OK();
}

std::string ShardFileName(uint32_t shard_id) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "shard-%05u.srec", shard_id);
  return buf;
}

}  // namespace saturate::format
