// A fake libnvidia-ml.so for nvml_test: exports the C symbols the loader in
// src/watch/nvml.cc resolves, answering with fixed, known values for two
// GPUs. It exists only because test machines have no GPU.
//
// Built twice: libfake_nvml.so exports the current (versioned) names, and
// libfake_nvml_old.so (FAKE_NVML_OLD_SYMBOLS) only the legacy ones, with the
// legacy struct layouts, to exercise the loader's fallbacks. The old build also
// lacks nvmlDeviceGetTotalEnergyConsumption.
//
// Tests steer it through the fake_nvml_* functions at the bottom (looked up
// with dlsym); fake_nvml_reset() restores the defaults. Values per GPU i:
//   name "Fake GPU <i>", uuid "GPU-fake-<i>", bus id "00000000:1<i>:00.0"
//   utilization gpu 40+10i %, memory 20+i %; memory 80 GiB total, (i+1) GiB used
//   power 250000+1000i mW, energy 1000000+i mJ, SM clock 1980 MHz, memory
//   clock 2619 MHz, PCIe rx 2000+i KB/s and tx 1000+i KB/s, 45+i degrees C
//   clocks-event reasons: GPU 0 sw_power_cap|hw_slowdown, GPU 1 gpu_idle
//   utilization samples (us, %): GPU 0 (100,10) (200,20) (300,30), GPU 1 none
//   processes on GPU 0: compute pid 1000 (2 GiB) and 1001 (1 GiB), graphics
//   pid 1001 (1 GiB); per-process utilization at t=5000: pid 1000 sm 70 mem
//   30, pid 1001 sm 5 mem 1, pid 999 (not listed) sm 50. GPU 1 has none.
//
// Processes that run the fake under `saturate watch` (the fleet test) plant
// patterns through the environment, read at each call:
//   FAKE_NVML_UTIL=<pct>                 every GPU's utilization, constant
//   FAKE_NVML_UTIL=square:<lo>:<hi>:<ms> alternating lo and hi, each for ms
//                                        (a saw-tooth GPU waiting on input)
//   FAKE_NVML_MEMORY_USED_GIB=<gib>      every GPU's memory in use
//   FAKE_NVML_GPM=<id>=<value>,...       GPM metric values (NVML units: %,
//                                        MiB/s) over the defaults below; a
//                                        value "x" makes that metric fail
//   FAKE_NVML_GPM=off                    no GPU supports GPM
//
// GPM (the current build only; the old one lacks the functions, as pre-R520
// drivers do): GPU 0 supports it, GPU 1 does not (a pre-Hopper GPU). Metrics
// between two samples of GPU 0, by id: graphics 1 -> 95, SM util 2 -> 20,
// occupancy 3 -> 15, any tensor 5 -> 2, HMMA 7 -> 1.5, DRAM 10 -> 30, fp64 11
// -> 0, fp32 12 -> 10, fp16 13 -> 0.5, PCIe tx 20 -> 100 MiB/s, rx 21 -> 200
// MiB/s; NVLink 60/61 answer NOT_SUPPORTED (a PCIe card). nvmlGpmMetricsGet
// fails with INVALID_ARGUMENT when sample2 is not newer than sample1.
// Thread-safety: none; the tests are single-threaded.
#include <time.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "watch/nvml.h"

using namespace saturate::watch::nvml_abi;  // NOLINT: mirrors nvml.h's global names

namespace {

constexpr int kMaxDevices = 2;
constexpr unsigned long long kGiB = 1ULL << 30;

struct FakeDevice {
  int index = 0;
  long calls = 0;        // device calls made so far
  long lose_after = -1;  // GPU_IS_LOST once `calls` exceeds this; -1: never
  std::vector<nvmlSample_t> util_samples;
};

struct PendingEvent {
  int device;
  unsigned long long xid;
};

struct FakeState {
  FakeDevice devices[kMaxDevices];
  int device_count = kMaxDevices;
  nvmlReturn_t init_result = NVML_SUCCESS;
  bool not_supported = false;  // power, energy, PCIe, processes, process utilization
  int init_version = 0;
  int process_query_version = 0;
  int event_set_count = 0;  // created and not freed
  std::vector<PendingEvent> events;
  bool xid_registered[kMaxDevices] = {};
  bool gpm_supported[kMaxDevices] = {true, false};
  int gpm_open_samples = 0;  // allocated and not freed
  long gpm_sample_gets = 0;
  long gpm_metrics_gets = 0;
  std::vector<std::pair<unsigned int, double>> gpm_overrides;  // set by the tests
};

// A GPM sample buffer: which device and when (a counter) it was read.
struct FakeGpmSample {
  int device = -1;
  long sequence = 0;  // 0: never read
};

FakeState& State() {
  static FakeState state;  // destroyed at dlclose
  return state;
}

void Reset() {
  FakeState& s = State();
  s = FakeState();
  for (int i = 0; i < kMaxDevices; ++i) s.devices[i].index = i;
  for (unsigned long long t : {100ULL, 200ULL, 300ULL}) {
    nvmlSample_t sample{};
    sample.timeStamp = t;
    sample.sampleValue.uiVal = static_cast<unsigned int>(t / 10);
    s.devices[0].util_samples.push_back(sample);
  }
}

// FAKE_NVML_UTIL (see the top of the file), as of now.
std::optional<unsigned int> PlantedUtil() {
  const char* spec = std::getenv("FAKE_NVML_UTIL");
  if (spec == nullptr) return std::nullopt;
  unsigned int lo = 0, hi = 0, ms = 0;
  if (std::sscanf(spec, "square:%u:%u:%u", &lo, &hi, &ms) == 3 && ms > 0) {
    timespec now{};
    clock_gettime(CLOCK_REALTIME, &now);
    const long long now_ms = now.tv_sec * 1000LL + now.tv_nsec / 1000000;
    return (now_ms / ms) % 2 == 0 ? lo : hi;
  }
  return static_cast<unsigned int>(std::strtoul(spec, nullptr, 10));
}

struct Initializer {
  Initializer() { Reset(); }
} initializer;

// GPM metric `id`: its value, or nullopt for NOT_SUPPORTED.
[[maybe_unused]] std::optional<double> GpmValue(unsigned int id) {
  std::optional<double> v;
  switch (id) {
    case 1:
      v = 95;
      break;
    case 2:
      v = 20;
      break;
    case 3:
      v = 15;
      break;
    case 5:
      v = 2;
      break;
    case 7:
      v = 1.5;
      break;
    case 10:
      v = 30;
      break;
    case 11:
      v = 0;
      break;
    case 12:
      v = 10;
      break;
    case 13:
      v = 0.5;
      break;
    case 20:
      v = 100;
      break;
    case 21:
      v = 200;
      break;
    default:
      break;
  }
  for (const auto& [oid, value] : State().gpm_overrides) {
    if (oid == id) v = value;
  }
  if (const char* spec = std::getenv("FAKE_NVML_GPM")) {
    for (const char* p = spec; *p != '\0';) {
      char* end = nullptr;
      const unsigned long oid = std::strtoul(p, &end, 10);
      if (end == p || *end != '=') break;
      p = end + 1;
      if (*p == 'x') {
        if (oid == id) v.reset();
        ++p;
      } else {
        const double value = std::strtod(p, &end);
        if (end == p) break;
        if (oid == id) v = value;
        p = end;
      }
      if (*p == ',') ++p;
    }
  }
  return v;
}

[[maybe_unused]] bool GpmOff() {
  const char* spec = std::getenv("FAKE_NVML_GPM");
  return spec != nullptr && std::strcmp(spec, "off") == 0;
}

// The FakeDevice behind a handle, counting the call; null for a bad handle.
FakeDevice* Dev(nvmlDevice_t handle) {
  auto* dev = reinterpret_cast<FakeDevice*>(handle);
  if (dev == nullptr) return nullptr;
  ++dev->calls;
  return dev;
}

// What a device call answers before doing its work.
nvmlReturn_t Check(FakeDevice* dev, bool optional_metric = false) {
  if (dev == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (dev->lose_after >= 0 && dev->calls > dev->lose_after) return NVML_ERROR_GPU_IS_LOST;
  if (optional_metric && State().not_supported) return NVML_ERROR_NOT_SUPPORTED;
  return NVML_SUCCESS;
}

nvmlReturn_t CopyString(const char* text, char* buf, unsigned int length) {
  if (std::strlen(text) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::snprintf(buf, length, "%s", text);
  return NVML_SUCCESS;
}

nvmlReturn_t Init(int version) {
  State().init_version = version;
  return State().init_result;
}

nvmlReturn_t GetCount(unsigned int* count) {
  *count = static_cast<unsigned int>(State().device_count);
  return NVML_SUCCESS;
}

nvmlReturn_t GetHandle(unsigned int index, nvmlDevice_t* device) {
  if (static_cast<int>(index) >= State().device_count) return NVML_ERROR_INVALID_ARGUMENT;
  *device = reinterpret_cast<nvmlDevice_t>(&State().devices[index]);
  return NVML_SUCCESS;
}

struct FakeProcess {
  unsigned int pid;
  unsigned long long used;
};

// Fills an NVML process array of either layout.
template <typename Info>
nvmlReturn_t Processes(nvmlDevice_t device, unsigned int* count, Info* infos, bool graphics,
                       int version) {
  FakeDevice* dev = Dev(device);
  if (nvmlReturn_t rc = Check(dev, true); rc != NVML_SUCCESS) return rc;
  State().process_query_version = version;
  std::vector<FakeProcess> procs;
  if (dev->index == 0) {
    if (graphics) {
      procs = {{1001, 1 * kGiB}};
    } else {
      procs = {{1000, 2 * kGiB}, {1001, 1 * kGiB}};
    }
  }
  const unsigned int capacity = *count;
  *count = static_cast<unsigned int>(procs.size());
  if (procs.size() > capacity || (infos == nullptr && !procs.empty())) {
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (size_t i = 0; i < procs.size(); ++i) {
    infos[i] = Info{};
    infos[i].pid = procs[i].pid;
    infos[i].usedGpuMemory = procs[i].used;
  }
  return NVML_SUCCESS;
}

nvmlReturn_t WaitEvent(nvmlEventSet_t set, nvmlEventData_t* data, size_t data_size) {
  if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  FakeState& s = State();
  for (size_t i = 0; i < s.events.size(); ++i) {
    const PendingEvent event = s.events[i];
    if (!s.xid_registered[event.device]) continue;
    s.events.erase(s.events.begin() + static_cast<long>(i));
    nvmlEventData_t full{};
    full.device = reinterpret_cast<nvmlDevice_t>(&s.devices[event.device]);
    full.eventType = nvmlEventTypeXidCriticalError;
    full.eventData = event.xid;
    full.gpuInstanceId = full.computeInstanceId = 0xFFFFFFFFu;
    std::memcpy(data, &full, data_size);  // the legacy call fills only its shorter struct
    return NVML_SUCCESS;
  }
  return NVML_ERROR_TIMEOUT;
}

nvmlReturn_t PciInfo(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  FakeDevice* dev = Dev(device);
  if (nvmlReturn_t rc = Check(dev); rc != NVML_SUCCESS) return rc;
  *pci = nvmlPciInfo_t{};
  pci->bus = 0x10u + static_cast<unsigned int>(dev->index);
  std::snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "0000:%02X:00.0", pci->bus);
  std::snprintf(pci->busId, sizeof(pci->busId), "00000000:%02X:00.0", pci->bus);
  return NVML_SUCCESS;
}
nvmlReturn_t ClocksReasons(nvmlDevice_t device, unsigned long long* reasons) {
  FakeDevice* dev = Dev(device);
  if (nvmlReturn_t rc = Check(dev); rc != NVML_SUCCESS) return rc;
  *reasons = dev->index == 0 ? (nvmlClocksEventReasonSwPowerCap | nvmlClocksEventReasonHwSlowdown)
                             : nvmlClocksEventReasonGpuIdle;
  return NVML_SUCCESS;
}
}  // namespace

extern "C" {

// ---- versioned or legacy entry points --------------------------------------

#ifndef FAKE_NVML_OLD_SYMBOLS
nvmlReturn_t nvmlInit_v2() { return Init(2); }
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) { return GetCount(count); }
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  return GetHandle(index, device);
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* count,
                                                     nvmlProcessInfo_v2_t* infos) {
  return Processes(device, count, infos, false, 3);
}
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int* count,
                                                      nvmlProcessInfo_v2_t* infos) {
  return Processes(device, count, infos, true, 3);
}
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data, unsigned int) {
  return WaitEvent(set, data, sizeof(nvmlEventData_t));
}
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return PciInfo(device, pci);
}
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                    unsigned long long* reasons) {
  return ClocksReasons(device, reasons);
}
nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long* mj) {
  FakeDevice* dev = Dev(device);
  if (nvmlReturn_t rc = Check(dev, true); rc != NVML_SUCCESS) return rc;
  *mj = 1000000ULL + static_cast<unsigned long long>(dev->index);
  return NVML_SUCCESS;
}

// ---- GPM ----------------------------------------------------------------------

nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t* support) {
  FakeDevice* dev = Dev(device);
  if (nvmlReturn_t rc = Check(dev); rc != NVML_SUCCESS) return rc;
  if (support == nullptr || support->version != NVML_GPM_SUPPORT_VERSION) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  support->isSupportedDevice = State().gpm_supported[dev->index] && !GpmOff() ? 1 : 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t* sample) {
  if (sample == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  sample->handle = reinterpret_cast<nvmlGpmSample_st*>(new FakeGpmSample());
  ++State().gpm_open_samples;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample) {
  if (sample.handle == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  delete reinterpret_cast<FakeGpmSample*>(sample.handle);
  --State().gpm_open_samples;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t sample) {
  FakeDevice* dev = Dev(device);
  if (nvmlReturn_t rc = Check(dev); rc != NVML_SUCCESS) return rc;
  if (sample.handle == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!State().gpm_supported[dev->index] || GpmOff()) return NVML_ERROR_NOT_SUPPORTED;
  auto* s = reinterpret_cast<FakeGpmSample*>(sample.handle);
  s->device = dev->index;
  s->sequence = ++State().gpm_sample_gets;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t* get) {
  if (get == nullptr || get->version != NVML_GPM_METRICS_GET_VERSION ||
      get->numMetrics > NVML_GPM_METRIC_MAX_V1 || get->sample1.handle == nullptr ||
      get->sample2.handle == nullptr) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  const auto* s1 = reinterpret_cast<const FakeGpmSample*>(get->sample1.handle);
  const auto* s2 = reinterpret_cast<const FakeGpmSample*>(get->sample2.handle);
  if (s1->sequence == 0 || s2->sequence <= s1->sequence || s1->device != s2->device) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  ++State().gpm_metrics_gets;
  for (unsigned int i = 0; i < get->numMetrics; ++i) {
    nvmlGpmMetric_t& m = get->metrics[i];
    const std::optional<double> v = GpmValue(m.metricId);
    m.nvmlReturn = v ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
    m.value = v.value_or(0);
    m.metricInfo = {nullptr, nullptr, nullptr};
  }
  return NVML_SUCCESS;
}
#endif

// Legacy names: present in both builds (as in real drivers, which keep them),
// but the current build's loader must prefer the versioned ones above.
nvmlReturn_t nvmlInit() { return Init(1); }
nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) { return GetCount(count); }
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device) {
  return GetHandle(index, device);
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int* count,
                                                  nvmlProcessInfo_v1_t* infos) {
  return Processes(device, count, infos, false, 1);
}
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device, unsigned int* count,
                                                   nvmlProcessInfo_v1_t* infos) {
  return Processes(device, count, infos, true, 1);
}
nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t* data, unsigned int) {
  // The v1 struct ends after eventData.
  return WaitEvent(set, data, offsetof(nvmlEventData_t, gpuInstanceId));
}

nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return PciInfo(device, pci);
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                       unsigned long long* reasons) {
  return ClocksReasons(device, reasons);
}

// ---- entry points with one name ---------------------------------------------

nvmlReturn_t nvmlShutdown() { return NVML_SUCCESS; }

const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    default:
      return "Unknown Error";
  }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  return CopyString("550.54.15-fake", version, length);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  FakeDevice* dev = Dev(device);
  if (nvmlReturn_t rc = Check(dev); rc != NVML_SUCCESS) return rc;
  char text[32];
  std::snprintf(text, sizeof(text), "Fake GPU %d", dev->index);
  return CopyString(text, name, length);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  FakeDevice* dev = Dev(device);
  if (nvmlReturn_t rc = Check(dev); rc != NVML_SUCCESS) return rc;
  char text[32];
  std::snprintf(text, sizeof(text), "GPU-fake-%d", dev->index);
  return CopyString(text, uuid, length);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  FakeDevice* dev = Dev(device);
  if (nvmlReturn_t rc = Check(dev); rc != NVML_SUCCESS) return rc;
  memory->total = 80 * kGiB;
  memory->used = static_cast<unsigned long long>(dev->index + 1) * kGiB;
  if (const char* gib = std::getenv("FAKE_NVML_MEMORY_USED_GIB")) {
    memory->used = std::min(memory->total, std::strtoull(gib, nullptr, 10) * kGiB);
  }
  memory->free = memory->total - memory->used;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* util) {
  FakeDevice* dev = Dev(device);
  if (nvmlReturn_t rc = Check(dev); rc != NVML_SUCCESS) return rc;
  util->gpu = PlantedUtil().value_or(40u + 10u * static_cast<unsigned int>(dev->index));
  util->memory = 20u + static_cast<unsigned int>(dev->index);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t device, int type, unsigned long long last_seen,
                                  int* value_type, unsigned int* count, nvmlSample_t* samples) {
  FakeDevice* dev = Dev(device);
  if (nvmlReturn_t rc = Check(dev); rc != NVML_SUCCESS) return rc;
  if (type != NVML_GPU_UTILIZATION_SAMPLES) return NVML_ERROR_NOT_SUPPORTED;
  std::vector<nvmlSample_t> newer;
  for (const nvmlSample_t& s : dev->util_samples) {
    if (s.timeStamp > last_seen) newer.push_back(s);
  }
  if (newer.empty()) return NVML_ERROR_NOT_FOUND;
  *value_type = NVML_VALUE_TYPE_UNSIGNED_INT;
  if (samples == nullptr) {
    *count = static_cast<unsigned int>(newer.size());
    return NVML_SUCCESS;
  }
  const size_t n = std::min<size_t>(*count, newer.size());
  std::memcpy(samples, newer.data(), n * sizeof(nvmlSample_t));
  *count = static_cast<unsigned int>(n);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* milliwatts) {
  FakeDevice* dev = Dev(device);
  if (nvmlReturn_t rc = Check(dev, true); rc != NVML_SUCCESS) return rc;
  *milliwatts = 250000u + 1000u * static_cast<unsigned int>(dev->index);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, int type, unsigned int* mhz) {
  FakeDevice* dev = Dev(device);
  if (nvmlReturn_t rc = Check(dev); rc != NVML_SUCCESS) return rc;
  if (type == NVML_CLOCK_SM) {
    *mhz = 1980;
  } else if (type == NVML_CLOCK_MEM) {
    *mhz = 2619;
  } else {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, int counter, unsigned int* kbps) {
  FakeDevice* dev = Dev(device);
  if (nvmlReturn_t rc = Check(dev, true); rc != NVML_SUCCESS) return rc;
  const unsigned int base = counter == NVML_PCIE_UTIL_RX_BYTES ? 2000u : 1000u;
  *kbps = base + static_cast<unsigned int>(dev->index);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned int* celsius) {
  FakeDevice* dev = Dev(device);
  if (nvmlReturn_t rc = Check(dev); rc != NVML_SUCCESS) return rc;
  if (sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
  *celsius = 45u + static_cast<unsigned int>(dev->index);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                             nvmlProcessUtilizationSample_t* utilization,
                                             unsigned int* count, unsigned long long last_seen) {
  FakeDevice* dev = Dev(device);
  if (nvmlReturn_t rc = Check(dev, true); rc != NVML_SUCCESS) return rc;
  std::vector<nvmlProcessUtilizationSample_t> newer;
  if (dev->index == 0 && last_seen < 5000) {
    newer = {{1000, 5000, 70, 30, 0, 0}, {1001, 5000, 5, 1, 0, 0}, {999, 5000, 50, 10, 0, 0}};
  }
  if (newer.empty()) return NVML_ERROR_NOT_FOUND;
  if (utilization == nullptr || *count < newer.size()) {
    *count = static_cast<unsigned int>(newer.size());
    return utilization == nullptr ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
  }
  std::memcpy(utilization, newer.data(), newer.size() * sizeof(newer[0]));
  *count = static_cast<unsigned int>(newer.size());
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  static int token;
  *set = reinterpret_cast<nvmlEventSet_t>(&token);
  ++State().event_set_count;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types,
                                      nvmlEventSet_t set) {
  FakeDevice* dev = Dev(device);
  if (nvmlReturn_t rc = Check(dev); rc != NVML_SUCCESS) return rc;
  if (set == nullptr || types != nvmlEventTypeXidCriticalError) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  State().xid_registered[dev->index] = true;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t) {
  --State().event_set_count;
  return NVML_SUCCESS;
}

// ---- test controls --------------------------------------------------------

void fake_nvml_reset() { Reset(); }
void fake_nvml_set_device_count(int count) { State().device_count = count; }
void fake_nvml_set_init_result(int result) { State().init_result = result; }
// Power, energy, PCIe, process lists and process utilization answer NOT_SUPPORTED.
void fake_nvml_set_not_supported(int on) { State().not_supported = on != 0; }
// GPU `index` answers GPU_IS_LOST to every device call after `calls` more.
void fake_nvml_lose_gpu_after(int index, long calls) {
  FakeDevice& dev = State().devices[index];
  dev.lose_after = dev.calls + calls;
}
long fake_nvml_device_calls(int index) { return State().devices[index].calls; }
void fake_nvml_push_util_sample(int index, unsigned long long time_us, unsigned int pct) {
  nvmlSample_t sample{};
  sample.timeStamp = time_us;
  sample.sampleValue.uiVal = pct;
  State().devices[index].util_samples.push_back(sample);
}
void fake_nvml_push_xid(int index, unsigned long long xid) {
  State().events.push_back({index, xid});
}
// Which nvmlInit was called (2: nvmlInit_v2, 1: nvmlInit) and which process
// query version (3 or 1) was used last.
int fake_nvml_init_version() { return State().init_version; }
int fake_nvml_process_query_version() { return State().process_query_version; }
int fake_nvml_open_event_sets() { return State().event_set_count; }
// GPM: whether GPU `index` supports it (read at nvmlGpmQueryDeviceSupport),
// a metric's value (NVML units) over the default, buffers not freed, and the
// calls made.
void fake_nvml_set_gpm_supported(int index, int on) { State().gpm_supported[index] = on != 0; }
void fake_nvml_set_gpm_metric(unsigned int id, double value) {
  State().gpm_overrides.emplace_back(id, value);
}
int fake_nvml_gpm_open_samples() { return State().gpm_open_samples; }
long fake_nvml_gpm_sample_gets() { return State().gpm_sample_gets; }
long fake_nvml_gpm_metrics_gets() { return State().gpm_metrics_gets; }

}  // extern "C"
