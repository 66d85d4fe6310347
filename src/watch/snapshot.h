// Snapshot: one sample of host, process tree and GPUs, and the pure functions
// that present it: the samples.jsonl object (schema: docs/watch.md), the
// Prometheus page and the live view. Pure, so they are tested on hand-built
// snapshots; the Watcher fills snapshots and calls these.
//
// Thread-safety: plain values and reentrant functions.
#ifndef SATURATE_WATCH_SNAPSHOT_H_
#define SATURATE_WATCH_SNAPSHOT_H_

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "watch/job_labels.h"
#include "watch/nvml.h"
#include "watch/procfs.h"

namespace saturate::watch {

struct ProcessRow {
  int pid = 0;
  std::string comm;
  double cpu_pct = 0;  // of one core
  uint64_t rss_bytes = 0;
  int64_t threads = 0;
  std::optional<double> runq_wait_cores;  // its threads waiting for a CPU (mean)
  // Of those, saturate's own threads (loader workers, writers): their waits
  // and their CPU. Set only in a process that has such threads.
  std::optional<double> saturate_runq_wait_cores;
  std::optional<double> saturate_cpu_cores;
};

struct Snapshot {
  int64_t t_ns = 0;  // since the watcher started
  int64_t unix_ns = 0;
  HostRates host;
  MemInfo mem;
  std::optional<ProcessTreeRates> tree;  // when a process tree is watched
  std::vector<ProcessRow> processes;     // the tree's members, busiest first
  std::vector<GpuSample> gpus;
};

// One samples.jsonl object. Metrics a source lacks are left out.
nlohmann::json SnapshotJson(const Snapshot& s);

// The Prometheus page: GPU metrics named and labelled as dcgm-exporter
// (DCGM_FI_DEV_GPU_UTIL{gpu,UUID,device,modelName,Hostname}, ...), host and
// process-tree metrics as saturate_*. Every series carries the job's labels
// (job_labels.h), except those of GPUs the job does not hold.
std::string SnapshotPrometheus(const Snapshot& s, const std::vector<GpuDeviceInfo>& gpus,
                               const std::string& hostname, const JobLabels& job, uint64_t samples,
                               int64_t sampler_cpu_ns);

// saturate_job_steps_total and saturate_job_stalled: a job's progress as
// followed from its step marks (a multi-rank job's hang watch), labelled as
// the host series.
std::string JobProgressPrometheus(const Labels& host_labels, int64_t steps, bool stalled);

// saturate_job_precision_bits: the bits each rank's training math runs in
// (rank -> bits, from its spans files' "model" or "precision" records;
// docs/auto.md), labelled as the host series plus "rank". Empty: none known.
std::string JobPrecisionPrometheus(const Labels& host_labels,
                                   const std::map<int, int64_t>& bits_by_rank);

// saturate_loader_* and saturate_remote_*: each rank's traced saturate
// loaders, from the latest "loader" / "loader_remote" counters records of its
// spans files, and the JPEG decode split of those that feed a GPU from their
// "loader_decode" records (rank -> key -> value, summed over its loaders;
// docs/watch.md, docs/gpu.md), labelled as the host series plus "rank" (and
// "where" / "mode" for the split). A key a rank lacks is left out.
std::string LoaderPrometheus(const Labels& host_labels,
                             const std::map<int, std::map<std::string, int64_t>>& by_rank);

// {Hostname, the job's labels}: the labels of the host, process-tree and
// job series (saturate_job_* too, which the watch command adds).
Labels HostLabels(const std::string& hostname, const JobLabels& job);

struct ViewContext {
  std::string gpu_status;
  std::string run_dir;
  int pid = 0;
  std::vector<std::string> command;
  int64_t interval_ns = 0;
};

// The live one-screen view (for a terminal) and the one-line form (for logs).
std::string RenderScreen(const Snapshot& s, const ViewContext& view);
std::string RenderLine(const Snapshot& s);

}  // namespace saturate::watch

#endif  // SATURATE_WATCH_SNAPSHOT_H_
