#include "checkpoint/buffer_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

namespace saturate::checkpoint {
namespace {

// Capacities are rounded to huge pages: fewer distinct sizes to reuse, and
// whole huge pages for the kernel to back.
constexpr size_t kGranule = size_t{2} << 20;

class PageHostAllocator final : public HostAllocator {
 public:
  Result<void*> Allocate(size_t bytes) override {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      return Status::FromErrno("checkpoint buffer of " + std::to_string(bytes) + " bytes", errno);
    }
    // Huge pages make the snapshot copy cheaper (fewer faults and TLB misses).
    (void)::madvise(p, bytes, MADV_HUGEPAGE);
    return p;
  }
  void Free(void* ptr, size_t bytes) override { ::munmap(ptr, bytes); }
};

}  // namespace

std::shared_ptr<HostAllocator> PageAllocator() {
  static const auto allocator = std::make_shared<PageHostAllocator>();
  return allocator;
}

BufferPool::BufferPool(std::shared_ptr<HostAllocator> allocator, size_t max_free)
    : allocator_(std::move(allocator)), max_free_(std::max<size_t>(max_free, 1)) {}

BufferPool::~BufferPool() {
  for (HostBuffer& b : free_) Free(b);
}

Result<HostBuffer> BufferPool::Acquire(size_t bytes) {
  auto best = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->capacity >= bytes && (best == free_.end() || it->capacity < best->capacity)) best = it;
  }
  if (best != free_.end()) {
    HostBuffer b = *best;
    free_.erase(best);
    return b;
  }
  // Nothing fits: the free buffers would only be outgrown again, and freeing
  // them before allocating keeps old and new from being held at once.
  DropSmallerThan(bytes);
  return Allocate(bytes);
}

Result<HostBuffer> BufferPool::Allocate(size_t bytes) {
  size_t capacity = CapacityFor(bytes);
  SATURATE_ASSIGN_OR_RETURN(void* p, allocator_->Allocate(capacity));
  held_bytes_ += capacity;
  ++allocations_;
  return HostBuffer{static_cast<std::byte*>(p), capacity};
}

void BufferPool::DropSmallerThan(size_t bytes) {
  auto small = [&](const HostBuffer& b) { return b.capacity < bytes; };
  for (const HostBuffer& b : free_) {
    if (small(b)) Free(b);
  }
  std::erase_if(free_, small);
}

size_t BufferPool::FreeFitting(size_t bytes) const {
  return static_cast<size_t>(
      std::count_if(free_.begin(), free_.end(), [&](auto& b) { return b.capacity >= bytes; }));
}

size_t BufferPool::CapacityFor(size_t bytes) {
  return std::max<size_t>((bytes + kGranule - 1) / kGranule * kGranule, kGranule);
}

void BufferPool::Release(HostBuffer buffer) {
  free_.push_back(buffer);
  if (free_.size() > max_free_) {
    auto smallest = std::min_element(free_.begin(), free_.end(),
                                     [](auto& a, auto& b) { return a.capacity < b.capacity; });
    Free(*smallest);
    free_.erase(smallest);
  }
}

void BufferPool::Free(HostBuffer buffer) {
  allocator_->Free(buffer.data, buffer.capacity);
  held_bytes_ -= buffer.capacity;
}

namespace {

// MADV_POPULATE_WRITE (Linux 5.14) faults the range in writable without
// touching it from user space; EINVAL (older kernel, or memory the allocator
// mapped specially) falls back to writing one byte per page. The buffer is
// new, its contents undefined until a snapshot copy, so writing zero is fine.
void PrefaultRange(std::byte* data, size_t bytes) {
#ifdef MADV_POPULATE_WRITE
  if (::madvise(data, bytes, MADV_POPULATE_WRITE) == 0) return;
#endif
  if (bytes == 0) return;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data);
  *static_cast<volatile std::byte*>(data) = std::byte{0};  // may start inside a page
  for (uintptr_t at = (begin / page + 1) * page; at < begin + bytes; at += page) {
    *reinterpret_cast<volatile std::byte*>(at) = std::byte{0};
  }
}

}  // namespace

void Prefault(const HostBuffer& buffer, int threads) {
  if (buffer.data == nullptr || buffer.capacity == 0) return;
  // Whole granules per thread: a huge page is faulted by one thread only.
  const size_t granules = (buffer.capacity + kGranule - 1) / kGranule;
  const size_t n = std::clamp<size_t>(static_cast<size_t>(std::max(threads, 1)), 1, granules);
  const size_t per = (granules + n - 1) / n * kGranule;
  std::vector<std::thread> helpers;
  for (size_t at = per; at < buffer.capacity; at += per) {
    helpers.emplace_back(PrefaultRange, buffer.data + at, std::min(per, buffer.capacity - at));
  }
  PrefaultRange(buffer.data, std::min(per, buffer.capacity));
  for (std::thread& t : helpers) t.join();
}

}  // namespace saturate::checkpoint
