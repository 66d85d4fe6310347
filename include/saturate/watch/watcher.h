// Watcher: samples the host (/proc), a process tree and the GPUs (NVML,
// loaded at run time) every `interval_ns` on its own thread, keeps the latest
// values, and records them into a run directory that doctor reads:
//
//   RUN_DIR/meta.json       host, CPUs, GPUs, driver, command, start, interval;
//                           rewritten at the end with the end time, exit code
//                           and the sampler's own CPU use (temp + rename)
//   RUN_DIR/samples.jsonl   one JSON object per sample (schema: docs/watch.md)
//
// GPUs are optional: without a driver the watcher samples zero GPUs and
// gpu_status() says why in one line. Every GPU metric is optional, too.
//
// Ownership: Start() returns the Watcher, which owns its thread, the NVML
// handle and the open samples file; Stop() or destruction joins the thread.
// Thread-safety: every const method may be called from any thread while the
// sampler runs (e.g. a Prometheus endpoint); Stop() from one thread.
#ifndef SATURATE_WATCH_WATCHER_H_
#define SATURATE_WATCH_WATCHER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "saturate/base/status.h"

namespace saturate::watch {

struct WatchOptions {
  int64_t interval_ns = 100'000'000;  // 10 Hz
  std::string run_dir;                // "": keep nothing on disk
  int pid = 0;                        // root of the watched process tree; 0: none
  std::vector<std::string> command;   // recorded in meta.json
  bool gpus = true;                   // false: do not load NVML
  std::string nvml_library;           // "": libnvidia-ml.so.1, then .so
  std::string proc_root = "/proc";    // for tests
  // Recorded in meta.json: whether the command got the Python
  // auto-instrumentation bootstrap (src/job/bootstrap.h).
  bool auto_instrument = false;
  // Labels every exported series carries (job_id, user, ...: see
  // src/watch/job_labels.h), except those of GPUs outside `job_gpus` when
  // it is set. Recorded in meta.json as "job_labels".
  std::vector<std::pair<std::string, std::string>> job_labels;
  std::optional<std::vector<int>> job_gpus;
};

// Counters about the watcher itself.
struct WatchStats {
  uint64_t samples = 0;
  int64_t elapsed_ns = 0;
  int64_t sampler_cpu_ns = 0;  // CPU time of the sampling thread
  std::string last_error;      // the last sampling problem, "" if none
};

class Watcher {
 public:
  static Result<std::unique_ptr<Watcher>> Start(const WatchOptions& options);
  ~Watcher();  // stops without an exit code if Stop() was not called
  Watcher(const Watcher&) = delete;
  Watcher& operator=(const Watcher&) = delete;

  // Stops sampling and finishes the run directory (meta.json gets the end
  // time and `exit_code` of the watched command, if any). Idempotent.
  Status Stop(std::optional<int> exit_code = std::nullopt);

  std::string gpu_status() const;  // "2 GPUs (driver 550.54, libnvidia-ml.so.1)" or why none
  int gpu_count() const;
  WatchStats stats() const;

  // The latest sample as one JSON object (the samples.jsonl schema), "{}" before the first.
  std::string LatestJson() const;
  // The latest values in the Prometheus text exposition format, GPU metrics
  // named and labelled as dcgm-exporter does.
  std::string PrometheusText() const;
  // The labels of host-level series: Hostname and the job's labels.
  std::vector<std::pair<std::string, std::string>> HostLabels() const;
  // The latest values for people: a one-screen view (`screen`) or one line.
  std::string Render(bool screen) const;

  class Impl;

 private:
  explicit Watcher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace saturate::watch

#endif  // SATURATE_WATCH_WATCHER_H_
