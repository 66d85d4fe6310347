// Dataset: random access to the records of a saturate dataset.
//
// Open() reads the manifest, maps every shard (pread fallback when mapping is
// impossible), and checks each shard's header, footer and index. Get(i)
// returns record i (global index across shards) after checking its checksum
// and field table, so corrupt bytes are reported, never handed out as data.
//
// Remote datasets: `dir` may be an s3://bucket/prefix or http(s):// URL
// (docs/remote.md). Shards are then read by byte range through a
// remote::RangeReader; PlanReads() tells it the order records will be read
// in, so it fetches ahead and coalesces neighbours. Records are checked the
// same way; a record that fails its checksum is fetched once more, bypassing
// the local cache, before Corruption is reported (naming the object's URL).
//
// Datasets in other formats: `dir` may name WebDataset tar shards or TFRecord
// files (`laion-{000..009}.tar`, `train-*.tfrecord`; formats/source.h), read
// where they lie through a sidecar index. Get() then lays each sample out as
// a record (a copy) under the schema the source chose.
//
// Ownership: a Record's views point into the Dataset's mappings (or into a
// buffer the Record owns, in pread and remote mode); they stay valid while
// the Dataset lives. Thread-safety: a Dataset is immutable after Open() (its
// read-ahead plan aside, which is internally synchronized); Get(),
// PlanReads() and remote_stats() may be called from any number of threads.
#ifndef SATURATE_FORMAT_READER_H_
#define SATURATE_FORMAT_READER_H_

#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "saturate/base/status.h"
#include "saturate/format/schema.h"
#include "saturate/remote/range_reader.h"

namespace saturate {
class ReadOnlyFile;
}
namespace saturate::formats {
class Source;
}

namespace saturate::format {

struct ReaderOptions {
  bool use_mmap = true;  // false forces the pread path
  // Per-record XXH3 (and the field table's bounds) checked on Get(). A local
  // dataset checks each record the first time this Dataset reads it, not on
  // every epoch: saturate never rewrites a dataset file in place (a new file
  // is renamed over), and re-hashing small records cost ~15% of their read.
  // A record failing its check fails every read. Verify() checks them all.
  bool verify_checksums = true;
  remote::RemoteOptions remote;  // s3:// and http(s):// datasets only
  // WebDataset / TFRecord patterns: called while the first open makes the
  // sidecar index's JPEG tables (formats::SourceOptions::progress).
  std::function<void(uint64_t done, uint64_t total)> open_progress;
};

// One record: a view of its fields, decoded lazily from its field table.
class Record {
 public:
  Record() = default;
  uint64_t index() const { return index_; }
  size_t num_fields() const { return num_fields_; }
  std::span<const std::byte> field(size_t i) const;
  // Field i's JPEG entry table (image/transform.h), when the dataset's index
  // has one for it (datasets read where they lie); else empty.
  std::span<const std::byte> jpeg_entries(size_t i) const {
    return i == entries_field_ ? jpeg_entries_ : std::span<const std::byte>();
  }

  // Typed views; the caller must know the field's type from the schema.
  int64_t int64_at(size_t i) const { return Load<int64_t>(field(i)); }
  float float32_at(size_t i) const { return Load<float>(field(i)); }
  template <typename T>
  std::span<const T> array_at(size_t i) const {
    auto b = field(i);  // payloads are 64-byte aligned, so this cast is safe
    return {reinterpret_cast<const T*>(b.data()), b.size() / sizeof(T)};
  }

 private:
  friend class Dataset;
  template <typename T>
  static T Load(std::span<const std::byte> b) {
    T v{};
    std::memcpy(&v, b.data(), b.size() < sizeof(T) ? b.size() : sizeof(T));
    return v;
  }

  const std::byte* bytes_ = nullptr;
  size_t num_fields_ = 0;
  uint64_t index_ = 0;
  std::shared_ptr<std::byte[]> owned_;  // pread mode only
  size_t entries_field_ = SIZE_MAX;
  std::span<const std::byte> jpeg_entries_;  // points into the Dataset's source
};

class Dataset {
 public:
  static Result<std::unique_ptr<Dataset>> Open(const std::string& dir, ReaderOptions options = {});
  ~Dataset();
  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;

  const Manifest& manifest() const { return manifest_; }
  const Schema& schema() const { return manifest_.schema; }
  uint64_t size() const { return total_records_; }
  const std::string& dir() const { return dir_; }
  bool mapped() const;

  // Record `index` in [0, size()). Corruption names the shard, the record
  // number inside it and its byte offset.
  Result<Record> Get(uint64_t index) const;

  // Hints that Get(index) comes soon: for a memory-mapped dataset, starts
  // loading the record's first max_bytes into the CPU caches. Small records
  // read in random order are otherwise bound by memory latency. Does
  // nothing for an index out of range.
  void Prefetch(uint64_t index, uint64_t max_bytes) const;
  // Hints that Prefetch(index, ...) comes soon: starts loading the record's
  // index entry, which Prefetch reads (a cache miss of its own when records
  // are visited in random order). Does nothing for an index out of range.
  void PrefetchEntry(uint64_t index) const;

  // Remote datasets: records `indices` are read next, in this order
  // (appended to the plan, or replacing it). A no-op for local datasets.
  void PlanReads(std::span<const uint64_t> indices, bool replace) const;
  bool remote() const;  // read from object storage (a dataset or WebDataset/TFRecord objects)
  // Requests, bytes, retries and cache counters (zero for local datasets).
  remote::RemoteStats remote_stats() const;
  // Remote datasets: ends the requests running or retrying now and fails
  // later reads with Cancelled (for an owner shutting down while the server
  // is unreachable). Thread-safe; cannot be undone.
  void CancelRemote() const;
  // The WebDataset / TFRecord source a pattern named; null for saturate datasets.
  const formats::Source* source() const { return source_.get(); }

 private:
  struct Shard;
  // The shard holding record `index` (< size()) and the index within it.
  std::pair<const Shard*, uint64_t> Locate(uint64_t index) const;
  Dataset(std::string dir, Manifest manifest, ReaderOptions options);
  static Result<std::unique_ptr<Dataset>> OpenRemote(const std::string& url, ReaderOptions options);
  Result<Record> GetRemote(uint64_t index, const Shard& shard, uint64_t local) const;
  static Result<std::unique_ptr<Dataset>> OpenSource(const std::string& pattern,
                                                     ReaderOptions options);
  Result<Record> GetSource(uint64_t index) const;
  bool Verified(uint64_t index) const;
  void MarkVerified(uint64_t index) const;

  std::string dir_;
  Manifest manifest_;
  ReaderOptions options_;
  std::vector<Shard> shards_;
  std::vector<uint64_t> shard_start_;  // global index of each shard's first record
  uint64_t total_records_ = 0;
  std::unique_ptr<remote::RangeReader> remote_;  // remote datasets only
  std::unique_ptr<formats::Source> source_;      // WebDataset / TFRecord only
  // Local datasets with verify_checksums: one bit per record whose checks
  // passed (null past kMaxVerifiedRecords: every Get() checks then).
  std::unique_ptr<std::atomic<uint64_t>[]> verified_;
};

}  // namespace saturate::format

#endif  // SATURATE_FORMAT_READER_H_
