#include "remote/block_cache.h"

#define XXH_INLINE_ALL
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "base/file.h"

namespace saturate::remote {
namespace {

constexpr char kBlockMagic[8] = {'S', 'A', 'T', 'B', 'L', 'K', '0', '1'};

// Closes a descriptor at scope exit.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

Status PreadFully(int fd, std::byte* out, size_t n, uint64_t offset, const std::string& path) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, out + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Status::FromErrno(path, errno);
    if (r == 0) return Status::Corruption(path + ": block shorter than expected");
    done += static_cast<size_t>(r);
  }
  return Status::OK();
}

}  // namespace

void LruAccounting::Touch(const std::string& key) {
  auto it = map_.find(key);
  if (it == map_.end()) return;
  lru_.splice(lru_.end(), lru_, it->second);
}

void LruAccounting::Append(const std::string& key, uint64_t bytes) {
  auto it = map_.find(key);
  if (it != map_.end()) {
    total_bytes_ -= it->second->second;
    it->second->second = bytes;
    lru_.splice(lru_.end(), lru_, it->second);
  } else {
    lru_.emplace_back(key, bytes);
    map_[key] = std::prev(lru_.end());
  }
  total_bytes_ += bytes;
}

std::vector<std::string> LruAccounting::EvictToFit(const std::string& keep) {
  std::vector<std::string> evict;
  for (auto it = lru_.begin(); total_bytes_ > budget_bytes_ && it != lru_.end();) {
    if (it->first == keep) {
      ++it;
      continue;
    }
    evict.push_back(it->first);
    total_bytes_ -= it->second;
    map_.erase(it->first);
    it = lru_.erase(it);
  }
  if (total_bytes_ > budget_bytes_ && map_.count(keep) != 0) {  // it alone is too big
    evict.push_back(keep);
    Erase(keep);
  }
  return evict;
}

std::vector<std::string> LruAccounting::Insert(const std::string& key, uint64_t bytes) {
  Append(key, bytes);
  return EvictToFit(key);
}

void LruAccounting::Erase(const std::string& key) {
  auto it = map_.find(key);
  if (it == map_.end()) return;
  total_bytes_ -= it->second->second;
  lru_.erase(it->second);
  map_.erase(it);
}

void LruAccounting::Clear() {
  lru_.clear();
  map_.clear();
  total_bytes_ = 0;
}

Result<std::unique_ptr<BlockCache>> BlockCache::Open(const std::string& dir,
                                                     uint64_t budget_bytes) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (!std::filesystem::is_directory(dir, ec)) {
    return Status::InvalidArgument("cache directory " + dir +
                                   " does not exist and cannot be created");
  }
  const bool writable = ::access(dir.c_str(), W_OK | X_OK) == 0;
  std::unique_ptr<BlockCache> cache(new BlockCache(dir, budget_bytes, writable));
  std::lock_guard<std::mutex> lock(cache->mu_);
  cache->RescanLocked();
  return cache;
}

void BlockCache::RescanLocked() {
  struct Entry {
    std::filesystem::file_time_type mtime;
    std::string key;
    uint64_t bytes;
  };
  std::vector<Entry> entries;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir_, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    const std::string name = it->path().filename().string();
    if (name == ".lock" || name.find(".tmp.") != std::string::npos) continue;
    const std::string key = std::filesystem::relative(it->path(), dir_, ec).string();
    entries.push_back({it->last_write_time(ec), key, it->file_size(ec)});
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.mtime < b.mtime; });
  // Keep this process's recency for keys it knows; others by mtime.
  std::unordered_set<std::string> known;
  for (const Entry& e : entries) {
    if (lru_.Contains(e.key)) known.insert(e.key);
  }
  // Rebuild: others first (older), then the keys this process has used.
  lru_.Clear();
  for (const Entry& e : entries) {
    if (known.count(e.key) == 0) lru_.Append(e.key, e.bytes);
  }
  for (const Entry& e : entries) {
    if (known.count(e.key) != 0) lru_.Append(e.key, e.bytes);
  }
}

bool BlockCache::Contains(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.Contains(key);
}

Status BlockCache::Read(const std::string& key, uint64_t offset, std::span<std::byte> out) {
  const std::string path = PathOf(key);
  bool verified;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!lru_.Contains(key)) {
      // Another rank may have stored it since the last scan.
      struct stat st;
      if (::stat(path.c_str(), &st) != 0) return Status::NotFound(path);
      (void)lru_.Insert(key, static_cast<uint64_t>(st.st_size));
    }
    lru_.Touch(key);
    verified = verified_.count(key) != 0;
  }
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) {
    std::lock_guard<std::mutex> lock(mu_);
    lru_.Erase(key);
    verified_.erase(key);
    return Status::NotFound(path);  // evicted by another rank
  }
  auto corrupt = [&](const std::string& what) {
    Drop(key);
    return Status::Corruption(path + ": " + what);
  };
  if (!verified) {
    struct stat st;
    if (::fstat(f.fd, &st) != 0) return Status::FromErrno(path, errno);
    if (static_cast<uint64_t>(st.st_size) < kHeaderBytes) return corrupt("shorter than its header");
    std::vector<std::byte> all(static_cast<size_t>(st.st_size));
    SATURATE_RETURN_IF_ERROR(PreadFully(f.fd, all.data(), all.size(), 0, path));
    uint64_t stored;
    std::memcpy(&stored, all.data() + 8, 8);
    if (std::memcmp(all.data(), kBlockMagic, 8) != 0 ||
        XXH3_64bits(all.data() + kHeaderBytes, all.size() - kHeaderBytes) != stored) {
      return corrupt("block checksum mismatch");
    }
    if (offset + out.size() > all.size() - kHeaderBytes) return corrupt("block shorter than asked");
    std::memcpy(out.data(), all.data() + kHeaderBytes + offset, out.size());
    std::lock_guard<std::mutex> lock(mu_);
    verified_.insert(key);
    return Status::OK();
  }
  Status s = PreadFully(f.fd, out.data(), out.size(), kHeaderBytes + offset, path);
  if (s.code() == StatusCode::kCorruption) return corrupt("block shorter than asked");
  return s;
}

Status BlockCache::Insert(const std::string& key, std::span<const std::byte> payload) {
  if (!writable_) return Status::IOError("cache directory " + dir_ + " is not writable");
  const std::string path = PathOf(key);
  const std::string dir = path.substr(0, path.rfind('/'));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::string temp;
  {
    std::lock_guard<std::mutex> lock(mu_);
    temp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(temp_counter_++);
  }
  {
    Fd f{::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)};
    if (f.fd < 0) return Status::FromErrno("cache " + temp, errno);
    std::byte header[kHeaderBytes];
    std::memcpy(header, kBlockMagic, 8);
    const uint64_t sum = XXH3_64bits(payload.data(), payload.size());
    std::memcpy(header + 8, &sum, 8);
    Status s = WriteFully(f.fd, header, temp);
    if (s.ok()) s = WriteFully(f.fd, payload, temp);
    if (!s.ok()) {
      ::unlink(temp.c_str());
      return s;
    }
  }
  // No fsync: a block torn by a crash fails its checksum and is refetched.
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    return Status::FromErrno("cache " + path, err);
  }
  std::lock_guard<std::mutex> lock(mu_);
  verified_.insert(key);
  lru_.Append(key, payload.size() + kHeaderBytes);
  if (lru_.total_bytes() > lru_.budget_bytes()) {
    // Over budget: look at what the other ranks wrote, under the node-wide lock.
    Fd lock_fd{::open((dir_ + "/.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)};
    if (lock_fd.fd >= 0) ::flock(lock_fd.fd, LOCK_EX);
    RescanLocked();
    lru_.Touch(key);
    const std::vector<std::string> evict = lru_.EvictToFit(key);
    for (const std::string& k : evict) {
      if (::unlink(PathOf(k).c_str()) == 0) ++evictions_;
      verified_.erase(k);
    }
    if (lock_fd.fd >= 0) ::flock(lock_fd.fd, LOCK_UN);
  }
  return Status::OK();
}

void BlockCache::Drop(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  ::unlink(PathOf(key).c_str());
  lru_.Erase(key);
  verified_.erase(key);
}

uint64_t BlockCache::evictions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return evictions_;
}

uint64_t BlockCache::total_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.total_bytes();
}

}  // namespace saturate::remote
