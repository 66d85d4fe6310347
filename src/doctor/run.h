// Run: a run directory read into memory for analysis (meta.json,
// samples.jsonl, spans-*.jsonl; formats in docs/watch.md and docs/trace.md).
// LoadRun() is the only function here that touches the file system; the
// features and rules are pure functions over a Run, so tests build Runs by
// hand.
//
// Times are nanoseconds since the watch started (samples' `t_ns`); spans are
// shifted onto that axis with meta.json's `start_monotonic_ns`.
//
// Thread-safety: plain values.
#ifndef SATURATE_DOCTOR_RUN_H_
#define SATURATE_DOCTOR_RUN_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "saturate/base/status.h"

namespace saturate::doctor {

struct GpuPoint {
  int index = 0;
  bool lost = false;
  std::optional<double> util_pct;  // util_sampled_pct when present, else util_pct
  std::optional<uint64_t> memory_used_bytes;
  std::optional<uint64_t> memory_total_bytes;
  std::optional<double> power_w;
  std::optional<uint64_t> pcie_rx_bytes_per_s;
  std::optional<double> sm_clock_mhz;
  std::vector<std::string> clocks_event_reasons;  // e.g. "sw_power_cap", "hw_thermal"
  // GPM activity counters (samples' "gpm"; Hopper and later), 0-100.
  std::optional<double> sm_active_pct;
  std::optional<double> sm_occupancy_pct;
  std::optional<double> tensor_active_pct;
  std::optional<double> dram_active_pct;
};

// One samples.jsonl line, reduced to what the rules read.
struct SamplePoint {
  int64_t t_ns = 0;
  double cpu_busy_pct = 0;    // of all cores, 0-100
  double cpu_iowait_pct = 0;  // of all cores, 0-100
  // Share of the interval some runnable task waited for a CPU (PSI); empty
  // on kernels without it.
  std::optional<double> cpu_pressure_pct;
  uint64_t mem_available_bytes = 0;
  uint64_t mem_total_bytes = 0;
  double disk_read_bytes_per_s = 0;
  // The watched process tree; empty when none was watched.
  std::optional<double> tree_cpu_pct;  // 100 = one core
  std::optional<uint64_t> tree_rss_bytes;
  std::optional<double> tree_runq_wait_cores;  // its threads waiting for a CPU (mean)
  struct Member {
    int pid = 0;
    double cpu_pct = 0;
    std::optional<double> runq_wait_cores;
    // saturate's own threads in it (loader workers, writers), when it has any
    double saturate_runq_wait_cores = 0;
    double saturate_cpu_cores = 0;
  };
  std::vector<Member> members;  // the tree's processes
  std::vector<GpuPoint> gpus;
};

enum class SpanKind { kUser, kLoader, kCheckpoint };

struct Span {
  std::string name;  // "forward", "data_wait", "load_batch", ...
  SpanKind kind = SpanKind::kUser;
  int pid = 0;
  int64_t tid = 0;
  int64_t start_ns = 0;  // run axis
  int64_t dur_ns = 0;
  std::map<std::string, int64_t> args;
  std::map<std::string, std::string> labels;  // e.g. {"site": "train.py:42"}
  bool auto_source = false;                   // recorded by the auto-instrumentation
};

// The last "loader" counters record of one process (cumulative values).
struct LoaderCounters {
  int pid = 0;
  int64_t t_ns = 0;                       // run axis
  std::map<std::string, int64_t> values;  // batch_size, threads, samples, decode_ns, wait_ns, ...
};

// A torch DataLoader as the auto-instrumentation saw it built.
struct DataLoaderInfo {
  int pid = 0;
  int64_t loader_id = 0;
  std::map<std::string, int64_t> values;  // num_workers, pin_memory, batch_size (-1: none), ...
  std::string site;                       // where it was built: "train.py:120"
  std::string dataset;                    // the dataset's class name
};

// Host syncs from one call site of one process (cumulative totals).
struct SyncSite {
  int pid = 0;
  std::string site;    // "train.py:42"
  std::string op;      // ".item()", ".cpu()", "torch.cuda.synchronize()", ...
  std::string device;  // "cuda": a real wait for the device; "cpu": would be one on a GPU
  int64_t count = 0;
  int64_t total_ns = 0;
  int64_t max_ns = 0;
  // In how many of the stretches between optimizer updates the site ran, of
  // how many (0 when not recorded): an evaluation loop every N steps has as
  // many calls per step as a loss logged every step, in few of them.
  int64_t steps = 0;
  int64_t intervals = 0;
};

// A process the auto-instrumentation recorded, and what it captured.
struct AutoProcess {
  int pid = 0;
  std::string torch_version;                   // empty: torch was never imported
  std::map<std::string, std::string> missing;  // hook -> why it is not captured
  int64_t errors = 0;                          // recording errors (events may be missing)
};

// A process's exit as the auto-instrumentation saw it: through exit handlers
// (sys.exit, the end of the script, an uncaught exception). A killed process
// records none.
struct ProcessExit {
  int pid = 0;
  int64_t t_ns = 0;  // run axis
  int64_t steps = 0;
  std::string exception;  // "RuntimeError: ..." when one ended it; empty otherwise
};

struct RunMeta {
  std::string dir;
  std::vector<std::string> command;
  std::string host;
  int cpus = 0;
  uint64_t mem_total_bytes = 0;
  std::string gpu_status;
  int gpu_count = 0;
  std::vector<uint64_t> gpu_memory_total_bytes;  // by GPU index
  int64_t start_unix_ns = 0;
  int64_t start_monotonic_ns = 0;
  int64_t interval_ns = 0;
  int64_t duration_ns = 0;  // end - start; from the samples when meta has no end
  std::optional<int> exit_code;
  // Whether the command ran with the auto-instrumentation bootstrap; unknown
  // for runs recorded before it existed.
  std::optional<bool> auto_instrument;
};

struct Run {
  RunMeta meta;
  std::vector<SamplePoint> samples;                   // by t_ns
  std::vector<Span> spans;                            // all processes, by start_ns
  std::map<int, std::vector<int64_t>> step_marks_ns;  // per pid, run axis, ascending
  std::vector<LoaderCounters> loaders;                // one per process that ran a Loader
  // The last record of every other counter name (e.g. a user's "model"
  // counter with {"precision_bits": 16}), over all processes.
  std::map<std::string, std::map<std::string, int64_t>> counters;
  std::vector<std::string> warnings;  // lines skipped and why (torn last line, ...)
  // From the auto-instrumentation (spans-<pid>-auto.jsonl files).
  std::vector<AutoProcess> auto_processes;
  std::vector<DataLoaderInfo> dataloaders;
  std::vector<SyncSite> host_syncs;
  std::vector<ProcessExit> exits;  // processes whose exit was recorded
};

// Reads `dir`. A process with step marks of its own (saturate.step()) keeps
// them and its own forward/backward/optimizer spans: the auto-instrumentation's
// marks and those phases are dropped there, so nothing counts twice. Fails (NotFound /
// InvalidArgument naming the file and line) when meta.json is missing or unreadable; a torn last
// line of a JSON Lines file is skipped with a warning, a bad line elsewhere is an error.
Result<Run> LoadRun(const std::string& dir);

// What LoadRunFrom reads; LoadRun(dir) reads {dir, dir}. One rank of a job
// (docs/ranks.md) is its node's meta.json and samples with its own spans.
struct RunSources {
  std::string meta_dir;   // meta.json and samples.jsonl; "": none (spans only)
  std::string spans_dir;  // spans-*.jsonl
  // Set: the axis starts at this wall-clock time, and each spans file is
  // placed by its own wall-clock reading (its meta line's unix_ns), so spans
  // and samples from several nodes share one axis; `shift_ns` is added to
  // all of them (the node's clock correction).
  std::optional<int64_t> origin_unix_ns;
  int64_t shift_ns = 0;
};
Result<Run> LoadRunFrom(const RunSources& sources);

}  // namespace saturate::doctor

#endif  // SATURATE_DOCTOR_RUN_H_
