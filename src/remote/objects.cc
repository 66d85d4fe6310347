// FetchInto (parallel ranged GETs) and the in-memory ObjectStore.
#include "saturate/remote/objects.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace saturate::remote {

RemoteStats ObjectStore::stats() const {
  RemoteStats s;
  s.requests = counters_.requests.load();
  s.bytes_fetched = counters_.bytes_fetched.load();
  s.bytes_uploaded = counters_.bytes_uploaded.load();
  s.retries = counters_.retries.load();
  s.errors = counters_.errors.load();
  s.request_ns = counters_.request_ns.load();
  s.in_flight = counters_.in_flight.load();
  return s;
}

Status FetchInto(ObjectStore& store, std::string_view name, uint64_t offset,
                 std::span<std::byte> out, const FetchOptions& options) {
  if (out.empty()) return Status::OK();
  const uint64_t part = std::max<uint64_t>(options.part_bytes, 1);
  const uint64_t parts = (out.size() + part - 1) / part;
  const int threads = static_cast<int>(std::clamp<uint64_t>(options.requests, 1, parts));
  std::atomic<uint64_t> next{0};
  std::mutex mu;
  Status first;
  auto work = [&] {
    for (uint64_t i = next++; i < parts; i = next++) {
      const uint64_t at = i * part;
      const uint64_t n = std::min<uint64_t>(part, out.size() - at);
      Status s = store.GetRange(name, offset + at, out.subspan(at, n));
      if (!s.ok()) {
        std::lock_guard lock(mu);
        if (first.ok()) first = s;
        next = parts;  // stop handing out parts
      }
    }
  };
  std::vector<std::thread> helpers;
  for (int t = 1; t < threads; ++t) helpers.emplace_back(work);
  work();
  for (std::thread& t : helpers) t.join();
  return first;
}

namespace {

class MemoryStore final : public ObjectStore {
 public:
  explicit MemoryStore(ObjectUrl url) : ObjectStore(std::move(url)) {}

  Result<std::string> Get(std::string_view name) override {
    std::lock_guard lock(mu_);
    ++counters_.requests;
    auto it = objects_.find(std::string(name));
    if (it == objects_.end()) return Status::NotFound(Describe(name) + ": not found");
    counters_.bytes_fetched += it->second.size();
    return it->second;
  }
  Result<ObjectStat> Stat(std::string_view name) override {
    std::lock_guard lock(mu_);
    ++counters_.requests;
    auto it = objects_.find(std::string(name));
    if (it == objects_.end()) return Status::NotFound(Describe(name) + ": not found");
    return ObjectStat{it->second.size(), std::to_string(std::hash<std::string>()(it->second))};
  }
  Status GetRange(std::string_view name, uint64_t offset, std::span<std::byte> out) override {
    std::lock_guard lock(mu_);
    ++counters_.requests;
    auto it = objects_.find(std::string(name));
    if (it == objects_.end()) return Status::NotFound(Describe(name) + ": not found");
    if (offset + out.size() > it->second.size()) {
      return Status::Corruption(Describe(name) + ": range " + std::to_string(offset) + "+" +
                                std::to_string(out.size()) + " past the object's " +
                                std::to_string(it->second.size()) + " bytes");
    }
    std::memcpy(out.data(), it->second.data() + offset, out.size());
    counters_.bytes_fetched += out.size();
    return Status::OK();
  }
  Status Put(std::string_view name, std::span<const std::byte> data) override {
    std::lock_guard lock(mu_);
    ++counters_.requests;
    objects_[std::string(name)].assign(reinterpret_cast<const char*>(data.data()), data.size());
    counters_.bytes_uploaded += data.size();
    return Status::OK();
  }
  Status PutFile(std::string_view name, const std::string& path) override {
    return Status::Unimplemented(Describe(name) + ": the memory store does not read " + path);
  }
  Status Delete(std::string_view name) override {
    std::lock_guard lock(mu_);
    ++counters_.requests;
    objects_.erase(std::string(name));
    return Status::OK();
  }
  Result<std::vector<std::string>> List() override {
    std::lock_guard lock(mu_);
    ++counters_.requests;
    std::vector<std::string> names;
    for (const auto& [name, bytes] : objects_) names.push_back(name);
    return names;
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::string> objects_;  // guarded by mu_
};

}  // namespace

std::unique_ptr<ObjectStore> NewMemoryStore(ObjectUrl url) {
  return std::make_unique<MemoryStore>(std::move(url));
}

}  // namespace saturate::remote
