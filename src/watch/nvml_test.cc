#include "watch/nvml.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "base/testing.h"

// The loader runs against testing/fake_nvml.cc (see the values listed there):
// these machines have no GPU. The real driver is only touched by
// DefaultLibraryLoadsOrSaysWhyNot, which also smoke-tests it where present.

namespace saturate::watch {
namespace {

using ::saturate::testing::HasError;
using Names = std::vector<std::string>;

constexpr uint64_t kGiB = uint64_t{1} << 30;

// The fake's test controls, resolved from the same loaded copy of the library
// the Nvml under test dlopens (dlopen of one path shares one copy).
class FakeNvml {
 public:
  explicit FakeNvml(const char* path) : handle_(dlopen(path, RTLD_NOW | RTLD_LOCAL)) {
    if (handle_ == nullptr) return;
    ok_ = Resolve("fake_nvml_reset", &reset_) &&
          Resolve("fake_nvml_set_device_count", &set_device_count_) &&
          Resolve("fake_nvml_set_init_result", &set_init_result_) &&
          Resolve("fake_nvml_set_not_supported", &set_not_supported_) &&
          Resolve("fake_nvml_lose_gpu_after", &lose_gpu_after_) &&
          Resolve("fake_nvml_device_calls", &device_calls_) &&
          Resolve("fake_nvml_push_util_sample", &push_util_sample_) &&
          Resolve("fake_nvml_push_xid", &push_xid_) &&
          Resolve("fake_nvml_init_version", &init_version_) &&
          Resolve("fake_nvml_process_query_version", &process_query_version_) &&
          Resolve("fake_nvml_open_event_sets", &open_event_sets_);
    // The GPM controls exist in the current build only.
    Resolve("fake_nvml_set_gpm_supported", &set_gpm_supported_);
    Resolve("fake_nvml_set_gpm_metric", &set_gpm_metric_);
    Resolve("fake_nvml_gpm_open_samples", &gpm_open_samples_);
    Resolve("fake_nvml_gpm_metrics_gets", &gpm_metrics_gets_);
    if (ok_) reset_();
  }
  ~FakeNvml() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  FakeNvml(const FakeNvml&) = delete;
  FakeNvml& operator=(const FakeNvml&) = delete;

  bool ok() const { return ok_; }
  void SetDeviceCount(int n) { set_device_count_(n); }
  void SetInitResult(int rc) { set_init_result_(rc); }
  void SetNotSupported(bool on) { set_not_supported_(on ? 1 : 0); }
  void LoseGpuAfter(int index, long calls) { lose_gpu_after_(index, calls); }
  long DeviceCalls(int index) { return device_calls_(index); }
  void PushUtilSample(int index, unsigned long long t_us, unsigned int pct) {
    push_util_sample_(index, t_us, pct);
  }
  void PushXid(int index, unsigned long long xid) { push_xid_(index, xid); }
  int InitVersion() { return init_version_(); }
  int ProcessQueryVersion() { return process_query_version_(); }
  int OpenEventSets() { return open_event_sets_(); }
  void SetGpmSupported(int index, bool on) { set_gpm_supported_(index, on ? 1 : 0); }
  void SetGpmMetric(unsigned int id, double value) { set_gpm_metric_(id, value); }
  int GpmOpenSamples() { return gpm_open_samples_(); }
  long GpmMetricsGets() { return gpm_metrics_gets_(); }

 private:
  template <typename F>
  bool Resolve(const char* name, F** fn) {
    *fn = reinterpret_cast<F*>(dlsym(handle_, name));
    return *fn != nullptr;
  }

  void* handle_;
  bool ok_ = false;
  void (*reset_)() = nullptr;
  void (*set_device_count_)(int) = nullptr;
  void (*set_init_result_)(int) = nullptr;
  void (*set_not_supported_)(int) = nullptr;
  void (*lose_gpu_after_)(int, long) = nullptr;
  long (*device_calls_)(int) = nullptr;
  void (*push_util_sample_)(int, unsigned long long, unsigned int) = nullptr;
  void (*push_xid_)(int, unsigned long long) = nullptr;
  int (*init_version_)() = nullptr;
  int (*process_query_version_)() = nullptr;
  int (*open_event_sets_)() = nullptr;
  void (*set_gpm_supported_)(int, int) = nullptr;
  void (*set_gpm_metric_)(unsigned int, double) = nullptr;
  int (*gpm_open_samples_)() = nullptr;
  long (*gpm_metrics_gets_)() = nullptr;
};

class NvmlTest : public ::testing::Test {
 protected:
  // Loads the fake at `path` (its defaults restored, then `configure` applied).
  template <typename Configure>
  std::unique_ptr<Nvml> LoadFake(const char* path, Configure configure) {
    fake_ = std::make_unique<FakeNvml>(path);
    EXPECT_TRUE(fake_->ok()) << path << ": " << dlerror();
    if (!fake_->ok()) return nullptr;
    configure(*fake_);
    Result<std::unique_ptr<Nvml>> nvml = Nvml::Load(path);
    EXPECT_TRUE(nvml.ok()) << nvml.status().ToString();
    if (!nvml.ok()) return nullptr;
    return std::move(nvml).value();
  }
  std::unique_ptr<Nvml> LoadFake(const char* path = FAKE_NVML_PATH) {
    return LoadFake(path, [](FakeNvml&) {});
  }

  std::unique_ptr<FakeNvml> fake_;
};

bool HasNoMetrics(const GpuSample& s) {
  return !s.util_pct && !s.mem_util_pct && !s.util_sampled_pct && !s.memory_used_bytes &&
         !s.memory_total_bytes && !s.power_w && !s.energy_mj && !s.sm_clock_mhz &&
         !s.mem_clock_mhz && !s.pcie_rx_bytes_per_s && !s.pcie_tx_bytes_per_s &&
         !s.clocks_event_reasons && !s.temperature_c && !s.processes && !s.gpm.any() &&
         !s.gpm.interval_s;
}

TEST_F(NvmlTest, MissingLibraryFailsWithOneClearLine) {
  auto nvml = Nvml::Load("/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(nvml.ok());
  EXPECT_TRUE(HasError(nvml.status(), StatusCode::kUnimplemented,
                       {"no NVIDIA driver: cannot load /nonexistent/libnvidia-ml.so.1 (dlopen: "}));
  EXPECT_EQ(nvml.status().message().find('\n'), std::string::npos);
}

// Without a driver (this machine) Load("") must say why, naming the library;
// on a GPU machine it must load and sample every GPU.
TEST_F(NvmlTest, DefaultLibraryLoadsOrSaysWhyNot) {
  auto nvml = Nvml::Load();
  if (!nvml.ok()) {
    // "no NVIDIA driver: libnvidia-ml.so.1 not found (dlopen: ...)" on a machine without one.
    EXPECT_TRUE(HasError(nvml.status(), StatusCode::kUnimplemented, {"libnvidia-ml"}));
    EXPECT_EQ(nvml.status().message().find('\n'), std::string::npos);
    return;
  }
  EXPECT_FALSE((*nvml)->driver_version().empty());
  for (const GpuSample& s : (*nvml)->SampleAll()) {
    const GpuDeviceInfo& info = (*nvml)->info(s.index);
    EXPECT_FALSE(info.name.empty());
    EXPECT_EQ(info.uuid.rfind("GPU-", 0), 0u) << info.uuid;
    EXPECT_FALSE(s.lost);
    EXPECT_TRUE(s.memory_total_bytes.has_value());
    EXPECT_TRUE(s.util_pct.has_value());
  }
  // GPM on Hopper and later: the second reading has the activity counters.
  for (int i = 0; i < (*nvml)->device_count(); ++i) {
    if (!(*nvml)->gpm_supported(i)) continue;
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    GpuSample s = (*nvml)->Sample(i).value();
    EXPECT_TRUE(s.gpm.sm_active_pct.has_value()) << (*nvml)->info(i).name;
    EXPECT_TRUE(s.gpm.tensor_active_pct.has_value()) << (*nvml)->info(i).name;
    EXPECT_TRUE(s.gpm.dram_active_pct.has_value()) << (*nvml)->info(i).name;
    ASSERT_TRUE(s.gpm.interval_s.has_value());
    EXPECT_GT(*s.gpm.interval_s, 0.1);
  }
}

TEST_F(NvmlTest, LibraryWithoutNvmlIsRefused) {
  auto nvml = Nvml::Load("libm.so.6");
  EXPECT_TRUE(HasError(nvml.status(), StatusCode::kUnimplemented,
                       {"no usable NVIDIA driver: libm.so.6 lacks nvmlInit_v2"}));
}

TEST_F(NvmlTest, InitFailureSaysWhy) {
  FakeNvml fake(FAKE_NVML_PATH);
  ASSERT_TRUE(fake.ok());
  fake.SetInitResult(nvml_abi::NVML_ERROR_DRIVER_NOT_LOADED);
  auto nvml = Nvml::Load(FAKE_NVML_PATH);
  EXPECT_TRUE(HasError(nvml.status(), StatusCode::kUnimplemented,
                       {"nvmlInit in ", "failed: Driver Not Loaded (NVML error 9)"}));
}

TEST_F(NvmlTest, ZeroGpusIsNotAnError) {
  auto nvml = LoadFake(FAKE_NVML_PATH, [](FakeNvml& f) { f.SetDeviceCount(0); });
  ASSERT_NE(nvml, nullptr);
  EXPECT_EQ(nvml->device_count(), 0);
  EXPECT_TRUE(nvml->SampleAll().empty());
  EXPECT_FALSE(nvml->xid_events_available());  // no GPU took the registration
  EXPECT_EQ(fake_->OpenEventSets(), 0);
}

TEST_F(NvmlTest, StaticInfoAndVersionedSymbols) {
  auto nvml = LoadFake();
  ASSERT_NE(nvml, nullptr);
  EXPECT_EQ(fake_->InitVersion(), 2);  // nvmlInit_v2, not the legacy nvmlInit
  EXPECT_EQ(nvml->library_path(), FAKE_NVML_PATH);
  EXPECT_EQ(nvml->driver_version(), "550.54.15-fake");
  EXPECT_TRUE(nvml->missing_symbols().empty());
  EXPECT_TRUE(nvml->xid_events_available());
  ASSERT_EQ(nvml->device_count(), 2);
  for (int i = 0; i < 2; ++i) {
    const GpuDeviceInfo& info = nvml->info(i);
    EXPECT_EQ(info.index, i);
    EXPECT_EQ(info.name, "Fake GPU " + std::to_string(i));
    EXPECT_EQ(info.uuid, "GPU-fake-" + std::to_string(i));
    EXPECT_EQ(info.pci_bus_id, "00000000:1" + std::to_string(i) + ":00.0");
    EXPECT_EQ(info.memory_total_bytes, 80 * kGiB);
  }
}

TEST_F(NvmlTest, SampleConvertsUnits) {
  auto nvml = LoadFake();
  ASSERT_NE(nvml, nullptr);
  std::vector<GpuSample> samples = nvml->SampleAll();
  ASSERT_EQ(samples.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const GpuSample& s = samples[i];
    SCOPED_TRACE(i);
    EXPECT_EQ(s.index, i);
    EXPECT_FALSE(s.lost);
    EXPECT_EQ(s.util_pct, 40u + 10u * i);
    EXPECT_EQ(s.mem_util_pct, 20u + i);
    EXPECT_EQ(s.memory_used_bytes, (i + 1) * kGiB);
    EXPECT_EQ(s.memory_total_bytes, 80 * kGiB);
    EXPECT_EQ(s.power_w, 250.0 + i);       // mW -> W
    EXPECT_EQ(s.energy_mj, 1000000u + i);  // mJ as NVML gives it
    EXPECT_EQ(s.sm_clock_mhz, 1980u);
    EXPECT_EQ(s.mem_clock_mhz, 2619u);
    EXPECT_EQ(s.pcie_rx_bytes_per_s, (2000u + i) * uint64_t{1024});  // KB/s -> bytes/s
    EXPECT_EQ(s.pcie_tx_bytes_per_s, (1000u + i) * uint64_t{1024});
    EXPECT_EQ(s.temperature_c, 45u + i);
    EXPECT_TRUE(s.xid_events.empty());
  }
  EXPECT_EQ(samples[0].clocks_event_reasons, 0xCu);
  EXPECT_EQ(samples[1].clocks_event_reasons, 0x1u);
}

TEST_F(NvmlTest, SampleRejectsBadIndex) {
  auto nvml = LoadFake();
  ASSERT_NE(nvml, nullptr);
  EXPECT_TRUE(HasError(nvml->Sample(2).status(), StatusCode::kInvalidArgument,
                       {"GPU index 2 out of range (2 GPUs)"}));
  EXPECT_FALSE(nvml->Sample(-1).ok());
}

TEST_F(NvmlTest, SubSecondUtilizationAveragesOnlyNewSamples) {
  auto nvml = LoadFake();
  ASSERT_NE(nvml, nullptr);
  GpuSample first = nvml->Sample(0).value();  // the buffered (100,10) (200,20) (300,30)
  EXPECT_EQ(first.util_sampled_pct, 20.0);
  EXPECT_EQ(first.util_sampled_count, 3u);

  fake_->PushUtilSample(0, 400, 90);
  fake_->PushUtilSample(0, 500, 70);
  GpuSample second = nvml->Sample(0).value();
  EXPECT_EQ(second.util_sampled_pct, 80.0);
  EXPECT_EQ(second.util_sampled_count, 2u);

  GpuSample third = nvml->Sample(0).value();  // the driver answers NOT_FOUND
  EXPECT_FALSE(third.util_sampled_pct.has_value());
  EXPECT_EQ(third.util_sampled_count, 0u);
  EXPECT_EQ(third.util_pct, 40u);  // the rest is unaffected

  // GPU 1 has no sample at all.
  EXPECT_FALSE(nvml->Sample(1).value().util_sampled_pct.has_value());
}

TEST_F(NvmlTest, ProcessesMergedAndMatchedWithUtilizationByPid) {
  auto nvml = LoadFake();
  ASSERT_NE(nvml, nullptr);
  GpuSample s = nvml->Sample(0).value();
  EXPECT_EQ(fake_->ProcessQueryVersion(), 3);
  ASSERT_TRUE(s.processes.has_value());
  ASSERT_EQ(s.processes->size(), 2u);  // pid 1001 is in both lists; 999 is not listed
  const GpuProcess& a = (*s.processes)[0];
  const GpuProcess& b = (*s.processes)[1];
  EXPECT_EQ(a.pid, 1000u);
  EXPECT_EQ(a.used_memory_bytes, 2 * kGiB);
  EXPECT_EQ(a.sm_util_pct, 70u);
  EXPECT_EQ(a.mem_util_pct, 30u);
  EXPECT_EQ(b.pid, 1001u);
  EXPECT_EQ(b.used_memory_bytes, 1 * kGiB);
  EXPECT_EQ(b.sm_util_pct, 5u);
  EXPECT_EQ(b.mem_util_pct, 1u);

  // No newer per-process sample: still listed, utilization unknown.
  GpuSample again = nvml->Sample(0).value();
  ASSERT_TRUE(again.processes.has_value());
  ASSERT_EQ(again.processes->size(), 2u);
  EXPECT_FALSE((*again.processes)[0].sm_util_pct.has_value());

  GpuSample idle = nvml->Sample(1).value();
  ASSERT_TRUE(idle.processes.has_value());
  EXPECT_TRUE(idle.processes->empty());
}

TEST(ClocksEventReasonNamesTest, NamesEachSetBit) {
  EXPECT_TRUE(ClocksEventReasonNames(0).empty());
  EXPECT_EQ(ClocksEventReasonNames(0xC), (Names{"sw_power_cap", "hw_slowdown"}));
  EXPECT_EQ(ClocksEventReasonNames(0x1), (Names{"gpu_idle"}));
  EXPECT_EQ(ClocksEventReasonNames(0x1FF),
            (Names{"gpu_idle", "applications_clocks", "sw_power_cap", "hw_slowdown", "sync_boost",
                   "sw_thermal", "hw_thermal", "hw_power_brake", "display_clocks"}));
  EXPECT_EQ(ClocksEventReasonNames((uint64_t{1} << 40) | 0x20), (Names{"sw_thermal", "bit_40"}));
}

TEST_F(NvmlTest, LegacySymbolsWorkThroughFallbacks) {
  auto nvml = LoadFake(FAKE_NVML_OLD_PATH);
  ASSERT_NE(nvml, nullptr);
  EXPECT_EQ(fake_->InitVersion(), 1);
  EXPECT_EQ(nvml->missing_symbols(),
            (Names{"nvmlDeviceGetTotalEnergyConsumption", "nvmlGpmMetricsGet"}));
  EXPECT_FALSE(nvml->gpm_supported(0));                     // a pre-R520 driver: no GPM at all
  EXPECT_EQ(nvml->info(1).pci_bus_id, "00000000:11:00.0");  // nvmlDeviceGetPciInfo_v2
  fake_->PushXid(0, 48);

  GpuSample s = nvml->Sample(0).value();
  EXPECT_EQ(fake_->ProcessQueryVersion(), 1);
  EXPECT_FALSE(s.energy_mj.has_value());
  EXPECT_EQ(s.power_w, 250.0);
  EXPECT_EQ(s.clocks_event_reasons, 0xCu);  // nvmlDeviceGetCurrentClocksThrottleReasons
  // The v1 process layout is 16 bytes, not 24: a wrong stride garbles pid 1001.
  ASSERT_TRUE(s.processes.has_value());
  ASSERT_EQ(s.processes->size(), 2u);
  EXPECT_EQ((*s.processes)[0].pid, 1000u);
  EXPECT_EQ((*s.processes)[0].used_memory_bytes, 2 * kGiB);
  EXPECT_EQ((*s.processes)[1].pid, 1001u);
  EXPECT_EQ((*s.processes)[1].used_memory_bytes, 1 * kGiB);
  ASSERT_EQ(s.xid_events.size(), 1u);  // through the legacy nvmlEventSetWait
  EXPECT_EQ(s.xid_events[0].xid, 48u);
}

TEST_F(NvmlTest, NotSupportedLeavesOnlyThoseMetricsEmpty) {
  auto nvml = LoadFake(FAKE_NVML_PATH, [](FakeNvml& f) { f.SetNotSupported(true); });
  ASSERT_NE(nvml, nullptr);
  for (const GpuSample& s : nvml->SampleAll()) {
    SCOPED_TRACE(s.index);
    EXPECT_FALSE(s.lost);
    EXPECT_FALSE(s.power_w.has_value());
    EXPECT_FALSE(s.energy_mj.has_value());
    EXPECT_FALSE(s.pcie_rx_bytes_per_s.has_value());
    EXPECT_FALSE(s.pcie_tx_bytes_per_s.has_value());
    EXPECT_FALSE(s.processes.has_value());
    EXPECT_TRUE(s.util_pct.has_value());
    EXPECT_TRUE(s.memory_used_bytes.has_value());
    EXPECT_TRUE(s.sm_clock_mhz.has_value());
    EXPECT_TRUE(s.clocks_event_reasons.has_value());
    EXPECT_TRUE(s.temperature_c.has_value());
  }
}

TEST_F(NvmlTest, GpuLostMidRunStaysLostWithoutCallingTheDriver) {
  auto nvml = LoadFake();
  ASSERT_NE(nvml, nullptr);
  ASSERT_FALSE(nvml->Sample(1).value().lost);

  fake_->LoseGpuAfter(1, 3);  // falls off partway through the next sample
  fake_->PushXid(1, 79);
  std::vector<GpuSample> samples = nvml->SampleAll();
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_FALSE(samples[0].lost);
  EXPECT_EQ(samples[0].power_w, 250.0);
  EXPECT_TRUE(samples[1].lost);
  EXPECT_TRUE(HasNoMetrics(samples[1]));
  ASSERT_EQ(samples[1].xid_events.size(), 1u);  // the XID that came with the loss
  EXPECT_EQ(samples[1].xid_events[0].gpu_index, 1);
  EXPECT_EQ(samples[1].xid_events[0].xid, 79u);

  const long calls = fake_->DeviceCalls(1);
  samples = nvml->SampleAll();
  EXPECT_TRUE(samples[1].lost);
  EXPECT_TRUE(samples[1].xid_events.empty());
  EXPECT_EQ(fake_->DeviceCalls(1), calls);  // not asked again
  EXPECT_FALSE(samples[0].lost);
  EXPECT_EQ(samples[0].temperature_c, 45u);
}

TEST_F(NvmlTest, GpuLostBeforeTheFirstSample) {
  auto nvml = LoadFake();
  ASSERT_NE(nvml, nullptr);
  fake_->LoseGpuAfter(0, 0);
  GpuSample s = nvml->Sample(0).value();
  EXPECT_TRUE(s.lost);
  EXPECT_TRUE(HasNoMetrics(s));
  EXPECT_FALSE(nvml->Sample(1).value().lost);
}

TEST_F(NvmlTest, XidReportedOnceOnItsOwnGpu) {
  auto nvml = LoadFake();
  ASSERT_NE(nvml, nullptr);
  fake_->PushXid(1, 13);
  fake_->PushXid(1, 31);
  // Sampling GPU 0 drains the event set; GPU 1's events wait for GPU 1.
  EXPECT_TRUE(nvml->Sample(0).value().xid_events.empty());
  GpuSample s = nvml->Sample(1).value();
  ASSERT_EQ(s.xid_events.size(), 2u);
  EXPECT_EQ(s.xid_events[0].gpu_index, 1);
  EXPECT_EQ(s.xid_events[0].xid, 13u);
  EXPECT_EQ(s.xid_events[1].xid, 31u);
  EXPECT_TRUE(nvml->Sample(1).value().xid_events.empty());
}

TEST_F(NvmlTest, GpmMetricsBetweenConsecutiveSamples) {
  auto nvml = LoadFake();
  ASSERT_NE(nvml, nullptr);
  EXPECT_TRUE(nvml->gpm_supported(0));
  EXPECT_FALSE(nvml->gpm_supported(1));  // "pre-Hopper": no buffers, no calls
  EXPECT_EQ(fake_->GpmOpenSamples(), 2);
  nvml->set_gpm_min_interval_ns(0);
  // Load took the first reading, so the first Sample() has metrics.
  GpuSample s = nvml->Sample(0).value();
  const GpmMetrics& g = s.gpm;
  EXPECT_EQ(g.graphics_active_pct, 95.0);
  EXPECT_EQ(g.sm_active_pct, 20.0);
  EXPECT_EQ(g.sm_occupancy_pct, 15.0);
  EXPECT_EQ(g.tensor_active_pct, 2.0);
  EXPECT_EQ(g.hmma_tensor_active_pct, 1.5);
  EXPECT_EQ(g.dram_active_pct, 30.0);
  EXPECT_EQ(g.fp64_active_pct, 0.0);
  EXPECT_EQ(g.fp32_active_pct, 10.0);
  EXPECT_EQ(g.fp16_active_pct, 0.5);
  EXPECT_EQ(g.pcie_tx_bytes_per_s, 100.0 * 1024 * 1024);  // MiB/s -> bytes/s
  EXPECT_EQ(g.pcie_rx_bytes_per_s, 200.0 * 1024 * 1024);
  EXPECT_FALSE(g.nvlink_tx_bytes_per_s.has_value());  // NOT_SUPPORTED for this metric only
  EXPECT_FALSE(g.nvlink_rx_bytes_per_s.has_value());
  ASSERT_TRUE(g.interval_s.has_value());
  EXPECT_GE(*g.interval_s, 0.0);
  EXPECT_FALSE(nvml->Sample(1).value().gpm.any());
  EXPECT_EQ(fake_->GpmMetricsGets(), 1);

  // Each call computes over the span since the previous one (the fake fails
  // a computation whose samples are not in order, so the buffers rotate).
  fake_->SetGpmMetric(nvml_abi::NVML_GPM_METRIC_SM_UTIL, 80);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(nvml->Sample(0).value().gpm.sm_active_pct, 80.0);
  EXPECT_EQ(fake_->GpmMetricsGets(), 4);
}

TEST_F(NvmlTest, GpmSkipsSamplesCloserThanTheMinimumInterval) {
  auto nvml = LoadFake();
  ASSERT_NE(nvml, nullptr);
  nvml->set_gpm_min_interval_ns(60'000'000'000);  // a minute: never within the test
  EXPECT_FALSE(nvml->Sample(0).value().gpm.any());
  EXPECT_FALSE(nvml->Sample(0).value().gpm.interval_s.has_value());
  EXPECT_EQ(fake_->GpmMetricsGets(), 0);
  nvml->set_gpm_min_interval_ns(0);
  EXPECT_TRUE(nvml->Sample(0).value().gpm.sm_active_pct.has_value());
}

TEST_F(NvmlTest, GpmUnsupportedGpuOrFailedMetricsLeaveFieldsEmpty) {
  auto nvml = LoadFake(FAKE_NVML_PATH, [](FakeNvml& f) { f.SetGpmSupported(0, false); });
  ASSERT_NE(nvml, nullptr);
  nvml->set_gpm_min_interval_ns(0);
  EXPECT_FALSE(nvml->gpm_supported(0));
  EXPECT_EQ(fake_->GpmOpenSamples(), 0);
  EXPECT_FALSE(nvml->Sample(0).value().gpm.any());
  EXPECT_TRUE(nvml->missing_symbols().empty());  // the driver has GPM; the GPU does not
}

TEST_F(NvmlTest, GpmOnALostGpuStops) {
  auto nvml = LoadFake();
  ASSERT_NE(nvml, nullptr);
  nvml->set_gpm_min_interval_ns(0);
  fake_->LoseGpuAfter(0, 0);
  GpuSample s = nvml->Sample(0).value();
  EXPECT_TRUE(s.lost);
  EXPECT_TRUE(HasNoMetrics(s));
  EXPECT_EQ(fake_->GpmMetricsGets(), 0);
}

TEST_F(NvmlTest, DestructionFreesTheGpmSamples) {
  auto nvml = LoadFake();
  ASSERT_NE(nvml, nullptr);
  EXPECT_EQ(fake_->GpmOpenSamples(), 2);
  nvml.reset();
  EXPECT_EQ(fake_->GpmOpenSamples(), 0);
}

TEST_F(NvmlTest, DestructionFreesTheEventSet) {
  auto nvml = LoadFake();
  ASSERT_NE(nvml, nullptr);
  EXPECT_EQ(fake_->OpenEventSets(), 1);
  nvml.reset();
  EXPECT_EQ(fake_->OpenEventSets(), 0);
}

}  // namespace
}  // namespace saturate::watch
