#include "saturate/watch/watcher.h"

#include <time.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "base/file.h"
#include "base/rank_env.h"
#include "base/thread_name.h"
#include "watch/nvml.h"
#include "watch/procfs.h"
#include "watch/snapshot.h"

namespace saturate::watch {
namespace {

using json = nlohmann::json;

constexpr int64_t kRescanNs = 1'000'000'000;  // full /proc scan for new tree members

int64_t UnixNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// The watched process tree: a full /proc scan every kRescanNs finds every
// new descendant; in between the known members are read, with the children
// their main threads forked (cheap at 100 Hz). Without the latter, workers
// that live less than a rescan interval (a DataLoader's, started again at
// every epoch) were missed, and their CPU counted as other processes'.
class TreeTracker {
 public:
  TreeTracker(std::string proc_root, int root_pid)
      : proc_root_(std::move(proc_root)), root_(root_pid) {}

  std::vector<ProcessStat> Read(int64_t now_ns) {
    std::vector<ProcessStat> members;
    if (now_ns - last_scan_ns_ >= kRescanNs) {
      auto all = ListProcesses(proc_root_);
      if (all.ok()) {
        members = Descendants(*all, root_);
        last_scan_ns_ = now_ns;
      }
    } else {
      std::unordered_set<int> known(pids_.begin(), pids_.end());
      for (size_t i = 0; i < pids_.size(); ++i) {
        auto p = ReadProcess(proc_root_, pids_[i]);
        if (!p.ok()) continue;
        members.push_back(std::move(*p));
        for (int child : ReadChildren(proc_root_, pids_[i])) {
          if (known.insert(child).second) pids_.push_back(child);
        }
      }
    }
    pids_.clear();
    for (const ProcessStat& p : members) pids_.push_back(p.pid);
    return members;
  }

 private:
  std::string proc_root_;
  int root_;
  std::vector<int> pids_;
  int64_t last_scan_ns_ = INT64_MIN / 2;
};

}  // namespace

class Watcher::Impl {
 public:
  explicit Impl(WatchOptions options)
      : options_(std::move(options)),
        clock_ticks_(ClockTicksPerSecond()),
        page_bytes_(PageSizeBytes()),
        tree_(options_.proc_root, options_.pid) {}

  ~Impl() { (void)Stop(std::nullopt); }

  Status Open() {
    start_ns_ = MonotonicNowNs();
    start_unix_ns_ = UnixNs();
    LoadGpus();
    SATURATE_ASSIGN_OR_RETURN(prev_host_,
                              ReadHostCounters(options_.proc_root, "/sys", &whole_disks_));
    if (options_.pid > 0) prev_tree_ = Tree(start_ns_);
    if (!options_.run_dir.empty()) SATURATE_RETURN_IF_ERROR(OpenRunDir());
    thread_ = std::thread([this] {
      base::NameThisThread("watch");
      Loop();
    });
    return Status::OK();
  }

  Status Stop(std::optional<int> exit_code) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return Status::OK();
      stopped_ = true;
      stop_ns_ = MonotonicNowNs();
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    if (samples_file_ != nullptr) {
      std::fclose(samples_file_);
      samples_file_ = nullptr;
    }
    if (options_.run_dir.empty()) return Status::OK();
    meta_["end_unix_ns"] = UnixNs();
    meta_["samples"] = samples_;
    meta_["sampler_cpu_ns"] = sampler_cpu_ns_;
    if (exit_code) meta_["exit_code"] = *exit_code;
    return WriteFileAtomic(options_.run_dir + "/meta.json", meta_.dump(2) + "\n");
  }

  std::string gpu_status() const { return gpu_status_; }
  int gpu_count() const { return nvml_ ? nvml_->device_count() : 0; }

  WatchStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t now_ns = stopped_ ? stop_ns_ : MonotonicNowNs();
    return WatchStats{samples_, now_ns - start_ns_, sampler_cpu_ns_, last_error_};
  }

  std::string LatestJson() const {
    std::lock_guard<std::mutex> lock(mu_);
    return samples_ == 0 ? "{}" : SnapshotJson(latest_).dump();
  }

  std::string PrometheusText() const {
    std::lock_guard<std::mutex> lock(mu_);
    return SnapshotPrometheus(latest_, GpuInfos(), hostname_, Job(), samples_, sampler_cpu_ns_);
  }

  Labels HostLabels() const { return watch::HostLabels(hostname_, Job()); }

  std::string Render(bool screen) const {
    std::lock_guard<std::mutex> lock(mu_);
    ViewContext view{gpu_status_, options_.run_dir, options_.pid, options_.command,
                     options_.interval_ns};
    return screen ? RenderScreen(latest_, view) : RenderLine(latest_);
  }

 private:
  void LoadGpus() {
    if (!options_.gpus) {
      gpu_status_ = "GPU sampling off";
      return;
    }
    auto nvml = Nvml::Load(options_.nvml_library);
    if (!nvml.ok()) {
      gpu_status_ = "no GPUs: " + nvml.status().message();
      return;
    }
    nvml_ = std::move(*nvml);
    gpu_status_ = std::to_string(nvml_->device_count()) + " GPU" +
                  (nvml_->device_count() == 1 ? "" : "s") + " (driver " +
                  (nvml_->driver_version().empty() ? "unknown" : nvml_->driver_version()) + ", " +
                  nvml_->library_path() + ")";
  }

  std::vector<GpuDeviceInfo> GpuInfos() const {
    std::vector<GpuDeviceInfo> infos;
    for (int i = 0; i < gpu_count(); ++i) infos.push_back(nvml_->info(i));
    return infos;
  }

  json GpuInfoJson() const {
    json gpus = json::array();
    for (int i = 0; i < gpu_count(); ++i) {
      const GpuDeviceInfo& g = nvml_->info(i);
      json j = {
          {"index", g.index}, {"name", g.name}, {"uuid", g.uuid}, {"pci_bus_id", g.pci_bus_id}};
      if (g.memory_total_bytes) j["memory_total_bytes"] = *g.memory_total_bytes;
      gpus.push_back(std::move(j));
    }
    return gpus;
  }

  JobLabels Job() const { return JobLabels{options_.job_labels, options_.job_gpus}; }

  nlohmann::json JobLabelsJson() const {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [key, value] : options_.job_labels) j[key] = value;
    return j;
  }

  Status OpenRunDir() {
    std::error_code ec;
    std::filesystem::create_directories(options_.run_dir, ec);
    if (ec)
      return Status::IOError("cannot create run directory " + options_.run_dir + ": " +
                             ec.message());
    meta_ = {{"saturate_version", "0.1.0"},
             {"host", hostname_},
             {"cpus", prev_host_.cpu.cores.size()},
             {"mem_total_bytes", prev_host_.mem.total_bytes},
             {"gpu_status", gpu_status_},
             {"driver_version", nvml_ ? nvml_->driver_version() : ""},
             {"gpus", GpuInfoJson()},
             {"command", options_.command},
             {"pid", options_.pid},
             {"auto_instrument", options_.auto_instrument},
             {"job_labels", JobLabelsJson()},
             {"start_unix_ns", start_unix_ns_},
             {"start_monotonic_ns", start_ns_},
             {"interval_ns", options_.interval_ns},
             {"samples_file", "samples.jsonl"},
             {"schema", "docs/watch.md"}};
    SATURATE_RETURN_IF_ERROR(
        WriteFileAtomic(options_.run_dir + "/meta.json", meta_.dump(2) + "\n"));
    const std::string path = options_.run_dir + "/samples.jsonl";
    samples_file_ = std::fopen(path.c_str(), "w");
    if (samples_file_ == nullptr) return Status::FromErrno("cannot create " + path, errno);
    return Status::OK();
  }

  std::optional<ProcessTreeCounters> Tree(int64_t now_ns) {
    std::vector<ProcessStat> members = tree_.Read(now_ns);
    if (members.empty()) return std::nullopt;
    ProcessTreeCounters c = SumProcesses(members, page_bytes_);
    c.time_ns = now_ns;
    members_ = std::move(members);
    return c;
  }

  // Per-process CPU% since the previous sample, busiest first.
  std::vector<ProcessRow> Rows(double elapsed_s) {
    std::vector<ProcessRow> rows;
    std::unordered_map<int, uint64_t> ticks;
    for (const ProcessStat& p : members_) {
      const uint64_t t = p.utime_ticks + p.stime_ticks;
      ticks[p.pid] = t;
      auto prev = prev_ticks_.find(p.pid);
      const double d =
          prev != prev_ticks_.end() && t >= prev->second ? double(t - prev->second) : 0;
      rows.push_back({p.pid, p.comm, elapsed_s > 0 ? 100.0 * d / clock_ticks_ / elapsed_s : 0,
                      uint64_t(p.rss_pages) * uint64_t(page_bytes_), p.num_threads});
    }
    prev_ticks_ = std::move(ticks);
    std::stable_sort(rows.begin(), rows.end(), [](const ProcessRow& a, const ProcessRow& b) {
      return a.cpu_pct > b.cpu_pct;
    });
    return rows;
  }

  // The threads waiting for a CPU, per member and for the tree, as rates
  // since the last read of every thread's schedstat. Those reads list each
  // member's threads, so they run once per kRescanNs, not at every sample;
  // the values hold in between.
  void AddRunqWaits(int64_t now_ns, Snapshot* s) {
    if (now_ns - scheds_ns_ >= kRescanNs) {
      const double elapsed_ns = double(now_ns - scheds_ns_);
      std::unordered_map<int, ThreadScheds> scheds;
      uint64_t tree_ns = 0;
      member_waits_.clear();
      for (const ProcessStat& p : members_) {
        ThreadScheds& now = scheds[p.pid] = ReadThreadScheds(options_.proc_root, p.pid);
        auto prev = scheds_.find(p.pid);
        const SchedGrowth g =
            GrowthBetween(prev == scheds_.end() ? ThreadScheds{} : prev->second, now);
        tree_ns += g.runq_wait_ns;  // a member new since the last read: all its wait is new
        if (prev == scheds_.end()) continue;
        ProcessRow& rates = member_waits_[p.pid];
        rates.runq_wait_cores = double(g.runq_wait_ns) / elapsed_ns;
        if (g.saturate_threads) {
          rates.saturate_runq_wait_cores = double(g.saturate_runq_wait_ns) / elapsed_ns;
          rates.saturate_cpu_cores = double(g.saturate_run_ns) / elapsed_ns;
        }
      }
      if (!scheds_.empty()) runq_wait_cores_ = double(tree_ns) / elapsed_ns;
      scheds_ = std::move(scheds);
      scheds_ns_ = now_ns;
    }
    s->tree->runq_wait_cores = runq_wait_cores_;
    for (ProcessRow& row : s->processes) {
      auto it = member_waits_.find(row.pid);
      if (it == member_waits_.end()) continue;
      row.runq_wait_cores = it->second.runq_wait_cores;
      row.saturate_runq_wait_cores = it->second.saturate_runq_wait_cores;
      row.saturate_cpu_cores = it->second.saturate_cpu_cores;
    }
  }

  void SampleOnce() {
    const int64_t now_ns = MonotonicNowNs();
    Snapshot s;
    s.t_ns = now_ns - start_ns_;
    s.unix_ns = UnixNs();
    auto host = ReadHostCounters(options_.proc_root, "/sys", &whole_disks_);
    if (!host.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      last_error_ = host.status().message();
      return;
    }
    s.host = ComputeHostRates(prev_host_, *host);
    s.mem = host->mem;
    prev_host_ = std::move(*host);
    if (options_.pid > 0) {
      std::optional<ProcessTreeCounters> tree = Tree(now_ns);
      if (tree && prev_tree_) {
        s.tree = ComputeProcessTreeRates(*prev_tree_, *tree, clock_ticks_);
        s.processes = Rows(s.tree->elapsed_s);
        AddRunqWaits(now_ns, &s);
      }
      prev_tree_ = tree;
    }
    if (nvml_) s.gpus = nvml_->SampleAll();
    if (samples_file_ != nullptr) {
      const std::string line = SnapshotJson(s).dump() + "\n";
      std::fwrite(line.data(), 1, line.size(), samples_file_);
      std::fflush(samples_file_);  // a crash loses at most the line being written
    }
    std::lock_guard<std::mutex> lock(mu_);
    latest_ = std::move(s);
    ++samples_;
  }

  void Loop() {
    const int64_t cpu0 = ThreadCpuNs();
    auto next = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopped_) {
      next += std::chrono::nanoseconds(options_.interval_ns);
      if (cv_.wait_until(lock, next, [&] { return stopped_; })) break;
      lock.unlock();
      SampleOnce();
      const int64_t cpu = ThreadCpuNs() - cpu0;
      lock.lock();
      sampler_cpu_ns_ = cpu;
      // After a stall (suspended, overloaded), skip the missed ticks.
      if (std::chrono::steady_clock::now() > next + std::chrono::nanoseconds(options_.interval_ns))
        next = std::chrono::steady_clock::now();
    }
  }

  const WatchOptions options_;
  const int64_t clock_ticks_;
  const int64_t page_bytes_;
  std::unique_ptr<Nvml> nvml_;
  std::string gpu_status_;
  const std::string hostname_ = base::HostName();
  int64_t start_ns_ = 0, start_unix_ns_ = 0;
  json meta_;
  FILE* samples_file_ = nullptr;

  // Sampler thread only.
  HostCounters prev_host_;
  std::unordered_map<std::string, bool> whole_disks_;
  TreeTracker tree_;
  std::vector<ProcessStat> members_;
  std::optional<ProcessTreeCounters> prev_tree_;
  std::unordered_map<int, uint64_t> prev_ticks_;
  std::unordered_map<int, ThreadScheds> scheds_;  // the last schedstat read, by member
  int64_t scheds_ns_ = 0;
  std::optional<double> runq_wait_cores_;
  std::unordered_map<int, ProcessRow> member_waits_;  // only the runq fields are set

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;
  int64_t stop_ns_ = 0;
  Snapshot latest_;
  uint64_t samples_ = 0;
  int64_t sampler_cpu_ns_ = 0;
  std::string last_error_;
  std::thread thread_;
};

Result<std::unique_ptr<Watcher>> Watcher::Start(const WatchOptions& options) {
  if (options.interval_ns < 1'000'000) {
    return Status::InvalidArgument("interval must be at least 1ms");
  }
  auto impl = std::make_unique<Impl>(options);
  SATURATE_RETURN_IF_ERROR(impl->Open());
  return std::unique_ptr<Watcher>(new Watcher(std::move(impl)));
}

Watcher::Watcher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Watcher::~Watcher() = default;
Status Watcher::Stop(std::optional<int> exit_code) { return impl_->Stop(exit_code); }
std::string Watcher::gpu_status() const { return impl_->gpu_status(); }
int Watcher::gpu_count() const { return impl_->gpu_count(); }
WatchStats Watcher::stats() const { return impl_->stats(); }
std::string Watcher::LatestJson() const { return impl_->LatestJson(); }
std::string Watcher::PrometheusText() const { return impl_->PrometheusText(); }
std::vector<std::pair<std::string, std::string>> Watcher::HostLabels() const {
  return impl_->HostLabels();
}
std::string Watcher::Render(bool screen) const { return impl_->Render(screen); }

}  // namespace saturate::watch
