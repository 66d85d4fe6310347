#include "watch/nvml.h"

#include <dlfcn.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <map>
#include <utility>

namespace saturate::watch {
namespace abi = nvml_abi;

namespace {

constexpr const char* kDefaultLibraries[] = {"libnvidia-ml.so.1", "libnvidia-ml.so"};
// Processes may start between NVML's "how many" answer and the read.
constexpr unsigned int kArraySlack = 8;
constexpr int kArrayAttempts = 4;
// Bounds the work of one Sample() when the driver floods events.
constexpr int kMaxEventsPerDrain = 64;

// Resolves the first of `names` the library exports into *fn.
template <typename Fn>
bool Resolve(void* library, std::initializer_list<const char*> names, Fn** fn) {
  for (const char* name : names) {
    if (void* symbol = dlsym(library, name)) {
      *fn = reinterpret_cast<Fn*>(symbol);
      return true;
    }
  }
  return false;
}

template <typename T, typename F>
auto Transform(const std::optional<T>& value, F f) -> std::optional<decltype(f(*value))> {
  if (!value) return std::nullopt;
  return f(*value);
}

double ValueAsDouble(int value_type, const abi::nvmlValue_t& v) {
  switch (value_type) {
    case abi::NVML_VALUE_TYPE_DOUBLE:
      return v.dVal;
    case abi::NVML_VALUE_TYPE_UNSIGNED_LONG:
      return static_cast<double>(v.ulVal);
    case abi::NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
      return static_cast<double>(v.ullVal);
    case abi::NVML_VALUE_TYPE_SIGNED_LONG_LONG:
      return static_cast<double>(v.sllVal);
    case abi::NVML_VALUE_TYPE_SIGNED_INT:
      return v.siVal;
    case abi::NVML_VALUE_TYPE_UNSIGNED_SHORT:
      return v.usVal;
    default:  // NVML_VALUE_TYPE_UNSIGNED_INT, what utilization samples use
      return v.uiVal;
  }
}

// NVML fills fixed-size char buffers; do not trust the terminator.
std::string FromCString(const char* buf, size_t size) {
  return std::string(buf, strnlen(buf, size));
}

uint64_t KibToBytes(unsigned int kib) { return uint64_t{kib} * 1024; }

int64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// The GPM metrics read, where each lands in GpmMetrics, and the factor to
// its unit (MiB/s -> bytes/s for the rates).
struct GpmField {
  unsigned int id;
  std::optional<double> GpmMetrics::*field;
  double scale;
};
constexpr double kMiB = 1024.0 * 1024.0;
constexpr GpmField kGpmFields[] = {
    {abi::NVML_GPM_METRIC_GRAPHICS_UTIL, &GpmMetrics::graphics_active_pct, 1},
    {abi::NVML_GPM_METRIC_SM_UTIL, &GpmMetrics::sm_active_pct, 1},
    {abi::NVML_GPM_METRIC_SM_OCCUPANCY, &GpmMetrics::sm_occupancy_pct, 1},
    {abi::NVML_GPM_METRIC_ANY_TENSOR_UTIL, &GpmMetrics::tensor_active_pct, 1},
    {abi::NVML_GPM_METRIC_HMMA_TENSOR_UTIL, &GpmMetrics::hmma_tensor_active_pct, 1},
    {abi::NVML_GPM_METRIC_DRAM_BW_UTIL, &GpmMetrics::dram_active_pct, 1},
    {abi::NVML_GPM_METRIC_FP64_UTIL, &GpmMetrics::fp64_active_pct, 1},
    {abi::NVML_GPM_METRIC_FP32_UTIL, &GpmMetrics::fp32_active_pct, 1},
    {abi::NVML_GPM_METRIC_FP16_UTIL, &GpmMetrics::fp16_active_pct, 1},
    {abi::NVML_GPM_METRIC_PCIE_TX_PER_SEC, &GpmMetrics::pcie_tx_bytes_per_s, kMiB},
    {abi::NVML_GPM_METRIC_PCIE_RX_PER_SEC, &GpmMetrics::pcie_rx_bytes_per_s, kMiB},
    {abi::NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, &GpmMetrics::nvlink_tx_bytes_per_s, kMiB},
    {abi::NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, &GpmMetrics::nvlink_rx_bytes_per_s, kMiB},
};
static_assert(std::size(kGpmFields) <= abi::NVML_GPM_METRIC_MAX_V1);

}  // namespace

struct Nvml::Api {
  using Ret = abi::nvmlReturn_t;
  using Dev = abi::nvmlDevice_t;
  using Set = abi::nvmlEventSet_t;

  // Required.
  Ret (*init)() = nullptr;
  Ret (*shutdown)() = nullptr;
  Ret (*get_count)(unsigned int*) = nullptr;
  Ret (*get_handle_by_index)(unsigned int, Dev*) = nullptr;
  // Optional.
  const char* (*error_string)(Ret) = nullptr;
  Ret (*get_driver_version)(char*, unsigned int) = nullptr;
  Ret (*get_name)(Dev, char*, unsigned int) = nullptr;
  Ret (*get_uuid)(Dev, char*, unsigned int) = nullptr;
  Ret (*get_pci_info)(Dev, abi::nvmlPciInfo_t*) = nullptr;
  Ret (*get_memory_info)(Dev, abi::nvmlMemory_t*) = nullptr;
  Ret (*get_utilization_rates)(Dev, abi::nvmlUtilization_t*) = nullptr;
  Ret (*get_samples)(Dev, int, unsigned long long, int*, unsigned int*,
                     abi::nvmlSample_t*) = nullptr;
  Ret (*get_power_usage)(Dev, unsigned int*) = nullptr;
  Ret (*get_total_energy_consumption)(Dev, unsigned long long*) = nullptr;
  Ret (*get_clock_info)(Dev, int, unsigned int*) = nullptr;
  Ret (*get_pcie_throughput)(Dev, int, unsigned int*) = nullptr;
  Ret (*get_clocks_event_reasons)(Dev, unsigned long long*) = nullptr;
  Ret (*get_temperature)(Dev, int, unsigned int*) = nullptr;
  // _v3/_v2 fill nvmlProcessInfo_v2_t; the unversioned legacy names fill v1.
  Ret (*get_compute_processes)(Dev, unsigned int*, abi::nvmlProcessInfo_v2_t*) = nullptr;
  Ret (*get_compute_processes_v1)(Dev, unsigned int*, abi::nvmlProcessInfo_v1_t*) = nullptr;
  Ret (*get_graphics_processes)(Dev, unsigned int*, abi::nvmlProcessInfo_v2_t*) = nullptr;
  Ret (*get_graphics_processes_v1)(Dev, unsigned int*, abi::nvmlProcessInfo_v1_t*) = nullptr;
  Ret (*get_process_utilization)(Dev, abi::nvmlProcessUtilizationSample_t*, unsigned int*,
                                 unsigned long long) = nullptr;
  Ret (*event_set_create)(Set*) = nullptr;
  Ret (*register_events)(Dev, unsigned long long, Set) = nullptr;
  Ret (*event_set_wait)(Set, abi::nvmlEventData_t*, unsigned int) = nullptr;
  Ret (*event_set_free)(Set) = nullptr;
  // GPM: all five, or none (see ResolveSymbols).
  Ret (*gpm_query_device_support)(Dev, abi::nvmlGpmSupport_t*) = nullptr;
  Ret (*gpm_sample_alloc)(abi::nvmlGpmSample_t*) = nullptr;
  Ret (*gpm_sample_free)(abi::nvmlGpmSample_t) = nullptr;
  Ret (*gpm_sample_get)(Dev, abi::nvmlGpmSample_t) = nullptr;
  Ret (*gpm_metrics_get)(abi::nvmlGpmMetricsGet_t*) = nullptr;
};

struct Nvml::DeviceState {
  GpuDeviceInfo info;
  abi::nvmlDevice_t handle = nullptr;
  bool lost = false;  // once set, the driver is not asked about this GPU again
  unsigned long long last_util_sample_us = 0;     // newest nvmlDeviceGetSamples timestamp seen
  unsigned long long last_process_sample_us = 0;  // same, nvmlDeviceGetProcessUtilization
  std::vector<XidEvent> pending_xids;
  // GPM: two sample buffers when the GPU supports it; `gpm_older` holds the
  // previous reading once gpm_older_ns > 0.
  bool gpm = false;
  abi::nvmlGpmSample_t gpm_older{};
  abi::nvmlGpmSample_t gpm_newer{};
  int64_t gpm_older_ns = 0;  // CLOCK_MONOTONIC of gpm_older; 0: none yet

  // Notes a lost GPU; true when `rc` is success.
  bool Succeeded(abi::nvmlReturn_t rc) {
    if (rc == abi::NVML_ERROR_GPU_IS_LOST) lost = true;
    return rc == abi::NVML_SUCCESS;
  }

  // Calls NVML device function `fn` (null when the library lacks it) as
  // fn(handle, args...); true on success.
  template <typename Fn, typename... Args>
  bool Call(Fn* fn, Args... args) {
    if (fn == nullptr || lost) return false;
    return Succeeded(fn(handle, args...));
  }

  // fn(handle, args..., &value) for an NVML getter with one output.
  template <typename T, typename Fn, typename... Args>
  std::optional<T> Read(Fn* fn, Args... args) {
    T value{};
    if (!Call(fn, args..., &value)) return std::nullopt;
    return value;
  }

  // Reads an NVML array through `query(buffer, &count)`, which follows NVML's
  // convention: a null buffer asks for the count; INSUFFICIENT_SIZE (with the
  // needed count) means "retry with a bigger buffer".
  template <typename T, typename Query>
  bool ReadArray(Query query, std::vector<T>* out) {
    out->clear();
    if (lost) return false;
    unsigned int count = 0;
    abi::nvmlReturn_t rc = query(nullptr, &count);
    for (int attempt = 0; attempt < kArrayAttempts; ++attempt) {
      if (rc == abi::NVML_SUCCESS && (count == 0 || !out->empty())) {
        out->resize(std::min<size_t>(count, out->size()));
        return true;
      }
      if (rc != abi::NVML_SUCCESS && rc != abi::NVML_ERROR_INSUFFICIENT_SIZE) {
        return Succeeded(rc);
      }
      out->assign(count + kArraySlack, T{});
      count = static_cast<unsigned int>(out->size());
      rc = query(out->data(), &count);
    }
    return false;
  }

  std::string ReadString(abi::nvmlReturn_t (*fn)(abi::nvmlDevice_t, char*, unsigned int)) {
    char buf[abi::NVML_DEVICE_UUID_BUFFER_SIZE] = {};
    if (!Call(fn, buf, static_cast<unsigned int>(sizeof(buf)))) return "";
    return FromCString(buf, sizeof(buf));
  }

  // Adds the processes one NVML process list reports to `by_pid`.
  template <typename Info>
  bool ListProcesses(abi::nvmlReturn_t (*fn)(abi::nvmlDevice_t, unsigned int*, Info*),
                     std::map<uint32_t, GpuProcess>* by_pid) {
    if (fn == nullptr) return false;
    std::vector<Info> infos;
    auto query = [&](Info* buf, unsigned int* count) { return fn(handle, count, buf); };
    if (!ReadArray(query, &infos)) return false;
    for (const Info& p : infos) {
      GpuProcess& proc = (*by_pid)[p.pid];
      proc.pid = p.pid;
      if (p.usedGpuMemory != abi::NVML_VALUE_NOT_AVAILABLE_ULL) {
        proc.used_memory_bytes =
            std::max<uint64_t>(proc.used_memory_bytes.value_or(0), p.usedGpuMemory);
      }
    }
    return true;
  }

  // The preferred (v2 layout) list when the library has it, else the legacy one.
  template <typename FnV2, typename FnV1>
  bool ListProcesses(FnV2* v2, FnV1* v1, std::map<uint32_t, GpuProcess>* by_pid) {
    return v2 != nullptr ? ListProcesses(v2, by_pid) : ListProcesses(v1, by_pid);
  }
};

std::vector<std::string> ClocksEventReasonNames(uint64_t mask) {
  static constexpr struct {
    uint64_t bit;
    const char* name;
  } kNames[] = {
      {abi::nvmlClocksEventReasonGpuIdle, "gpu_idle"},
      {abi::nvmlClocksEventReasonApplicationsClocksSetting, "applications_clocks"},
      {abi::nvmlClocksEventReasonSwPowerCap, "sw_power_cap"},
      {abi::nvmlClocksEventReasonHwSlowdown, "hw_slowdown"},
      {abi::nvmlClocksEventReasonSyncBoost, "sync_boost"},
      {abi::nvmlClocksEventReasonSwThermalSlowdown, "sw_thermal"},
      {abi::nvmlClocksEventReasonHwThermalSlowdown, "hw_thermal"},
      {abi::nvmlClocksEventReasonHwPowerBrakeSlowdown, "hw_power_brake"},
      {abi::nvmlClocksEventReasonDisplayClockSetting, "display_clocks"},
  };
  std::vector<std::string> names;
  for (int i = 0; i < 64; ++i) {
    const uint64_t bit = uint64_t{1} << i;
    if ((mask & bit) == 0) continue;
    const auto* known = std::find_if(std::begin(kNames), std::end(kNames),
                                     [bit](const auto& n) { return n.bit == bit; });
    names.push_back(known != std::end(kNames) ? known->name : "bit_" + std::to_string(i));
  }
  return names;
}

bool GpmMetrics::any() const {
  for (const GpmField& f : kGpmFields) {
    if (this->*f.field) return true;
  }
  return false;
}

Nvml::Nvml() : api_(std::make_unique<Api>()) {}

Nvml::~Nvml() {
  FreeGpm();
  if (event_set_ != nullptr && api_->event_set_free != nullptr) {
    api_->event_set_free(static_cast<abi::nvmlEventSet_t>(event_set_));
  }
  if (initialized_) api_->shutdown();
  if (library_ != nullptr) dlclose(library_);
}

Result<std::unique_ptr<Nvml>> Nvml::Load(const std::string& library_path) {
  std::unique_ptr<Nvml> nvml(new Nvml());
  SATURATE_RETURN_IF_ERROR(nvml->Init(library_path));
  return nvml;
}

int Nvml::device_count() const { return static_cast<int>(devices_.size()); }

const GpuDeviceInfo& Nvml::info(int index) const { return devices_[index].info; }

Status Nvml::Open(const std::string& library_path) {
  std::vector<std::string> candidates;
  if (library_path.empty()) {
    candidates.assign(std::begin(kDefaultLibraries), std::end(kDefaultLibraries));
  } else {
    candidates.push_back(library_path);
  }
  std::string first_error;
  for (const std::string& path : candidates) {
    dlerror();  // clear
    library_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library_ != nullptr) {
      library_path_ = path;
      return Status::OK();
    }
    if (first_error.empty()) {
      const char* error = dlerror();
      first_error = error != nullptr ? error : "unknown error";
    }
  }
  const std::string what =
      library_path.empty() ? candidates.front() + " not found" : "cannot load " + library_path;
  return Status::Unimplemented("no NVIDIA driver: " + what + " (dlopen: " + first_error + ")");
}

Status Nvml::ResolveSymbols() {
  Api& a = *api_;
  std::string missing_required;
  auto required = [&](auto** fn, std::initializer_list<const char*> names) {
    if (!Resolve(library_, names, fn) && missing_required.empty()) {
      missing_required = *names.begin();
    }
  };
  auto optional = [&](auto** fn, std::initializer_list<const char*> names) {
    if (!Resolve(library_, names, fn)) missing_symbols_.push_back(*names.begin());
  };
  // Both layouts of one process list count as one symbol for missing_symbols().
  auto processes = [&](auto** v2, auto** v1, const char* v3_name, const char* v2_name,
                       const char* v1_name) {
    const bool found_v2 = Resolve(library_, {v3_name, v2_name}, v2);
    if (!Resolve(library_, {v1_name}, v1) && !found_v2) missing_symbols_.push_back(v3_name);
  };

  required(&a.init, {"nvmlInit_v2", "nvmlInit"});
  required(&a.shutdown, {"nvmlShutdown"});
  required(&a.get_count, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"});
  required(&a.get_handle_by_index, {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"});
  if (!missing_required.empty()) {
    return Status::Unimplemented("no usable NVIDIA driver: " + library_path_ + " lacks " +
                                 missing_required);
  }
  optional(&a.error_string, {"nvmlErrorString"});
  optional(&a.get_driver_version, {"nvmlSystemGetDriverVersion"});
  optional(&a.get_name, {"nvmlDeviceGetName"});
  optional(&a.get_uuid, {"nvmlDeviceGetUUID"});
  optional(&a.get_pci_info, {"nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2"});
  optional(&a.get_memory_info, {"nvmlDeviceGetMemoryInfo"});
  optional(&a.get_utilization_rates, {"nvmlDeviceGetUtilizationRates"});
  optional(&a.get_samples, {"nvmlDeviceGetSamples"});
  optional(&a.get_power_usage, {"nvmlDeviceGetPowerUsage"});
  optional(&a.get_total_energy_consumption, {"nvmlDeviceGetTotalEnergyConsumption"});
  optional(&a.get_clock_info, {"nvmlDeviceGetClockInfo"});
  optional(&a.get_pcie_throughput, {"nvmlDeviceGetPcieThroughput"});
  optional(&a.get_clocks_event_reasons,
           {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"});
  optional(&a.get_temperature, {"nvmlDeviceGetTemperature"});
  processes(&a.get_compute_processes, &a.get_compute_processes_v1,
            "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
            "nvmlDeviceGetComputeRunningProcesses");
  processes(&a.get_graphics_processes, &a.get_graphics_processes_v1,
            "nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v2",
            "nvmlDeviceGetGraphicsRunningProcesses");
  optional(&a.get_process_utilization, {"nvmlDeviceGetProcessUtilization"});
  optional(&a.event_set_create, {"nvmlEventSetCreate"});
  optional(&a.register_events, {"nvmlDeviceRegisterEvents"});
  optional(&a.event_set_wait, {"nvmlEventSetWait_v2", "nvmlEventSetWait"});
  optional(&a.event_set_free, {"nvmlEventSetFree"});
  // GPM is usable only whole; one name stands for the group.
  const bool resolved[] = {
      Resolve(library_, {"nvmlGpmQueryDeviceSupport"}, &a.gpm_query_device_support),
      Resolve(library_, {"nvmlGpmSampleAlloc"}, &a.gpm_sample_alloc),
      Resolve(library_, {"nvmlGpmSampleFree"}, &a.gpm_sample_free),
      Resolve(library_, {"nvmlGpmSampleGet"}, &a.gpm_sample_get),
      Resolve(library_, {"nvmlGpmMetricsGet"}, &a.gpm_metrics_get)};
  const bool gpm = std::all_of(std::begin(resolved), std::end(resolved), [](bool b) { return b; });
  if (!gpm) {
    a.gpm_query_device_support = nullptr;
    missing_symbols_.push_back("nvmlGpmMetricsGet");
  }
  return Status::OK();
}

std::string Nvml::ErrorString(int nvml_return) const {
  std::string text = "NVML error " + std::to_string(nvml_return);
  if (api_->error_string != nullptr) {
    if (const char* s = api_->error_string(nvml_return)) text = std::string(s) + " (" + text + ")";
  }
  return text;
}

Status Nvml::Init(const std::string& library_path) {
  SATURATE_RETURN_IF_ERROR(Open(library_path));
  SATURATE_RETURN_IF_ERROR(ResolveSymbols());
  abi::nvmlReturn_t rc = api_->init();
  if (rc != abi::NVML_SUCCESS) {
    return Status::Unimplemented("no usable NVIDIA driver: nvmlInit in " + library_path_ +
                                 " failed: " + ErrorString(rc));
  }
  initialized_ = true;
  unsigned int count = 0;
  rc = api_->get_count(&count);
  if (rc != abi::NVML_SUCCESS) {
    return Status::Unimplemented("no usable NVIDIA driver: nvmlDeviceGetCount in " + library_path_ +
                                 " failed: " + ErrorString(rc));
  }
  if (api_->get_driver_version != nullptr) {
    char buf[abi::NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {};
    if (api_->get_driver_version(buf, sizeof(buf)) == abi::NVML_SUCCESS) {
      driver_version_ = FromCString(buf, sizeof(buf));
    }
  }
  LoadDevices(count);
  RegisterXidEvents();
  return Status::OK();
}

void Nvml::LoadDevices(unsigned int count) {
  devices_.resize(count);
  for (unsigned int i = 0; i < count; ++i) {
    DeviceState& dev = devices_[i];
    dev.info.index = static_cast<int>(i);
    if (api_->get_handle_by_index(i, &dev.handle) != abi::NVML_SUCCESS) {
      dev.handle = nullptr;
      dev.lost = true;  // no handle: nothing can be asked about this GPU
      continue;
    }
    dev.info.name = dev.ReadString(api_->get_name);
    dev.info.uuid = dev.ReadString(api_->get_uuid);
    if (auto pci = dev.Read<abi::nvmlPciInfo_t>(api_->get_pci_info)) {
      dev.info.pci_bus_id = FromCString(pci->busId, sizeof(pci->busId));
    }
    if (auto memory = dev.Read<abi::nvmlMemory_t>(api_->get_memory_info)) {
      dev.info.memory_total_bytes = memory->total;
    }
    InitGpm(dev);
  }
}

bool Nvml::gpm_supported(int index) const {
  return index >= 0 && index < device_count() && devices_[index].gpm;
}

void Nvml::InitGpm(DeviceState& dev) {
  const Api& a = *api_;
  if (a.gpm_query_device_support == nullptr) return;
  abi::nvmlGpmSupport_t support{};
  support.version = abi::NVML_GPM_SUPPORT_VERSION;
  if (!dev.Call(a.gpm_query_device_support, &support) || support.isSupportedDevice == 0) return;
  if (a.gpm_sample_alloc(&dev.gpm_older) != abi::NVML_SUCCESS) return;
  if (a.gpm_sample_alloc(&dev.gpm_newer) != abi::NVML_SUCCESS) {
    a.gpm_sample_free(dev.gpm_older);
    return;
  }
  dev.gpm = true;
  // The first reading, so that the first Sample() can already have metrics.
  if (dev.Call(a.gpm_sample_get, dev.gpm_older)) dev.gpm_older_ns = MonotonicNs();
}

void Nvml::FreeGpm() {
  for (DeviceState& dev : devices_) {
    if (!dev.gpm) continue;
    api_->gpm_sample_free(dev.gpm_older);
    api_->gpm_sample_free(dev.gpm_newer);
    dev.gpm = false;
  }
}

void Nvml::ReadGpm(DeviceState& dev, GpmMetrics* out) {
  const Api& a = *api_;
  if (!dev.gpm || dev.lost) return;
  const int64_t now_ns = MonotonicNs();
  if (dev.gpm_older_ns > 0 && now_ns - dev.gpm_older_ns < gpm_min_interval_ns_) return;
  if (!dev.Call(a.gpm_sample_get, dev.gpm_newer)) return;
  if (dev.gpm_older_ns == 0) {  // no older reading yet: this one becomes it
    std::swap(dev.gpm_older, dev.gpm_newer);
    dev.gpm_older_ns = now_ns;
    return;
  }
  // ~4 KB; the driver reads numMetrics entries.
  auto get = std::make_unique<abi::nvmlGpmMetricsGet_t>();
  get->version = abi::NVML_GPM_METRICS_GET_VERSION;
  get->numMetrics = static_cast<unsigned int>(std::size(kGpmFields));
  get->sample1 = dev.gpm_older;
  get->sample2 = dev.gpm_newer;
  for (size_t i = 0; i < std::size(kGpmFields); ++i) get->metrics[i].metricId = kGpmFields[i].id;
  // On failure the older reading stays, so the next try spans a longer time.
  if (!dev.Succeeded(a.gpm_metrics_get(get.get()))) return;
  for (size_t i = 0; i < std::size(kGpmFields); ++i) {
    const abi::nvmlGpmMetric_t& m = get->metrics[i];
    if (m.nvmlReturn != abi::NVML_SUCCESS || !std::isfinite(m.value)) continue;
    out->*kGpmFields[i].field = m.value * kGpmFields[i].scale;
  }
  if (out->any()) out->interval_s = double(now_ns - dev.gpm_older_ns) / 1e9;
  std::swap(dev.gpm_older, dev.gpm_newer);
  dev.gpm_older_ns = now_ns;
}

void Nvml::RegisterXidEvents() {
  const Api& a = *api_;
  if (a.event_set_create == nullptr || a.register_events == nullptr ||
      a.event_set_wait == nullptr) {
    return;
  }
  abi::nvmlEventSet_t set = nullptr;
  if (a.event_set_create(&set) != abi::NVML_SUCCESS) return;
  bool registered = false;
  for (DeviceState& dev : devices_) {
    registered |= dev.Call(a.register_events, abi::nvmlEventTypeXidCriticalError, set);
  }
  if (registered) {
    event_set_ = set;
  } else if (a.event_set_free != nullptr) {
    a.event_set_free(set);
  }
}

void Nvml::DrainXidEvents() {
  if (event_set_ == nullptr) return;
  auto set = static_cast<abi::nvmlEventSet_t>(event_set_);
  for (int i = 0; i < kMaxEventsPerDrain; ++i) {
    abi::nvmlEventData_t event{};
    // NVML_ERROR_TIMEOUT: nothing pending. Other errors: try again next time.
    if (api_->event_set_wait(set, &event, 0) != abi::NVML_SUCCESS) return;
    if ((event.eventType & abi::nvmlEventTypeXidCriticalError) == 0) continue;
    for (DeviceState& dev : devices_) {
      if (dev.handle != nullptr && dev.handle == event.device) {
        dev.pending_xids.push_back({dev.info.index, event.eventData});
        break;
      }
    }
  }
}

void Nvml::ReadUtilizationSamples(DeviceState& dev, GpuSample* out) {
  auto* fn = api_->get_samples;
  if (fn == nullptr) return;
  const unsigned long long since = dev.last_util_sample_us;
  int value_type = abi::NVML_VALUE_TYPE_UNSIGNED_INT;
  std::vector<abi::nvmlSample_t> samples;
  auto query = [&](abi::nvmlSample_t* buf, unsigned int* count) {
    return fn(dev.handle, abi::NVML_GPU_UTILIZATION_SAMPLES, since, &value_type, count, buf);
  };
  // NVML_ERROR_NOT_FOUND: no sample newer than `since`.
  if (!dev.ReadArray(query, &samples)) return;
  double sum = 0;
  uint32_t n = 0;
  for (const abi::nvmlSample_t& s : samples) {
    if (s.timeStamp <= since) continue;
    sum += ValueAsDouble(value_type, s.sampleValue);
    ++n;
    dev.last_util_sample_us = std::max(dev.last_util_sample_us, s.timeStamp);
  }
  if (n == 0) return;
  out->util_sampled_pct = sum / n;
  out->util_sampled_count = n;
}

void Nvml::ReadProcesses(DeviceState& dev, GpuSample* out) {
  std::map<uint32_t, GpuProcess> by_pid;
  bool listed =
      dev.ListProcesses(api_->get_compute_processes, api_->get_compute_processes_v1, &by_pid);
  listed |=
      dev.ListProcesses(api_->get_graphics_processes, api_->get_graphics_processes_v1, &by_pid);
  if (!listed) return;
  std::vector<GpuProcess> processes;
  processes.reserve(by_pid.size());
  for (auto& [pid, proc] : by_pid) processes.push_back(std::move(proc));
  ReadProcessUtilization(dev, &processes);
  out->processes = std::move(processes);
}

void Nvml::ReadProcessUtilization(DeviceState& dev, std::vector<GpuProcess>* processes) {
  auto* fn = api_->get_process_utilization;
  if (fn == nullptr || processes->empty()) return;
  const unsigned long long since = dev.last_process_sample_us;
  std::vector<abi::nvmlProcessUtilizationSample_t> samples;
  auto query = [&](abi::nvmlProcessUtilizationSample_t* buf, unsigned int* count) {
    return fn(dev.handle, buf, count, since);
  };
  if (!dev.ReadArray(query, &samples)) return;
  std::map<uint32_t, const abi::nvmlProcessUtilizationSample_t*> newest;
  for (const auto& s : samples) {
    if (s.timeStamp <= since) continue;
    dev.last_process_sample_us = std::max(dev.last_process_sample_us, s.timeStamp);
    const auto*& slot = newest[s.pid];
    if (slot == nullptr || slot->timeStamp < s.timeStamp) slot = &s;
  }
  for (GpuProcess& proc : *processes) {
    auto it = newest.find(proc.pid);
    if (it == newest.end()) continue;
    proc.sm_util_pct = it->second->smUtil;
    proc.mem_util_pct = it->second->memUtil;
  }
}

GpuSample Nvml::ReadMetrics(DeviceState& dev) {
  const Api& a = *api_;
  GpuSample s;
  s.index = dev.info.index;
  if (auto u = dev.Read<abi::nvmlUtilization_t>(a.get_utilization_rates)) {
    s.util_pct = u->gpu;
    s.mem_util_pct = u->memory;
  }
  ReadUtilizationSamples(dev, &s);
  if (auto m = dev.Read<abi::nvmlMemory_t>(a.get_memory_info)) {
    s.memory_used_bytes = m->used;
    s.memory_total_bytes = m->total;
  }
  s.power_w = Transform(dev.Read<unsigned int>(a.get_power_usage),
                        [](unsigned int mw) { return mw / 1000.0; });
  s.energy_mj = dev.Read<unsigned long long>(a.get_total_energy_consumption);
  s.sm_clock_mhz = dev.Read<unsigned int>(a.get_clock_info, abi::NVML_CLOCK_SM);
  s.mem_clock_mhz = dev.Read<unsigned int>(a.get_clock_info, abi::NVML_CLOCK_MEM);
  s.pcie_rx_bytes_per_s = Transform(
      dev.Read<unsigned int>(a.get_pcie_throughput, abi::NVML_PCIE_UTIL_RX_BYTES), KibToBytes);
  s.pcie_tx_bytes_per_s = Transform(
      dev.Read<unsigned int>(a.get_pcie_throughput, abi::NVML_PCIE_UTIL_TX_BYTES), KibToBytes);
  s.clocks_event_reasons = dev.Read<unsigned long long>(a.get_clocks_event_reasons);
  s.temperature_c = dev.Read<unsigned int>(a.get_temperature, abi::NVML_TEMPERATURE_GPU);
  ReadGpm(dev, &s.gpm);
  ReadProcesses(dev, &s);
  if (dev.lost) {  // fell off mid-sample: report nothing half-read
    s = GpuSample();
    s.index = dev.info.index;
    s.lost = true;
  }
  return s;
}

Result<GpuSample> Nvml::Sample(int index) {
  if (index < 0 || index >= device_count()) {
    return Status::InvalidArgument("GPU index " + std::to_string(index) + " out of range (" +
                                   std::to_string(device_count()) + " GPUs)");
  }
  DrainXidEvents();
  DeviceState& dev = devices_[index];
  GpuSample s = ReadMetrics(dev);  // makes no NVML call for a lost GPU
  s.xid_events = std::move(dev.pending_xids);
  dev.pending_xids.clear();
  return s;
}

std::vector<GpuSample> Nvml::SampleAll() {
  std::vector<GpuSample> samples;
  samples.reserve(devices_.size());
  for (int i = 0; i < device_count(); ++i) samples.push_back(std::move(Sample(i)).value());
  return samples;
}

}  // namespace saturate::watch
