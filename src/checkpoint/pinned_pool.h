// PinnableAllocator: the snapshot pool's allocator, whose buffers can be
// page-locked for CUDA after the fact (the Python layer learns that a state
// holds CUDA tensors only at its first save or prepare).
//
// Pin(ptr, device) registers the live allocation at `ptr` with that GPU
// (cudaHostRegister through device::Gpu, the static runtime saturate links,
// which shares the driver's primary context with the framework's runtime);
// Free() unregisters a pinned buffer before unmapping it. Unmapping a
// registered buffer would leave a stale registration: later memory mapped at
// that address (another library's staging buffer) would receive device->host
// copies into the old pages.
//
// Ownership: owns the Gpu handles it opens and the bookkeeping of its live
// allocations; the memory itself comes from and goes back to `base`.
// Thread-safety: every method may be called from any thread (one mutex).
#ifndef SATURATE_CHECKPOINT_PINNED_POOL_H_
#define SATURATE_CHECKPOINT_PINNED_POOL_H_

#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include "device/gpu.h"
#include "saturate/checkpoint/checkpointer.h"

namespace saturate::checkpoint {

class PinnableAllocator final : public HostAllocator {
 public:
  using GpuOpener = std::function<Result<std::shared_ptr<device::Gpu>>(int index)>;

  explicit PinnableAllocator(std::shared_ptr<HostAllocator> base,
                             GpuOpener open_gpu = device::OpenCudaGpu);
  ~PinnableAllocator() override;

  Result<void*> Allocate(size_t bytes) override;
  void Free(void* ptr, size_t bytes) override;

  // Page-locks the allocation that starts at `ptr` for `cuda_device`; a
  // no-op when it already is. InvalidArgument for a pointer this allocator
  // did not hand out; Unavailable without CUDA.
  Status Pin(void* ptr, int cuda_device);
  bool pinned(void* ptr) const;

 private:
  struct Allocation {
    size_t bytes = 0;
    std::shared_ptr<device::Gpu> gpu;  // set once pinned
  };

  const std::shared_ptr<HostAllocator> base_;
  const GpuOpener open_gpu_;
  mutable std::mutex mu_;
  std::map<void*, Allocation> live_;
  std::map<int, std::shared_ptr<device::Gpu>> gpus_;  // opened once per device
};

}  // namespace saturate::checkpoint

#endif  // SATURATE_CHECKPOINT_PINNED_POOL_H_
