// BlockCache: a local directory of fixed-size blocks of remote objects, with
// a byte budget kept by evicting the least recently used blocks.
//
// A block is one file, `<dir>/<dataset>/<object>.<block>`, holding a 16-byte
// header ("SATBLK01", XXH3-64 of the payload) and the payload. Files are
// written to a unique temporary name and renamed into place, so a reader
// (this process, another rank of the node, or a later run) sees a whole
// block or none; a torn or flipped block fails its checksum, is removed and
// is reported as a miss (Corruption from Read), never served. Each block's
// checksum is checked the first time this process reads it; later reads of
// a part trust the page cache and leave corruption to the record checksums
// (the caller then calls Drop and fetches again).
//
// LRU accounting (LruAccounting, pure) starts from a scan of the directory
// (mtime order), so the budget holds across restarts. Ranks of a node share
// the directory: their own inserts are counted exactly, other ranks' are
// picked up by a rescan under an flock on `<dir>/.lock` whenever this
// process evicts, so the directory exceeds the budget by at most what other
// ranks wrote since their last rescan. A read-only directory serves what it
// holds; Insert then fails (the caller counts it and keeps the block in memory).
//
// Thread-safety: BlockCache is safe to use from many threads at once;
// LruAccounting is not (BlockCache guards it).
#ifndef SATURATE_REMOTE_BLOCK_CACHE_H_
#define SATURATE_REMOTE_BLOCK_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "saturate/base/status.h"

namespace saturate::remote {

class LruAccounting {
 public:
  explicit LruAccounting(uint64_t budget_bytes) : budget_bytes_(budget_bytes) {}
  // Marks `key` most recently used (no-op when absent).
  void Touch(const std::string& key);
  // Adds (or resizes) `key` as most recently used and returns the keys to
  // evict, least recently used first, so the total fits the budget again.
  // `key` itself is evicted only when it alone exceeds the budget.
  std::vector<std::string> Insert(const std::string& key, uint64_t bytes);
  // Adds (or resizes) `key` as most recently used without evicting.
  void Append(const std::string& key, uint64_t bytes);
  // The keys to evict, least recently used first, to fit the budget; keeps
  // `keep` unless it alone exceeds the budget.
  std::vector<std::string> EvictToFit(const std::string& keep);
  void Erase(const std::string& key);
  bool Contains(const std::string& key) const { return map_.count(key) != 0; }
  uint64_t total_bytes() const { return total_bytes_; }
  uint64_t budget_bytes() const { return budget_bytes_; }
  size_t size() const { return map_.size(); }
  void Clear();

 private:
  uint64_t budget_bytes_;
  uint64_t total_bytes_ = 0;
  std::list<std::pair<std::string, uint64_t>> lru_;  // front: least recently used
  std::unordered_map<std::string, std::list<std::pair<std::string, uint64_t>>::iterator> map_;
};

class BlockCache {
 public:
  static constexpr uint64_t kHeaderBytes = 16;

  // Creates `dir` when missing. A directory that cannot be created or
  // written still opens, read-only (writable() is false).
  static Result<std::unique_ptr<BlockCache>> Open(const std::string& dir, uint64_t budget_bytes);

  bool writable() const { return writable_; }
  const std::string& dir() const { return dir_; }
  bool Contains(const std::string& key) const;
  // Copies bytes [offset, offset + out.size()) of block `key` into `out`.
  // NotFound on a miss; Corruption (the file removed) when the block fails
  // its checksum or is shorter than asked.
  Status Read(const std::string& key, uint64_t offset, std::span<std::byte> out);
  // Stores a block (temp file + rename) and evicts to fit the budget.
  Status Insert(const std::string& key, std::span<const std::byte> payload);
  // Removes a block (e.g. one whose records failed their checksums).
  void Drop(const std::string& key);
  uint64_t evictions() const;
  uint64_t total_bytes() const;

 private:
  BlockCache(std::string dir, uint64_t budget_bytes, bool writable)
      : dir_(std::move(dir)), writable_(writable), lru_(budget_bytes) {}
  void RescanLocked();
  std::string PathOf(const std::string& key) const { return dir_ + "/" + key; }

  const std::string dir_;
  const bool writable_;
  mutable std::mutex mu_;
  LruAccounting lru_;
  std::unordered_set<std::string> verified_;  // checked by this process since it was stored
  uint64_t evictions_ = 0;
  uint64_t temp_counter_ = 0;
};

}  // namespace saturate::remote

#endif  // SATURATE_REMOTE_BLOCK_CACHE_H_
