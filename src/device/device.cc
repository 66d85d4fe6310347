#include "saturate/device/device.h"

#include <thread>

#ifdef SATURATE_WITH_CUDA
#include "device/cuda/cuda_probe.h"
#endif

namespace saturate::device {

DeviceReport ProbeDevices() {
  DeviceReport report;
  report.cpu_cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
#ifdef SATURATE_WITH_CUDA
  report.built_with_cuda = true;
  cuda::ProbeCuda(&report);
#else
  report.no_gpu_reason = "built without CUDA (SATURATE_WITH_CUDA=OFF)";
#endif
  return report;
}

}  // namespace saturate::device
