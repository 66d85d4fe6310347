// Analysis: what doctor concludes from a Run. Features are measurements
// (busy fractions, idle gaps, step-phase shares, CPU and memory headroom);
// rules turn them into Findings, one rule per cause id of docs/diagnosis.md.
// Everything here is a pure function of the Run and the options, so each
// rule is tested on synthetic runs.
//
// Thread-safety: plain values and reentrant functions.
#ifndef SATURATE_DOCTOR_ANALYSIS_H_
#define SATURATE_DOCTOR_ANALYSIS_H_

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "doctor/run.h"

namespace saturate::doctor {

// One measured number behind a finding, e.g. {"data_wait_pct", 41.2, "%",
// "share of step time spent waiting for the next batch"}.
struct Evidence {
  std::string key;
  double value = 0;
  std::string unit;  // "%", "s", "ms", "cores", "GiB", "MB/s", "" ...
  std::string text;
};

// A place in the user's code behind a finding (from the auto-instrumentation).
struct SiteStat {
  std::string site;    // "train.py:42"
  std::string op;      // ".item()", "torch.save", "copy", ...
  std::string device;  // host syncs: "cuda" (a real wait) or "cpu"; else empty
  int64_t count = 0;
  double per_step = 0;  // calls per training step
  double total_s = 0;   // time spent in those calls
  // Host syncs: the share of training steps in which the site ran (empty:
  // not recorded). A site with calls in few steps runs in bursts.
  std::optional<double> step_share;
};

// Features::compile_steps lists at most this many steps.
inline constexpr size_t kMaxCompileSteps = 5;

// A host sync site that ran in under half the steps: a loop of its own (an
// evaluation every N steps), not a call made every step.
inline bool RunsInBursts(const SiteStat& s) { return s.step_share && *s.step_share < 0.5; }

// What applying a finding's fix is expected to give, and the model behind
// the number: "data wait 0.21 s of 0.80 s per step; with 4 workers the wait
// falls to ~0.03 s -> ~1.28x steps/s".
struct Prediction {
  std::string metric;              // "steps/s" or "samples/s" (the fix changes the batch)
  std::optional<double> now;       // the run's rate; empty when the batch size is unknown
  std::optional<double> expected;  // after the fix
  double speedup = 1;              // expected / now
  bool upper_bound = false;        // the fix removes all of the cost at best
  std::string model;
};

// A fix applied and measured by `saturate doctor --check-fix`: the knob
// changed, the A/B re-runs, and how the measured gain compares with the
// prediction.
struct FixCheck {
  std::string knob;  // "num_workers", "batch_size", "prefetch_factor"
  std::string flag;  // the command's flag that carries it: "-j", "--batch-size="
  std::string from, to;
  double predicted_speedup = 0;
  double measured_speedup = 0;  // 0: not measured
  bool reliable_gain = false;   // the A/B re-runs agree on a gain beyond the noise
  bool within_tolerance = false;
  std::string verdict;   // one line
  std::string tune_dir;  // the trials' run directories and tune.json
};

struct Finding {
  std::string cause;  // a cause id: input_pipeline, io_bound, cpu_contention, parallelism, ...
  std::string title;  // one line: what is wrong
  double time_lost_s = 0;
  double time_lost_pct = 0;  // of the run's duration
  std::vector<Evidence> evidence;
  std::string fix;  // what to change, with the number where one can be computed
  // The concrete setting, when there is one: {"threads", 6} or {"batch_size", 256}.
  std::optional<std::pair<std::string, double>> fix_value;
  double confidence = 0;  // 0..1
  // Advice with no measured time lost (e.g. `monitoring`: add step marks).
  // Not ranked and not subject to min_time_lost_pct; listed after the rest.
  bool info = false;
  std::vector<SiteStat> sites;  // where in the code, largest first
  std::optional<Prediction> prediction;
  std::optional<FixCheck> check;  // set by --check-fix
  bool demoted = false;           // its fix gave no reliable gain when applied
};

// A histogram with explicit bucket upper edges (the last bucket is open).
struct Histogram {
  std::vector<double> upper_edges;  // ascending
  std::vector<int64_t> counts;      // upper_edges.size() + 1 buckets
};

// One step on the training thread, as the phases that filled it: a row of
// the report's waterfall.
struct StepWaterfall {
  int64_t step = 0;  // 1 = the first full step (between the first two marks)
  double start_s = 0;
  double dur_s = 0;
  std::vector<std::tuple<std::string, double, double>> segments;  // (phase, offset_s, dur_s)
};

// What the auto-instrumentation recorded, for "what was not captured".
struct AutoSummary {
  std::optional<bool> enabled;  // meta.json's auto_instrument (unknown on older runs)
  int processes = 0;            // Python processes that recorded
  std::string torch_version;    // of the training process when known
  std::map<std::string, std::string> missing;  // hook -> why, over all processes
  int64_t errors = 0;
};

struct PhaseShare {
  std::string name;  // "data_wait", "forward", ..., "other" (step time in no phase)
  double total_s = 0;
  double pct_of_steps = 0;  // share of the summed step time
};

// One rank of a multi-rank job (docs/ranks.md), step by step: a row of the
// report's rank x step heat map. Step i is the i-th full step of that rank.
struct RankRow {
  int rank = 0;
  int local_rank = 0;
  std::string host;
  std::string gpu;                  // "cuda:1" from its copies to the device; empty: none seen
  std::vector<double> step_s;       // step times
  std::vector<double> data_wait_s;  // waiting for the next batch, per step
  std::vector<double> wait_s;       // waiting for other ranks (collectives), per step
  double clock_offset_ms = 0;       // correction applied to this rank's node clock
  std::optional<int> exit_code;     // from task.json (saturate run inside the task)
  bool exited = false;              // the process exited through exit handlers (sys.exit too)
  std::string exception;            // the uncaught exception that ended it, if one did
  std::string note;                 // "no step marks", "rank directory missing", ...
};

// The job as its ranks, when the run directory holds rank-<r>/ folders.
struct RanksView {
  int world_size = 0;         // 0: not a multi-rank run
  std::vector<RankRow> rows;  // by rank; a missing rank has a row with a note
  std::vector<std::string> hosts;
  std::string clock_method;           // how node clocks were aligned ("none": one node)
  double residual_skew_ms = 0;        // what remains after alignment (upper bound)
  std::optional<int> straggler;       // the rank the others wait for most
  double others_wait_per_step_s = 0;  // the others' mean wait per step on it
  std::string straggler_reason;       // "data_wait", "compute", "checkpoint", ...
};

// Measurements. Every optional is empty when the run lacks the source
// (no GPU, no process tree, no spans, no step marks).
struct Features {
  double duration_s = 0;
  int cpus = 0;
  int gpu_count = 0;

  // "Device busy": the GPUs' utilization when there are GPUs; otherwise the
  // share of step time outside data_wait (the training process's compute).
  std::optional<double> device_busy_pct;                        // mean
  std::vector<std::pair<double, double>> device_busy_timeline;  // (t_s, busy %) for charts
  Histogram idle_gaps_s;  // lengths of idle stretches (GPU < 10% busy, or data_wait spans)
  std::optional<double> idle_period_s;  // the saw-tooth's period when idle gaps recur

  // Steps (from step marks).
  int64_t steps = 0;
  std::optional<double> step_time_median_s;
  std::vector<PhaseShare> phases;       // step-phase breakdown, largest first
  std::optional<double> data_wait_pct;  // of step time
  std::optional<double> copy_pct;       // of step time (phases named "copy"/"h2d")

  // Host.
  std::optional<double> host_cpu_busy_pct;  // mean, of all cores
  std::optional<double> host_iowait_pct;    // mean
  std::optional<double> cpu_pressure_pct;   // mean PSI "some": a runnable task waited for a CPU
  std::optional<double> tree_cpu_cores;     // mean cores the process tree used
  std::optional<double> other_cpu_cores;    // mean cores used by everything else
  // Mean threads of the process tree runnable but waiting for a CPU: the
  // compute the job wanted and did not get (its loader's and training's).
  std::optional<double> tree_runq_wait_cores;
  // The same for the training process alone (where the step runs), and the
  // cores it used over those samples.
  std::optional<double> training_runq_wait_cores;
  std::optional<double> training_cpu_cores;
  std::optional<double> mem_headroom_pct;    // min MemAvailable / MemTotal over the run
  std::optional<double> disk_read_mb_per_s;  // mean

  // Checkpoints.
  std::optional<double> checkpoint_s;  // summed checkpoint spans on the training thread
  int64_t checkpoints = 0;             // how many of them
  // The steps right after the saves: their time beyond the median step
  // (page-cache writeback, caches refilled), a cost outside the spans.
  std::optional<double> checkpoint_after_s;

  // Start-up and torch.compile (the training process's `compile` spans).
  std::optional<double> startup_s;  // run start to the first step mark: outside the window
  int64_t compiles = 0;             // compilations, start-up included
  double compile_s = 0;
  int64_t compiles_in_window = 0;  // those that ran during training: recompiles
  double compile_in_window_s = 0;  // their time inside the window
  // The steps they ran in, counted as the job counts its updates: step k
  // ends with the k-th optimizer update (the first kMaxCompileSteps).
  std::vector<int64_t> compile_steps;

  // ---- Added for the rules (docs/diagnosis.md) ----------------------------

  // The training window: first to last step when there are step marks,
  // else the whole run. Shares below are of this window unless said.
  double active_s = 0;
  std::optional<int> training_pid;  // the process with the most step marks
  std::optional<int64_t> training_tid;
  bool has_spans = false;  // user or loader spans on the training thread
  std::optional<double> step_time_mean_s;
  std::optional<double> data_wait_s;         // summed on the training thread, within steps
  std::optional<double> compute_per_step_s;  // mean step time minus mean data wait
  std::optional<double> copy_s;
  std::optional<double> comm_s;
  std::optional<double> comm_pct;  // of step time (phases "comm", "allreduce", ...)

  // Idle gaps away from the run's start and end (start-up and tear-down
  // are idle for other reasons).
  double interior_idle_s = 0;
  int64_t interior_idle_gaps = 0;

  // GPUs, by index.
  std::vector<double> gpu_busy_pct;  // mean utilization over the training window
  std::vector<double> gpu_idle_pct;  // share of the training window in long stretches < 5%
                                     // for >= 5 s (or half the run)
  std::optional<double> gpu_memory_used_max_pct;  // max over samples and GPUs
  std::optional<double> throttled_pct;        // share of busy samples (util >= 10%) clock-limited
                                              // by power or temperature
  std::vector<std::string> throttle_reasons;  // the power/thermal reasons seen
  std::optional<double> throttle_clock_loss_pct;  // mean SM clock deficit while throttled,
                                                  // against the highest clock seen
  // GPM activity counters (Hopper and later) over the steady state: the
  // training window's samples of busy GPUs (util >= 10%) that have them.
  // Means; empty without GPM.
  int64_t gpm_samples = 0;
  std::optional<double> gpm_util_pct;  // utilization over those same samples
  std::optional<double> gpm_sm_active_pct;
  std::optional<double> gpm_sm_occupancy_pct;
  std::optional<double> gpm_tensor_active_pct;
  std::optional<double> gpm_dram_active_pct;

  // The training process's loader (its last counters record).
  std::optional<int64_t> loader_batch_size;
  std::optional<int64_t> loader_threads;
  std::optional<int64_t> loader_prefetch;
  std::optional<double> loader_cpu_ns_per_sample;   // (read + decode + transform) / samples
  std::optional<double> loader_read_ns_per_sample;  // read alone
  std::optional<double> loader_busy_cores;          // loader CPU time / its elapsed time
  // CPU the loader computes per sample, waits for storage excluded: decode +
  // transform (saturate.Loader), or the DataLoader fetches' thread CPU time
  // (cpu_ns) without each thread's first fetch (a worker's start). What
  // loading costs once reads no longer block.
  std::optional<double> loader_compute_ns_per_sample;
  // A torch DataLoader's fetches' thread CPU time in the window / the window
  // (loader_busy_cores is their wall time: blocked reads included).
  std::optional<double> loader_cpu_cores;
  std::optional<double> samples_per_s;  // consumed by training
  // A remote dataset (s3://, http(s)://), from the loader's request counters.
  std::optional<double> remote_mb_per_s;              // fetched, over the loader's lifetime
  std::optional<double> remote_request_ms;            // mean time of one request
  std::optional<double> remote_cache_hit_pct;         // of the cache's block reads, when cached
  std::optional<int64_t> remote_concurrent_requests;  // the limit in force
  std::optional<int64_t> remote_retries;

  // Host extras.
  std::optional<double> disk_read_peak_mb_per_s;
  std::optional<double> tree_rss_max_bytes;
  std::optional<double> mem_available_min_bytes;
  std::optional<int> exit_code;  // the command's, from meta.json

  // The bits the training math ran in: a user "model" counter
  // ({"precision_bits": 32}), else the auto-instrumentation's "precision"
  // record (torch.autocast regions and the parameters' dtype). The source is
  // the counter's name; tf32_matmul: that record saw fp32 matmuls allowed TF32.
  std::optional<int64_t> precision_bits;
  std::string precision_source;
  bool tf32_matmul = false;
  // The optimizer's weights as the auto-instrumentation saw them at the first
  // update ("model_shapes"): 4-D (convolution) ones, those laid out NCHW
  // rather than channels_last, 2-D (Linear, Embedding) ones and those with a
  // size not a multiple of 8. Absent without that record, or when it saw
  // neither kind (flattened parameters).
  struct ModelShapes {
    int64_t conv_weights = 0, conv_nchw_weights = 0;
    int64_t matrix_weights = 0, matrix_unaligned_weights = 0;
  };
  std::optional<ModelShapes> model_shapes;

  // ---- JPEG decode on the GPU (a DeviceLoader's "loader_decode" records) -----
  // The split between the loader's CPU threads and nvJPEG (docs/gpu.md), from
  // the last record of the run. decode_mode is empty without one: a host
  // loader, or a run recorded before the record existed.
  std::string decode_mode;           // decode=: "cpu", "gpu" or "auto"
  bool decode_gpu_decoder = false;   // nvJPEG opened (auto without it decodes on the CPU)
  int64_t decode_cpu_images = 0;     // decoded by the loader's threads (nvJPEG's refusals too)
  int64_t decode_gpu_images = 0;     // decoded by nvJPEG
  int64_t decode_gpu_fallbacks = 0;  // JPEGs nvJPEG refused
  std::optional<double> decode_gpu_share;  // of each batch's JPEGs, handed to the GPU now
  std::optional<double> decode_cpu_per_s_per_thread;  // images/s of one loader thread
  std::optional<double> decode_gpu_per_s;             // images/s of the GPU decoder
  // Any saturate loader: its threads' decode CPU time per sample.
  std::optional<double> loader_decode_ns_per_sample;

  // ---- From the auto-instrumentation (docs/auto.md) --------------------------

  AutoSummary auto_info;
  // Which loader the rules talk about: "saturate" (its counters), "torch" (a
  // DataLoader seen by the auto-instrumentation; loader_threads is then its
  // num_workers and loader_prefetch its prefetch_factor) or "" (none seen).
  std::string loader_kind;
  std::string loader_site;  // where the DataLoader was built
  // The command's flag that set num_workers, when it carries the value seen:
  // "-j" for `-j 0`, "--workers=" for `--workers=0`.
  std::optional<std::string> loader_workers_flag;
  std::optional<bool> loader_pin_memory;
  std::optional<bool> loader_persistent_workers;
  // Data wait for the first batch of each pass over the DataLoader (within
  // the training window), and how many passes: with workers that are not
  // persistent, each pass starts them again.
  std::optional<double> loader_first_batch_wait_s;
  int64_t loader_passes = 0;
  std::vector<SiteStat> host_syncs;         // the training process's, by time
  std::vector<SiteStat> checkpoint_sites;   // blocking saves on the training thread
  std::vector<SiteStat> copy_sites;         // host-to-device copies on the training thread
  std::optional<double> copy_pageable_pct;  // of copied bytes, from pageable memory
  std::optional<double> copy_blocking_pct;  // of copies, without non_blocking
  std::vector<StepWaterfall> waterfall;     // a few steps around the median one

  // ---- Ranks of a multi-rank job (src/ranks, docs/ranks.md) -----------------
  RanksView ranks;

  nlohmann::json ToJson() const;
};

// Thresholds a team may change (docs/diagnosis.md explains each).
struct AnalysisOptions {
  double min_time_lost_pct = 2.0;  // findings below this are not reported
  // Mean time between failures assumed for Young's checkpoint interval.
  double assumed_mtbf_s = 24 * 3600.0;
};

struct Analysis {
  Features features;
  std::vector<Finding> findings;  // ranked by time_lost_s, largest first; info ones last
  double min_time_lost_pct = AnalysisOptions{}.min_time_lost_pct;  // where findings were cut
};

Features ComputeFeatures(const Run& run);
// features.ranks as JSON (findings.json "features.ranks"; docs/ranks.md).
nlohmann::json RanksJson(const RanksView& view);
// The flag of `argv` that passes `value` as a worker count (-j, --workers,
// --num-workers, --num_workers, --dataloader-num-workers, ...), as "-j" for
// "-j 0" or "--workers=" for "--workers=0".
std::optional<std::string> WorkersFlag(const std::vector<std::string>& argv, int64_t value);

// [{"site", "op", "count", "per_step", "total_s"[, "device"][, "step_share"]}], for
// features and findings alike.
nlohmann::json SitesJson(const std::vector<SiteStat>& sites);
std::vector<Finding> Diagnose(const Run& run, const Features& features,
                              const AnalysisOptions& options = {});
Analysis Analyze(const Run& run, const AnalysisOptions& options = {});

// A finding whose time lost is also a share of `duration_s` (the rules' and
// src/ranks' constructor).
Finding NewFinding(std::string cause, std::string title, double lost_s, double duration_s,
                   double confidence);
// A fix that saves `saved_s` of a training window of `window_s`: the rate
// rises by window / (window - saved). `rate_now` in `metric` units, when known.
Prediction SavingPrediction(double window_s, double saved_s, std::optional<double> rate_now,
                            std::string metric, std::string model, bool upper_bound);

// Findings ranked as Diagnose() ranks its own: measured ones at or above
// `min_time_lost_pct` by time lost, largest first, then the info ones.
std::vector<Finding> RankFindings(std::vector<Finding> findings, double min_time_lost_pct);

// findings.json: {"run": dir, "duration_s", "features": {...}, "findings": [{"cause",
// "title", "time_lost_s", "time_lost_pct", "evidence": [{key, value, unit, text}],
// "fix", "fix_value": {name: value}, "confidence"}]}.
nlohmann::json AnalysisJson(const Run& run, const Analysis& analysis);

}  // namespace saturate::doctor

#endif  // SATURATE_DOCTOR_ANALYSIS_H_
