#include "saturate/remote/range_reader.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "base/thread_name.h"
#include "remote/block_cache.h"

namespace saturate::remote {
namespace {

constexpr uint64_t kAlign = 64;

std::shared_ptr<std::byte[]> AlignedBuffer(uint64_t bytes) {
  return std::shared_ptr<std::byte[]>(
      new (std::align_val_t{kAlign}) std::byte[std::max<uint64_t>(bytes, 1)],
      [](std::byte* p) { ::operator delete[](p, std::align_val_t{kAlign}); });
}

// A unit's identity: object index and offset (objects below 1 TiB).
uint64_t KeyOf(uint32_t object, uint64_t offset) { return (uint64_t{object} << 40) | offset; }
uint32_t ObjectOf(uint64_t key) { return static_cast<uint32_t>(key >> 40); }
uint64_t OffsetOf(uint64_t key) { return key & ((uint64_t{1} << 40) - 1); }

uint64_t EnvBytes(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return 0;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 10);
  return end != v ? n : 0;
}

}  // namespace

RemoteOptions ResolveRemoteOptions(RemoteOptions o) {
  if (o.cache_dir.empty()) {
    const char* d = std::getenv("SATURATE_CACHE_DIR");
    if (d != nullptr) o.cache_dir = d;
  }
  if (o.cache_bytes == 0) o.cache_bytes = EnvBytes("SATURATE_CACHE_BYTES");
  if (o.cache_bytes == 0 && !o.cache_dir.empty()) {
    o.cache_bytes = uint64_t{64} << 30;
    struct statvfs fs;
    std::error_code ec;
    std::filesystem::create_directories(o.cache_dir, ec);
    if (::statvfs(o.cache_dir.c_str(), &fs) == 0) {
      o.cache_bytes = std::min(o.cache_bytes, uint64_t{fs.f_bavail} * fs.f_frsize / 2);
    }
  }
  if (o.readahead_bytes == 0) o.readahead_bytes = uint64_t{64} << 20;
  if (o.requests <= 0) o.requests = kDefaultConcurrentRequests;
  if (o.block_bytes == 0) o.block_bytes = uint64_t{1} << 20;
  if (o.max_request_bytes < o.block_bytes) o.max_request_bytes = o.block_bytes;
  return o;
}

class RangeReader::Impl {
 public:
  Impl(std::shared_ptr<ObjectStore> store, std::vector<ObjectInfo> objects, std::string dataset_id,
       RemoteOptions options, std::unique_ptr<BlockCache> cache)
      : store_(std::move(store)),
        objects_(std::move(objects)),
        dataset_id_(std::move(dataset_id)),
        options_(std::move(options)),
        cache_(std::move(cache)),
        mem_lru_(options_.readahead_bytes) {
    for (int i = 0; i < options_.requests; ++i) {
      threads_.emplace_back([this, i] {
        base::NameThisThread("fetch-" + std::to_string(i));
        FetchLoop();
      });
    }
  }

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    Cancel();  // a fetch retrying against a dead server ends now, not in minutes
    work_cv_.notify_all();
    done_cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  void Cancel() { store_->Cancel(); }

  void Plan(std::span<const ByteRange> ranges, bool replace) {
    std::lock_guard<std::mutex> lock(mu_);
    if (replace) {
      ++generation_;
      plan_base_ += plan_.size();
      plan_.clear();
      admit_ = consumed_ = plan_base_;
      positions_.clear();
      wanted_.clear();
      wanted_order_.clear();
      ready_.clear();
      pending_uses_.clear();
      ahead_bytes_ = 0;
    }
    for (const ByteRange& r : ranges) {
      positions_.emplace(KeyOf(r.object, r.offset), plan_base_ + plan_.size());
      plan_.push_back({r, 0});
    }
    AdmitLocked();
    work_cv_.notify_all();
    done_cv_.notify_all();  // a replaced plan drops keys readers may wait on
  }

  Result<std::shared_ptr<std::byte[]>> Read(const ByteRange& r) {
    if (r.object >= objects_.size() || r.offset + r.length > objects_[r.object].bytes) {
      return Status::InvalidArgument("range outside object");
    }
    return cache_ ? ReadBlocks(r) : ReadRecord(r);
  }

  void Invalidate(const ByteRange& r) {
    if (!cache_) return;
    for (uint64_t b = r.offset / options_.block_bytes * options_.block_bytes;
         b < r.offset + r.length; b += options_.block_bytes) {
      cache_->Drop(BlockName(r.object, b));
      std::lock_guard<std::mutex> lock(mu_);
      mem_blocks_.erase(KeyOf(r.object, b));
      mem_lru_.Erase(std::to_string(KeyOf(r.object, b)));
      ++checksum_failures_;
    }
  }

  bool cached() const { return cache_ != nullptr; }
  std::string cache_dir() const { return cache_ ? cache_->dir() : std::string(); }
  const ObjectStore& store() const { return *store_; }
  const std::vector<ObjectInfo>& objects() const { return objects_; }

  RemoteStats stats() const {
    RemoteStats s = store_->stats();
    std::lock_guard<std::mutex> lock(mu_);
    s.cache_hits = hits_;
    s.cache_misses = misses_;
    s.cache_checksum_failures = checksum_failures_;
    s.cache_write_errors = write_errors_;
    s.cache_evictions = cache_ ? cache_->evictions() : 0;
    return s;
  }

 private:
  struct PlanEntry {
    ByteRange range;
    uint64_t charged = 0;  // bytes requested ahead for it (released when read)
    bool read = false;
  };
  // Plan entries this far behind the furthest read are taken as skipped.
  static constexpr uint64_t kSkipSlack = 4096;
  struct Ready {
    std::shared_ptr<std::byte[]> bytes;
    uint64_t length = 0;
    int uses = 1;
  };
  struct Job {
    uint32_t object = 0;
    uint64_t offset = 0, length = 0;
    std::vector<std::pair<uint64_t, uint64_t>> parts;  // (key, length)
  };

  std::string BlockName(uint32_t object, uint64_t block_offset) const {
    return dataset_id_ + "/" + objects_[object].name + "." +
           std::to_string(block_offset / options_.block_bytes);
  }
  uint64_t BlockLength(uint32_t object, uint64_t block_offset) const {
    return std::min(options_.block_bytes, objects_[object].bytes - block_offset);
  }

  // Marks the plan position of `key` read and releases the window behind it.
  void ConsumeLocked(uint64_t key) {
    // The earliest unread position of `key` (a record is planned more than
    // once only near epoch ends: padding, or the next epoch's plan).
    auto [first, last] = positions_.equal_range(key);
    if (first == last) return;
    auto it = first;
    for (auto j = first; j != last; ++j) {
      if (j->second < it->second) it = j;
    }
    const uint64_t pos = it->second;
    positions_.erase(it);
    consumed_ = std::max(consumed_, pos + 1);
    // Reads arrive a little out of order (several workers), so an entry is
    // released when it is read, and an unread one only once it is far behind.
    PlanEntry& read = plan_[pos - plan_base_];
    read.read = true;
    ahead_bytes_ -= std::min(ahead_bytes_, read.charged);
    read.charged = 0;
    while (!plan_.empty() && (plan_.front().read || plan_base_ + kSkipSlack < consumed_)) {
      const PlanEntry& e = plan_.front();
      if (!e.read) {  // skipped, never read (e.g. drop_last): drop what was fetched for it
        if (plan_base_ < admit_) ahead_bytes_ -= std::min(ahead_bytes_, e.charged);
        const uint64_t skipped = KeyOf(e.range.object, e.range.offset);
        auto [from, to] = positions_.equal_range(skipped);
        for (auto p = from; p != to; ++p) {
          if (p->second == plan_base_) {
            positions_.erase(p);
            break;
          }
        }
        auto r = ready_.find(skipped);
        if (r != ready_.end() && --r->second.uses <= 0) ready_.erase(r);
        if (!cache_ && positions_.count(skipped) == 0) wanted_.erase(skipped);
      }
      plan_.pop_front();
      ++plan_base_;
    }
    admit_ = std::max(admit_, plan_base_);
    if (AdmitLocked()) work_cv_.notify_all();
  }

  bool HaveBlockLocked(uint64_t key) const {
    return mem_blocks_.count(key) != 0 ||
           (cache_->Contains(BlockName(ObjectOf(key), OffsetOf(key))));
  }

  // Admits plan entries into the window: the units they need that are not
  // here, in flight or wanted already become wanted.
  // Returns whether new units became wanted.
  bool AdmitLocked() {
    const size_t before = wanted_order_.size();
    while (admit_ < plan_base_ + plan_.size() && ahead_bytes_ < options_.readahead_bytes) {
      PlanEntry& e = plan_[admit_ - plan_base_];
      if (e.read) {  // a reader got here first
        ++admit_;
        continue;
      }
      const ByteRange& r = e.range;
      if (!cache_) {
        const uint64_t key = KeyOf(r.object, r.offset);
        if (auto it = ready_.find(key); it != ready_.end()) {
          ++it->second.uses;
        } else if (inflight_.count(key) != 0 || wanted_.count(key) != 0) {
          ++pending_uses_[key];
        } else {
          wanted_[key] = r.length;
          wanted_order_.push_back(key);
          e.charged = r.length;
        }
      } else {
        for (uint64_t b = r.offset / options_.block_bytes * options_.block_bytes;
             b < r.offset + r.length; b += options_.block_bytes) {
          const uint64_t key = KeyOf(r.object, b);
          if (inflight_.count(key) || wanted_.count(key) || HaveBlockLocked(key)) continue;
          const uint64_t len = BlockLength(r.object, b);
          wanted_[key] = len;
          wanted_order_.push_back(key);
          e.charged += len;
        }
      }
      ahead_bytes_ += e.charged;
      ++admit_;
    }
    return wanted_order_.size() > before;
  }

  // The next request: the first wanted unit, with the wanted units that
  // follow it in the same object, up to max_request_bytes.
  bool NextJobLocked(Job* job) {
    AdmitLocked();
    while (!wanted_order_.empty()) {
      const uint64_t key = wanted_order_.front();
      wanted_order_.pop_front();
      auto it = wanted_.find(key);
      if (it == wanted_.end()) continue;  // taken by a coalesced request or a reader
      *job = Job{ObjectOf(key), OffsetOf(key), 0, {}};
      while (it != wanted_.end() && ObjectOf(it->first) == job->object &&
             OffsetOf(it->first) == job->offset + job->length &&
             (job->length == 0 || job->length + it->second <= options_.max_request_bytes)) {
        job->parts.emplace_back(it->first, it->second);
        job->length += it->second;
        inflight_.insert(it->first);
        it = wanted_.erase(it);
      }
      return true;
    }
    return false;
  }

  void FetchLoop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      Job job;
      work_cv_.wait(lock, [&] { return stop_ || NextJobLocked(&job); });
      if (stop_) {
        for (const auto& [key, len] : job.parts) inflight_.erase(key);
        return;
      }
      const uint64_t generation = generation_;
      lock.unlock();
      auto buffer = AlignedBuffer(job.length);
      Status s = store_->GetRange(objects_[job.object].name, job.offset,
                                  std::span<std::byte>(buffer.get(), job.length));
      std::vector<std::pair<uint64_t, std::shared_ptr<std::vector<std::byte>>>> unstored;
      if (s.ok() && cache_) {
        for (const auto& [key, len] : job.parts) {
          const auto part =
              std::span<const std::byte>(buffer.get() + (OffsetOf(key) - job.offset), len);
          if (!cache_->Insert(BlockName(job.object, OffsetOf(key)), part).ok()) {
            unstored.emplace_back(
                key, std::make_shared<std::vector<std::byte>>(part.begin(), part.end()));
          }
        }
      }
      lock.lock();
      for (const auto& [key, len] : job.parts) {
        inflight_.erase(key);
        if (!s.ok()) continue;  // a reader fetches it again and reports the error
        if (cache_) {
          ++misses_;
          fetched_.insert(key);
        } else if (generation == generation_) {
          int uses = 1;
          if (auto p = pending_uses_.find(key); p != pending_uses_.end()) {
            uses += p->second;
            pending_uses_.erase(p);
          }
          ready_[key] = Ready{
              std::shared_ptr<std::byte[]>(buffer, buffer.get() + (OffsetOf(key) - job.offset)),
              len, uses};
        }
      }
      for (auto& [key, bytes] : unstored) {
        ++write_errors_;
        PutMemLocked(key, std::move(bytes));
      }
      done_cv_.notify_all();
    }
  }

  void PutMemLocked(uint64_t key, std::shared_ptr<std::vector<std::byte>> bytes) {
    for (const std::string& k : mem_lru_.Insert(std::to_string(key), bytes->size())) {
      mem_blocks_.erase(std::stoull(k));
    }
    if (mem_lru_.Contains(std::to_string(key))) mem_blocks_[key] = std::move(bytes);
  }

  Result<std::shared_ptr<std::byte[]>> ReadRecord(const ByteRange& r) {
    const uint64_t key = KeyOf(r.object, r.offset);
    std::unique_lock<std::mutex> lock(mu_);
    ConsumeLocked(key);
    while (true) {
      if (auto it = ready_.find(key); it != ready_.end() && it->second.length == r.length) {
        auto bytes = it->second.bytes;
        if (--it->second.uses <= 0) ready_.erase(it);
        return bytes;
      }
      // Requested or queued (the fetchers take the queue in plan order, so
      // it is near the front): wait for it.
      if (inflight_.count(key) == 0 && wanted_.count(key) == 0) break;
      done_cv_.wait(lock);
    }
    inflight_.insert(key);  // not planned (or beyond the window): fetch it here
    lock.unlock();
    auto buffer = AlignedBuffer(r.length);
    Status s = store_->GetRange(objects_[r.object].name, r.offset,
                                std::span<std::byte>(buffer.get(), r.length));
    lock.lock();
    inflight_.erase(key);
    done_cv_.notify_all();
    if (!s.ok()) return s;
    return buffer;
  }

  Result<std::shared_ptr<std::byte[]>> ReadBlocks(const ByteRange& r) {
    auto out = AlignedBuffer(r.length);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ConsumeLocked(KeyOf(r.object, r.offset));
    }
    for (uint64_t b = r.offset / options_.block_bytes * options_.block_bytes;
         b < r.offset + r.length; b += options_.block_bytes) {
      const uint64_t key = KeyOf(r.object, b);
      const uint64_t from = std::max(b, r.offset);
      const uint64_t to = std::min(b + options_.block_bytes, r.offset + r.length);
      std::span<std::byte> part(out.get() + (from - r.offset), to - from);
      SATURATE_RETURN_IF_ERROR(ReadBlockPart(r.object, b, key, from - b, part));
    }
    return out;
  }

  Status ReadBlockPart(uint32_t object, uint64_t block, uint64_t key, uint64_t offset,
                       std::span<std::byte> part) {
    const std::string name = BlockName(object, block);
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return inflight_.count(key) == 0 && wanted_.count(key) == 0; });
    if (auto it = mem_blocks_.find(key); it != mem_blocks_.end()) {
      std::memcpy(part.data(), it->second->data() + offset, part.size());
      return Status::OK();
    }
    const bool first_use = seen_.insert(key).second;
    const bool fetched_here = fetched_.count(key) != 0;
    lock.unlock();
    Status s = cache_->Read(name, offset, part);
    lock.lock();
    if (s.ok()) {
      if (first_use && !fetched_here) ++hits_;
      return Status::OK();
    }
    if (s.code() == StatusCode::kCorruption) ++checksum_failures_;
    // Fetch the whole block ourselves (unless another thread started to).
    if (inflight_.count(key) != 0) {
      lock.unlock();
      return ReadBlockPart(object, block, key, offset, part);
    }
    inflight_.insert(key);
    lock.unlock();
    const uint64_t len = BlockLength(object, block);
    auto bytes = std::make_shared<std::vector<std::byte>>(len);
    s = store_->GetRange(objects_[object].name, block, *bytes);
    bool stored = false;
    if (s.ok()) stored = cache_->Insert(name, *bytes).ok();
    lock.lock();
    inflight_.erase(key);
    done_cv_.notify_all();
    SATURATE_RETURN_IF_ERROR(s);
    ++misses_;
    fetched_.insert(key);
    std::memcpy(part.data(), bytes->data() + offset, part.size());
    if (!stored) {
      ++write_errors_;
      PutMemLocked(key, std::move(bytes));
    }
    return Status::OK();
  }

  const std::shared_ptr<ObjectStore> store_;
  const std::vector<ObjectInfo> objects_;
  const std::string dataset_id_;
  const RemoteOptions options_;
  const std::unique_ptr<BlockCache> cache_;
  std::vector<std::thread> threads_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // fetchers: new wanted units (or stop)
  std::condition_variable done_cv_;  // readers: a fetch ended, or the plan changed
  bool stop_ = false;
  std::deque<PlanEntry> plan_;
  uint64_t generation_ = 0;  // Plan(replace) calls so far
  uint64_t plan_base_ = 0;   // plan position of plan_.front()
  uint64_t admit_ = 0;       // first plan position not yet admitted to the window
  uint64_t consumed_ = 0;    // one past the furthest plan position read
  uint64_t ahead_bytes_ = 0;
  // Unit key -> an unread plan position (a multimap: a node per entry, where
  // a deque per key cost over 500 bytes per planned record).
  std::unordered_multimap<uint64_t, uint64_t> positions_;
  std::map<uint64_t, uint64_t> wanted_;  // unit key -> length, not yet requested
  std::deque<uint64_t> wanted_order_;    // the same keys in plan order
  std::unordered_set<uint64_t> inflight_;
  std::unordered_map<uint64_t, Ready> ready_;  // records mode: fetched, not yet read
  std::unordered_map<uint64_t, int> pending_uses_;
  // Blocks mode: blocks the cache could not store, kept in memory (LRU).
  std::unordered_map<uint64_t, std::shared_ptr<std::vector<std::byte>>> mem_blocks_;
  LruAccounting mem_lru_;
  std::unordered_set<uint64_t> seen_, fetched_;  // blocks read / fetched by this process
  uint64_t hits_ = 0, misses_ = 0, checksum_failures_ = 0, write_errors_ = 0;
};

RangeReader::RangeReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RangeReader::~RangeReader() = default;

Result<std::unique_ptr<RangeReader>> RangeReader::Open(std::shared_ptr<ObjectStore> store,
                                                       std::vector<ObjectInfo> objects,
                                                       std::string dataset_id,
                                                       const RemoteOptions& given) {
  const RemoteOptions options = ResolveRemoteOptions(given);
  if (objects.size() >= (size_t{1} << 24)) return Status::InvalidArgument("too many objects");
  for (const ObjectInfo& o : objects) {
    if (o.bytes >= (uint64_t{1} << 40)) {
      return Status::InvalidArgument(store->Describe(o.name) +
                                     ": objects of 1 TiB or more are not supported");
    }
  }
  std::unique_ptr<BlockCache> cache;
  if (!options.cache_dir.empty()) {
    SATURATE_ASSIGN_OR_RETURN(cache, BlockCache::Open(options.cache_dir, options.cache_bytes));
  }
  return std::unique_ptr<RangeReader>(new RangeReader(std::make_unique<Impl>(
      std::move(store), std::move(objects), std::move(dataset_id), options, std::move(cache))));
}

void RangeReader::Plan(std::span<const ByteRange> ranges, bool replace) {
  impl_->Plan(ranges, replace);
}
Result<std::shared_ptr<std::byte[]>> RangeReader::Read(const ByteRange& range) {
  return impl_->Read(range);
}
void RangeReader::Invalidate(const ByteRange& range) { impl_->Invalidate(range); }
bool RangeReader::cached() const { return impl_->cached(); }
std::string RangeReader::cache_dir() const { return impl_->cache_dir(); }
const ObjectStore& RangeReader::store() const { return impl_->store(); }
const std::vector<ObjectInfo>& RangeReader::objects() const { return impl_->objects(); }
RemoteStats RangeReader::stats() const { return impl_->stats(); }
void RangeReader::Cancel() { impl_->Cancel(); }

}  // namespace saturate::remote
