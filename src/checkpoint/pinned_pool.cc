#include "checkpoint/pinned_pool.h"

#include <string>
#include <utility>

namespace saturate::checkpoint {

PinnableAllocator::PinnableAllocator(std::shared_ptr<HostAllocator> base, GpuOpener open_gpu)
    : base_(std::move(base)), open_gpu_(std::move(open_gpu)) {}

PinnableAllocator::~PinnableAllocator() {
  // The pool frees every buffer it holds before its allocator goes; what is
  // left was leaked by its holder, and must at least not stay registered.
  for (auto& [ptr, a] : live_) {
    if (a.gpu) a.gpu->UnregisterHost(ptr);
  }
}

Result<void*> PinnableAllocator::Allocate(size_t bytes) {
  SATURATE_ASSIGN_OR_RETURN(void* p, base_->Allocate(bytes));
  std::lock_guard<std::mutex> lock(mu_);
  live_[p] = Allocation{bytes, nullptr};
  return p;
}

void PinnableAllocator::Free(void* ptr, size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(ptr);
    if (it != live_.end()) {
      if (it->second.gpu) it->second.gpu->UnregisterHost(ptr);
      live_.erase(it);
    }
  }
  base_->Free(ptr, bytes);
}

Status PinnableAllocator::Pin(void* ptr, int cuda_device) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  if (it == live_.end()) {
    return Status::InvalidArgument("not a checkpoint pool buffer: " +
                                   std::to_string(reinterpret_cast<uintptr_t>(ptr)));
  }
  if (it->second.gpu) return Status::OK();
  std::shared_ptr<device::Gpu>& gpu = gpus_[cuda_device];
  if (!gpu) {
    auto opened = open_gpu_(cuda_device);
    if (!opened.ok()) {
      gpus_.erase(cuda_device);
      return opened.status();
    }
    gpu = std::move(*opened);
  }
  SATURATE_RETURN_IF_ERROR(gpu->RegisterHost(ptr, it->second.bytes)
                               .WithContext("page-locking a checkpoint buffer of " +
                                            std::to_string(it->second.bytes) + " bytes"));
  it->second.gpu = gpu;
  return Status::OK();
}

bool PinnableAllocator::pinned(void* ptr) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  return it != live_.end() && it->second.gpu != nullptr;
}

}  // namespace saturate::checkpoint
