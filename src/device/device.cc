#include "saturate/device/device.h"

#include <charconv>
#include <string>
#include <thread>

#include "device/gpu.h"

#ifdef SATURATE_WITH_CUDA
#include "device/cuda/cuda_gpu.h"
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

Result<int> ParseCudaDevice(std::string_view device) {
  auto bad = [&] {
    return Status::InvalidArgument("device '" + std::string(device) + "': use cpu, cuda or cuda:N");
  };
  if (device == "cuda") return 0;
  if (!device.starts_with("cuda:")) return bad();
  std::string_view digits = device.substr(5);
  int index = -1;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
  if (ec != std::errc() || end != digits.data() + digits.size() || index < 0) return bad();
  return index;
}

Result<std::shared_ptr<Gpu>> OpenCudaGpu(int index) {
#ifdef SATURATE_WITH_CUDA
  return cuda::OpenCudaGpu(index);
#else
  return Status::Unavailable("cuda:" + std::to_string(index) +
                             ": saturate was built without CUDA (SATURATE_WITH_CUDA=OFF)");
#endif
}

}  // namespace saturate::device
