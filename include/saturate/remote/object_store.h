// ObjectStore: the objects of one remote dataset location (an S3 bucket and
// prefix, or an HTTP(S) base URL), read by byte range and written whole.
//
// The libcurl implementation (OpenObjectStore) signs S3 requests with AWS
// SigV4, retries 5xx, 408/429, timeouts and dropped connections with
// exponential backoff and jitter (RetryOptions), and reports 403/404 as
// errors naming the bucket and key. HTTP(S) locations are read-only.
//
// Ownership: a store owns its connections. Thread-safety: every method may
// be called from any number of threads at once (each call takes its own
// connection from a pool); stats() is a snapshot of atomic counters.
#ifndef SATURATE_REMOTE_OBJECT_STORE_H_
#define SATURATE_REMOTE_OBJECT_STORE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "saturate/base/status.h"
#include "saturate/remote/url.h"

namespace saturate::remote {

// When a failed request is tried again (see retry.h for the policy).
struct RetryOptions {
  int max_attempts = 12;                 // tries per request, the first included
  uint64_t base_delay_ns = 100'000'000;  // the first backoff, doubled each retry
  uint64_t max_delay_ns = 5'000'000'000;
  uint64_t deadline_ns = 120'000'000'000;  // no retry starts after this long
};

struct StoreOptions {
  std::string endpoint;  // S3: overrides AWS_ENDPOINT_URL; see ResolveS3Config
  RetryOptions retry;
  uint64_t multipart_threshold_bytes = uint64_t{64} << 20;  // PutFile: larger uses multipart
  uint64_t part_bytes = uint64_t{16} << 20;                 // >= 5 MiB (S3's minimum part)
  int connect_timeout_ms = 5000;
  int stall_timeout_s = 30;  // a transfer slower than 1 byte/s for this long fails (and retries)
};

// Counters since the store (or reader) was opened. Latency is the sum over
// requests, first byte sent to last byte received, retries included.
struct RemoteStats {
  uint64_t requests = 0;  // HTTP requests that completed (any status), retries included
  uint64_t bytes_fetched = 0;
  uint64_t bytes_uploaded = 0;
  uint64_t retries = 0;
  uint64_t errors = 0;  // requests that failed for good
  uint64_t request_ns = 0;
  uint64_t in_flight = 0;  // requests running now
  // The range reader's local cache (zero without one).
  uint64_t cache_hits = 0;               // blocks read from the cache directory
  uint64_t cache_misses = 0;             // blocks fetched because the cache lacked them
  uint64_t cache_checksum_failures = 0;  // cached blocks that failed and were refetched
  uint64_t cache_write_errors = 0;       // blocks that could not be stored (e.g. read-only dir)
  uint64_t cache_evictions = 0;
};

struct ObjectStat {
  uint64_t bytes = 0;
  // What changes when the object is replaced: its ETag, else its
  // Last-Modified; empty when the server sends neither.
  std::string version;
};

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;
  const ObjectUrl& url() const { return url_; }
  // "s3://bucket/prefix/name": how errors name an object.
  std::string Describe(std::string_view name) const { return url_.Describe(name); }

  // `name` is relative to the location's prefix ("manifest.json").
  virtual Result<std::string> Get(std::string_view name) = 0;
  // The object's size and version (a HEAD request), without its bytes.
  virtual Result<ObjectStat> Stat(std::string_view name) = 0;
  // Exactly out.size() bytes at `offset`; Corruption when the object is shorter.
  virtual Status GetRange(std::string_view name, uint64_t offset, std::span<std::byte> out) = 0;
  // One PUT up to multipart_threshold_bytes, else a multipart upload straight
  // from `data` (parts of part_bytes; no copy).
  virtual Status Put(std::string_view name, std::span<const std::byte> data) = 0;
  // Uploads a local file: one PUT up to multipart_threshold_bytes, else a
  // multipart upload (the object appears whole when it completes).
  virtual Status PutFile(std::string_view name, const std::string& path) = 0;
  virtual Status Delete(std::string_view name) = 0;
  // Names (relative to the prefix) of the objects under it.
  virtual Result<std::vector<std::string>> List() = 0;

  RemoteStats stats() const;

  // Ends the requests running or waiting to retry now, and fails later ones,
  // with Cancelled within ~50 ms: for an owner shutting down while the server
  // is unreachable (a retrying request could otherwise hold it for minutes).
  // Thread-safe; cannot be undone.
  void Cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

 protected:
  explicit ObjectStore(ObjectUrl url) : url_(std::move(url)) {}
  struct Counters {
    std::atomic<uint64_t> requests{0}, bytes_fetched{0}, bytes_uploaded{0}, retries{0}, errors{0},
        request_ns{0}, in_flight{0};
  };
  Counters counters_;

 private:
  ObjectUrl url_;
  std::atomic<bool> cancelled_{false};
};

// A libcurl store for `url`; S3 configuration from ResolveS3Config(options.endpoint).
Result<std::unique_ptr<ObjectStore>> OpenObjectStore(const ObjectUrl& url,
                                                     const StoreOptions& options = {});

}  // namespace saturate::remote

#endif  // SATURATE_REMOTE_OBJECT_STORE_H_
