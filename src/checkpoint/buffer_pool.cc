#include "checkpoint/buffer_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

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
  // Nothing fits: a too-small free buffer would only be outgrown again.
  if (free_.size() >= max_free_) {
    Free(free_.front());
    free_.erase(free_.begin());
  }
  size_t capacity = std::max<size_t>((bytes + kGranule - 1) / kGranule * kGranule, kGranule);
  SATURATE_ASSIGN_OR_RETURN(void* p, allocator_->Allocate(capacity));
  held_bytes_ += capacity;
  return HostBuffer{static_cast<std::byte*>(p), capacity};
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

}  // namespace saturate::checkpoint
