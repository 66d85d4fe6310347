// The CUDA runtime behind device::Gpu; only built with SATURATE_WITH_CUDA.
// Thread-safety: as Gpu (each call selects its device first).
#ifndef SATURATE_DEVICE_CUDA_CUDA_GPU_H_
#define SATURATE_DEVICE_CUDA_CUDA_GPU_H_

#include <memory>

#include "device/gpu.h"

namespace saturate::device::cuda {

Result<std::shared_ptr<Gpu>> OpenCudaGpu(int index);

}  // namespace saturate::device::cuda

#endif  // SATURATE_DEVICE_CUDA_CUDA_GPU_H_
