// Device probing: which accelerators this process can use.
//
// Probing never throws and never crashes: on a machine without a GPU (or a
// build without CUDA) it reports no devices and one line saying why. The CPU
// is always present. CUDA code lives behind this narrow interface in
// src/device/cuda/ and is compiled whenever the toolkit is found.
//
// Thread-safety: ProbeDevices() may be called from any thread.
#ifndef SATURATE_DEVICE_DEVICE_H_
#define SATURATE_DEVICE_DEVICE_H_

#include <cstdint>
#include <string>
#include <vector>

namespace saturate::device {

struct GpuInfo {
  int index = 0;
  std::string name;
  uint64_t memory_bytes = 0;
  int compute_major = 0;
  int compute_minor = 0;
};

struct DeviceReport {
  bool built_with_cuda = false;
  std::vector<GpuInfo> gpus;
  std::string no_gpu_reason;  // set when `gpus` is empty
  int cpu_cores = 1;
};

DeviceReport ProbeDevices();

}  // namespace saturate::device

#endif  // SATURATE_DEVICE_DEVICE_H_
