// formats::Source: random access to the samples of datasets in other
// formats, read where they lie: WebDataset tar shards and TFRecord files of
// tf.Example (docs/formats.md).
//
// A source is named by a pattern: brace ranges and lists, then globs
// (`laion-{000..009}.tar`, `train-*.tfrecord`); the format follows from the
// suffix (.tar, .tfrecord/.tfrecords, each optionally .gz) or a prefix
// (`webdataset:PATTERN`, `tfrecord:PATTERN`, for names without a suffix such
// as ImageNet's `train-00000-of-01024`). TFRecord keys may follow a '?':
// `train-*.tfrecord?image_key=jpeg&label_key=cls`.
//
// Open() finds each file's sidecar index (`FILE.satidx`: byte offsets of its
// members or records, stamped with the file's size and mtime) or builds it
// on first use, writing it beside the file, or into a cache directory when
// that folder is read-only. The samples then have global numbers, so
// shuffling, rank sharding and resume work as for packed datasets.
//
// Schema: WebDataset samples (consecutive members sharing a key) become
// `key` (bytes), `image` (.jpg/.jpeg/.png), `label` (int64, from .cls) and a
// bytes field per other extension, as the first samples have them. tf.Example
// features become `image` and `label` (the image and label keys) and one
// field per other feature: bytes, int64/float32 when every probed record has
// one value, else int64[]/float32[].
//
// The index also holds, per sample, its image's JPEG entry table (made
// after the offsets, in parallel, about one decode of each image; see
// SourceOptions::index_jpeg), so that such a JPEG is cut around its crop
// as a restart-marked one is. Indexes and tables missing are made by one
// process at a time (a lock file beside the first file's index): the ranks
// of a node opening the same files at once wait for the first one and read
// what it saved.
//
// Objects in a bucket (s3://, http(s)://) are read in place: each object's
// index is made from one whole read of it and kept in the index folder,
// stamped with its size and ETag; samples are then ranges fetched ahead in
// the loader's order (PlanReads; docs/remote.md).
//
// Uncompressed files are memory-mapped and stay open (Open() raises the
// soft limit on open files toward the hard one when there are many); gzip'd
// ones can only be packed (Open() says so). Errors name the file, the member or record, and the
// field.
//
// Ownership: a Sample's views point into the Source's mappings or into the
// Sample's own storage; they stay valid while both live.
// Thread-safety: a Source is immutable after Open(); Read() and Prefetch()
// may be called from any number of threads.
#ifndef SATURATE_FORMATS_SOURCE_H_
#define SATURATE_FORMATS_SOURCE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "saturate/base/status.h"
#include "saturate/format/schema.h"
#include "saturate/remote/range_reader.h"

namespace saturate::formats {

enum class SourceFormat { kWebDataset, kTfrecord };

class IndexBuildLock;  // src/formats/side_index.h

struct SourceOptions {
  std::string image_key = "image/encoded";      // TFRecord: the image's feature
  std::string label_key = "image/class/label";  // TFRecord: the label's feature ("" none)
  // Where indexes go when a data folder is read-only. "": $SATURATE_INDEX_DIR,
  // else $XDG_CACHE_HOME/saturate/index, else ~/.cache/saturate/index.
  std::string index_dir;
  bool write_index = true;  // false: build in memory only
  bool verify = true;       // TFRecord: check both CRCs on every read
  // With the index, make each image's JPEG entry table (about one decode of
  // each image, once; saved in the index): a JPEG without restart markers
  // is then decoded only around its crop. false (pattern key `jpeg_index=0`):
  // neither made nor used.
  bool index_jpeg = true;
  // Called as JPEG tables are made (samples done, samples to do), from the
  // threads making them, one call at a time.
  std::function<void(uint64_t done, uint64_t total)> progress;
  // Objects in a bucket: endpoint, cache directory, read-ahead, requests.
  remote::RemoteOptions remote;
};

// What a pattern names, before any file is opened.
struct SourceSpec {
  SourceFormat format = SourceFormat::kWebDataset;
  std::string pattern;             // without prefix and '?' keys
  std::vector<std::string> files;  // expanded, in order
  SourceOptions options;
  // An s3:// or http(s):// pattern: `files` is left empty; Source::Open (or
  // saturate pack, which fetches the objects) expands it against the
  // location (formats/pattern.h, ExpandRemotePattern).
  bool remote = false;
};

// True when `path` names a source (by prefix or suffix), not a saturate
// dataset directory. Cheap: no file system access.
bool IsSourcePattern(const std::string& path);

// Parses prefix and keys and expands the pattern (NotFound when it matches
// nothing). `defaults` gives the options the '?' keys do not set.
Result<SourceSpec> ParseSourceSpec(const std::string& path, const SourceOptions& defaults = {});

// True for a gzip'd file name (.gz, .tgz).
bool IsGzipName(const std::string& file);

// One sample: a view per schema field, in schema order (scalars as
// little-endian values, var arrays as packed elements, as in a record).
struct Sample {
  std::vector<std::span<const std::byte>> fields;
  std::vector<std::vector<std::byte>> owned;  // storage some views point into
  std::shared_ptr<const void> keep;           // other storage views point into
  // The image field's JPEG entry table (image/transform.h), if it has one;
  // it points into the Source.
  std::span<const std::byte> image_entries;
};

class Source {
 public:
  class Data;  // where a file's bytes are read (source.cc)

  // `schema`: use this schema instead of inferring one (packing many files
  // one at a time). `names`: what errors call each file (default: its path).
  static Result<std::unique_ptr<Source>> Open(const SourceSpec& spec,
                                              const format::Schema* schema = nullptr,
                                              const std::vector<std::string>* names = nullptr);
  static Result<std::unique_ptr<Source>> Open(const std::string& path,
                                              const SourceOptions& defaults = {});
  ~Source();
  Source(const Source&) = delete;
  Source& operator=(const Source&) = delete;

  SourceFormat format() const { return format_; }
  const format::Schema& schema() const { return schema_; }
  uint64_t size() const { return total_; }
  size_t num_files() const { return files_.size(); }
  const std::string& file_name(size_t f) const;
  uint64_t file_samples(size_t f) const;
  uint64_t file_bytes(size_t f) const;
  // Indexes found (true) or built (false) at Open(), per file.
  size_t indexes_built() const { return indexes_built_; }

  // Sample `index` in [0, size()). Corruption names the file, the member or
  // record and the field.
  Status Read(uint64_t index, Sample* sample) const;
  // "FILE: sample 'KEY'" or "FILE: record N".
  std::string Describe(uint64_t index) const;
  // Starts loading sample `index`'s first max_bytes into memory.
  void Prefetch(uint64_t index, uint64_t max_bytes) const;

  // Objects in a bucket (s3://, http(s)://): read by range, through a
  // remote::RangeReader that fetches ahead in the order PlanReads gives
  // (the loader's sampler order). The rest is a no-op for local files.
  bool remote() const;
  void PlanReads(std::span<const uint64_t> indices, bool replace) const;
  void CancelRemote() const;
  remote::RemoteStats remote_stats() const;

 private:
  struct File;
  Source() = default;
  // Expands a remote pattern, finds each object's size and version, and
  // opens the range reader; the files read through it.
  Status OpenRemote(const SourceSpec& spec, const std::vector<std::string>* names);
  // A remote object's index and JPEG tables, from one read of it whole.
  Status BuildRemote(File& file);
  // After the schema: the JPEG tables, taken or made under `lock` (Open's).
  static Result<std::unique_ptr<Source>> Finish(std::unique_ptr<Source> src, IndexBuildLock* lock);
  // Waits for the process making tables (IndexBuildLock) unless `lock` is
  // held already, then takes the tables it saved.
  void LoadJpegTablesAfterWait(IndexBuildLock* lock);
  void MakeJpegTables(const std::vector<File*>& files);
  // Sample `local`'s image bytes as the schema's image field reads them (the
  // first .jpg/.jpeg/.png member; the image_key feature); empty if none.
  Result<std::span<const std::byte>> ImageBytes(const File& file, uint64_t local,
                                                Sample* sample) const;
  // Where sample `local` lies in its file: (offset, bytes), from its first
  // member to the next sample's, or its TFRecord framing; the one range a
  // read of it asks for.
  std::pair<uint64_t, uint64_t> SampleSpan(const File& file, uint64_t local) const;
  std::pair<const File*, uint64_t> Locate(uint64_t index) const;
  Status ReadWebDataset(const File& file, uint64_t local, Sample* sample) const;
  Status ReadTfrecord(const File& file, uint64_t local, Sample* sample) const;

  SourceFormat format_ = SourceFormat::kWebDataset;
  SourceOptions options_;
  format::Schema schema_;
  std::vector<std::string> features_;  // TFRecord: the feature of each field
  std::vector<std::unique_ptr<File>> files_;
  std::vector<uint64_t> file_start_;
  uint64_t total_ = 0;
  size_t indexes_built_ = 0;
  size_t image_field_ = SIZE_MAX;  // the schema's image field, if any
  // Remote objects only: the store (whole reads while indexing) and the
  // reader of the samples' ranges.
  std::shared_ptr<remote::ObjectStore> store_;
  std::unique_ptr<remote::RangeReader> reader_;
};

}  // namespace saturate::formats

#endif  // SATURATE_FORMATS_SOURCE_H_
