#include <cuda_runtime.h>

#include "device/cuda/cuda_probe.h"

namespace saturate::device::cuda {

void ProbeCuda(DeviceReport* report) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    // No driver shows up as "insufficient driver": say what a user would check.
    const char* hint = err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice
                           ? "no NVIDIA GPU or driver visible; "
                           : "";
    report->no_gpu_reason = std::string(hint) + "CUDA runtime: " + cudaGetErrorString(err);
    cudaGetLastError();  // clear the sticky error so later calls start clean
    return;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    report->gpus.push_back(
        GpuInfo{i, prop.name, static_cast<uint64_t>(prop.totalGlobalMem), prop.major, prop.minor});
  }
  if (report->gpus.empty()) report->no_gpu_reason = "CUDA runtime reports no devices";
}

}  // namespace saturate::device::cuda
