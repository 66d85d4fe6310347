// RangeReader: byte ranges of the objects of a remote dataset, fetched ahead
// of use in the order the caller plans, through an optional local cache.
//
// The caller (format::Dataset, driven by the loader's sampler order) hands
// in the ranges it will read, in order (Plan). Background threads fetch
// ahead of the reads, at most `readahead_bytes` ahead of the last range
// read, with up to `requests` requests in flight; ranges that lie next to
// each other in an object and fall in the window together are fetched by
// one request (up to max_request_bytes). Read(range) returns the bytes,
// waiting for a fetch in progress, or fetching them itself when they were
// not planned.
//
// Without a cache directory the units fetched are the planned ranges
// themselves (a record is fetched once per read, so an epoch fetches the
// dataset's size). With one (BlockCache), the units are aligned blocks of
// `block_bytes`: a block is fetched once, stored, and later ranges inside it
// come from the cache -- across epochs, restarts and the ranks of a node.
// A cached block that fails its checksum is dropped and fetched again
// (counted in cache_checksum_failures); so is every block of a range the
// caller reports bad with Invalidate().
//
// Ownership: a RangeReader shares its ObjectStore and owns its threads and
// buffers; buffers returned by Read() are the caller's. Thread-safety: all
// methods may be called from any number of threads at once.
#ifndef SATURATE_REMOTE_RANGE_READER_H_
#define SATURATE_REMOTE_RANGE_READER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "saturate/base/status.h"
#include "saturate/remote/object_store.h"

namespace saturate::remote {

inline constexpr int kDefaultConcurrentRequests = 8;

struct RemoteOptions {
  std::string endpoint;          // S3 endpoint; empty: AWS_ENDPOINT_URL or AWS
  std::string cache_dir;         // empty: $SATURATE_CACHE_DIR, else no cache
  uint64_t cache_bytes = 0;      // 0: $SATURATE_CACHE_BYTES, else half the free space (<= 64 GiB)
  uint64_t readahead_bytes = 0;  // 0: 64 MiB
  int requests = 0;              // concurrent requests; 0: kDefaultConcurrentRequests
  uint64_t block_bytes = uint64_t{1} << 20;        // cache block size
  uint64_t max_request_bytes = uint64_t{8} << 20;  // coalescing stops here
  RetryOptions retry;
};

struct ObjectInfo {
  std::string name;  // relative to the store's prefix
  uint64_t bytes = 0;
};

struct ByteRange {
  uint32_t object = 0;  // index into the objects given to Open()
  uint64_t offset = 0;
  uint64_t length = 0;
};

class RangeReader {
 public:
  // `dataset_id` names the dataset's directory inside the cache (it must
  // change when the objects' bytes may have changed, e.g. a hash of the
  // location and the manifest).
  static Result<std::unique_ptr<RangeReader>> Open(std::shared_ptr<ObjectStore> store,
                                                   std::vector<ObjectInfo> objects,
                                                   std::string dataset_id,
                                                   const RemoteOptions& options);
  // Cancels the store's requests (ObjectStore::Cancel: the store must be this
  // reader's alone) and stops the fetch threads.
  ~RangeReader();
  RangeReader(const RangeReader&) = delete;
  RangeReader& operator=(const RangeReader&) = delete;

  // Appends ranges to the plan, or (replace) first drops the plan and what
  // was fetched for it but not read.
  void Plan(std::span<const ByteRange> ranges, bool replace);
  // The bytes of `range`, in a 64-byte-aligned buffer of range.length bytes.
  Result<std::shared_ptr<std::byte[]>> Read(const ByteRange& range);
  // The bytes Read() returned for `range` failed a check: forget any cached
  // copy so the next Read() fetches them again.
  void Invalidate(const ByteRange& range);

  bool cached() const;  // a cache directory is in use
  std::string cache_dir() const;
  const ObjectStore& store() const;
  const std::vector<ObjectInfo>& objects() const;
  RemoteStats stats() const;
  // The store's Cancel(): reads now and later end with Cancelled. Thread-safe.
  void Cancel();

 private:
  class Impl;
  explicit RangeReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Fills the zero fields of `options` from the environment and defaults.
RemoteOptions ResolveRemoteOptions(RemoteOptions options);

// Uploads the dataset directory `local_dir` to `url`: every shard (multipart
// when large), then manifest.json last, so readers see the dataset only once
// it is whole. An existing manifest at `url` is AlreadyExists unless
// `overwrite`, which deletes it first (readers then see no dataset, never a
// mix of old and new shards).
Status UploadDataset(const std::string& local_dir, const std::string& url, bool overwrite,
                     const StoreOptions& options = {});

// The store settings of a dataset upload: files larger than
// `multipart_threshold_bytes` go up in parts of that size, kept within S3's
// 5 MiB minimum part and 16 MiB.
StoreOptions UploadStoreOptions(const std::string& endpoint, uint64_t multipart_threshold_bytes);

}  // namespace saturate::remote

#endif  // SATURATE_REMOTE_RANGE_READER_H_
