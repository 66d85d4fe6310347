// JobLabels: which job the GPUs and host that `saturate watch` exports belong
// to, as Prometheus labels on every series, so that a cluster-wide view
// (`saturate fleet`, the alert rules in deploy/prometheus) can tell an
// allocated GPU from a free one and sum GPU-hours by job and user.
//
//   job_id, user      Slurm: SLURM_JOB_ID, SLURM_JOB_USER
//   namespace, pod    Kubernetes, from the downward API: POD_NAMESPACE, POD_NAME
//                     (dcgm-exporter's own names for these labels)
//   run_id            torchrun: TORCHELASTIC_RUN_ID (not its default "none")
//   anything          --label key=value (wins over the environment)
// `user` falls back to the login name of this process when a job label is
// present and the scheduler named none.
//
// A job holds only some of a node's GPUs: Slurm lists them in SLURM_JOB_GPUS
// (SLURM_STEP_GPUS inside a step). Only those GPUs' series carry the job's
// labels; the others are exported as free. When the driver shows exactly as
// many GPUs as the list (cgroups hide the rest, and renumber), all carry them.
//
// Thread-safety: pure functions over values (JobLabelsFromEnv reads through
// the given GetEnv).
#ifndef SATURATE_WATCH_JOB_LABELS_H_
#define SATURATE_WATCH_JOB_LABELS_H_

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/rank_env.h"
#include "saturate/base/status.h"
#include "watch/prometheus.h"

namespace saturate::watch {

struct JobLabels {
  Labels labels;  // in a fixed order: job_id, user, namespace, pod, run_id, flags
  std::optional<std::vector<int>> gpus;  // the job's GPU indices; empty optional: every GPU
};

// From the scheduler's and launcher's variables.
JobLabels JobLabelsFromEnv(const base::GetEnv& getenv);

// JobLabelsFromEnv with `--label key=value` flags (ParseLabelFlag) over it.
Result<JobLabels> JobLabelsWithFlags(const base::GetEnv& getenv,
                                     const std::vector<std::string>& flags);

// Parses one `--label key=value`: the key must be a Prometheus label name
// ([a-zA-Z_][a-zA-Z0-9_]*), not reserved (`job` and `instance` are the
// scrape target's, `__*` Prometheus' own) and not one saturate sets on its
// series (gpu, UUID, Hostname, modelName, device, pci_bus_id, cpu, mode).
Result<std::pair<std::string, std::string>> ParseLabelFlag(std::string_view flag);

// `labels` with `extra` added; an extra label replaces one of the same name.
Labels MergeLabels(Labels labels, const Labels& extra);

// Whether GPU `index` (of `gpu_count` the driver shows) carries the job's labels.
bool GpuInJob(const JobLabels& job, int index, int gpu_count);

}  // namespace saturate::watch

#endif  // SATURATE_WATCH_JOB_LABELS_H_
