// BufferPool: the reusable host buffers snapshots are copied into.
//
// A save needs one buffer as large as its tensors.bin; the pool keeps up to
// `max_free` released buffers and hands the smallest one that fits to the
// next Acquire(), so in the steady state (same state every save) nothing is
// allocated and the snapshot copy never page-faults.
//
// Ownership: the pool owns its free buffers; an acquired buffer belongs to
// the caller until Release(). Buffers still acquired when the pool is
// destroyed leak. Thread-safety: not thread-safe; the Checkpointer calls it
// under its mutex.
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

  Result<HostBuffer> Acquire(size_t bytes);
  void Release(HostBuffer buffer);
  // Bytes allocated and not yet freed (acquired or free).
  uint64_t held_bytes() const { return held_bytes_; }

 private:
  void Free(HostBuffer buffer);

  std::shared_ptr<HostAllocator> allocator_;
  size_t max_free_;
  std::vector<HostBuffer> free_;
  uint64_t held_bytes_ = 0;
};

}  // namespace saturate::checkpoint

#endif  // SATURATE_CHECKPOINT_BUFFER_POOL_H_
