// GPU sampling through NVML (libnvidia-ml), loaded at run time with dlopen.
//
// saturate never links against the NVIDIA driver: Nvml::Load() dlopens
// libnvidia-ml.so.1 (then libnvidia-ml.so), resolves the few functions it
// uses (versioned names first, older names as fallbacks) and initializes
// NVML. On a machine without the driver Load() fails with one line saying
// why, and the caller reports zero GPUs.
//
// Every metric is optional: a GPU or driver that lacks a function, or answers
// NOT_SUPPORTED or any other error for it, leaves that field empty. A GPU
// that falls off the bus (NVML_ERROR_GPU_IS_LOST) is reported as `lost` in
// its samples from then on, without calling the driver for it again; the
// other GPUs keep being sampled.
//
// GPU activity counters (GPM: SM active, occupancy, tensor and other pipes,
// DRAM bandwidth, PCIe and NVLink rates; Hopper and later, driver R520+) come
// from two GPM samples: Nvml keeps the previous sample of each GPU that
// supports GPM and computes the metrics over the span between consecutive
// Sample() calls (at least gpm_min_interval_ns apart; a call sooner leaves
// them empty and keeps the older sample, as does a failed computation).
//
// Ownership: an Nvml owns the dlopen handle, the NVML initialization, the
// XID event set and the GPM sample buffers; its destructor frees the buffers
// and the event set, calls nvmlShutdown and dlcloses the library. Samples
// are plain values.
// Thread-safety: Nvml is not thread-safe. Sample()/SampleAll() keep
// per-device state (last utilization timestamps, pending XID events, the
// previous GPM sample), so call them from one thread at a time. The const
// accessors may be called concurrently with each other once Load() has
// returned; set_gpm_min_interval_ns() is not const. Construction and
// destruction must not race with any other call.
#ifndef SATURATE_WATCH_NVML_H_
#define SATURATE_WATCH_NVML_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "saturate/base/status.h"

namespace saturate::watch {

// What does not change while the process runs. Empty strings when NVML could
// not answer.
struct GpuDeviceInfo {
  int index = 0;
  std::string name;        // "NVIDIA H100 80GB HBM3"
  std::string uuid;        // "GPU-xxxxxxxx-..."
  std::string pci_bus_id;  // "00000000:1B:00.0"
  std::optional<uint64_t> memory_total_bytes;
};

// One process using a GPU (compute and graphics lists merged by pid).
struct GpuProcess {
  uint32_t pid = 0;
  std::optional<uint64_t> used_memory_bytes;  // empty when NVML says "not available"
  // From nvmlDeviceGetProcessUtilization, when the driver has a sample for
  // this pid newer than the previous Sample() of this device.
  std::optional<uint32_t> sm_util_pct;
  std::optional<uint32_t> mem_util_pct;
};

// An XID (driver-reported GPU error, e.g. 79 "fallen off the bus").
struct XidEvent {
  int gpu_index = 0;
  uint64_t xid = 0;
};

// GPM activity counters of one GPU, averaged over the span between two GPM
// samples (interval_s). Percentages are 0-100 as NVML gives them (DCGM's
// DCGM_FI_PROF_* ratios are these / 100); rates are bytes per second (NVML
// gives MiB/s). Each field is empty when the GPU or driver cannot give it
// (pre-Hopper GPUs: all of them; a PCIe card: the NVLink rates).
struct GpmMetrics {
  std::optional<double> interval_s;              // the span the values average over
  std::optional<double> graphics_active_pct;     // GRAPHICS_UTIL: any kernel/graphics work active
  std::optional<double> sm_active_pct;           // SM_UTIL: share of SMs busy
  std::optional<double> sm_occupancy_pct;        // SM_OCCUPANCY: resident warps / maximum
  std::optional<double> tensor_active_pct;       // ANY_TENSOR_UTIL: any tensor-core pipe
  std::optional<double> hmma_tensor_active_pct;  // HMMA_TENSOR_UTIL: fp16/bf16/tf32 tensor math
  std::optional<double> dram_active_pct;         // DRAM_BW_UTIL: DRAM bandwidth / peak
  std::optional<double> fp64_active_pct;         // FP64_UTIL: non-tensor fp64 pipe
  std::optional<double> fp32_active_pct;         // FP32_UTIL: non-tensor fp32 pipe
  std::optional<double> fp16_active_pct;         // FP16_UTIL: non-tensor fp16 pipe
  std::optional<double> pcie_tx_bytes_per_s;     // PCIE_TX_PER_SEC: from the GPU
  std::optional<double> pcie_rx_bytes_per_s;     // PCIE_RX_PER_SEC: to the GPU
  std::optional<double> nvlink_tx_bytes_per_s;   // NVLINK_TOTAL_TX_PER_SEC, all links
  std::optional<double> nvlink_rx_bytes_per_s;   // NVLINK_TOTAL_RX_PER_SEC, all links

  // True when any metric (not counting interval_s) has a value.
  bool any() const;
};

// One reading of one GPU. Every metric is optional (see the file comment).
struct GpuSample {
  int index = 0;
  // The GPU fell off the bus or became inaccessible; all metrics are empty.
  bool lost = false;

  std::optional<uint32_t> util_pct;      // nvmlDeviceGetUtilizationRates: kernel busy time
  std::optional<uint32_t> mem_util_pct;  // nvmlDeviceGetUtilizationRates: memory busy time
  // Mean of the driver's utilization samples (about 6 per second) taken since
  // the previous Sample() of this device; the first call averages whatever
  // the driver still buffers. Empty when no new sample arrived.
  std::optional<double> util_sampled_pct;
  uint32_t util_sampled_count = 0;  // how many driver samples went into util_sampled_pct

  std::optional<uint64_t> memory_used_bytes;
  std::optional<uint64_t> memory_total_bytes;
  std::optional<double> power_w;
  std::optional<uint64_t> energy_mj;  // total since the driver loaded
  std::optional<uint32_t> sm_clock_mhz;
  std::optional<uint32_t> mem_clock_mhz;
  std::optional<uint64_t> pcie_rx_bytes_per_s;
  std::optional<uint64_t> pcie_tx_bytes_per_s;
  std::optional<uint64_t> clocks_event_reasons;  // bitmask; see ClocksEventReasonNames()
  std::optional<uint32_t> temperature_c;
  // GPM counters since the previous GPM sample; all empty without GPM.
  GpmMetrics gpm;
  // Empty when the driver cannot list processes; an empty vector when it can
  // and none runs.
  std::optional<std::vector<GpuProcess>> processes;
  // XID errors the driver reported for this GPU since its previous Sample().
  std::vector<XidEvent> xid_events;
};

// Names of the bits set in a clocks-event (throttle) reason mask, lowest bit
// first: "gpu_idle", "applications_clocks", "sw_power_cap", "hw_slowdown",
// "sync_boost", "sw_thermal", "hw_thermal", "hw_power_brake",
// "display_clocks"; bits NVML may add later appear as "bit_<n>".
std::vector<std::string> ClocksEventReasonNames(uint64_t mask);

class Nvml {
 public:
  // Loads NVML from `library_path`, or when empty from libnvidia-ml.so.1 and
  // then libnvidia-ml.so. Fails with Unimplemented (this machine cannot serve
  // GPU sampling) when the library cannot be loaded, lacks nvmlInit,
  // nvmlShutdown, nvmlDeviceGetCount or nvmlDeviceGetHandleByIndex, or NVML
  // fails to initialize or count devices; the message is one line, e.g.
  // "no NVIDIA driver: libnvidia-ml.so.1 not found (dlopen: ...)" (with an
  // explicit path: "no NVIDIA driver: cannot load <path> (dlopen: ...)").
  // A GPU whose handle cannot be obtained is reported as lost, not an error.
  static Result<std::unique_ptr<Nvml>> Load(const std::string& library_path = "");

  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  int device_count() const;
  // `index` in [0, device_count()).
  const GpuDeviceInfo& info(int index) const;
  const std::string& driver_version() const { return driver_version_; }  // "" if unknown
  const std::string& library_path() const { return library_path_; }      // what was dlopened
  // Optional NVML functions this library lacks under all accepted names (the
  // metrics they feed stay empty), e.g. {"nvmlDeviceGetTotalEnergyConsumption"}.
  const std::vector<std::string>& missing_symbols() const { return missing_symbols_; }
  // False when XID events cannot be watched (no event API, or no GPU accepted
  // the registration).
  bool xid_events_available() const { return event_set_ != nullptr; }
  // True when GPU `index` answers GPM (the library has the GPM functions, the
  // GPU says it supports them and its two sample buffers were allocated).
  bool gpm_supported(int index) const;
  // The shortest span GPM metrics are computed over (default 90 ms; NVIDIA
  // advises samples about 100 ms apart). Tests lower it.
  int64_t gpm_min_interval_ns() const { return gpm_min_interval_ns_; }
  void set_gpm_min_interval_ns(int64_t ns) { gpm_min_interval_ns_ = ns; }

  // Reads every metric of GPU `index`. InvalidArgument only for a bad index;
  // an unavailable metric or a lost GPU is reported inside the sample.
  Result<GpuSample> Sample(int index);
  // Sample() of every GPU, in index order.
  std::vector<GpuSample> SampleAll();

 private:
  struct Api;          // resolved NVML function pointers (nvml.cc)
  struct DeviceState;  // per-GPU handle and sampling state (nvml.cc)

  Nvml();
  Status Init(const std::string& library_path);
  Status Open(const std::string& library_path);
  Status ResolveSymbols();
  std::string ErrorString(int nvml_return) const;
  void LoadDevices(unsigned int count);
  void RegisterXidEvents();
  void DrainXidEvents();
  GpuSample ReadMetrics(DeviceState& dev);
  void ReadUtilizationSamples(DeviceState& dev, GpuSample* out);
  void ReadProcesses(DeviceState& dev, GpuSample* out);
  void ReadProcessUtilization(DeviceState& dev, std::vector<GpuProcess>* processes);
  void InitGpm(DeviceState& dev);
  void ReadGpm(DeviceState& dev, GpmMetrics* out);
  void FreeGpm();

  void* library_ = nullptr;  // dlopen handle
  std::unique_ptr<Api> api_;
  bool initialized_ = false;   // nvmlInit succeeded; nvmlShutdown is owed
  void* event_set_ = nullptr;  // nvmlEventSet_t
  std::string library_path_;
  std::string driver_version_;
  std::vector<std::string> missing_symbols_;
  std::vector<DeviceState> devices_;
  int64_t gpm_min_interval_ns_ = 90'000'000;
};

// NVML's C ABI, as far as this loader uses it. These declarations mirror the
// layouts and values of NVIDIA's public nvml.h (API version 12) so that
// saturate builds without the driver's headers; they must never change
// meaning. Enums are passed as int, as the C ABI does. Shared with the fake
// library the tests build (src/watch/testing/fake_nvml.cc).
namespace nvml_abi {

using nvmlReturn_t = int;
inline constexpr nvmlReturn_t NVML_SUCCESS = 0;
inline constexpr nvmlReturn_t NVML_ERROR_UNINITIALIZED = 1;
inline constexpr nvmlReturn_t NVML_ERROR_INVALID_ARGUMENT = 2;
inline constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
inline constexpr nvmlReturn_t NVML_ERROR_NO_PERMISSION = 4;
inline constexpr nvmlReturn_t NVML_ERROR_NOT_FOUND = 6;
inline constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;
inline constexpr nvmlReturn_t NVML_ERROR_DRIVER_NOT_LOADED = 9;
inline constexpr nvmlReturn_t NVML_ERROR_TIMEOUT = 10;
inline constexpr nvmlReturn_t NVML_ERROR_FUNCTION_NOT_FOUND = 13;
inline constexpr nvmlReturn_t NVML_ERROR_GPU_IS_LOST = 15;
inline constexpr nvmlReturn_t NVML_ERROR_UNKNOWN = 999;

struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
struct nvmlEventSet_st;
using nvmlEventSet_t = nvmlEventSet_st*;

struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};

struct nvmlMemory_t {  // v1, for nvmlDeviceGetMemoryInfo
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

// nvmlDeviceGetPciInfo_v2/_v3.
inline constexpr int NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE = 16;
inline constexpr int NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE = 32;
struct nvmlPciInfo_t {
  char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
};

// The unversioned ...RunningProcesses functions fill v1; _v2 and _v3 fill v2.
struct nvmlProcessInfo_v1_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
};
struct nvmlProcessInfo_v2_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
inline constexpr unsigned long long NVML_VALUE_NOT_AVAILABLE_ULL = ~0ULL;  // (-1)

struct nvmlProcessUtilizationSample_t {
  unsigned int pid;
  unsigned long long timeStamp;  // CPU time, microseconds
  unsigned int smUtil;
  unsigned int memUtil;
  unsigned int encUtil;
  unsigned int decUtil;
};

// nvmlSamplingType_t
inline constexpr int NVML_TOTAL_POWER_SAMPLES = 0;
inline constexpr int NVML_GPU_UTILIZATION_SAMPLES = 1;
inline constexpr int NVML_MEMORY_UTILIZATION_SAMPLES = 2;
// nvmlValueType_t
inline constexpr int NVML_VALUE_TYPE_DOUBLE = 0;
inline constexpr int NVML_VALUE_TYPE_UNSIGNED_INT = 1;
inline constexpr int NVML_VALUE_TYPE_UNSIGNED_LONG = 2;
inline constexpr int NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3;
inline constexpr int NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4;
inline constexpr int NVML_VALUE_TYPE_SIGNED_INT = 5;
inline constexpr int NVML_VALUE_TYPE_UNSIGNED_SHORT = 6;
union nvmlValue_t {
  double dVal;
  int siVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  signed long long sllVal;
  unsigned short usVal;
};
struct nvmlSample_t {
  unsigned long long timeStamp;  // CPU time, microseconds
  nvmlValue_t sampleValue;
};

// nvmlEventSetWait_v2 fills all of it; the legacy nvmlEventSetWait stops
// after eventData.
struct nvmlEventData_t {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;  // the XID for nvmlEventTypeXidCriticalError
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
inline constexpr unsigned long long nvmlEventTypeXidCriticalError = 0x8ULL;

inline constexpr int NVML_TEMPERATURE_GPU = 0;  // nvmlTemperatureSensors_t
inline constexpr int NVML_CLOCK_SM = 1;         // nvmlClockType_t
inline constexpr int NVML_CLOCK_MEM = 2;
inline constexpr int NVML_PCIE_UTIL_TX_BYTES = 0;  // nvmlPcieUtilCounter_t, KB/s
inline constexpr int NVML_PCIE_UTIL_RX_BYTES = 1;

// nvmlClocksEventReason* (formerly nvmlClocksThrottleReason*) bits.
inline constexpr unsigned long long nvmlClocksEventReasonGpuIdle = 0x1ULL;
inline constexpr unsigned long long nvmlClocksEventReasonApplicationsClocksSetting = 0x2ULL;
inline constexpr unsigned long long nvmlClocksEventReasonSwPowerCap = 0x4ULL;
inline constexpr unsigned long long nvmlClocksEventReasonHwSlowdown = 0x8ULL;
inline constexpr unsigned long long nvmlClocksEventReasonSyncBoost = 0x10ULL;
inline constexpr unsigned long long nvmlClocksEventReasonSwThermalSlowdown = 0x20ULL;
inline constexpr unsigned long long nvmlClocksEventReasonHwThermalSlowdown = 0x40ULL;
inline constexpr unsigned long long nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x80ULL;
inline constexpr unsigned long long nvmlClocksEventReasonDisplayClockSetting = 0x100ULL;

inline constexpr int NVML_DEVICE_NAME_BUFFER_SIZE = 96;  // the _V2 size; covers 64
inline constexpr int NVML_DEVICE_UUID_BUFFER_SIZE = 96;  // the _V2 size; covers 80
inline constexpr int NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE = 80;

// GPM (nvml.h "GPM Enums/Structs"; nvmlGpmQueryDeviceSupport,
// nvmlGpmSampleAlloc/Free, nvmlGpmSampleGet, nvmlGpmMetricsGet).
struct nvmlGpmSample_st;
struct nvmlGpmSample_t {  // a handle wrapped in a struct, passed by value
  nvmlGpmSample_st* handle;
};
struct nvmlGpmMetric_t {
  unsigned int metricId;    // IN: NVML_GPM_METRIC_*
  nvmlReturn_t nvmlReturn;  // OUT: this metric's status; value valid iff NVML_SUCCESS
  double value;             // OUT
  struct {
    char* shortName;
    char* longName;
    char* unit;
  } metricInfo;  // OUT, may be null
};
// The array length of version 1 (NVML_GPM_METRIC_MAX in the headers that
// introduced GPM; later headers enlarge it without changing the version).
// The driver reads numMetrics entries, so a shorter array is safe.
inline constexpr int NVML_GPM_METRIC_MAX_V1 = 98;
struct nvmlGpmMetricsGet_t {
  unsigned int version;     // NVML_GPM_METRICS_GET_VERSION
  unsigned int numMetrics;  // entries of metrics[] to fill
  nvmlGpmSample_t sample1;  // the older sample
  nvmlGpmSample_t sample2;  // the newer sample
  nvmlGpmMetric_t metrics[NVML_GPM_METRIC_MAX_V1];
};
inline constexpr unsigned int NVML_GPM_METRICS_GET_VERSION = 1;
struct nvmlGpmSupport_t {
  unsigned int version;  // NVML_GPM_SUPPORT_VERSION
  unsigned int isSupportedDevice;
};
inline constexpr unsigned int NVML_GPM_SUPPORT_VERSION = 1;
// nvmlGpmMetricId_t. Percentages 0.0-100.0; *_PER_SEC in MiB/s.
inline constexpr unsigned int NVML_GPM_METRIC_GRAPHICS_UTIL = 1;
inline constexpr unsigned int NVML_GPM_METRIC_SM_UTIL = 2;
inline constexpr unsigned int NVML_GPM_METRIC_SM_OCCUPANCY = 3;
inline constexpr unsigned int NVML_GPM_METRIC_INTEGER_UTIL = 4;
inline constexpr unsigned int NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5;
inline constexpr unsigned int NVML_GPM_METRIC_DFMA_TENSOR_UTIL = 6;
inline constexpr unsigned int NVML_GPM_METRIC_HMMA_TENSOR_UTIL = 7;
inline constexpr unsigned int NVML_GPM_METRIC_IMMA_TENSOR_UTIL = 9;
inline constexpr unsigned int NVML_GPM_METRIC_DRAM_BW_UTIL = 10;
inline constexpr unsigned int NVML_GPM_METRIC_FP64_UTIL = 11;
inline constexpr unsigned int NVML_GPM_METRIC_FP32_UTIL = 12;
inline constexpr unsigned int NVML_GPM_METRIC_FP16_UTIL = 13;
inline constexpr unsigned int NVML_GPM_METRIC_PCIE_TX_PER_SEC = 20;
inline constexpr unsigned int NVML_GPM_METRIC_PCIE_RX_PER_SEC = 21;
inline constexpr unsigned int NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC = 60;
inline constexpr unsigned int NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC = 61;

static_assert(sizeof(nvmlGpmSample_t) == sizeof(void*) && sizeof(nvmlGpmMetric_t) == 40);
static_assert(offsetof(nvmlGpmMetricsGet_t, metrics) == 24 && sizeof(nvmlGpmSupport_t) == 8);
static_assert(sizeof(nvmlProcessInfo_v1_t) == 16 && sizeof(nvmlProcessInfo_v2_t) == 24);
static_assert(sizeof(nvmlProcessUtilizationSample_t) == 32 && sizeof(nvmlSample_t) == 16);
static_assert(sizeof(nvmlPciInfo_t) == 68 && sizeof(nvmlEventData_t) == 32);

}  // namespace nvml_abi
}  // namespace saturate::watch

#endif  // SATURATE_WATCH_NVML_H_
