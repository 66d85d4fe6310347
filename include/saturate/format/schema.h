// Schema and Manifest: what a saturate dataset holds and where it lives.
//
// A dataset is a directory with `manifest.json` and shard files. The
// manifest records the format version, the schema (named, typed fields),
// class names, and each shard's file name, record count and byte size. It is
// written last by the writer, so a directory without it is not a dataset.
// See docs/record-format.md for the exact grammar.
//
// Thread-safety: plain values; const access from many threads is safe.
#ifndef SATURATE_FORMAT_SCHEMA_H_
#define SATURATE_FORMAT_SCHEMA_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "saturate/base/status.h"

namespace saturate::format {

// What one field of a record holds.
enum class FieldKind : uint8_t {
  kBytes,     // opaque bytes (strings, serialized blobs)
  kImage,     // an encoded image (JPEG or PNG)
  kInt64,     // one little-endian int64 (labels)
  kFloat32,   // one little-endian float32
  kArray,     // fixed-shape array: dtype + shape, e.g. uint8[28,28]
  kVarArray,  // variable-length 1-D array of dtype, e.g. int32 token ids
};

// Element type of array fields (little-endian).
// Values are stored in manifests: append only.
enum class DType : uint8_t { kUInt8, kInt32, kInt64, kFloat16, kFloat32, kBFloat16 };

std::string_view FieldKindName(FieldKind kind);  // "bytes", "image", "int64", ...
std::string_view DTypeName(DType dtype);         // "uint8", "int32", ...
size_t DTypeSize(DType dtype);
Result<FieldKind> ParseFieldKind(std::string_view name);
Result<DType> ParseDType(std::string_view name);

struct FieldSpec {
  std::string name;
  FieldKind kind = FieldKind::kBytes;
  DType dtype = DType::kUInt8;  // kArray and kVarArray only
  std::vector<int64_t> shape;   // kArray only

  // Payload size every record must have, or 0 when it varies (bytes, image, var arrays).
  uint64_t fixed_bytes() const;
  // Payloads of a kVarArray must be a multiple of this; 1 for other variable kinds.
  uint64_t element_bytes() const;
  // Byte alignment of the payload inside a shard (8 for scalars, 64 otherwise).
  uint64_t alignment() const;
  // "label: int64", "pixels: uint8[28,28]", "tokens: int32[]".
  std::string ToString() const;

  friend bool operator==(const FieldSpec&, const FieldSpec&) = default;
};

struct Schema {
  std::vector<FieldSpec> fields;

  // Index of the field called `name`, or NotFound naming the known fields.
  Result<size_t> FieldIndex(std::string_view name) const;
  // Non-empty, unique non-empty names, valid shapes (positive dims, < 2^40 bytes).
  Status Validate() const;

  friend bool operator==(const Schema&, const Schema&) = default;
};

struct ShardInfo {
  std::string file;  // relative to the dataset directory
  uint64_t records = 0;
  uint64_t bytes = 0;  // file size
  friend bool operator==(const ShardInfo&, const ShardInfo&) = default;
};

inline constexpr uint32_t kFormatVersion = 1;
inline constexpr std::string_view kManifestFile = "manifest.json";

struct Manifest {
  uint32_t format_version = kFormatVersion;
  Schema schema;
  std::vector<std::string> class_names;  // label id i is class_names[i]
  std::vector<ShardInfo> shards;
  std::map<std::string, std::string> metadata;  // free-form: source, tool version, ...

  uint64_t num_records() const;
  uint64_t num_bytes() const;
  friend bool operator==(const Manifest&, const Manifest&) = default;
};

// Pure JSON (de)serialization. Parse errors name `source` (usually the file
// path) and the offending key; every count and size is checked for sanity.
std::string SerializeManifest(const Manifest& manifest);
Result<Manifest> ParseManifest(std::string_view json, std::string_view source);

// Stable 64-bit fingerprint of the schema, stored in every shard header so a
// shard cannot be read under the wrong schema.
uint64_t SchemaFingerprint(const Schema& schema);

}  // namespace saturate::format

#endif  // SATURATE_FORMAT_SCHEMA_H_
