// What the CUDA runtime code in this folder shares: a cudaError_t as a Status
// naming the call and the device, and a scope that makes one device current.
//
// Thread-safety: CudaCheck clears the calling thread's last (non-sticky)
// error; DeviceScope changes the calling thread's current device while it
// lives. Both only touch per-thread CUDA state.
#ifndef SATURATE_DEVICE_CUDA_CUDA_UTIL_H_
#define SATURATE_DEVICE_CUDA_CUDA_UTIL_H_

#include <cuda_runtime.h>

#include <string>

#include "saturate/base/status.h"

namespace saturate::device::cuda {

inline Status CudaCheck(cudaError_t err, const char* what, int index) {
  if (err == cudaSuccess) return Status::OK();
  cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  return Status::Internal(std::string(what) + " on cuda:" + std::to_string(index) + ": " +
                          cudaGetErrorString(err));
}

// Makes `index` the calling thread's current device for one call and puts
// the caller's back afterwards: the consumer thread belongs to the training
// framework, whose idea of the current device must not change under it.
class DeviceScope {
 public:
  explicit DeviceScope(int index) : index_(index) {
    cudaGetDevice(&previous_);
    if (previous_ != index) status_ = CudaCheck(cudaSetDevice(index), "cudaSetDevice", index);
  }
  ~DeviceScope() {
    if (previous_ >= 0 && previous_ != index_ && status_.ok()) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  const Status& status() const { return status_; }

 private:
  int index_;
  int previous_ = -1;
  Status status_;
};

}  // namespace saturate::device::cuda

#endif  // SATURATE_DEVICE_CUDA_CUDA_UTIL_H_
