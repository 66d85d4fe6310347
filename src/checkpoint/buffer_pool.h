// BufferPool: the reusable host buffers snapshots are copied into.
//
// A save needs one buffer as large as its tensors.bin; the pool keeps up to
// `max_free` released buffers and hands the smallest one that fits to the
// next Acquire(), so in the steady state (same state every save) nothing is
// allocated and the snapshot copy never page-faults. Allocate() + Prefault()
// + Release() put a buffer in ahead of the first save (Checkpointer::Prepare).
//
// Memory: a request that no free buffer fits first frees the free ones (all
// too small, they would only be outgrown again), so the pool never holds an
// old and a new generation at once; it keeps at most `max_free` free buffers.
//
// Ownership: the pool owns its free buffers; an acquired buffer belongs to
// the caller until Release(). Buffers still acquired when the pool is
// destroyed leak. Thread-safety: not thread-safe; the Checkpointer calls it
// under its mutex. Prefault() is a free function on a buffer the caller owns
// and needs no lock.
#ifndef SATURATE_CHECKPOINT_BUFFER_POOL_H_
#define SATURATE_CHECKPOINT_BUFFER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "saturate/base/status.h"
#include "saturate/checkpoint/checkpointer.h"

namespace saturate::checkpoint {

struct HostBuffer {
  std::byte* data = nullptr;
  size_t capacity = 0;
};

class BufferPool {
 public:
  BufferPool(std::shared_ptr<HostAllocator> allocator, size_t max_free);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // The smallest free buffer of at least `bytes`, or a new one.
  Result<HostBuffer> Acquire(size_t bytes);
  // A new buffer of at least `bytes`, never a free one (the caller prefaults
  // it, then Release()s it into the pool).
  Result<HostBuffer> Allocate(size_t bytes);
  void Release(HostBuffer buffer);
  // Frees the free buffers smaller than `bytes`.
  void DropSmallerThan(size_t bytes);
  // Free buffers of at least `bytes`.
  size_t FreeFitting(size_t bytes) const;
  // Bytes allocated and not yet freed (acquired or free).
  uint64_t held_bytes() const { return held_bytes_; }
  // Buffers allocated since construction.
  uint64_t allocations() const { return allocations_; }
  // What a buffer for `bytes` really holds (rounded up to whole huge pages).
  static size_t CapacityFor(size_t bytes);

 private:
  void Free(HostBuffer buffer);

  std::shared_ptr<HostAllocator> allocator_;
  size_t max_free_;
  std::vector<HostBuffer> free_;
  uint64_t held_bytes_ = 0;
  uint64_t allocations_ = 0;
};

// Maps every page of `buffer` writable now (MADV_POPULATE_WRITE, or one
// write per 4 KiB page where the kernel or the allocator's memory refuses),
// split over `threads` threads, so the snapshot copy into it takes no page
// fault. Touches no more memory than the buffer: the kernel maps the pages
// the copy would have mapped (huge pages where THP grants them).
void Prefault(const HostBuffer& buffer, int threads);

}  // namespace saturate::checkpoint

#endif  // SATURATE_CHECKPOINT_BUFFER_POOL_H_
