// File helpers used by every part that touches disk: crash-safe writes
// (temp file + fsync + rename + directory fsync) and read-only views of
// whole files (mmap, with a pread fallback when mapping is impossible).
//
// Ownership: WritableFile owns its descriptor and removes its temp file if it
// is destroyed before Commit(). ReadOnlyFile owns its mapping or descriptor.
// Thread-safety: WritableFile is single-threaded. ReadOnlyFile is immutable
// after Open() and safe to Read() from many threads at once.
#ifndef SATURATE_BASE_FILE_H_
#define SATURATE_BASE_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "saturate/base/status.h"

namespace saturate {

// Appends to `<path>.tmp`; Commit() fsyncs it, renames it to `path` and
// fsyncs the directory, so a reader sees either nothing or the whole file.
class WritableFile {
 public:
  // Fails with AlreadyExists if the temp file exists (another writer).
  static Result<std::unique_ptr<WritableFile>> Create(const std::string& path);
  ~WritableFile();
  WritableFile(const WritableFile&) = delete;
  WritableFile& operator=(const WritableFile&) = delete;

  Status Append(std::span<const std::byte> data);
  Status Append(std::string_view data) {
    return Append(std::as_bytes(std::span(data.data(), data.size())));
  }
  // Appends zero bytes until size() is a multiple of `alignment`.
  Status PadTo(uint64_t alignment);
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

  Status Commit();

 private:
  WritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string temp_path() const { return path_ + ".tmp"; }

  std::string path_;
  int fd_;
  uint64_t size_ = 0;
  bool committed_ = false;
};

// write(2) until all of `data` is written (retrying short writes and EINTR);
// errors name `path`.
Status WriteFully(int fd, std::span<const std::byte> data, const std::string& path);

// Writes `data` to `path` atomically (see WritableFile).
Status WriteFileAtomic(const std::string& path, std::string_view data);

// Reads a whole file into memory (for small files such as manifests).
Result<std::string> ReadFileToString(const std::string& path);

// fsync on a directory, so a rename or create inside it is durable.
Status SyncDir(const std::string& dir);

// A read-only whole-file view. Prefers mmap; if mapping fails (or
// `allow_mmap` is false) falls back to pread into caller scratch buffers.
class ReadOnlyFile {
 public:
  static Result<std::unique_ptr<ReadOnlyFile>> Open(const std::string& path,
                                                    bool allow_mmap = true);
  ~ReadOnlyFile();
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;

  uint64_t size() const { return size_; }
  bool mapped() const { return map_ != nullptr; }
  const std::string& path() const { return path_; }

  // Returns `n` bytes at `offset`: a view into the mapping when mapped(),
  // otherwise read into `scratch` (resized to n) and a view of it.
  // Fails with Corruption when the range lies outside the file.
  Result<std::span<const std::byte>> Read(uint64_t offset, uint64_t n,
                                          std::vector<std::byte>* scratch) const;

  // Hints that [offset, offset + n) is read soon: when mapped(), asks the
  // CPU to start loading those bytes into its caches, so a later Read of a
  // small, randomly placed record does not wait on memory. Bytes outside
  // the file are ignored; a no-op when not mapped().
  void Prefetch(uint64_t offset, uint64_t n) const;

 private:
  ReadOnlyFile(std::string path, int fd, uint64_t size, const std::byte* map)
      : path_(std::move(path)), fd_(fd), size_(size), map_(map) {}

  std::string path_;
  int fd_;
  uint64_t size_;
  const std::byte* map_;
};

}  // namespace saturate

#endif  // SATURATE_BASE_FILE_H_
