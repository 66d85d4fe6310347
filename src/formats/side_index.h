// Sidecar indexes: where each member (tar) or record (TFRecord) of a data
// file lies, saved beside the file as `FILE.satidx` (or in the index folder;
// a remote object's only there, named by a hash of its URL) so the next
// Open() does not scan it again.
//
//   index   := magic "SATFIDX1" | version u32 | kind u32 | data_size u64 |
//              data_mtime_ns i64 | count u64 | entry* | tables | xxh3 u64 (of all before)
//   entry   := offset u64 | size u64 | name_length u32 | name bytes
//   tables  := (version 2) has u8 | [samples u64 | start u64 * (samples + 1) | blob]
// `tables` holds each sample's JPEG entry table (image/transform.h,
// IndexJpegEntries; empty where its image has none), back to back in
// `blob`; a version-1 index has none, and gets them when next opened.
//
// An index is used only when its checksum holds and the data file's size and
// mtime equal the stamped ones; otherwise it is rebuilt. Writes go to a
// unique temporary name and are renamed into place, so ranks building the
// same index at once never see a partial one.
//
// Thread-safety: pure functions; files are replaced atomically.
#ifndef SATURATE_FORMATS_SIDE_INDEX_H_
#define SATURATE_FORMATS_SIDE_INDEX_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "saturate/base/status.h"

namespace saturate::formats {

struct IndexEntry {
  std::string name;  // tar member name; empty for TFRecord
  uint64_t offset = 0;
  uint64_t size = 0;
};

struct FileIndex {
  uint32_t kind = 0;  // 1 tar, 2 TFRecord
  uint64_t data_size = 0;
  int64_t data_mtime_ns = 0;
  std::vector<IndexEntry> entries;
  // Per sample: its image's JPEG entry table is jpeg_tables[starts[s],
  // starts[s + 1]) (empty: none). Both empty until they are made. The
  // tables (2-6% of the images' bytes) stay where `storage` keeps them: a
  // mapped index file, shared by every process that reads it.
  bool has_jpeg_tables = false;
  std::span<const std::byte> jpeg_tables;
  std::vector<uint64_t> jpeg_table_starts;
  std::shared_ptr<const void> storage;

  std::span<const std::byte> JpegTable(uint64_t sample) const {
    if (!has_jpeg_tables || sample + 1 >= jpeg_table_starts.size()) return {};
    return std::span(jpeg_tables)
        .subspan(jpeg_table_starts[sample],
                 jpeg_table_starts[sample + 1] - jpeg_table_starts[sample]);
  }
};

std::string EncodeFileIndex(const FileIndex& index);
// Corruption (naming `source`) for anything malformed. The JPEG tables are
// a view into `bytes`: the caller keeps them alive (FileIndex::storage).
Result<FileIndex> DecodeFileIndex(std::span<const std::byte> bytes, const std::string& source);

// Where the index of `data_path` may live: beside it, then in `index_dir`
// (or the default cache directory when empty; see SourceOptions::index_dir).
std::vector<std::string> IndexCandidates(const std::string& data_path,
                                         const std::string& index_dir);

// Writes `index` to the first candidate that accepts it; false if none did.
bool SaveFileIndex(const FileIndex& index, const std::vector<std::string>& candidates);

// Lets one process at a time make missing indexes: an exclusive flock on
// `CANDIDATE.lock`, the first of `candidates` where that file can be made
// (it is left there, empty). The ranks of a node that open the same files
// at once then wait for the first one, and read what it saved instead of
// each scanning every file and decoding every image again. Released when
// destroyed or when the process ends, however it ends. Holds nothing where
// no lock file can be made or the file system has no flock: each process
// then builds, as without it (safe, only slower).
class IndexBuildLock {
 public:
  IndexBuildLock() = default;
  // Blocks until the lock is held (or known to be unavailable).
  static IndexBuildLock Acquire(const std::vector<std::string>& candidates);
  IndexBuildLock(IndexBuildLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  IndexBuildLock& operator=(IndexBuildLock&& other) noexcept;
  ~IndexBuildLock();

  bool held() const { return fd_ >= 0; }

 private:
  explicit IndexBuildLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace saturate::formats

#endif  // SATURATE_FORMATS_SIDE_INDEX_H_
