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
};

// The last "loader" counters record of one process (cumulative values).
struct LoaderCounters {
  int pid = 0;
  int64_t t_ns = 0;                       // run axis
  std::map<std::string, int64_t> values;  // batch_size, threads, samples, decode_ns, wait_ns, ...
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
};

// Reads `dir`. Fails (NotFound / InvalidArgument naming the file and line)
// when meta.json is missing or unreadable; a torn last line of a JSON Lines
// file is skipped with a warning, a bad line elsewhere is an error.
Result<Run> LoadRun(const std::string& dir);

}  // namespace saturate::doctor

#endif  // SATURATE_DOCTOR_RUN_H_
