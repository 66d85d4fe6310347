// DatasetWriter: streams records into shard files and writes the manifest.
//
// Records are appended in order; a shard is closed (index + footer, fsync,
// rename from .tmp) when it reaches the target size, and the manifest is
// written last by Finish(). Until Finish() returns OK the directory holds no
// manifest, so an interrupted write never looks like a complete dataset.
//
// Ownership: the writer owns its open shard file. Destroying it without
// Finish() leaves only committed shards and no manifest.
// Thread-safety: not thread-safe; one thread appends.
#ifndef SATURATE_FORMAT_WRITER_H_
#define SATURATE_FORMAT_WRITER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "saturate/base/status.h"
#include "saturate/format/schema.h"

namespace saturate::format {

struct WriterOptions {
  uint64_t shard_bytes = uint64_t{256} << 20;  // roll to a new shard past this size
  std::vector<std::string> class_names;
  std::map<std::string, std::string> metadata;
};

// Views one field's payload as bytes (for scalars and arrays).
template <typename T>
std::span<const std::byte> AsBytes(const T& value) {
  return std::as_bytes(std::span<const T>(&value, 1));
}
template <typename T>
std::span<const std::byte> AsBytes(std::span<const T> values) {
  return std::as_bytes(values);
}

class DatasetWriter {
 public:
  // `dir` must exist and must not already hold a manifest.
  static Result<std::unique_ptr<DatasetWriter>> Create(const std::string& dir, Schema schema,
                                                       WriterOptions options = {});
  ~DatasetWriter();
  DatasetWriter(const DatasetWriter&) = delete;
  DatasetWriter& operator=(const DatasetWriter&) = delete;

  // One payload per schema field, in schema order. Sizes are checked against
  // the schema (InvalidArgument naming the field and the record number).
  Status Append(std::span<const std::span<const std::byte>> fields);

  // Closes the last shard and writes the manifest. The writer is done after.
  Status Finish();

  uint64_t records_written() const { return records_; }
  uint64_t bytes_written() const;  // committed shards plus the open one
  const Manifest& manifest() const { return manifest_; }

 private:
  class Shard;
  DatasetWriter(std::string dir, Manifest manifest, uint64_t shard_bytes);
  Status CloseShard();

  std::string dir_;
  Manifest manifest_;
  uint64_t shard_bytes_;
  uint64_t fingerprint_;
  uint64_t records_ = 0;
  bool finished_ = false;
  std::unique_ptr<Shard> shard_;
  std::vector<std::byte> record_buf_;
};

}  // namespace saturate::format

#endif  // SATURATE_FORMAT_WRITER_H_
