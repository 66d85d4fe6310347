// The CUDA side of device probing; only built with SATURATE_WITH_CUDA.
// Thread-safety: safe from any thread (the CUDA runtime serializes).
#ifndef SATURATE_DEVICE_CUDA_CUDA_PROBE_H_
#define SATURATE_DEVICE_CUDA_CUDA_PROBE_H_

#include "saturate/device/device.h"

namespace saturate::device::cuda {

// Fills `report->gpus`, or `report->no_gpu_reason` with the runtime's error.
void ProbeCuda(DeviceReport* report);

}  // namespace saturate::device::cuda

#endif  // SATURATE_DEVICE_CUDA_CUDA_PROBE_H_
