#include "watch/snapshot.h"

#include <cstdio>

#include "watch/prometheus.h"

namespace saturate::watch {
namespace {

using json = nlohmann::json;

template <typename T>
void Put(json& j, const char* key, const std::optional<T>& v) {
  if (v) j[key] = *v;
}

json GpuJson(const GpuSample& g) {
  json j = {{"index", g.index}};
  if (g.lost) {
    j["lost"] = true;
    return j;
  }
  Put(j, "util_pct", g.util_pct);
  Put(j, "util_sampled_pct", g.util_sampled_pct);
  Put(j, "mem_util_pct", g.mem_util_pct);
  Put(j, "memory_used_bytes", g.memory_used_bytes);
  Put(j, "memory_total_bytes", g.memory_total_bytes);
  Put(j, "power_w", g.power_w);
  Put(j, "energy_mj", g.energy_mj);
  Put(j, "sm_clock_mhz", g.sm_clock_mhz);
  Put(j, "mem_clock_mhz", g.mem_clock_mhz);
  Put(j, "pcie_rx_bytes_per_s", g.pcie_rx_bytes_per_s);
  Put(j, "pcie_tx_bytes_per_s", g.pcie_tx_bytes_per_s);
  Put(j, "temperature_c", g.temperature_c);
  if (g.clocks_event_reasons) {
    j["clocks_event_reasons"] = ClocksEventReasonNames(*g.clocks_event_reasons);
  }
  if (g.gpm.any()) {
    const GpmMetrics& m = g.gpm;
    json gpm = json::object();
    Put(gpm, "interval_s", m.interval_s);
    Put(gpm, "graphics_active_pct", m.graphics_active_pct);
    Put(gpm, "sm_active_pct", m.sm_active_pct);
    Put(gpm, "sm_occupancy_pct", m.sm_occupancy_pct);
    Put(gpm, "tensor_active_pct", m.tensor_active_pct);
    Put(gpm, "hmma_tensor_active_pct", m.hmma_tensor_active_pct);
    Put(gpm, "dram_active_pct", m.dram_active_pct);
    Put(gpm, "fp64_active_pct", m.fp64_active_pct);
    Put(gpm, "fp32_active_pct", m.fp32_active_pct);
    Put(gpm, "fp16_active_pct", m.fp16_active_pct);
    Put(gpm, "pcie_tx_bytes_per_s", m.pcie_tx_bytes_per_s);
    Put(gpm, "pcie_rx_bytes_per_s", m.pcie_rx_bytes_per_s);
    Put(gpm, "nvlink_tx_bytes_per_s", m.nvlink_tx_bytes_per_s);
    Put(gpm, "nvlink_rx_bytes_per_s", m.nvlink_rx_bytes_per_s);
    j["gpm"] = std::move(gpm);
  }
  if (g.processes) {
    json procs = json::array();
    for (const GpuProcess& p : *g.processes) {
      json pj = {{"pid", p.pid}};
      Put(pj, "used_memory_bytes", p.used_memory_bytes);
      Put(pj, "sm_util_pct", p.sm_util_pct);
      procs.push_back(std::move(pj));
    }
    j["processes"] = std::move(procs);
  }
  if (!g.xid_events.empty()) {
    json xids = json::array();
    for (const XidEvent& x : g.xid_events) xids.push_back(x.xid);
    j["xid"] = std::move(xids);
  }
  return j;
}

std::string Format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

std::string GiB(uint64_t bytes) { return Format("%.1f", double(bytes) / (1u << 30)); }

// A metric family over the GPUs that have the value.
template <typename Fn>
void GpuFamily(PrometheusText& page, const char* name, const char* type, const char* help,
               const Snapshot& s, const std::vector<GpuDeviceInfo>& gpus,
               const std::string& hostname, const JobLabels& job, Fn value) {
  bool started = false;
  for (const GpuSample& g : s.gpus) {
    std::optional<double> v = g.lost ? std::nullopt : value(g);
    if (!v) continue;
    if (!started) page.Family(name, type, help);
    started = true;
    const GpuDeviceInfo* info = g.index < int(gpus.size()) ? &gpus[g.index] : nullptr;
    Labels labels = {{"gpu", std::to_string(g.index)},
                     {"UUID", info ? info->uuid : ""},
                     {"pci_bus_id", info ? info->pci_bus_id : ""},
                     {"device", "nvidia" + std::to_string(g.index)},
                     {"modelName", info ? info->name : ""},
                     {"Hostname", hostname}};
    if (GpuInJob(job, g.index, int(s.gpus.size()))) labels = MergeLabels(labels, job.labels);
    page.Sample(labels, *v);
  }
}

template <typename T>
std::optional<double> AsDouble(const std::optional<T>& v) {
  return v ? std::optional<double>(double(*v)) : std::nullopt;
}

std::string Pct(const std::optional<double>& v) { return v ? Format("%3.0f%%", *v) : " n/a"; }

std::string Opt(const char* fmt, const std::optional<double>& v) {
  return v ? Format(fmt, *v) : "n/a";
}

// A GPM percentage as DCGM's 0-1 ratio.
std::optional<double> Ratio(const std::optional<double>& pct) {
  return pct ? std::optional<double>(*pct / 100) : std::nullopt;
}

// GPM's PCIe rate (exact, over the whole interval) when the GPU has it, else
// nvmlDeviceGetPcieThroughput's (a 20 ms window).
std::optional<double> PcieRx(const GpuSample& g) {
  return g.gpm.pcie_rx_bytes_per_s ? g.gpm.pcie_rx_bytes_per_s : AsDouble(g.pcie_rx_bytes_per_s);
}
std::optional<double> PcieTx(const GpuSample& g) {
  return g.gpm.pcie_tx_bytes_per_s ? g.gpm.pcie_tx_bytes_per_s : AsDouble(g.pcie_tx_bytes_per_s);
}

template <typename T>
std::optional<double> Scaled(const std::optional<T>& v, double factor) {
  return v ? std::optional<double>(double(*v) * factor) : std::nullopt;
}

// A device loader's JPEG decode split (its "loader_decode" records; docs/gpu.md):
// images decoded on each side, the GPU's share now, the decode mode, and the
// rates decode="auto" balances. Ranks without such a record have none of them.
template <typename RankLabels>
void DecodeSplitPrometheus(const std::map<int, std::map<std::string, int64_t>>& by_rank,
                           const RankLabels& labels, PrometheusText& page) {
  auto value = [](const std::map<std::string, int64_t>& values,
                  const char* key) -> std::optional<int64_t> {
    const auto it = values.find(key);
    return it == values.end() ? std::nullopt : std::optional<int64_t>(it->second);
  };
  // One family over the ranks: `sample(rank, values, emit)` calls emit(extra
  // labels, value) for each series it has; the family is written only once
  // one has.
  auto family = [&](const char* name, const char* type, const char* help, auto sample) {
    bool started = false;
    for (const auto& entry : by_rank) {  // not a structured binding: lambdas capture it
      sample(entry.second, [&](const Labels& extra, double v) {
        if (!started) page.Family(name, type, help);
        started = true;
        page.Sample(MergeLabels(labels(entry.first), extra), v);
      });
    }
  };
  family("saturate_loader_decoded_images_total", "counter",
         "Images the device loaders decoded, by where: \"cpu\" (the loader's threads, and "
         "images nvJPEG refused) or \"gpu\" (nvJPEG).",
         [&](const auto& values, auto emit) {
           const std::optional<int64_t> cpu = value(values, "cpu_decoded");
           const std::optional<int64_t> gpu = value(values, "gpu_decoded");
           if (!cpu && !gpu) return;
           emit({{"where", "cpu"}}, double(cpu.value_or(0)));
           emit({{"where", "gpu"}}, double(gpu.value_or(0)));
         });
  family("saturate_loader_gpu_decode_ratio", "gauge",
         "Share of each batch's JPEGs handed to the GPU decoder now (0-1; decode=\"auto\" sets it "
         "from the measured rates).",
         [&](const auto& values, auto emit) {
           if (auto permille = value(values, "gpu_permille")) emit({}, double(*permille) / 1000);
         });
  family("saturate_loader_decode_mode", "gauge",
         "The device loader's decode= setting: 1 for the mode in force, 0 for the others.",
         [&](const auto& values, auto emit) {
           const std::optional<int64_t> mode = value(values, "decode_mode");
           if (!mode) return;
           const char* names[] = {"cpu", "gpu", "auto"};
           for (int64_t m = 0; m < 3; ++m) emit({{"mode", names[m]}}, *mode == m ? 1 : 0);
         });
  family("saturate_loader_gpu_decoder_available", "gauge",
         "1 when the GPU JPEG decoder (nvJPEG) opened; 0 when decode=\"auto\" fell back to the "
         "CPU or decode=\"cpu\".",
         [&](const auto& values, auto emit) {
           if (auto up = value(values, "gpu_decoder")) emit({}, double(*up));
         });
  family("saturate_loader_gpu_decode_seconds_total", "counter",
         "Time in the GPU decoder's calls (wall time of the device stage).",
         [&](const auto& values, auto emit) {
           if (auto ns = value(values, "gpu_decode_ns")) emit({}, double(*ns) * 1e-9);
         });
  family("saturate_loader_gpu_decode_fallbacks_total", "counter",
         "JPEGs the GPU decoder refused, decoded on the CPU instead.",
         [&](const auto& values, auto emit) {
           if (auto n = value(values, "gpu_decode_fallbacks")) emit({}, double(*n));
         });
  family("saturate_loader_gpu_decode_cut_total", "counter",
         "JPEGs sent to the GPU decoder cut to the MCUs around their crop (restart-marked "
         "files, as saturate pack writes them).",
         [&](const auto& values, auto emit) {
           if (auto n = value(values, "gpu_decode_cut")) emit({}, double(*n));
         });
  // The measured rates decode="auto" splits by; absent until measured.
  family("saturate_loader_cpu_decode_images_per_s_per_thread", "gauge",
         "JPEGs one loader thread decodes per second (decode=\"auto\"'s measurement).",
         [&](const auto& values, auto emit) {
           const std::optional<int64_t> rate = value(values, "cpu_per_s_per_thread");
           if (rate && *rate > 0) emit({}, double(*rate));
         });
  family("saturate_loader_gpu_decode_images_per_s", "gauge",
         "JPEGs the GPU decodes per second (decode=\"auto\"'s measurement).",
         [&](const auto& values, auto emit) {
           const std::optional<int64_t> rate = value(values, "gpu_per_s");
           if (rate && *rate > 0) emit({}, double(*rate));
         });
}

}  // namespace

json SnapshotJson(const Snapshot& s) {
  json cores = json::array();
  for (const CpuUsage& c : s.host.cores) {
    cores.push_back(
        {{"user_pct", c.user_pct}, {"system_pct", c.system_pct}, {"iowait_pct", c.iowait_pct}});
  }
  json j = {{"t_ns", s.t_ns},
            {"unix_ns", s.unix_ns},
            {"host",
             {{"cpu_user_pct", s.host.cpu.user_pct},
              {"cpu_system_pct", s.host.cpu.system_pct},
              {"cpu_iowait_pct", s.host.cpu.iowait_pct},
              {"cpu_busy_pct", s.host.cpu.busy_pct},
              {"cores", std::move(cores)},
              {"mem_used_bytes", s.mem.used_bytes()},
              {"mem_available_bytes", s.mem.available_bytes},
              {"mem_total_bytes", s.mem.total_bytes},
              {"disk_read_bytes_per_s", s.host.disks_total.read_bytes_per_s},
              {"disk_write_bytes_per_s", s.host.disks_total.write_bytes_per_s}}}};
  if (s.host.cpu_pressure_pct) j["host"]["cpu_pressure_pct"] = *s.host.cpu_pressure_pct;
  if (s.tree) {
    json members = json::array();
    for (const ProcessRow& p : s.processes) {
      members.push_back({{"pid", p.pid},
                         {"comm", p.comm},
                         {"cpu_pct", p.cpu_pct},
                         {"rss_bytes", p.rss_bytes},
                         {"threads", p.threads}});
      if (p.runq_wait_cores) members.back()["runq_wait_cores"] = *p.runq_wait_cores;
      if (p.saturate_runq_wait_cores) {
        members.back()["saturate_runq_wait_cores"] = *p.saturate_runq_wait_cores;
      }
      if (p.saturate_cpu_cores) members.back()["saturate_cpu_cores"] = *p.saturate_cpu_cores;
    }
    j["tree"] = {{"processes", s.tree->processes},
                 {"cpu_pct", s.tree->cpu_pct},
                 {"rss_bytes", s.tree->rss_bytes},
                 {"threads", s.tree->threads},
                 {"members", std::move(members)}};
    if (s.tree->runq_wait_cores) j["tree"]["runq_wait_cores"] = *s.tree->runq_wait_cores;
  }
  json gpus = json::array();
  for (const GpuSample& g : s.gpus) gpus.push_back(GpuJson(g));
  j["gpus"] = std::move(gpus);
  return j;
}

std::string SnapshotPrometheus(const Snapshot& s, const std::vector<GpuDeviceInfo>& gpus,
                               const std::string& hostname, const JobLabels& job, uint64_t samples,
                               int64_t sampler_cpu_ns) {
  PrometheusText page;
  auto gpu = [&](const char* name, const char* type, const char* help, auto value) {
    GpuFamily(page, name, type, help, s, gpus, hostname, job, value);
  };
  gpu("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).",
      [](const GpuSample& g) { return AsDouble(g.util_pct); });
  gpu("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).",
      [](const GpuSample& g) { return AsDouble(g.mem_util_pct); });
  gpu("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", [](const GpuSample& g) {
    return g.memory_used_bytes ? std::optional<double>(double(*g.memory_used_bytes) / (1 << 20))
                               : std::nullopt;
  });
  gpu("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", [](const GpuSample& g) {
    if (!g.memory_used_bytes || !g.memory_total_bytes) return std::optional<double>();
    return std::optional<double>(double(*g.memory_total_bytes - *g.memory_used_bytes) / (1 << 20));
  });
  gpu("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).",
      [](const GpuSample& g) { return g.power_w; });
  gpu("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter",
      "Total energy consumption since boot (in mJ).",
      [](const GpuSample& g) { return AsDouble(g.energy_mj); });
  gpu("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).",
      [](const GpuSample& g) { return AsDouble(g.sm_clock_mhz); });
  gpu("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).",
      [](const GpuSample& g) { return AsDouble(g.mem_clock_mhz); });
  gpu("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).",
      [](const GpuSample& g) { return AsDouble(g.temperature_c); });
  gpu("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "PCIe receive rate (in bytes/s).", PcieRx);
  gpu("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "PCIe transmit rate (in bytes/s).", PcieTx);
  // GPM activity counters (Hopper and later), as DCGM's profiling fields:
  // ratios 0-1 and bytes/s.
  gpu("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active.",
      [](const GpuSample& g) { return Ratio(g.gpm.graphics_active_pct); });
  gpu("DCGM_FI_PROF_SM_ACTIVE", "gauge",
      "The ratio of cycles an SM has at least 1 warp assigned (computed from the number of "
      "cycles and elapsed cycles).",
      [](const GpuSample& g) { return Ratio(g.gpm.sm_active_pct); });
  gpu("DCGM_FI_PROF_SM_OCCUPANCY", "gauge",
      "The ratio of number of warps resident on an SM (resident warps / maximum warps).",
      [](const GpuSample& g) { return Ratio(g.gpm.sm_occupancy_pct); });
  gpu("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge",
      "Ratio of cycles any tensor pipe is active (off the peak sustained elapsed cycles).",
      [](const GpuSample& g) { return Ratio(g.gpm.tensor_active_pct); });
  gpu("DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE", "gauge",
      "Ratio of cycles the HMMA (fp16/bf16/tf32) tensor pipe is active.",
      [](const GpuSample& g) { return Ratio(g.gpm.hmma_tensor_active_pct); });
  gpu("DCGM_FI_PROF_DRAM_ACTIVE", "gauge",
      "Ratio of cycles the device memory interface is active sending or receiving data.",
      [](const GpuSample& g) { return Ratio(g.gpm.dram_active_pct); });
  gpu("DCGM_FI_PROF_PIPE_FP64_ACTIVE", "gauge", "Ratio of cycles the fp64 pipes are active.",
      [](const GpuSample& g) { return Ratio(g.gpm.fp64_active_pct); });
  gpu("DCGM_FI_PROF_PIPE_FP32_ACTIVE", "gauge", "Ratio of cycles the fp32 pipes are active.",
      [](const GpuSample& g) { return Ratio(g.gpm.fp32_active_pct); });
  gpu("DCGM_FI_PROF_PIPE_FP16_ACTIVE", "gauge", "Ratio of cycles the fp16 pipes are active.",
      [](const GpuSample& g) { return Ratio(g.gpm.fp16_active_pct); });
  gpu("DCGM_FI_PROF_NVLINK_TX_BYTES", "gauge", "NVLink transmit rate, all links (in bytes/s).",
      [](const GpuSample& g) { return g.gpm.nvlink_tx_bytes_per_s; });
  gpu("DCGM_FI_PROF_NVLINK_RX_BYTES", "gauge", "NVLink receive rate, all links (in bytes/s).",
      [](const GpuSample& g) { return g.gpm.nvlink_rx_bytes_per_s; });
  gpu("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge",
      "Clocks event (throttle) reasons, an NVML bitmask.",
      [](const GpuSample& g) { return AsDouble(g.clocks_event_reasons); });
  gpu("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error seen.",
      [](const GpuSample& g) {
        return g.xid_events.empty() ? std::optional<double>()
                                    : std::optional<double>(double(g.xid_events.back().xid));
      });
  gpu("saturate_gpu_util_sampled_pct", "gauge",
      "GPU utilization from the driver's sub-second sample buffer (in %).",
      [](const GpuSample& g) { return g.util_sampled_pct; });

  const Labels host = HostLabels(hostname, job);
  auto host_gauge = [&](const char* name, const char* help, double v) {
    page.Family(name, "gauge", help);
    page.Sample(host, v);
  };
  page.Family("saturate_host_cpu_pct", "gauge",
              "Host CPU use by mode, percent of all cores (cpu=\"all\") or of one core.");
  auto cpu = [&](const std::string& id, const CpuUsage& c) {
    for (auto [mode, pct] : {std::pair{"user", c.user_pct}, std::pair{"system", c.system_pct},
                             std::pair{"iowait", c.iowait_pct}}) {
      page.Sample(MergeLabels(host, {{"cpu", id}, {"mode", mode}}), pct);
    }
  };
  cpu("all", s.host.cpu);
  for (const CpuUsage& c : s.host.cores) cpu(std::to_string(c.cpu), c);
  host_gauge("saturate_host_memory_used_bytes", "Host memory in use (total - available).",
             double(s.mem.used_bytes()));
  host_gauge("saturate_host_memory_total_bytes", "Host memory.", double(s.mem.total_bytes));
  host_gauge("saturate_host_disk_read_bytes_per_s", "Read rate over whole disks.",
             s.host.disks_total.read_bytes_per_s);
  host_gauge("saturate_host_disk_write_bytes_per_s", "Write rate over whole disks.",
             s.host.disks_total.write_bytes_per_s);
  if (s.tree) {
    host_gauge("saturate_process_tree_cpu_pct", "CPU of the watched process tree (100 = 1 core).",
               s.tree->cpu_pct);
    host_gauge("saturate_process_tree_rss_bytes", "Resident memory of the watched process tree.",
               double(s.tree->rss_bytes));
    host_gauge("saturate_process_tree_threads", "Threads in the watched process tree.",
               double(s.tree->threads));
    host_gauge("saturate_process_tree_processes", "Processes in the watched process tree.",
               double(s.tree->processes));
    if (s.tree->runq_wait_cores) {
      host_gauge("saturate_process_tree_runq_wait_cores",
                 "Threads of the watched process tree runnable but waiting for a CPU (mean).",
                 *s.tree->runq_wait_cores);
    }
  }
  page.Family("saturate_watch_samples_total", "counter", "Samples taken by saturate watch.");
  page.Sample(host, double(samples));
  page.Family("saturate_watch_sampler_cpu_seconds_total", "counter",
              "CPU time used by saturate's sampling thread.");
  page.Sample(host, double(sampler_cpu_ns) / 1e9);
  return page.text();
}

std::string JobProgressPrometheus(const Labels& host_labels, int64_t steps, bool stalled) {
  PrometheusText page;
  page.Family("saturate_job_steps_total", "counter",
              "Training steps the watched job marked (the most of any rank).");
  page.Sample(host_labels, double(steps));
  page.Family("saturate_job_stalled", "gauge",
              "1 while no rank of the watched job has stepped for --hang-timeout.");
  page.Sample(host_labels, stalled ? 1 : 0);
  return page.text();
}

std::string JobPrecisionPrometheus(const Labels& host_labels,
                                   const std::map<int, int64_t>& bits_by_rank) {
  if (bits_by_rank.empty()) return "";
  PrometheusText page;
  page.Family("saturate_job_precision_bits", "gauge",
              "Bits the rank's training math runs in: 16 under torch.autocast (fp16/bf16) or "
              "with 16-bit weights, 32 in fp32.");
  for (const auto& [rank, bits] : bits_by_rank) {
    page.Sample(MergeLabels(host_labels, {{"rank", std::to_string(rank)}}), double(bits));
  }
  return page.text();
}

std::string LoaderPrometheus(const Labels& host_labels,
                             const std::map<int, std::map<std::string, int64_t>>& by_rank) {
  struct Metric {
    const char* key;  // in the counters records (docs/trace.md)
    const char* name;
    const char* type;
    double scale;  // to the family's unit
    const char* help;
  };
  static constexpr Metric kMetrics[] = {
      {"samples", "saturate_loader_samples_total", "counter", 1, "Samples the loaders produced."},
      {"batches_delivered", "saturate_loader_batches_total", "counter", 1,
       "Batches the loaders handed to training."},
      {"wait_ns", "saturate_loader_wait_seconds_total", "counter", 1e-9,
       "Time training waited for the loaders' next batch."},
      {"read_ns", "saturate_loader_read_seconds_total", "counter", 1e-9,
       "Loader thread time reading records."},
      {"decode_ns", "saturate_loader_decode_seconds_total", "counter", 1e-9,
       "Loader thread time decoding."},
      {"threads", "saturate_loader_threads", "gauge", 1, "Loader worker threads now."},
      {"remote_requests", "saturate_remote_requests_total", "counter", 1,
       "Object-store/HTTP requests completed, retries included."},
      {"remote_bytes_fetched", "saturate_remote_fetched_bytes_total", "counter", 1,
       "Bytes fetched from the object store or HTTP server."},
      {"remote_request_ns", "saturate_remote_request_seconds_total", "counter", 1e-9,
       "Time spent in requests (divide by requests for the mean latency)."},
      {"remote_in_flight", "saturate_remote_in_flight_requests", "gauge", 1,
       "Requests running now."},
      {"remote_retries", "saturate_remote_retries_total", "counter", 1, "Requests retried."},
      {"remote_errors", "saturate_remote_errors_total", "counter", 1,
       "Requests that failed for good."},
      {"remote_cache_hits", "saturate_remote_cache_hits_total", "counter", 1,
       "Blocks read from the local cache directory."},
      {"remote_cache_misses", "saturate_remote_cache_misses_total", "counter", 1,
       "Blocks fetched because the cache lacked them."},
  };
  PrometheusText page;
  auto labels = [&](int rank) {
    return MergeLabels(host_labels, {{"rank", std::to_string(rank)}});
  };
  for (const Metric& m : kMetrics) {
    bool started = false;
    for (const auto& [rank, values] : by_rank) {
      const auto it = values.find(m.key);
      if (it == values.end()) continue;
      if (!started) page.Family(m.name, m.type, m.help);
      started = true;
      page.Sample(labels(rank), double(it->second) * m.scale);
    }
  }
  // The ratio a dashboard wants, from the two counters.
  bool started = false;
  for (const auto& [rank, values] : by_rank) {
    const auto hits = values.find("remote_cache_hits"), misses = values.find("remote_cache_misses");
    if (hits == values.end() || misses == values.end() || hits->second + misses->second == 0) {
      continue;
    }
    if (!started) {
      page.Family("saturate_remote_cache_hit_ratio", "gauge",
                  "Cache hits / (hits + misses) since the loader opened.");
    }
    started = true;
    page.Sample(labels(rank), double(hits->second) / double(hits->second + misses->second));
  }
  DecodeSplitPrometheus(by_rank, labels, page);
  return page.text();
}

Labels HostLabels(const std::string& hostname, const JobLabels& job) {
  return MergeLabels({{"Hostname", hostname}}, job.labels);
}

std::string RenderLine(const Snapshot& s) {
  std::string line = Format("t=%.1fs", double(s.t_ns) / 1e9);
  for (const GpuSample& g : s.gpus) {
    line += " | gpu" + std::to_string(g.index);
    if (g.lost) {
      line += " LOST";
      continue;
    }
    line += " " + Pct(AsDouble(g.util_pct));
    if (g.memory_used_bytes && g.memory_total_bytes) {
      line += " " + GiB(*g.memory_used_bytes) + "/" + GiB(*g.memory_total_bytes) + "GiB";
    }
    if (g.power_w) line += Format(" %.0fW", *g.power_w);
    if (g.gpm.sm_active_pct) line += Format(" sm %.0f%%", *g.gpm.sm_active_pct);
    if (g.gpm.tensor_active_pct) line += Format(" tensor %.0f%%", *g.gpm.tensor_active_pct);
    if (g.gpm.dram_active_pct) line += Format(" dram %.0f%%", *g.gpm.dram_active_pct);
  }
  line += " | cpu " + Format("%.0f%%", s.host.cpu.busy_pct) +
          Format(" iowait %.1f%%", s.host.cpu.iowait_pct) + " mem " + GiB(s.mem.used_bytes()) +
          "/" + GiB(s.mem.total_bytes) + "GiB";
  if (s.tree) {
    line += Format(" | tree %.0f procs", double(s.tree->processes)) +
            Format(" cpu %.0f%%", s.tree->cpu_pct) + " rss " + GiB(s.tree->rss_bytes) + "GiB";
  }
  return line;
}

std::string RenderScreen(const Snapshot& s, const ViewContext& view) {
  std::string out = Format("saturate watch   %.1f s", double(s.t_ns) / 1e9) +
                    Format("   every %.0f ms", double(view.interval_ns) / 1e6);
  if (!view.run_dir.empty()) out += "   run: " + view.run_dir;
  out += "\n";
  if (!view.command.empty()) {
    out += "command:";
    for (const std::string& a : view.command) out += " " + a;
    out += Format("   (pid %.0f)\n", double(view.pid));
  }
  out += "\nGPU " + view.gpu_status + "\n";
  if (!s.gpus.empty()) {
    out +=
        "  #  util  sampled  mem util  memory used/total   power   SM/mem MHz    PCIe rx/tx MB/s  "
        "temp  events\n";
  }
  for (const GpuSample& g : s.gpus) {
    char row[256];
    if (g.lost) {
      std::snprintf(row, sizeof(row), "%3d  lost: the GPU fell off the bus\n", g.index);
      out += row;
      continue;
    }
    const std::string mem =
        g.memory_used_bytes && g.memory_total_bytes
            ? GiB(*g.memory_used_bytes) + "/" + GiB(*g.memory_total_bytes) + " GiB"
            : "n/a";
    std::string events = "-";
    if (g.clocks_event_reasons && *g.clocks_event_reasons) {
      events.clear();
      for (const std::string& n : ClocksEventReasonNames(*g.clocks_event_reasons)) {
        events += (events.empty() ? "" : ",") + n;
      }
    }
    std::snprintf(
        row, sizeof(row), "%3d  %s   %s     %s     %-17s  %5s  %5s/%-5s  %6s/%-6s  %4s  %s\n",
        g.index, Pct(AsDouble(g.util_pct)).c_str(), Pct(g.util_sampled_pct).c_str(),
        Pct(AsDouble(g.mem_util_pct)).c_str(), mem.c_str(), Opt("%.0fW", g.power_w).c_str(),
        Opt("%.0f", AsDouble(g.sm_clock_mhz)).c_str(),
        Opt("%.0f", AsDouble(g.mem_clock_mhz)).c_str(),
        Opt("%.0f", Scaled(PcieRx(g), 1e-6)).c_str(), Opt("%.0f", Scaled(PcieTx(g), 1e-6)).c_str(),
        Opt("%.0fC", AsDouble(g.temperature_c)).c_str(), events.c_str());
    out += row;
  }
  // GPM activity counters, for the GPUs that have them (Hopper and later).
  bool gpm_header = false;
  for (const GpuSample& g : s.gpus) {
    if (g.lost || !g.gpm.any()) continue;
    if (!gpm_header) {
      out += "  #  SM active  occupancy  tensor  fp32  DRAM   NVLink rx/tx MB/s  (GPM)\n";
      gpm_header = true;
    }
    char row[192];
    std::snprintf(row, sizeof(row), "%3d  %s       %s       %s    %s  %s   %7s/%-7s\n", g.index,
                  Pct(g.gpm.sm_active_pct).c_str(), Pct(g.gpm.sm_occupancy_pct).c_str(),
                  Pct(g.gpm.tensor_active_pct).c_str(), Pct(g.gpm.fp32_active_pct).c_str(),
                  Pct(g.gpm.dram_active_pct).c_str(),
                  Opt("%.0f", Scaled(g.gpm.nvlink_rx_bytes_per_s, 1e-6)).c_str(),
                  Opt("%.0f", Scaled(g.gpm.nvlink_tx_bytes_per_s, 1e-6)).c_str());
    out += row;
  }
  out += Format("\nhost  CPU %3.0f%%", s.host.cpu.busy_pct) +
         Format("  (user %.0f", s.host.cpu.user_pct) +
         Format(", system %.0f", s.host.cpu.system_pct) +
         Format(", iowait %.1f)", s.host.cpu.iowait_pct) + "   memory " + GiB(s.mem.used_bytes()) +
         "/" + GiB(s.mem.total_bytes) + " GiB" +
         Format("   disk read %.1f MB/s", s.host.disks_total.read_bytes_per_s / 1e6) +
         Format(", write %.1f MB/s\n", s.host.disks_total.write_bytes_per_s / 1e6);
  out += "cores";
  for (const CpuUsage& c : s.host.cores) out += Format(" %3.0f", c.busy_pct);
  out += "  (% busy)\n";
  if (s.tree) {
    out += Format("\nprocess tree  %.0f processes", double(s.tree->processes)) +
           Format("   CPU %.0f%%", s.tree->cpu_pct) + "   RSS " + GiB(s.tree->rss_bytes) +
           Format(" GiB   %.0f threads\n", double(s.tree->threads));
    out += "      PID   CPU%      RSS MiB  THR  COMMAND\n";
    size_t shown = 0;
    for (const ProcessRow& p : s.processes) {
      if (++shown > 10) break;
      char row[160];
      std::snprintf(row, sizeof(row), "  %7d  %5.0f  %11.0f  %3lld  %s\n", p.pid, p.cpu_pct,
                    double(p.rss_bytes) / (1 << 20), static_cast<long long>(p.threads),
                    p.comm.c_str());
      out += row;
    }
  }
  return out;
}

}  // namespace saturate::watch
