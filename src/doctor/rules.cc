// Diagnose: one rule per cause id. Each rule is a small pure function of the
// Features that returns a Finding when its evidence is there, with the time
// it costs and a fix carrying a computed number where one can be computed.
// docs/diagnosis.md states every threshold and why.
#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>

#include "doctor/analysis.h"

namespace saturate::doctor {
namespace {

// ---- Thresholds (docs/diagnosis.md) -------------------------------------------

constexpr double kDataWaitPct = 10;       // data wait share of step time that is a problem
constexpr double kInlineDataWaitPct = 3;  // the same, when the loading runs inline
constexpr double kRestartShare = 0.5;     // of the wait at passes' first batches: worker restarts
constexpr double kCpuSaturatedPct = 85;   // host CPU busy: the loader cannot get more
constexpr double kLoaderBusyShare = 0.8;  // loader CPU / its threads: threads are busy
constexpr double kIowaitPct = 10;         // iowait: the CPUs wait for storage
constexpr double kCpuIdleishPct = 70;     // host busy below: CPUs are not what limits
constexpr double kReadShare = 0.5;        // read_ns share of loader time: reads dominate
constexpr double kOtherCoresShare = 0.5;  // of all cores used by other processes
constexpr double kCpuPressurePct = 10;    // PSI "some": runnable tasks queue for a CPU
constexpr double kRunqWaitShare = 0.1;    // training's runnable time spent waiting for a CPU
constexpr double kLowDeviceBusyPct = 60;  // GPU busy below: too little parallel work
constexpr double kFreeMemoryPct = 50;     // GPU memory used below: room for a larger batch
constexpr double kTargetBusyPct = 90;     // what a larger batch aims for
constexpr double kMaxBatchFactor = 8;     // never suggest more than batch x 8 untested
constexpr double kPhasePct = 10;          // copy / comm share of step time
constexpr double kFixedStepPct = 10;      // optimizer + loop share of a CPU step: tiny batch
constexpr double kShortStepS = 0.005;     // a CPU step shorter than this is mostly dispatch
constexpr double kCheckpointPct = 2;      // blocking checkpoints, of the run
constexpr double kThrottledPct = 20;      // busy samples clock-limited
constexpr double kAssumedThrottleLoss = 0.10;
constexpr double kImbalancePoints = 20;    // max - min mean util across used GPUs
constexpr double kMemoryFullPct = 95;      // GPU memory used, or host available below 5%
constexpr double kIdleAllocationPct = 50;  // a GPU below 5% util for this share of the window
constexpr double kFp32AssumedGain = 0.3;   // conservative share of GPU time bf16 would save
constexpr double kSyncsPerStep = 0.5;      // a CPU-run call site this frequent runs every step
constexpr double kUnattributedPct = 15;    // step time in no phase worth a note
// DataLoader workers where the run loaded inline (num_workers=0): what an
// inline run cannot show, measured by bench/diagnosis/calibrate_workers.py
// (docs/diagnosis.md, "Workers where there were none").
constexpr double kWorkerCpuFactor = 1.14;   // a sample's loading in a worker / inline: collation
                                            // into shared memory, the batch handed over
constexpr double kWorkerStartCpuS = 0.058;  // CPU of one worker's start and stop (non-persistent
                                            // workers: every pass), its first fetch's excess too
// GPM activity counters (Hopper and later).
constexpr int64_t kGpmMinSamples = 3;            // steady-state samples with counters
constexpr double kLaunchBoundUtilPct = 90;       // "busy" by utilization ...
constexpr double kLaunchBoundSmActivePct = 35;   // ... while the SMs mostly idle
constexpr double kWellFedSmActivePct = 80;       // SM active of large kernels (a bf16 GEMM: ~95)
constexpr double kSmallKernelRecoverable = 0.5;  // share of the SM idle time a fix recovers
constexpr double kTensorIdlePct = 5;             // tensor pipes active below: not on tensor cores
constexpr double kTensorBusyUtilPct = 80;        // ... on a GPU this busy
constexpr double kTensorMathSmActivePct = 50;    // ... with the SMs working (not launch-bound)

std::string Fmt(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string Fmt(const char* fmt, ...) {
  char buf[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, args);
  va_end(args);
  return buf;
}

// "0.21 s", or "7.4 ms" below a tenth of a second.
std::string Secs(double s) { return s >= 0.1 ? Fmt("%.3g s", s) : Fmt("%.3g ms", s * 1e3); }

// "1.2 ms", or "15 us" below a tenth of a millisecond (small records).
std::string CpuTime(double ns) {
  return ns >= 1e5 ? Fmt("%.1f ms", ns / 1e6) : Fmt("%.0f us", ns / 1e3);
}

Finding Make(const Features& f, std::string cause, std::string title, double lost_s,
             double confidence) {
  return NewFinding(std::move(cause), std::move(title), lost_s, f.duration_s, confidence);
}

void Add(Finding& x, std::string key, double value, std::string unit, std::string text) {
  x.evidence.push_back({std::move(key), value, std::move(unit), std::move(text)});
}

// The run's rate: samples/s when the loader reports its batch size, else
// steps/s; over the training window.
std::pair<std::optional<double>, std::string> RateNow(const Features& f) {
  if (f.steps <= 0 || f.active_s <= 0) return {std::nullopt, "steps/s"};
  const double steps_per_s = double(f.steps) / f.active_s;
  if (f.loader_batch_size) return {steps_per_s * double(*f.loader_batch_size), "samples/s"};
  return {steps_per_s, "steps/s"};
}

// "~1.28x steps/s", or "<= 1.28x" for an upper bound.
std::string GainWords(const Prediction& p) {
  return Fmt("%s%.2fx %s", p.upper_bound ? "<= " : "~", p.speedup, p.metric.c_str());
}

// The fix saves `saved_s` of the training window, at the same batch size.
void PredictSaving(const Features& f, Finding& x, double saved_s, const std::string& model,
                   bool upper_bound) {
  auto [rate, metric] = RateNow(f);
  x.prediction = SavingPrediction(f.active_s, saved_s, rate, metric, model, upper_bound);
}

// A step of `step_s` becomes `new_step_s` at the same batch size.
void PredictStep(const Features& f, Finding& x, double step_s, double new_step_s,
                 const std::string& model, bool upper_bound) {
  if (step_s <= 0 || new_step_s <= 0 || f.steps <= 0) return;
  PredictSaving(f, x, f.active_s * (1 - new_step_s / step_s), model, upper_bound);
}

}  // namespace

Prediction SavingPrediction(double window_s, double saved_s, std::optional<double> rate_now,
                            std::string metric, std::string model, bool upper_bound) {
  Prediction p;
  p.metric = std::move(metric);
  saved_s = std::clamp(saved_s, 0.0, 0.99 * window_s);
  p.speedup = window_s > 0 ? window_s / (window_s - saved_s) : 1;
  p.now = rate_now;
  if (rate_now) p.expected = *rate_now * p.speedup;
  p.upper_bound = upper_bound;
  p.model = model + (model.empty() ? "" : " -> ") + GainWords(p);
  return p;
}

Finding NewFinding(std::string cause, std::string title, double lost_s, double duration_s,
                   double confidence) {
  Finding x;
  x.cause = std::move(cause);
  x.title = std::move(title);
  x.time_lost_s = std::max(0.0, lost_s);
  x.time_lost_pct = duration_s > 0 ? 100.0 * x.time_lost_s / duration_s : 0;
  x.confidence = confidence;
  return x;
}

namespace {

// Mean utilization of the GPUs in use (those not idle most of the training window).
std::optional<double> UsedGpuBusyPct(const Features& f) {
  double sum = 0;
  int n = 0;
  for (size_t i = 0; i < f.gpu_busy_pct.size(); ++i) {
    if (i < f.gpu_idle_pct.size() && f.gpu_idle_pct[i] >= kIdleAllocationPct) continue;
    sum += f.gpu_busy_pct[i];
    ++n;
  }
  return n ? std::optional<double>(sum / n) : std::nullopt;
}

// The GPUs' idle time in the training window: the most that host-side waits
// on a GPU (syncs, blocking copies) can cost, since the queue such a wait
// drains is work the GPU does meanwhile.
std::optional<double> GpuIdleS(const Features& f) {
  const std::optional<double> busy = UsedGpuBusyPct(f);
  if (!busy) return std::nullopt;
  return f.active_s * std::max(0.0, 1 - *busy / 100);
}

// ---- JPEG decode on the GPU (docs/gpu.md) --------------------------------------

// A loader bound by its CPU threads that decodes JPEGs on the CPU although a
// GPU could take part of it: a DeviceLoader with decode="cpu", one with
// decode="auto" that found no nvJPEG, one whose "auto" already gives the GPU
// nearly all, or a host saturate.Loader on a GPU machine whose threads spend
// most of their time decoding. Adds the evidence to `x` and returns the
// sentence for input_pipeline's fix ("" when none applies).
constexpr double kDecodeShareOfLoaderCpu = 0.5;  // host loader: decode's share of its CPU
constexpr double kAutoNearlyAllGpu = 0.9;        // auto's GPU share where "gpu" is the next step

std::string GpuDecodeAdvice(const Features& f, Finding& x) {
  if (f.decode_mode == "cpu") {
    if (f.decode_cpu_per_s_per_thread) {
      Add(x, "cpu_decode_images_per_s_per_thread", *f.decode_cpu_per_s_per_thread, "images/s",
          "JPEGs one loader thread decodes per second");
    }
    return " The loader feeds a GPU but decodes its images on the CPU (decode=\"cpu\"): if "
           "they are JPEGs, set decode=\"auto\" and the GPU's nvJPEG takes a share of each "
           "batch, split by the measured rates (decode=\"gpu\": all of it).";
  }
  if (f.decode_mode == "auto" && !f.decode_gpu_decoder) {
    return " decode=\"auto\" decoded on the CPU because the GPU decoder did not load: install "
           "nvJPEG (PyPI's nvidia-nvjpeg, libnvjpeg.so.13) and put its lib/ directory on "
           "LD_LIBRARY_PATH.";
  }
  if (f.decode_mode == "auto" && f.decode_gpu_share.value_or(0) >= kAutoNearlyAllGpu) {
    Add(x, "gpu_decode_pct", 100 * *f.decode_gpu_share, "%",
        "share of each batch's JPEGs decode=\"auto\" hands to the GPU");
    return Fmt(
        " decode=\"auto\" already gives the GPU %.0f%% of the JPEGs: decode=\"gpu\" "
        "gives it all of them.",
        100 * *f.decode_gpu_share);
  }
  if (f.decode_mode.empty() && f.loader_kind == "saturate" && f.gpu_count > 0 &&
      f.loader_decode_ns_per_sample && f.loader_cpu_ns_per_sample &&
      *f.loader_cpu_ns_per_sample > 0 &&
      *f.loader_decode_ns_per_sample >= kDecodeShareOfLoaderCpu * *f.loader_cpu_ns_per_sample) {
    Add(x, "loader_decode_pct", 100 * *f.loader_decode_ns_per_sample / *f.loader_cpu_ns_per_sample,
        "%", "share of the loader's CPU time spent decoding");
    return " Most of the loader's CPU time is decoding, with a GPU present: if the images are "
           "JPEGs, saturate.Loader(..., device=\"cuda\", decode=\"auto\") decodes part of "
           "each batch on the GPU with nvJPEG.";
  }
  return "";
}

// ---- Is training waiting for data, and why ------------------------------------

struct DataWait {
  double lost_s = 0;
  double pct = 0;           // of step time (spans) or of the training window (GPU gaps)
  bool from_spans = false;  // measured on the training thread, not inferred from the GPU
};

// A torch DataLoader with num_workers=0 loads inside the wait: all of it is
// serial loading that workers would overlap, not jitter, so a smaller share
// already counts.
bool InlineLoading(const Features& f) { return f.loader_kind == "torch" && f.loader_threads == 0; }

std::optional<DataWait> FindDataWait(const Features& f) {
  if (f.data_wait_pct) {
    if (*f.data_wait_pct < (InlineLoading(f) ? kInlineDataWaitPct : kDataWaitPct)) {
      return std::nullopt;
    }
    return DataWait{*f.data_wait_s, *f.data_wait_pct, true};
  }
  // No spans: the saw-tooth, idle gaps between busy stretches that recur.
  if (f.gpu_count == 0 || f.active_s <= 0) return std::nullopt;
  const double idle_pct = 100.0 * f.interior_idle_s / f.active_s;
  if (idle_pct < kDataWaitPct || (!f.idle_period_s && f.interior_idle_gaps < 4)) {
    return std::nullopt;
  }
  return DataWait{f.interior_idle_s, idle_pct, false};
}

enum class DataCause { kInputPipeline, kIo, kContention };

// Other processes hold a large share of the cores, and (where the kernel
// reports pressure) runnable tasks queue for them: others merely using idle
// cores while the job waits on storage is not contention.
bool Contended(const Features& f) {
  if (f.cpus <= 0 || !f.other_cpu_cores) return false;
  if (f.cpu_pressure_pct && *f.cpu_pressure_pct < kCpuPressurePct) return false;
  const double other = *f.other_cpu_cores;
  return other >= kOtherCoresShare * f.cpus ||
         (f.host_cpu_busy_pct.value_or(0) >= 90 && other >= 0.25 * f.cpus);
}

// The cores the loader kept computing: its threads' CPU time when recorded.
// Otherwise a torch DataLoader's busy cores are
// the wall time of its workers' batches, blocked reads included; the job's
// measured CPU bounds what they can have computed.
std::optional<double> LoaderComputeCores(const Features& f) {
  if (f.loader_cpu_cores) return f.loader_cpu_cores;  // the fetches' thread CPU time
  if (!f.loader_busy_cores) return std::nullopt;
  if (f.loader_kind == "torch" && f.tree_cpu_cores) {
    return std::min(*f.loader_busy_cores, *f.tree_cpu_cores);
  }
  return f.loader_busy_cores;
}

bool LoaderThreadsBusy(const Features& f) {
  std::optional<double> busy = LoaderComputeCores(f);
  return busy && f.loader_threads && *f.loader_threads > 0 &&
         *busy >= kLoaderBusyShare * double(*f.loader_threads);
}

// The share of the loader's per-sample time spent in read(): high means its
// threads are busy waiting for storage, not computing. A torch DataLoader has
// no read counters; with its fetches' thread CPU recorded, the share of their
// wall time off the CPU plays that part (blocked in reads, or waiting for a
// CPU, which Contended() decides first). Unknown otherwise.
std::optional<double> ReadShare(const Features& f) {
  if (f.loader_kind == "torch" && f.loader_cpu_cores && f.loader_busy_cores &&
      *f.loader_busy_cores > 0) {
    return std::max(0.0, 1 - *f.loader_cpu_cores / *f.loader_busy_cores);
  }
  if (!f.loader_cpu_ns_per_sample || *f.loader_cpu_ns_per_sample <= 0 ||
      !f.loader_read_ns_per_sample) {
    return std::nullopt;
  }
  return *f.loader_read_ns_per_sample / *f.loader_cpu_ns_per_sample;
}

// Inline loading runs on the training thread: when the process kept a core
// busy, the thread computed through its waits (decode, transforms) rather
// than waiting for storage, whatever iowait the rest of the machine showed.
bool InlineLoaderBusy(const Features& f) {
  return InlineLoading(f) && f.tree_cpu_cores.value_or(0) >= kLoaderBusyShare;
}

bool CpuBound(const Features& f) {
  return f.host_cpu_busy_pct.value_or(0) >= kCpuSaturatedPct ||
         (LoaderThreadsBusy(f) && ReadShare(f).value_or(0) < kReadShare) || InlineLoaderBusy(f);
}

bool IoSigns(const Features& f) {
  if (f.host_iowait_pct.value_or(0) >= kIowaitPct) return true;
  // DataLoader fetches off the CPU most of their time, on a machine where
  // runnable tasks did not queue for a CPU: blocked in reads, whatever the
  // other processes kept busy.
  if (f.loader_kind == "torch" && f.loader_cpu_cores && f.cpu_pressure_pct &&
      *f.cpu_pressure_pct < kCpuPressurePct && ReadShare(f).value_or(0) >= kReadShare) {
    return true;
  }
  if (f.host_cpu_busy_pct.value_or(100) >= kCpuIdleishPct) return false;
  if (std::optional<double> read = ReadShare(f)) return *read >= kReadShare;
  // No loader counters: nobody computes while training waits.
  return f.tree_cpu_cores && *f.tree_cpu_cores < 1.0;
}

// One cause per data wait, so the three rules never count it twice: other
// processes first (the root cause even when the loader looks CPU-bound),
// then storage (when the loader is not computing), else the loader itself.
DataCause ClassifyDataWait(const Features& f) {
  if (Contended(f)) return DataCause::kContention;
  if (!CpuBound(f) && IoSigns(f)) return DataCause::kIo;
  return DataCause::kInputPipeline;
}

void AddDataWaitEvidence(Finding& x, const Features& f, const DataWait& w) {
  if (w.from_spans) {
    Add(x, "data_wait_pct", w.pct, "%", "share of step time waiting for the next batch");
  } else {
    Add(x, "gpu_idle_pct", w.pct, "%", "share of the training window with the GPU idle (<10%)");
    if (f.idle_period_s) {
      Add(x, "idle_period_s", *f.idle_period_s, "s", "idle gaps recur every this long");
    }
  }
  if (f.step_time_median_s) Add(x, "step_time_s", *f.step_time_median_s, "s", "median step");
  if (f.host_cpu_busy_pct) {
    Add(x, "host_cpu_busy_pct", *f.host_cpu_busy_pct, "%", "host CPU busy, of all cores");
  }
}

// The cores the training computation itself needs: what the process tree
// uses beyond the loader, at least one.
double ComputeCores(const Features& f) {
  if (!f.tree_cpu_cores) return 1;
  return std::max(1.0, *f.tree_cpu_cores - LoaderComputeCores(f).value_or(0));
}

// Per step, what the blocking saves cost the training thread: the saves and
// the slower steps after them. A fix to loading or to the batch leaves them.
double SavesPerStepS(const Features& f) {
  if (f.steps <= 0 || !f.checkpoint_s) return 0;
  return (*f.checkpoint_s + f.checkpoint_after_s.value_or(0)) / double(f.steps);
}

// How many loader threads keep the step fed, within the cores there are.
struct ThreadPlan {
  double loader_ns_per_sample = 0;  // the loader CPU the plan is for
  double compute_s = 0;             // the step's compute per step, the saves left out
  double saves_s = 0;               // the blocking saves per step (SavesPerStepS)
  double save_cpu_s = 0;            // their CPU per step: the writer's thread while it blocks
  double train_ns_per_sample = 0;   // training CPU per sample, the saves left out
  double target_per_s = 0;          // samples/s the step could take: batch_size / compute time
  double fit_per_s = 0;   // samples/s the free cores sustain, loader and training together
  double feed_per_s = 0;  // min of the two (and of the threads allowed)
  double free_cores = 0;  // cores not used by other processes
  double threads = 0;     // loader threads for feed_per_s
};

// Every sample costs loader CPU and training CPU; the free cores bound the
// rate of both together, so the threads are planned for the lesser of that
// rate and the rate the step could take. The blocking saves are planned
// apart (they stay after a loading fix): their time leaves the compute, and
// their CPU (the writer's thread, busy while it blocks) the training CPU.
// `loader_ns_per_sample`: the CPU a sample costs the loader; `max_threads`:
// the threads there will be, when the fix does not change them.
std::optional<ThreadPlan> PlanLoaderThreads(const Features& f, double loader_ns_per_sample,
                                            std::optional<double> max_threads = std::nullopt) {
  if (loader_ns_per_sample <= 0 || !f.loader_batch_size || !f.compute_per_step_s ||
      *f.compute_per_step_s <= 0 || f.cpus <= 0) {
    return std::nullopt;
  }
  ThreadPlan p;
  p.loader_ns_per_sample = loader_ns_per_sample;
  p.saves_s = std::min(SavesPerStepS(f), 0.9 * *f.compute_per_step_s);
  p.compute_s = *f.compute_per_step_s - p.saves_s;
  p.target_per_s = double(*f.loader_batch_size) / p.compute_s;
  p.free_cores = std::max(1.0, f.cpus - f.other_cpu_cores.value_or(0));
  // Training CPU per sample, measured: the tree's CPU beyond the loader's
  // and the saves'.
  if (f.steps > 0) p.save_cpu_s = std::min(f.checkpoint_s.value_or(0) / double(f.steps), p.saves_s);
  if (f.tree_cpu_cores && f.samples_per_s && *f.samples_per_s > 0) {
    const double save_cores = f.active_s > 0 ? f.checkpoint_s.value_or(0) / f.active_s : 0;
    p.train_ns_per_sample =
        std::max(0.0, *f.tree_cpu_cores - LoaderComputeCores(f).value_or(0) - save_cores) /
        *f.samples_per_s * 1e9;
  }
  p.fit_per_s = p.free_cores * 1e9 / (loader_ns_per_sample + p.train_ns_per_sample);
  p.feed_per_s = std::min(p.target_per_s, p.fit_per_s);
  if (max_threads) p.feed_per_s = std::min(p.feed_per_s, *max_threads * 1e9 / loader_ns_per_sample);
  p.threads = std::max(1.0, std::ceil(p.feed_per_s * loader_ns_per_sample / 1e9 - 0.05));
  return p;
}

// A fix that raises the threads: inline loading moved into worker processes
// costs kWorkerCpuFactor more CPU per sample than the run measured.
std::optional<ThreadPlan> PlanLoaderThreads(const Features& f) {
  if (!f.loader_cpu_ns_per_sample) return std::nullopt;
  return PlanLoaderThreads(
      f, *f.loader_cpu_ns_per_sample * (InlineLoading(f) ? kWorkerCpuFactor : 1.0));
}

// What DataLoader workers that are not persistent cost per pass over the
// data after a fix to their number: they start again at every pass, and the
// pass's first batch waits for one fresh worker to start and load it alone,
// however many there are.
struct PassStarts {
  double wait_s = 0;        // on top of the step: the first batch (workers where there were none)
  double first_wait_s = 0;  // the measured wait for a pass's first batch, the usual wait included
  double cpu_s = 0;         // the starts and stops the fix adds, on the free cores
};

PassStarts PassStartCosts(const Features& f, const ThreadPlan& plan) {
  if (f.loader_kind != "torch" || f.loader_persistent_workers == true) return {};
  if (InlineLoading(f)) {  // nothing measured: one worker's batch, and the calibrated starts
    return {double(*f.loader_batch_size) * plan.loader_ns_per_sample / 1e9, 0,
            plan.threads * kWorkerStartCpuS};
  }
  const double threads = double(f.loader_threads.value_or(0));
  if (f.loader_persistent_workers != false || f.loader_passes <= 0 || threads <= 0) return {};
  return {0, f.loader_first_batch_wait_s.value_or(0) / double(f.loader_passes),
          std::max(0.0, plan.threads - threads) * kWorkerStartCpuS};
}

// A step once the loader feeds `plan.feed_per_s`, with the costs the fix
// leaves in place. It is the longest of three: the training thread's own path
// (its compute and the blocking saves, which stay); the loading (batch / feed);
// and all the CPU a step needs (loader and training per sample, and the
// writer's while it saves, and the workers' starts) spread over the free
// cores. With workers that are not persistent, the first batch of each pass
// is a wait on top: while a fresh worker starts and loads it the training
// thread idles, and the forks are serial, so the cores are not full (the
// suite's restarting runs: 6% idle). More workers do not shorten it.
struct ComposedStep {
  double step_s = 0;
  double serial_s = 0;       // compute + saves on the training thread
  double loading_s = 0;      // batch / feed
  double cpu_s = 0;          // the step's CPU over the free cores
  double pass_starts_s = 0;  // per step
  double start_cpu_s = 0;    // the workers' starts' CPU per step (in cpu_s)
};

ComposedStep ComposeStep(const Features& f, const ThreadPlan& plan, PassStarts starts) {
  ComposedStep c;
  const double batch = double(*f.loader_batch_size);
  const double passes_per_step = f.steps > 0 ? double(f.loader_passes) / double(f.steps) : 0;
  c.serial_s = plan.compute_s + plan.saves_s;
  c.loading_s = batch / plan.feed_per_s;
  c.start_cpu_s = starts.cpu_s * passes_per_step;
  c.cpu_s = (batch * (plan.loader_ns_per_sample + plan.train_ns_per_sample) / 1e9 +
             plan.save_cpu_s + c.start_cpu_s) /
            plan.free_cores;
  // A measured first-batch wait stays, less the wait every batch has anyway.
  const double base_s = std::max({c.serial_s, c.loading_s, c.cpu_s});
  const double first_extra_s = std::max(0.0, starts.first_wait_s - (base_s - c.serial_s));
  c.pass_starts_s = (starts.wait_s + first_extra_s) * passes_per_step;
  c.step_s = base_s + c.pass_starts_s;
  return c;
}

// What binds the composed step, in words: "; the blocking saves stay (16.5
// ms per step), and the step's CPU over 2.0 free cores takes 53 ms".
std::string ComposedWords(const ThreadPlan& plan, const ComposedStep& c) {
  std::string words;
  if (plan.saves_s > 0) {
    words += "; the blocking saves stay (" + Secs(plan.saves_s) + " per step)";
    words +=
        c.cpu_s >= std::max(c.serial_s, c.loading_s)
            ? Fmt(", and the step's CPU with theirs over %.1f free cores takes ", plan.free_cores) +
                  Secs(c.cpu_s)
        : c.serial_s >= c.loading_s
            ? ", and the training thread's compute and saves take " + Secs(c.serial_s)
            : "";
  }
  if (c.pass_starts_s > 0 || c.start_cpu_s > 0) {
    words += "; workers started at each pass add " + Secs(c.pass_starts_s) + " per step";
    if (c.start_cpu_s > 0) words += " (and " + Secs(c.start_cpu_s) + " of CPU)";
  }
  return words;
}

// Whether a call site is in Hugging Face's Trainer, whose user sets its
// loader, saves and loss checks through TrainingArguments.
bool InTrainer(const std::string& site) {
  return site.find("transformers/trainer") != std::string::npos;
}

// How a fix names the loader's knobs: saturate.Loader's threads and prefetch,
// a torch DataLoader's num_workers and prefetch_factor, or, for the loader
// Hugging Face's Trainer builds, its TrainingArguments (the keys stay the
// DataLoader's: --check-fix knows the Trainer's flags by them).
struct Knobs {
  std::string threads = "loader threads";
  std::string threads_key = "threads";
  std::string prefetch = "prefetch";
  std::string prefetch_key = "prefetch";
};

Knobs KnobsOf(const Features& f) {
  if (f.loader_kind != "torch") return {};
  if (InTrainer(f.loader_site)) {
    return {"TrainingArguments dataloader_num_workers", "num_workers",
            "TrainingArguments dataloader_prefetch_factor", "prefetch_factor"};
  }
  return {"DataLoader num_workers", "num_workers", "DataLoader prefetch_factor", "prefetch_factor"};
}

// " (now 0; built at train.py:120; the command passes -j 0, so -j 2)".
std::string NowText(const Features& f, long long now, double want) {
  std::string text = Fmt(" (now %lld", now);
  if (!f.loader_site.empty()) text += "; built at " + f.loader_site;
  if (f.loader_workers_flag) {
    const std::string& flag = *f.loader_workers_flag;
    const char* sep = flag.ends_with("=") ? "" : " ";
    text += Fmt("; the command passes %s%s%lld, so %s%s%.0f", flag.c_str(), sep, now, flag.c_str(),
                sep, want);
  }
  return text + ")";
}

// DataLoader workers that are not persistent start again at every pass over
// the data, and the first batch waits for them: when most of the wait is
// there, more workers or prefetch would not help; keeping them would.
std::optional<Finding> WorkerRestarts(const Features& f, Finding x) {
  if (f.loader_kind != "torch" || f.loader_threads.value_or(0) == 0 ||
      f.loader_persistent_workers != false || f.loader_passes < 2 || !f.data_wait_s ||
      f.loader_first_batch_wait_s.value_or(0) < kRestartShare * *f.data_wait_s) {
    return std::nullopt;
  }
  const double first_s = *f.loader_first_batch_wait_s;
  Add(x, "first_batch_wait_s", first_s, "s",
      Fmt("data wait for the first batch of the %lld passes over the DataLoader",
          (long long)f.loader_passes));
  x.fix =
      Fmt("Set DataLoader(persistent_workers=True)%s: %.0f%% of the wait (%.2f s) is for the "
          "first batch of each of %lld passes, while %lld worker process%s start again; "
          "the other batches wait %.0f ms each on average.",
          f.loader_site.empty() ? "" : (" at " + f.loader_site).c_str(),
          100 * first_s / *f.data_wait_s, first_s, (long long)f.loader_passes,
          (long long)*f.loader_threads, *f.loader_threads == 1 ? "" : "es",
          f.steps > f.loader_passes
              ? 1e3 * (*f.data_wait_s - first_s) / double(f.steps - f.loader_passes)
              : 0.0);
  x.fix_value = {{"persistent_workers", 1}};
  // Kept workers start no more: the first batches wait like the others.
  const double other_wait_s = f.steps > f.loader_passes
                                  ? (*f.data_wait_s - first_s) / double(f.steps - f.loader_passes)
                                  : 0.0;
  const double saved_s = first_s - other_wait_s * double(f.loader_passes);
  PredictSaving(f, x, saved_s,
                Fmt("%.2f s of waits at %lld pass starts fall to the other batches' %.0f ms each",
                    first_s, (long long)f.loader_passes, 1e3 * other_wait_s),
                false);
  return x;
}

// Per step: the mean step, its data wait and its compute (the rest).
struct StepSplit {
  double step_s = 0, wait_s = 0, compute_s = 0;
};

std::optional<StepSplit> SplitStep(const Features& f) {
  if (!f.step_time_mean_s || !f.data_wait_s || !f.compute_per_step_s || f.steps <= 0) {
    return std::nullopt;
  }
  return StepSplit{*f.step_time_mean_s, *f.data_wait_s / double(f.steps), *f.compute_per_step_s};
}

// Removing the data wait entirely: the most any input fix can give.
void PredictNoWait(const Features& f, Finding& x, const DataWait& w, const std::string& how) {
  if (std::optional<StepSplit> s = SplitStep(f); s && w.from_spans) {
    PredictStep(f, x, s->step_s, s->compute_s,
                "data wait " + Secs(s->wait_s) + " of " + Secs(s->step_s) + " per step; " + how +
                    " the wait falls to 0 at best",
                true);
  } else {
    PredictSaving(f, x, w.lost_s,
                  Fmt("%.3g s of the %.3g s window idle for data; %s it falls to 0 at best",
                      w.lost_s, f.active_s, how.c_str()),
                  true);
  }
}

// More loader threads feed `plan.feed_per_s`: a step takes at least its
// compute, and at least the time the loader needs for a batch; the saves
// stay. Workers that are not persistent start at every pass: when the fix
// introduces them (the run loaded inline), the first batch of each pass
// waits for one worker to load it alone.
void PredictThreads(const Features& f, Finding& x, const ThreadPlan& plan,
                    const std::string& knob) {
  std::optional<StepSplit> s = SplitStep(f);
  if (!s || plan.feed_per_s <= 0) return;
  const double batch = double(*f.loader_batch_size);
  const ComposedStep c = ComposeStep(f, plan, PassStartCosts(f, plan));
  const std::string in_workers =
      InlineLoading(f) ? Fmt(" (in workers %.2fx the inline CPU per sample)", kWorkerCpuFactor)
                       : std::string();
  PredictStep(f, x, s->step_s, c.step_s,
              "data wait " + Secs(s->wait_s) + " of " + Secs(s->step_s) + " per step; " +
                  Fmt("with %s=%.0f the loader feeds %.0f samples/s%s, so a step of %.0f "
                      "samples waits ~",
                      knob.c_str(), plan.threads, plan.feed_per_s, in_workers.c_str(), batch) +
                  Secs(std::max(0.0, c.step_s - c.pass_starts_s - c.serial_s)) +
                  ComposedWords(plan, c),
              false);
}

// ---- The rules -------------------------------------------------------------------

std::optional<Finding> InputPipelineRule(const Features& f, const AnalysisOptions&) {
  std::optional<DataWait> w = FindDataWait(f);
  if (!w || ClassifyDataWait(f) != DataCause::kInputPipeline) return std::nullopt;
  const bool cpu_bound = CpuBound(f);
  Finding x = Make(f, "input_pipeline",
                   w->from_spans ? Fmt("Training waits for input %.0f%% of each step; the "
                                       "loader cannot keep up",
                                       w->pct)
                                 : Fmt("GPU idle %.0f%% of the time in a saw-tooth: it waits "
                                       "for the next batch",
                                       w->pct),
                   w->lost_s, w->from_spans && cpu_bound ? 0.85 : 0.6);
  AddDataWaitEvidence(x, f, *w);
  if (f.loader_cpu_ns_per_sample) {
    Add(x, "loader_cpu_ms_per_sample", *f.loader_cpu_ns_per_sample / 1e6, "ms",
        "read + decode + transform CPU time per sample");
  }
  if (f.loader_busy_cores && f.loader_threads) {
    Add(x, "loader_busy_cores", *f.loader_busy_cores, "cores",
        Fmt("loader time per second (read + decode + transform), with %lld thread%s",
            (long long)*f.loader_threads, *f.loader_threads == 1 ? "" : "s"));
  }

  std::string fix;
  const Knobs knobs = KnobsOf(f);
  if (std::optional<Finding> restarts = WorkerRestarts(f, x)) return restarts;
  if (std::optional<ThreadPlan> plan = PlanLoaderThreads(f)) {
    Add(x, "target_samples_per_s", plan->target_per_s, "samples/s",
        "batch_size / compute time per step: what keeps the device fed");
    Add(x, "cpu_limit_samples_per_s", plan->fit_per_s, "samples/s",
        "what the free cores sustain: loader plus training CPU per sample");
    const long long threads = f.loader_threads.value_or(0);
    const std::string per_sample = CpuTime(*f.loader_cpu_ns_per_sample);
    if (plan->threads > double(threads)) {
      fix =
          Fmt("Set %s=%.0f", knobs.threads.c_str(), plan->threads) +
          NowText(f, threads, plan->threads) +
          Fmt(": %.0f samples/s x %s of CPU per sample%s.", plan->feed_per_s,
              CpuTime(plan->loader_ns_per_sample).c_str(), InlineLoading(f) ? " in a worker" : "");
      if (plan->fit_per_s < plan->target_per_s) {
        fix +=
            Fmt(" That is all %.0f free cores can feed (the step could take %.0f/s); beyond it "
                "cut the per-sample CPU cost: preprocess offline (saturate pack), decode at a "
                "smaller resolution, or decode on the GPU.",
                plan->free_cores, plan->target_per_s);
      }
      x.fix_value = {{knobs.threads_key, plan->threads}};
      PredictThreads(f, x, *plan, knobs.threads);
    } else if (plan->fit_per_s < plan->target_per_s) {
      fix =
          Fmt("The CPUs are the limit: %.0f free cores sustain %.0f samples/s at %s of "
              "loader CPU each, the step could take %.0f/s. Cut the per-sample CPU cost: "
              "preprocess offline (saturate pack), decode at a smaller resolution, or decode on "
              "the GPU.",
              plan->free_cores, plan->fit_per_s, per_sample.c_str(), plan->target_per_s);
      PredictNoWait(f, x, *w, "with the per-sample cost cut enough");
    } else {
      const double prefetch = std::max<double>(2, 2 * double(f.loader_prefetch.value_or(1)));
      fix = Fmt(
          "%lld loader threads suffice on average (%.0f needed for %.0f samples/s), so the waits "
          "are bursts: raise %s to %.0f.",
          threads, plan->threads, plan->target_per_s, knobs.prefetch.c_str(), prefetch);
      x.fix_value = {{knobs.prefetch_key, prefetch}};
      PredictNoWait(f, x, *w, "with the bursts absorbed");
    }
  } else {
    PredictNoWait(f, x, *w, "with enough workers");
    fix =
        "Give the input pipeline more worker threads or processes (saturate.Loader threads, "
        "DataLoader num_workers)";
    if (f.tree_cpu_cores && f.cpus > 0) {
      fix += Fmt("; the job used %.1f of %d cores", *f.tree_cpu_cores, f.cpus);
    }
    fix += ". With saturate.Loader, doctor computes the thread count from its counters.";
    if (!cpu_bound) fix += " The CPUs were not saturated, so this is likely a worker count.";
  }
  if (f.loader_prefetch && *f.loader_prefetch < 2) {
    fix += Fmt(" Set %s >= 2 (now %lld) so a batch is ready when a step ends.",
               knobs.prefetch.c_str(), (long long)*f.loader_prefetch);
  }
  if (f.gpu_count > 0 && f.loader_pin_memory == false) {
    fix += " Set pin_memory=True so batches are copied to the GPU from pinned memory.";
  }
  fix += GpuDecodeAdvice(f, x);
  x.fix = fix;
  return x;
}

// The dataset is read from object storage or HTTP: the loader's requests,
// not a disk, are the storage. Fewer waits come from more requests in
// flight (read-ahead) and, from the second epoch on, a local block cache.
void RemoteIoFix(const Features& f, const DataWait& w, Finding& x) {
  x.title = Fmt("Training waits for data %.0f%% of the time on reads from remote storage", w.pct);
  Add(x, "remote_request_ms", *f.remote_request_ms, "ms", "mean time of one range request");
  if (f.remote_mb_per_s) Add(x, "remote_mb_per_s", *f.remote_mb_per_s, "MB/s", "fetched");
  if (f.remote_cache_hit_pct) {
    Add(x, "remote_cache_hit_pct", *f.remote_cache_hit_pct, "%", "cache blocks read locally");
  }
  if (f.remote_retries && *f.remote_retries > 0) {
    Add(x, "remote_retries", double(*f.remote_retries), "", "requests retried");
  }
  std::string fix = Fmt("Requests take %.0f ms each", *f.remote_request_ms);
  if (f.remote_mb_per_s) fix += Fmt(" and deliver %.1f MB/s", *f.remote_mb_per_s);
  if (f.remote_concurrent_requests) {
    const double more = 2.0 * double(*f.remote_concurrent_requests);
    fix +=
        Fmt(" with %lld in flight: raise saturate.Loader's remote_requests to %.0f so more "
            "reads overlap",
            (long long)*f.remote_concurrent_requests, more);
    x.fix_value = {{"remote_requests", more}};
  }
  fix += f.remote_cache_hit_pct
             ? Fmt(". The cache served %.0f%% of blocks; give it room for the whole dataset "
                   "(cache_bytes) so later epochs read locally",
                   *f.remote_cache_hit_pct)
             : ". Set cache_dir (or SATURATE_CACHE_DIR) to a local disk so later epochs read "
               "the blocks locally";
  x.fix = fix + ".";
  PredictNoWait(f, x, w, "with reads that keep up");
}

// Once storage keeps up, loading is bound by the CPU: the loader's threads
// (as many as now) computing on the free cores beside training, at the CPU a
// sample costs them without the blocked reads. The wait falls to what that
// feeds, not to 0. Without that CPU measured, 0 is the bound.
void PredictStorageFixed(const Features& f, Finding& x, const DataWait& w) {
  std::optional<StepSplit> s = SplitStep(f);
  if (!s || !w.from_spans || !f.loader_compute_ns_per_sample ||
      *f.loader_compute_ns_per_sample <= 0 || !f.loader_batch_size || !f.loader_threads) {
    return PredictNoWait(f, x, w, "with storage that keeps up");
  }
  const double ns = *f.loader_compute_ns_per_sample;
  const double batch = double(*f.loader_batch_size);
  const std::string head = "data wait " + Secs(s->wait_s) + " of " + Secs(s->step_s) +
                           " per step; with storage that keeps up, loading costs " + CpuTime(ns) +
                           " of CPU per sample";
  if (*f.loader_threads == 0) {  // inline: the training thread loads, then computes
    const double load_s = batch * ns / 1e9;
    PredictStep(
        f, x, s->step_s, s->compute_s + load_s,
        head + Fmt(" on the training thread, %.0f samples in ", batch) + Secs(load_s) + " per step",
        false);
    return;
  }
  std::optional<ThreadPlan> plan = PlanLoaderThreads(f, ns, double(*f.loader_threads));
  if (!plan) return PredictNoWait(f, x, w, "with storage that keeps up");
  const ComposedStep c = ComposeStep(f, *plan, {});
  PredictStep(f, x, s->step_s, c.step_s,
              head +
                  Fmt(": %s=%lld on %.1f free cores feeds %.0f samples/s, so a step of "
                      "%.0f samples waits ~",
                      KnobsOf(f).threads.c_str(), (long long)*f.loader_threads, plan->free_cores,
                      plan->feed_per_s, batch) +
                  Secs(std::max(0.0, c.step_s - c.serial_s)) + ComposedWords(*plan, c),
              false);
}

std::optional<Finding> IoBoundRule(const Features& f, const AnalysisOptions&) {
  std::optional<DataWait> w = FindDataWait(f);
  if (!w || ClassifyDataWait(f) != DataCause::kIo) return std::nullopt;
  const bool iowait = f.host_iowait_pct.value_or(0) >= kIowaitPct;
  Finding x = Make(f, "io_bound",
                   Fmt("Training waits for data %.0f%% of the time and the CPUs are not busy: "
                       "storage cannot deliver",
                       w->pct),
                   w->lost_s, iowait ? 0.8 : 0.6);
  AddDataWaitEvidence(x, f, *w);
  if (f.host_iowait_pct) Add(x, "iowait_pct", *f.host_iowait_pct, "%", "CPU time waiting for I/O");
  if (f.loader_read_ns_per_sample && f.loader_cpu_ns_per_sample) {
    Add(x, "read_share_pct", 100.0 * *f.loader_read_ns_per_sample / *f.loader_cpu_ns_per_sample,
        "%", "share of the loader's per-sample time spent reading");
  }
  if (f.remote_request_ms) {
    RemoteIoFix(f, *w, x);
    return x;
  }
  std::string fix;
  if (f.disk_read_mb_per_s && *f.disk_read_mb_per_s > 0) {
    Add(x, "disk_read_mb_per_s", *f.disk_read_mb_per_s, "MB/s", "mean disk read rate");
    fix = Fmt("Storage delivered %.0f MB/s", *f.disk_read_mb_per_s);
    if (f.step_time_mean_s && f.compute_per_step_s && *f.compute_per_step_s > 0) {
      const double needed = *f.disk_read_mb_per_s * *f.step_time_mean_s / *f.compute_per_step_s;
      fix += Fmt("; without the waits training would read about %.0f MB/s", needed);
      x.fix_value = {{"read_mb_per_s", needed}};
    }
    fix += ". ";
  }
  fix +=
      "Cache the dataset in RAM or on a local SSD, pack it into larger shards read "
      "sequentially (saturate pack)";
  if (f.loader_prefetch) {
    const double prefetch = std::max<double>(4, 2 * double(*f.loader_prefetch));
    fix += Fmt(", and raise prefetch to %.0f so reads overlap", prefetch);
    if (!x.fix_value) x.fix_value = {{"prefetch", prefetch}};
  } else {
    fix += ", and read ahead (more prefetch)";
  }
  x.fix = fix + ".";
  PredictStorageFixed(f, x, *w);
  return x;
}

// With the cores back, loading runs at the cores its threads can use rather
// than the share it got: the wait shrinks by that ratio. Inline loading runs
// on the training thread, so one core at most.
void PredictUncontended(const Features& f, Finding& x, const DataWait& w) {
  std::optional<StepSplit> s = SplitStep(f);
  const std::optional<double> now_cores =
      InlineLoading(f) ? f.tree_cpu_cores : LoaderComputeCores(f);
  if (!s || !w.from_spans || !f.loader_threads || !now_cores || *now_cores <= 0) {
    return PredictNoWait(f, x, w, "with the cores to itself");
  }
  const double threads = std::max<double>(1, double(*f.loader_threads));
  const double then_cores =
      InlineLoading(f) ? 1.0 : std::min(threads, std::max(1.0, f.cpus - ComputeCores(f)));
  const double new_wait_s = s->wait_s * std::min(1.0, *now_cores / then_cores);
  PredictStep(f, x, s->step_s, s->compute_s + new_wait_s,
              "data wait " + Secs(s->wait_s) + " of " + Secs(s->step_s) +
                  Fmt(" per step with loading on %.2f cores; with the cores to itself it gets "
                      "%.2f, so the wait falls to ~",
                      *now_cores, then_cores) +
                  Secs(new_wait_s),
              false);
}

// What both kinds of contention show about the others, and the fix they share.
void AddOthersEvidence(const Features& f, Finding& x) {
  Add(x, "other_cpu_cores", *f.other_cpu_cores, "cores",
      "mean cores used outside the watched process tree");
  if (f.cpu_pressure_pct) {
    Add(x, "cpu_pressure_pct", *f.cpu_pressure_pct, "%",
        "time a runnable task waited for a CPU (the kernel's pressure stall information)");
  }
}

std::string ContentionFix(const Features& f) {
  return Fmt(
      "Stop or move the other work taking %.1f cores, or give the job its own cores (a cpuset: "
      "taskset, cgroups, the scheduler's exclusive allocation).",
      *f.other_cpu_cores);
}

// The others' load slowing the training process itself, data wait or not:
// while they held the cores, its threads were runnable but waited for a CPU
// (schedstat) a share of the time. With the cores to itself that share runs,
// so the window shrinks by up to it: all of it when the steps are CPU-bound,
// at most the GPUs' idle time when a GPU does the math.
std::optional<Finding> ComputeContention(const Features& f) {
  if (!Contended(f) || !f.training_runq_wait_cores || !f.training_cpu_cores) return std::nullopt;
  const double wait = *f.training_runq_wait_cores;
  const double ran = *f.training_cpu_cores;
  const double share = wait + ran > 0 ? wait / (wait + ran) : 0;
  if (share < kRunqWaitShare) return std::nullopt;
  double lost_s = f.active_s * share;
  if (std::optional<double> idle_s = GpuIdleS(f)) lost_s = std::min(lost_s, *idle_s);
  Finding x = Make(f, "cpu_contention",
                   Fmt("Other processes used %.1f of %d cores, and training waited for a CPU "
                       "%.0f%% of the time it was ready to run",
                       *f.other_cpu_cores, f.cpus, 100 * share),
                   lost_s, 0.6);
  Add(x, "training_runq_wait_cores", wait, "threads",
      "the training process's threads ready to run but waiting for a CPU (mean, schedstat; "
      "saturate's own threads left out)");
  Add(x, "training_cpu_cores", ran, "cores", "what those threads ran on meanwhile");
  AddOthersEvidence(f, x);
  x.fix = ContentionFix(f);
  PredictSaving(f, x, lost_s,
                Fmt("training waited for a CPU %.0f%% of its ready time; with the cores to "
                    "itself that time runs",
                    100 * share),
                true);
  return x;
}

std::optional<Finding> CpuContentionRule(const Features& f, const AnalysisOptions&) {
  std::optional<DataWait> w = FindDataWait(f);
  if (!w || ClassifyDataWait(f) != DataCause::kContention) return ComputeContention(f);
  const double other = *f.other_cpu_cores;
  Finding x = Make(
      f, "cpu_contention",
      Fmt("Other processes used %.1f of %d cores while training waited for data", other, f.cpus),
      w->lost_s, 0.7);
  AddDataWaitEvidence(x, f, *w);
  AddOthersEvidence(f, x);
  if (f.tree_cpu_cores) Add(x, "tree_cpu_cores", *f.tree_cpu_cores, "cores", "the job's own");
  std::string fix = ContentionFix(f);
  if (f.loader_threads) {
    // What is left for the loader once the others and the training compute run.
    const double fit = std::max(1.0, std::floor(f.cpus - other - ComputeCores(f)));
    if (fit < double(*f.loader_threads)) {
      fix +=
          Fmt(" If it must share, set loader threads=%.0f (now %lld) so threads do not "
              "oversubscribe the %.0f free cores.",
              fit, (long long)*f.loader_threads, fit);
      x.fix_value = {{"threads", fit}};
    }
  }
  x.fix = fix;
  PredictUncontended(f, x, *w);
  return x;
}

double PhasePct(const Features& f, std::string_view name) {
  for (const PhaseShare& p : f.phases) {
    if (p.name == name) return p.pct_of_steps;
  }
  return 0;
}

// Share of step time whose cost does not grow with the batch: the optimizer
// update touches every parameter once whatever the batch. Time in no phase
// ("other") is not counted: it is unattributed, and what runs there (a
// conversion or augmentation of the batch) often grows with the batch.
double FixedStepPct(const Features& f) { return PhasePct(f, "optimizer"); }

// Batch x k spreads the fixed per-step time over k times the samples; the
// rest of the step (data, forward, backward, unattributed) grows with it.
// Samples/s then rise by k T / (fixed + k (T - fixed)).
double BatchSpeedup(double fixed_share, double k) {
  return k / (fixed_share + k * (1 - fixed_share));
}

// CPU training (the device is the process's compute): too little work per
// step shows as idle cores, or as steps dominated by fixed per-step costs.
std::optional<Finding> CpuParallelism(const Features& f, double explained_s) {
  if (!f.tree_cpu_cores || f.cpus <= 0 || f.steps == 0) return std::nullopt;
  const double used = *f.tree_cpu_cores;
  const double optimizer_pct = FixedStepPct(f);
  // Cores neither the job nor other processes used: a busy neighbour is not
  // the job leaving cores idle.
  const double idle = std::max(0.0, f.cpus - used - f.other_cpu_cores.value_or(0));
  const bool idle_cores = idle >= 0.5 * f.cpus;
  // Each operator has a fixed cost (dispatch, ~10 us on a CPU) that the phase
  // split does not show. It is assumed to equal one sample's work in the
  // operator, so 1 / (1 + batch) of forward and backward; a step shorter
  // than 5 ms is mostly dispatch, at least half. The accuracy suite's batch-1
  // MLP measured ~half (bench/diagnosis); --check-fix measures it per job.
  const bool short_steps = f.step_time_median_s && *f.step_time_median_s < kShortStepS;
  const double dispatch_share =
      std::max(short_steps ? 0.5 : 0.0,
               f.loader_batch_size ? 1.0 / (1.0 + double(*f.loader_batch_size)) : 0.0);
  // The blocking saves stay per sample at a larger batch (checkpoints as
  // often in samples): only the rest of the step is rescaled.
  const double saves_pct = f.step_time_mean_s && *f.step_time_mean_s > 0
                               ? std::clamp(100 * SavesPerStepS(f) / *f.step_time_mean_s, 0.0, 90.0)
                               : 0.0;
  const double fixed_pct =
      optimizer_pct +
      dispatch_share * std::max(0.0, 100 - optimizer_pct - f.data_wait_pct.value_or(0) - saves_pct);
  const bool fixed_costs = optimizer_pct >= kFixedStepPct || short_steps;
  if (!idle_cores && !fixed_costs) return std::nullopt;
  // Aim for the fixed costs to be 10% of the step.
  double k = std::floor(f.cpus / std::max(used, 0.5));
  const double fixed = fixed_pct / (100 - saves_pct);  // of the step without the saves
  if (fixed_costs) {
    k = std::max(k, std::ceil(9 * fixed / std::max(1 - fixed, 0.01)));
    if (short_steps && *f.step_time_median_s > 0) {
      k = std::max(k, std::ceil(kShortStepS / *f.step_time_median_s));
    }
  }
  k = std::min(k, kMaxBatchFactor);
  if (f.mem_available_min_bytes && f.tree_rss_max_bytes && *f.tree_rss_max_bytes > 0) {
    // As if all the job's memory grew with the batch (a floor, as on GPUs),
    // keeping a fifth of what is available free.
    k = std::min(k, std::floor(1 + 0.8 * *f.mem_available_min_bytes / *f.tree_rss_max_bytes));
  }
  if (k < 2) return std::nullopt;  // no room: nothing to suggest
  // Idle cores: the math library spreads a larger batch over them, at best
  // in proportion (an upper bound).
  const double saves = saves_pct / 100;
  const double speedup = fixed_costs ? 1 / ((1 - saves) / BatchSpeedup(fixed, k) + saves)
                                     : (used + idle) / std::max(used, 0.5);
  const double lost_s = f.active_s * (1 - 1 / speedup) - (fixed_costs ? 0 : explained_s);
  Finding x =
      Make(f, "parallelism",
           fixed_costs
               ? Fmt("Fixed per-step costs (%s) take %.0f%% of each step: too "
                     "little work per step",
                     dispatch_share > 0 ? "optimizer, operator dispatch" : "optimizer", fixed_pct)
               : Fmt("Training used %.1f of %d cores: too little parallel work "
                     "per step",
                     used, f.cpus),
           lost_s, short_steps && optimizer_pct < kFixedStepPct ? 0.4 : 0.5);
  Add(x, "tree_cpu_cores", used, "cores", "mean cores used by the training process tree");
  if (fixed_costs) {
    Add(x, "optimizer_pct", optimizer_pct, "%", "optimizer time, of step time (a fixed cost)");
  }
  if (f.step_time_median_s) Add(x, "step_time_s", *f.step_time_median_s, "s", "median step");
  const std::string why = idle_cores ? Fmt("so each step has work for the idle cores, and let "
                                           "the math library use them (torch.set_num_threads(%d))",
                                           f.cpus)
                                     : "to spread the fixed per-step costs over more samples";
  if (f.loader_batch_size) {
    const double batch = double(*f.loader_batch_size) * k;
    x.fix = Fmt("Raise the batch size x%.0f to %.0f %s; scale the learning rate with it.", k, batch,
                why.c_str());
    x.fix_value = {{"batch_size", batch}};
  } else {
    x.fix = Fmt("Raise the batch size x%.0f %s; scale the learning rate with it.", k, why.c_str());
    x.fix_value = {{"batch_size_factor", k}};
  }
  Prediction p;
  p.metric = "samples/s";
  auto [rate, metric] = RateNow(f);
  if (f.loader_batch_size && rate) {
    p.now = *rate;
    p.expected = *rate * speedup;
  }
  p.speedup = speedup;
  p.upper_bound = !fixed_costs;
  p.model = fixed_costs
                ? Fmt("fixed %.0f%% of a ", fixed_pct) + Secs(f.step_time_mean_s.value_or(0)) +
                      Fmt(" step (optimizer, and %.0f%% of the rest assumed operator dispatch) "
                          "stays per step while the rest grows with the batch: batch x%.0f "
                          "gives k/(fixed + k(1 - fixed))",
                          100 * dispatch_share, k) +
                      (saves > 0 ? Fmt(" on the %.0f%% of the step outside the blocking saves, "
                                       "which stay per sample",
                                       100 - saves_pct)
                                 : std::string())
                : Fmt("the job used %.1f of %.1f free cores; a batch x%.0f spread over all of "
                      "them",
                      used, used + idle, k);
  p.model += " -> " + GainWords(p);
  x.prediction = p;
  return x;
}

// Time in no known phase is not assigned to any cause: a note says how much
// there is, so that a reader can mark it and have it diagnosed.
std::optional<Finding> UnattributedRule(const Features& f, const AnalysisOptions&) {
  const double pct = PhasePct(f, "other");
  const bool compute_phases =
      PhasePct(f, "forward") + PhasePct(f, "backward") + PhasePct(f, "optimizer") > 0;
  if (f.steps == 0 || !compute_phases || pct < kUnattributedPct) return std::nullopt;
  Finding x = Make(
      f, "unattributed",
      Fmt("%.0f%% of step time is in no known phase; doctor assigns it to no cause", pct), 0, 1.0);
  x.info = true;
  Add(x, "unattributed_pct", pct, "%", "step time outside data, forward, backward, optimizer, ...");
  x.fix =
      "Mark that code with `with saturate.phase(\"NAME\"):` to see what it is. Work on the "
      "batch in the loop (a dtype conversion, augmentation) grows with the batch, so a larger "
      "batch does not amortize it; moving it into the loader's workers overlaps it.";
  return x;
}

std::optional<Finding> ParallelismRule(const Features& f, const AnalysisOptions&) {
  if (FindDataWait(f)) return std::nullopt;
  // Time the other rules already explain.
  const double explained = f.data_wait_s.value_or(0) + f.copy_s.value_or(0) + f.comm_s.value_or(0) +
                           f.checkpoint_s.value_or(0);
  if (f.gpu_count > 0) {
    std::optional<double> busy = UsedGpuBusyPct(f);
    if (!busy || *busy >= kLowDeviceBusyPct) return std::nullopt;
    if (f.gpu_memory_used_max_pct && *f.gpu_memory_used_max_pct >= kFreeMemoryPct) {
      return std::nullopt;  // no room for more work per step: memory's finding
    }
    Finding x =
        Make(f, "parallelism",
             Fmt("GPU busy only %.0f%% with memory to spare: too little work per step", *busy),
             f.active_s * (1 - *busy / 100) - explained, 0.6);
    Add(x, "device_busy_pct", *busy, "%", "mean utilization of the GPUs in use");
    // Memory is not proportional to batch size (weights and optimizer state
    // stay), so scaling by total/used is a floor; cap it anyway.
    double k = std::ceil(kTargetBusyPct / std::max(*busy, 1.0));
    if (f.gpu_memory_used_max_pct && *f.gpu_memory_used_max_pct > 0) {
      Add(x, "gpu_memory_used_max_pct", *f.gpu_memory_used_max_pct, "%", "peak GPU memory");
      k = std::min(k, std::floor(0.9 * 100.0 / *f.gpu_memory_used_max_pct));
    }
    k = std::clamp(k, 2.0, kMaxBatchFactor);
    if (f.loader_batch_size) {
      const double batch = double(*f.loader_batch_size) * k;
      x.fix =
          Fmt("Raise the batch size x%.0f to %.0f (memory allows it; check with saturate "
              "tune, and scale the learning rate), or train data-parallel on fewer GPUs.",
              k, batch);
      x.fix_value = {{"batch_size", batch}};
    } else {
      x.fix =
          Fmt("Raise the batch size x%.0f (memory allows it; check with saturate tune), "
              "fuse small serial operations, or use fewer GPUs.",
              k);
      x.fix_value = {{"batch_size_factor", k}};
    }
    // Idle SMs take a larger batch at little extra time per step, up to ~90% busy.
    Prediction p;
    p.metric = "samples/s";
    p.speedup = std::min(k, kTargetBusyPct / std::max(*busy, 1.0));
    p.upper_bound = true;
    auto [rate, metric] = RateNow(f);
    if (f.loader_batch_size && rate) {
      p.now = *rate;
      p.expected = *rate * p.speedup;
    }
    p.model = Fmt("GPU busy %.0f%%: batch x%.0f fills idle SMs until it is ~%.0f%% busy", *busy, k,
                  kTargetBusyPct) +
              " -> " + GainWords(p);
    x.prediction = p;
    return x;
  }
  return CpuParallelism(f, explained);
}

std::optional<Finding> CopyRule(const Features& f, const AnalysisOptions&) {
  if (!f.copy_pct || *f.copy_pct < kPhasePct) return std::nullopt;
  // A blocking copy's phase includes the wait for the work queued before it.
  const std::optional<double> idle_s = GpuIdleS(f);
  const double copy_s = f.copy_s.value_or(0);
  Finding x = Make(f, "host_to_device_copy",
                   Fmt("Host-to-device copies take %.0f%% of each step", *f.copy_pct),
                   idle_s ? std::min(copy_s, *idle_s) : copy_s, 0.8);
  Add(x, "copy_pct", *f.copy_pct, "%", "share of step time in copy/h2d phases");
  if (idle_s && *idle_s < copy_s) {
    Add(x, "gpu_idle_s", *idle_s, "s", "the GPU's idle time: the most the copies can cost");
  }
  std::string fix;
  if (f.copy_pageable_pct) {
    Add(x, "copy_pageable_pct", *f.copy_pageable_pct, "%",
        "of the bytes copied from pageable memory");
    Add(x, "copy_blocking_pct", f.copy_blocking_pct.value_or(0), "%",
        "of the copies without non_blocking=True");
    if (*f.copy_pageable_pct >= 50) {
      fix += "Copies read pageable memory";
      if (f.loader_kind == "torch") {
        fix += ": set DataLoader(pin_memory=True)";
        if (!f.loader_site.empty()) fix += " at " + f.loader_site;
      }
      fix += ". ";
    }
    if (f.copy_blocking_pct.value_or(0) >= 50 && !f.copy_sites.empty()) {
      fix += "Pass non_blocking=True at " + f.copy_sites.front().site + ". ";
    }
    x.sites = f.copy_sites;
  }
  x.fix = fix +
          "Copy from pinned memory with non_blocking=True on a side stream, so the next batch "
          "moves while this step computes; saturate.Loader(device=\"cuda\") does both.";
  x.fix_value = {{"pin_memory", 1}};
  PredictSaving(f, x, x.time_lost_s,
                Fmt("copies take %.3g s (the GPU idles %.3g s of it at most); overlapped with "
                    "compute they cost the step nothing",
                    copy_s, x.time_lost_s),
                true);
  return x;
}

bool InLightning(const std::string& site) { return site.find("lightning/") != std::string::npos; }

// Where a framework that saves for the user takes the interval: " with
// <setting>=<steps>" when a save site is in Hugging Face's Trainer or
// Lightning, else "".
std::string SaveIntervalKnob(const std::vector<SiteStat>& sites, const std::string& steps) {
  for (const SiteStat& s : sites) {
    if (InTrainer(s.site)) return " with TrainingArguments(save_steps=" + steps + ")";
    if (InLightning(s.site)) return " with ModelCheckpoint(every_n_train_steps=" + steps + ")";
  }
  return "";
}

// How to make the saves asynchronous: Lightning takes saturate's checkpoint
// I/O as a plugin; elsewhere the loop calls saturate.Checkpointer itself.
std::string AsyncSaveHow(const std::vector<SiteStat>& sites) {
  for (const SiteStat& s : sites) {
    if (InLightning(s.site)) {
      return "Trainer(plugins=[saturate.lightning.SaturateCheckpointIO()]) snapshots to memory "
             "and writes in the background";
    }
  }
  return "saturate.Checkpointer snapshots to memory and writes in the background";
}

std::optional<Finding> CheckpointRule(const Features& f, const AnalysisOptions& options) {
  if (!f.checkpoint_s || f.duration_s <= 0 || f.checkpoints == 0) return std::nullopt;
  const double pct = 100.0 * *f.checkpoint_s / f.duration_s;
  if (pct < kCheckpointPct) return std::nullopt;
  const double cost_s = *f.checkpoint_s / double(f.checkpoints);
  Finding x = Make(f, "checkpoint_stall",
                   Fmt("Training stops %.3g s per checkpoint (%.0f%% of the run)", cost_s, pct),
                   *f.checkpoint_s, 0.9);
  Add(x, "checkpoints", double(f.checkpoints), "", "checkpoints written on the training thread");
  Add(x, "checkpoint_cost_s", cost_s, "s", "mean stall per checkpoint");
  // Young (1974): the interval that minimizes checkpoint cost plus expected
  // rework, for a cost C and a mean time between failures M: sqrt(2 C M).
  const double interval_s = std::sqrt(2 * cost_s * options.assumed_mtbf_s);
  const double step_s = f.step_time_median_s.value_or(0);
  const std::string steps = step_s > 0 ? Fmt("%.0f", std::ceil(interval_s / step_s)) : "";
  std::string where, knob;
  if (!f.checkpoint_sites.empty()) {
    const SiteStat& top = f.checkpoint_sites.front();
    where = Fmt("%s at %s blocks %.2f s each time. ", top.op.c_str(), top.site.c_str(),
                top.count > 0 ? top.total_s / double(top.count) : 0.0);
    knob = SaveIntervalKnob(f.checkpoint_sites, steps.empty() ? "..." : steps);
    x.sites = f.checkpoint_sites;
  }
  std::string every = Fmt("%.0f s", interval_s);
  every += !knob.empty() ? knob : !steps.empty() ? " (~" + steps + " steps)" : "";
  std::string now;
  if (f.checkpoints > 1 && f.active_s > 0) {
    now = Fmt(" (now about every %.3g s", f.active_s / double(f.checkpoints));
    if (f.steps > 0) now += Fmt(", %.0f steps", double(f.steps) / double(f.checkpoints));
    now += ")";
  }
  x.fix = where + Fmt("Write checkpoints asynchronously (%s), and checkpoint every %s%s: "
                      "Young's interval sqrt(2 x %.3g s x MTBF) with an assumed MTBF of %.0f h.",
                      AsyncSaveHow(f.checkpoint_sites).c_str(), every.c_str(), now.c_str(), cost_s,
                      options.assumed_mtbf_s / 3600);
  x.fix_value = {{"checkpoint_interval_s", interval_s}};
  const double after_s = f.checkpoint_after_s.value_or(0);
  if (after_s > 0) {
    Add(x, "checkpoint_after_s", after_s, "s",
        "the steps right after the saves, beyond the median step (writeback, caches)");
  }
  PredictSaving(f, x, *f.checkpoint_s + after_s,
                Fmt("%lld blocking checkpoints cost %.3g s, and the steps after them %.3g s more; "
                    "saved less often (or in the background) that cost goes",
                    (long long)f.checkpoints, *f.checkpoint_s, after_s),
                true);
  return x;
}

// "It compiled in steps 16, 32. " (features list the first few steps; a step
// may hold several compilations: the forward, then the lazy backward).
std::string CompileStepsWords(const Features& f) {
  if (f.compile_steps.empty()) return "";
  std::string out = f.compile_steps.size() > 1 ? "It compiled in steps " : "It compiled in step ";
  for (size_t i = 0; i < f.compile_steps.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(f.compile_steps[i]);
  }
  return out + (f.compile_steps.size() >= kMaxCompileSteps ? " (the first five). " : ". ");
}

// torch.compile compiling during training: a guard (a shape, dtype or Python
// value the graph was specialized on) failed, and the step waited for a new
// graph; the GPU idles meanwhile. The compilation at start-up, before the
// first step mark, is outside the window and not counted.
std::optional<Finding> RecompileRule(const Features& f, const AnalysisOptions&) {
  if (f.compiles_in_window == 0 || f.compile_in_window_s <= 0) return std::nullopt;
  const long long n = f.compiles_in_window;
  Finding x = Make(f, "recompile",
                   Fmt("torch.compile compiled %lld time%s during training (%.3g s)", n,
                       n == 1 ? "" : "s", f.compile_in_window_s),
                   f.compile_in_window_s, 0.8);
  Add(x, "compiles_in_window", double(n), "", "compilations after the first step");
  Add(x, "compile_in_window_s", f.compile_in_window_s, "s", "their time in the training window");
  if (!f.compile_steps.empty()) {
    Add(x, "first_compile_step", double(f.compile_steps.front()), "",
        "the first step that compiled (step k ends with the k-th optimizer update)");
  }
  Add(x, "compiles", double(f.compiles), "", "compilations in all, start-up included");
  Add(x, "compile_s", f.compile_s, "s", "their time in all");
  x.fix =
      CompileStepsWords(f) +
      "Each compilation after the first step is a guard failing: a shape, dtype or Python value "
      "the compiled graph was specialized on changed, and the step waits for a new graph. Run "
      "with TORCH_LOGS=recompiles to see which guard. For shapes that vary (sequence lengths, a "
      "short last batch), pad to a few fixed sizes, use drop_last=True, or mark the dimension "
      "dynamic (torch._dynamo.mark_dynamic(x, dim), or torch.compile(model, dynamic=True)). "
      "Entering model.eval() or torch.no_grad() for evaluation compiles once more, once.";
  x.fix_value = {{"compiles_in_window", 0}};
  PredictSaving(f, x, f.compile_in_window_s,
                Fmt("%lld compilation%s during training cost %.3g s; with stable guards none "
                    "after the first step",
                    n, n == 1 ? "" : "s", f.compile_in_window_s),
                true);
  return x;
}

std::optional<Finding> ThrottlingRule(const Features& f, const AnalysisOptions&) {
  if (!f.throttled_pct || *f.throttled_pct <= kThrottledPct) return std::nullopt;
  const bool measured = f.throttle_clock_loss_pct && *f.throttle_clock_loss_pct > 0;
  const double loss = measured ? *f.throttle_clock_loss_pct / 100 : kAssumedThrottleLoss;
  std::string reasons;
  for (const std::string& r : f.throttle_reasons) reasons += (reasons.empty() ? "" : ", ") + r;
  const double busy_s = f.active_s * UsedGpuBusyPct(f).value_or(100) / 100;
  Finding x = Make(f, "throttling",
                   Fmt("GPU clocks limited by power or temperature in %.0f%% of busy samples (%s)",
                       *f.throttled_pct, reasons.c_str()),
                   busy_s * *f.throttled_pct / 100 * loss, measured ? 0.7 : 0.4);
  Add(x, "throttled_pct", *f.throttled_pct, "%", "busy samples with power/thermal clock limits");
  Add(x, "clock_loss_pct", loss * 100, "%",
      measured ? "SM clock below the highest seen, while limited"
               : "assumed clock loss (no clock readings)");
  x.fix =
      "Check cooling and power: nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE; raise the "
      "power limit if it was lowered (nvidia-smi -pl), clean airflow, or ask the operators.";
  PredictSaving(f, x, x.time_lost_s, "full clocks give back the busy time lost to throttling",
                false);
  return x;
}

std::optional<Finding> CommunicationRule(const Features& f, const AnalysisOptions&) {
  std::optional<Finding> comm;
  if (f.comm_pct && *f.comm_pct >= kPhasePct) {
    // Accumulating k steps without sync divides communication by k; aim at
    // 5% of step time.
    const double k = std::min(8.0, std::ceil(*f.comm_pct / 5));
    comm =
        Make(f, "communication", Fmt("Ranks spend %.0f%% of each step communicating", *f.comm_pct),
             f.comm_s.value_or(0), 0.8);
    Add(*comm, "comm_pct", *f.comm_pct, "%", "share of step time in comm/allreduce phases");
    comm->fix =
        Fmt("Overlap gradient all-reduce with backward (DDP buckets, NCCL), and "
            "accumulate %.0f steps under no_sync() between all-reduces.",
            k);
    comm->fix_value = {{"grad_accumulation_steps", k}};
    PredictSaving(f, *comm, f.comm_s.value_or(0) * (1 - 1 / k),
                  Fmt("communication %.3g s; all-reducing every %.0f steps divides it by %.0f",
                      f.comm_s.value_or(0), k, k),
                  false);
  }
  // Imbalance among the GPUs in use: the fast ones wait for the slowest.
  std::optional<Finding> imbalance;
  int lo = -1, hi = -1;
  for (size_t i = 0; i < f.gpu_busy_pct.size(); ++i) {
    if (i < f.gpu_idle_pct.size() && f.gpu_idle_pct[i] >= kIdleAllocationPct) continue;
    if (lo < 0 || f.gpu_busy_pct[i] < f.gpu_busy_pct[lo]) lo = int(i);
    if (hi < 0 || f.gpu_busy_pct[i] > f.gpu_busy_pct[hi]) hi = int(i);
  }
  if (lo >= 0 && lo != hi && f.gpu_busy_pct[hi] - f.gpu_busy_pct[lo] > kImbalancePoints) {
    const double gap = f.gpu_busy_pct[hi] - f.gpu_busy_pct[lo];
    imbalance = Make(f, "communication",
                     Fmt("GPUs are unbalanced: GPU %d %.0f%% busy, GPU %d %.0f%%", hi,
                         f.gpu_busy_pct[hi], lo, f.gpu_busy_pct[lo]),
                     f.active_s * gap / 100, 0.6);
    Add(*imbalance, "imbalance_points", gap, "%", "max - min mean utilization across GPUs");
    imbalance->fix =
        "Balance the work per rank: shard the data evenly (saturate.Loader shards "
        "by rank), equal batch sizes, and look for rank-0-only work (logging, "
        "evaluation) inside the step.";
    PredictSaving(f, *imbalance, imbalance->time_lost_s,
                  "balanced GPUs stop waiting for the slowest one", true);
  }
  if (comm && imbalance) return comm->time_lost_s >= imbalance->time_lost_s ? comm : imbalance;
  return comm ? comm : imbalance;
}

std::optional<Finding> MemoryRule(const Features& f, const AnalysisOptions&) {
  const bool failed = f.exit_code && *f.exit_code != 0;
  const bool gpu_full = f.gpu_memory_used_max_pct && *f.gpu_memory_used_max_pct > kMemoryFullPct;
  const bool host_full = f.mem_headroom_pct && *f.mem_headroom_pct < 100 - kMemoryFullPct;
  if (!gpu_full && !host_full) return std::nullopt;
  Finding x;
  if (gpu_full) {
    std::optional<double> busy = UsedGpuBusyPct(f);
    const double idle = busy ? std::max(0.0, 1 - *busy / kTargetBusyPct) : 0;
    // A failed run with memory full most likely ran out of it: all lost.
    x = failed ? Make(f, "memory",
                      Fmt("The run failed (exit %d) with GPU memory full (peak %.1f%%): likely "
                          "out of memory",
                          *f.exit_code, *f.gpu_memory_used_max_pct),
                      f.duration_s, 0.6)
               : Make(f, "memory",
                      Fmt("GPU memory is full (peak %.1f%%): no room for a larger batch",
                          *f.gpu_memory_used_max_pct),
                      f.active_s * idle, 0.5);
    Add(x, "gpu_memory_used_max_pct", *f.gpu_memory_used_max_pct, "%", "peak GPU memory");
    x.fix =
        "Free memory for work: mixed precision (bf16 autocast halves activations), "
        "activation checkpointing, and gradient accumulation (half the batch, 2 steps) "
        "where a larger effective batch is wanted.";
    x.fix_value = {{"grad_accumulation_steps", 2}};
  } else if (failed) {
    x = Make(f, "memory",
             Fmt("The run failed (exit %d) with host memory exhausted (%.1f%% available): "
                 "likely out of memory",
                 *f.exit_code, *f.mem_headroom_pct),
             f.duration_s, 0.6);
  } else {
    x = Make(f, "memory",
             Fmt("Host memory nearly exhausted (%.1f%% available at the low point)",
                 *f.mem_headroom_pct),
             0, 0.6);
    x.info = true;  // no time measured, but swapping or an OOM kill is close
  }
  if (!gpu_full) {
    x.fix =
        "Reduce host memory: fewer loader worker processes (each copies the dataset "
        "index), memory-mapped datasets instead of in-RAM copies, smaller prefetch.";
  }
  if (f.mem_headroom_pct) {
    Add(x, "mem_headroom_pct", *f.mem_headroom_pct, "%", "lowest host MemAvailable/MemTotal");
  }
  return x;
}

std::optional<Finding> IdleAllocationRule(const Features& f, const AnalysisOptions&) {
  if (f.gpu_idle_pct.empty() || f.duration_s <= 0) return std::nullopt;
  int idle = 0;
  double idle_gpu_s = 0;
  for (double pct : f.gpu_idle_pct) {
    if (pct < kIdleAllocationPct) continue;
    ++idle;
    // Held for the whole run, and idle through the training as around it.
    idle_gpu_s += f.duration_s * pct / 100;
  }
  if (idle == 0) return std::nullopt;
  const int n = int(f.gpu_idle_pct.size());
  // Wall time: the idle share of the allocation.
  Finding x = Make(
      f, "idle_allocation",
      idle == n ? Fmt("All %d GPU%s allocated but idle most of the training", n, n > 1 ? "s" : "")
                : Fmt("%d of %d GPUs allocated but idle most of the training", idle, n),
      idle_gpu_s / n, 0.9);
  Add(x, "idle_gpu_s", idle_gpu_s, "s", "GPU-seconds below 5% utilization");
  Add(x, "idle_gpus", idle, "", "GPUs idle for more than half the training window");
  if (idle < n) {
    x.fix =
        Fmt("Request %d GPU%s instead of %d (or set CUDA_VISIBLE_DEVICES), or use them all "
            "with data-parallel training. saturate watch --prometheus exports "
            "DCGM_FI_DEV_GPU_UTIL so the cluster can alert on idle allocations.",
            n - idle, n - idle > 1 ? "s" : "", n);
    x.fix_value = {{"gpus", double(n - idle)}};
  } else {
    x.fix =
        "Release the GPUs while the job does not use them (CPU-only stages as their own "
        "job), and export saturate watch --prometheus to the cluster's monitoring so idle "
        "allocations raise alerts.";
  }
  return x;
}

// The precision_bits evidence line, naming where the value came from.
void AddPrecision(const Features& f, Finding& x) {
  Add(x, "precision_bits", double(*f.precision_bits), "bits",
      f.precision_source == "model"
          ? "from the \"model\" counter"
          : "seen by the auto-instrumentation: torch.autocast regions, else the parameters' dtype");
  if (f.tf32_matmul) Add(x, "tf32_matmul", 1, "", "fp32 matmuls may use TF32 tensor cores");
}

// Besides precision, what keeps matrix math off the tensor cores: NCHW
// convolution weights and sizes not multiples of 8. With the
// auto-instrumentation's record of the weights the advice names what it saw
// and leaves out what is already right; without it, the general rule.
// Returns "; "-joined clauses ("" when nothing is to change).
std::string ShapeAdvice(const Features& f, Finding& x) {
  if (!f.model_shapes) {
    return "convert convolution models and their inputs to channels_last "
           "(model.to(memory_format=torch.channels_last)); keep batch, channel and hidden "
           "sizes multiples of 8";
  }
  const Features::ModelShapes& m = *f.model_shapes;
  std::string advice;
  if (m.conv_nchw_weights > 0) {
    Add(x, "conv_nchw_weights", double(m.conv_nchw_weights), "",
        Fmt("of the optimizer's %lld convolution weights laid out NCHW, not channels_last",
            (long long)m.conv_weights));
    advice =
        Fmt("convert the model and its inputs to channels_last (%lld of its %lld convolution "
            "weights are NCHW): model.to(memory_format=torch.channels_last) and "
            "x.to(memory_format=torch.channels_last)",
            (long long)m.conv_nchw_weights, (long long)m.conv_weights);
  }
  if (m.matrix_unaligned_weights > 0) {
    Add(x, "matrix_unaligned_weights", double(m.matrix_unaligned_weights), "",
        Fmt("of the optimizer's %lld 2-D (Linear, Embedding) weights with a size not a "
            "multiple of 8",
            (long long)m.matrix_weights));
    advice += std::string(advice.empty() ? "" : "; ") +
              Fmt("pad the sizes that are not multiples of 8 (%lld of its %lld Linear and "
                  "Embedding weights; a vocabulary to a multiple of 64)",
                  (long long)m.matrix_unaligned_weights, (long long)m.matrix_weights);
  }
  return advice;
}

// Only with evidence: precision_bits >= 32 on a GPU run, from a user's "model"
// counter or the auto-instrumentation's record.
std::optional<Finding> ModelConfigRule(const Features& f, const AnalysisOptions&) {
  if (f.gpu_count == 0 || !f.precision_bits || *f.precision_bits < 32) return std::nullopt;
  const double busy = UsedGpuBusyPct(f).value_or(0);
  Finding x = Make(f, "model_config", "The model trains in fp32 where bf16 would do",
                   f.active_s * busy / 100 * kFp32AssumedGain, 0.4);
  AddPrecision(f, x);
  if (f.gpm_tensor_active_pct) {
    Add(x, "tensor_active_pct", *f.gpm_tensor_active_pct, "%",
        "tensor pipes active while busy (GPM, DCGM_FI_PROF_PIPE_TENSOR_ACTIVE)");
    if (*f.gpm_tensor_active_pct < kTensorIdlePct) x.confidence = 0.6;  // measured, not assumed
  }
  const std::string shapes = ShapeAdvice(f, x);
  x.fix =
      "Use mixed precision (torch.autocast with bfloat16) so matrix math runs on tensor "
      "cores" +
      (shapes.empty() ? "" : "; " + shapes) +
      ". The time lost assumes a conservative 30% saving of GPU time.";
  x.fix_value = {{"precision_bits", 16}};
  PredictSaving(f, x, x.time_lost_s, "bf16 assumed to save 30% of the GPU's busy time", false);
  return x;
}

// GPM: "busy" by utilization (some kernel runs all the time) while few SMs
// work: kernels too small to fill the GPU, or too many launches between them.
// Time lost: the share of the busy time the SMs idled beyond what large
// kernels leave idle, half of it assumed recoverable.
std::optional<Finding> LaunchBoundRule(const Features& f, const AnalysisOptions&) {
  if (f.gpm_samples < kGpmMinSamples || !f.gpm_util_pct || !f.gpm_sm_active_pct) {
    return std::nullopt;
  }
  const double util = *f.gpm_util_pct, sm = *f.gpm_sm_active_pct;
  if (util < kLaunchBoundUtilPct || sm > kLaunchBoundSmActivePct) return std::nullopt;
  const double busy_s = f.active_s * UsedGpuBusyPct(f).value_or(util) / 100;
  const double idle_share = std::max(0.0, 1 - sm / kWellFedSmActivePct);
  Finding x = Make(f, "launch_bound",
                   Fmt("GPU busy %.0f%% of the time but only %.0f%% of its SMs active: small "
                       "kernels or launch overhead",
                       util, sm),
                   busy_s * idle_share * kSmallKernelRecoverable, 0.5);
  Add(x, "gpu_util_pct", util, "%", "GPU utilization over the samples with GPM counters");
  Add(x, "sm_active_pct", sm, "%", "SMs with work assigned (GPM, DCGM_FI_PROF_SM_ACTIVE)");
  if (f.gpm_sm_occupancy_pct) {
    Add(x, "sm_occupancy_pct", *f.gpm_sm_occupancy_pct, "%",
        "resident warps of the maximum (DCGM_FI_PROF_SM_OCCUPANCY)");
  }
  if (f.gpm_tensor_active_pct) {
    Add(x, "tensor_active_pct", *f.gpm_tensor_active_pct, "%", "tensor pipes active");
  }
  Add(x, "gpm_samples", double(f.gpm_samples), "", "busy samples with GPM counters");
  if (f.step_time_median_s) Add(x, "step_time_s", *f.step_time_median_s, "s", "median step");
  x.fix =
      Fmt("The GPU always has a kernel running, but %.0f%% of its SMs idle: the kernels are too "
          "small to fill the GPU, or the CPU launches them one by one. Capture the step in CUDA "
          "graphs (torch.compile(model, mode=\"reduce-overhead\"), or torch.cuda.CUDAGraph for a "
          "static step), let torch.compile fuse the small elementwise kernels, or give each kernel "
          "more work with a larger batch.",
          100 - sm);
  if (f.loader_batch_size && f.gpu_memory_used_max_pct &&
      *f.gpu_memory_used_max_pct < kFreeMemoryPct) {
    x.fix +=
        Fmt(" GPU memory peaked at %.0f%%: batch %lld -> %lld fits.", *f.gpu_memory_used_max_pct,
            (long long)*f.loader_batch_size, (long long)*f.loader_batch_size * 2);
    x.fix_value = {{"batch_size", double(*f.loader_batch_size * 2)}};
  }
  PredictSaving(f, x, x.time_lost_s,
                Fmt("SMs active %.0f%% of busy time against ~%.0f%% for large kernels; half "
                    "that gap assumed recovered by graphs, fusion or a larger batch",
                    sm, kWellFedSmActivePct),
                false);
  return x;
}

// GPM: the SMs compute but the tensor pipes stay idle, so matrix math runs
// on the slower FP32/FP16 pipes. Under mixed precision (precision_bits <= 16:
// a user's "model" counter or the auto-instrumentation's record) that means
// the ops miss the tensor cores (layout, shapes, ops outside autocast). A run
// with neither (a job traced only through saturate.Loader) does not say, so
// the finding says so and is less confident. fp32 is ModelConfigRule's.
std::optional<Finding> TensorCoresIdleRule(const Features& f, const AnalysisOptions&) {
  if (f.gpm_samples < kGpmMinSamples || !f.gpm_util_pct || !f.gpm_sm_active_pct ||
      !f.gpm_tensor_active_pct) {
    return std::nullopt;
  }
  if (f.precision_bits && *f.precision_bits >= 32) return std::nullopt;  // ModelConfigRule
  const double util = *f.gpm_util_pct, sm = *f.gpm_sm_active_pct, tensor = *f.gpm_tensor_active_pct;
  if (util < kTensorBusyUtilPct || sm < kTensorMathSmActivePct || tensor >= kTensorIdlePct) {
    return std::nullopt;
  }
  const bool amp = f.precision_bits.has_value();  // <= 16 here
  const double busy_s = f.active_s * UsedGpuBusyPct(f).value_or(util) / 100;
  Finding x = Make(
      f, "model_config",
      amp ? Fmt("Tensor cores idle (%.1f%% active) although the model runs in %lld-bit: the "
                "math is not on tensor cores",
                tensor, (long long)*f.precision_bits)
          : Fmt("Tensor cores idle (%.1f%% active) while %.0f%% of the SMs compute", tensor, sm),
      busy_s * kFp32AssumedGain, amp ? 0.6 : 0.35);
  Add(x, "tensor_active_pct", tensor, "%",
      "tensor pipes active while busy (GPM, DCGM_FI_PROF_PIPE_TENSOR_ACTIVE)");
  Add(x, "sm_active_pct", sm, "%", "SMs with work assigned (DCGM_FI_PROF_SM_ACTIVE)");
  Add(x, "gpu_util_pct", util, "%", "GPU utilization over the samples with GPM counters");
  if (amp) AddPrecision(f, x);
  const std::string shapes = ShapeAdvice(f, x);
  // A 16-bit model already asked for tensor cores: what misses them is math
  // left in fp32, layout or sizes.
  x.fix = std::string(amp ? "Find the matrix math that misses the tensor cores: matmuls or "
                            "convolutions left in fp32 (outside the torch.autocast region, or "
                            "after a .float())"
                          : "Whether the run used torch.autocast is not recorded (run it under "
                            "saturate watch or doctor, or add a \"model\" counter with "
                            "precision_bits). Put the matrix math on tensor cores: run the "
                            "forward pass under torch.autocast(\"cuda\", dtype=torch.bfloat16) "
                            "(fp32 matmuls: torch.set_float32_matmul_precision(\"high\") for "
                            "TF32)") +
          (shapes.empty() ? "" : "; " + shapes) +
          ". The time lost assumes a conservative 30% of GPU time saved.";
  PredictSaving(f, x, x.time_lost_s, "tensor cores assumed to save 30% of the GPU's busy time",
                false);
  return x;
}

// Hugging Face's Trainer tests every step's loss for NaN/inf on the host
// (`logging_nan_inf_filter`, on by default): a bool() in its trainer.py. The
// user's script cannot move that line, but one argument turns it off.
std::string TrainerSyncHint(const std::vector<SiteStat>& sites) {
  for (const SiteStat& s : sites) {
    if (s.op == "bool()" && InTrainer(s.site)) {
      return Fmt(
          "The bool() at %s is Hugging Face's Trainer checking each step's loss for "
          "NaN/inf; TrainingArguments(logging_nan_inf_filter=False) removes it. ",
          s.site.c_str());
    }
  }
  return "";
}

// A site with calls in few steps, many each time, is a loop of its own (an
// evaluation every N steps): one sync after that loop replaces them all.
std::string BurstSyncHint(const std::vector<SiteStat>& sites, int64_t steps) {
  for (const SiteStat& s : sites) {
    if (!RunsInBursts(s) || steps <= 0 || *s.step_share <= 0) continue;
    const double calls = double(s.count) / (*s.step_share * double(steps));
    return Fmt(
        "The %s at %s runs in %.0f%% of the steps, ~%.0f times each (a loop of its own, "
        "such as an evaluation): keep its values on the device (torch.stack, or sum "
        "into a tensor) and sync once after that loop. ",
        s.op.c_str(), s.site.c_str(), 100 * *s.step_share, calls);
  }
  return "";
}

// Host syncs (.item(), .cpu(), torch.cuda.synchronize, ...) by call site.
// On a GPU each waits for the device's queue to drain, and the thread
// queues nothing meanwhile. The GPU computes through most of a wait (the
// queue it drains is work), so the time lost is at most the GPU's idle time
// in the run: a GPU-bound loop that prints its loss now and then waits long
// in .item() and loses little. On a CPU-only run nothing waits, but the same
// lines would on a GPU: advice, when a site runs every step (often enough,
// and in most steps: not an evaluation loop every N steps).
std::optional<Finding> HostSyncRule(const Features& f, const AnalysisOptions&) {
  std::vector<SiteStat> gpu, every_step;
  double gpu_s = 0;
  for (const SiteStat& s : f.host_syncs) {
    if (s.device == "cuda") {
      gpu.push_back(s);
      gpu_s += s.total_s;
    } else if (s.per_step >= kSyncsPerStep && !RunsInBursts(s)) {
      every_step.push_back(s);
    }
  }
  const std::vector<SiteStat>& sites = gpu.empty() ? every_step : gpu;
  if (sites.empty() || (gpu.empty() && f.gpu_count > 0)) return std::nullopt;
  const SiteStat& top = sites.front();
  double per_step = 0;
  for (const SiteStat& s : sites) per_step += s.per_step;
  const std::optional<double> idle_s = GpuIdleS(f);
  const double lost_s = !gpu.empty() && idle_s ? std::min(gpu_s, *idle_s) : gpu_s;
  Finding x = Make(f, "host_sync",
                   gpu.empty() ? Fmt("%.1f host syncs per step would each stall a GPU: %s %s",
                                     per_step, top.op.c_str(), top.site.c_str())
                               : Fmt("Host syncs wait for the GPU %.1f times per step (%.1f s "
                                     "in all): %s %s",
                                     per_step, gpu_s, top.op.c_str(), top.site.c_str()),
                   lost_s, gpu.empty() ? 0.9 : 0.5);
  x.info = gpu.empty();
  Add(x, "syncs_per_step", per_step, "", "host syncs per training step");
  if (!gpu.empty()) Add(x, "sync_wait_s", gpu_s, "s", "time blocked in them");
  if (!gpu.empty() && idle_s) Add(x, "gpu_idle_s", *idle_s, "s", "the most the syncs can cost");
  x.sites = sites;
  x.fix = TrainerSyncHint(sites) + BurstSyncHint(sites, f.steps) +
          Fmt("Keep values on the device and sync less often: accumulate the loss with "
              "`total += loss.detach()` and call .item() when logging (e.g. every 50 "
              "steps), not every step; move .cpu()/.tolist() out of the step. Start at %s.",
              top.site.c_str());
  if (x.info) {
    x.fix +=
        " (This run has no GPU, so these calls cost nothing here; on a GPU each one "
        "drains the device's queue.)";
  }
  x.fix_value = {{"syncs_per_step", std::max(0.0, per_step - top.per_step)}};
  if (!x.info) {
    PredictSaving(f, x, lost_s,
                  Fmt("%.3g s blocked in host syncs, %.3g s of it with the GPU idle at most; "
                      "without them the GPU queue stays full",
                      gpu_s, lost_s),
                  true);
  }
  return x;
}

// Advice, not a measured loss: without step marks doctor cannot split the
// time, so say how to get them, but only when something looks off.
std::optional<Finding> MonitoringRule(const Features& f, const AnalysisOptions&) {
  if (f.steps > 0 || f.has_spans) return std::nullopt;
  if (f.gpu_count > 0 && f.device_busy_pct && *f.device_busy_pct >= 80) return std::nullopt;
  Finding x = Make(f, "monitoring", "No step data: doctor cannot split step time", 0, 1.0);
  x.info = true;
  if (f.device_busy_pct) Add(x, "device_busy_pct", *f.device_busy_pct, "%", "mean GPU busy");
  std::string why;
  if (f.auto_info.enabled == false) {
    why = "The auto-instrumentation was off (--no-auto): run without it to record steps. ";
  } else if (f.auto_info.processes == 0) {
    why =
        "The auto-instrumentation recorded nothing: the command did not run Python with "
        "torch (or ran it with -E/-I, which ignore PYTHONPATH). ";
  } else {
    why = "The job imported torch but ran no optimizer step. ";
  }
  x.fix = why +
          "Mark each step with saturate.step() and the phases with `with "
          "saturate.phase(\"forward\"):` (data, forward, backward, optimizer, copy, comm, "
          "checkpoint), or load data with saturate.Loader, which records its waits.";
  return x;
}

using Rule = std::optional<Finding> (*)(const Features&, const AnalysisOptions&);

const std::vector<Rule>& Rules() {
  static const std::vector<Rule> rules = {
      InputPipelineRule,  IoBoundRule,     CpuContentionRule, ParallelismRule,     CopyRule,
      CheckpointRule,     RecompileRule,   ThrottlingRule,    CommunicationRule,   MemoryRule,
      IdleAllocationRule, ModelConfigRule, LaunchBoundRule,   TensorCoresIdleRule, HostSyncRule,
      MonitoringRule,     UnattributedRule};
  return rules;
}

nlohmann::json OptionalJson(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

nlohmann::json PredictionJson(const Prediction& p) {
  return {{"metric", p.metric},
          {"now", OptionalJson(p.now)},
          {"expected", OptionalJson(p.expected)},
          {"speedup", p.speedup},
          {"upper_bound", p.upper_bound},
          {"model", p.model}};
}

nlohmann::json FixCheckJson(const FixCheck& c) {
  return {{"knob", c.knob},
          {"flag", c.flag},
          {"from", c.from},
          {"to", c.to},
          {"predicted_speedup", c.predicted_speedup},
          {"measured_speedup", c.measured_speedup},
          {"reliable_gain", c.reliable_gain},
          {"within_tolerance", c.within_tolerance},
          {"verdict", c.verdict},
          {"tune_dir", c.tune_dir}};
}

nlohmann::json FindingJson(const Finding& x) {
  nlohmann::json evidence = nlohmann::json::array();
  for (const Evidence& e : x.evidence) {
    evidence.push_back({{"key", e.key}, {"value", e.value}, {"unit", e.unit}, {"text", e.text}});
  }
  nlohmann::json fix_value = nullptr;
  if (x.fix_value) {
    // Counts (threads, num_workers, batch_size) read as integers: 2, not 2.0.
    const double v = x.fix_value->second;
    const bool whole = std::isfinite(v) && std::floor(v) == v && std::fabs(v) < 1e15;
    fix_value = {{x.fix_value->first, whole ? nlohmann::json(int64_t(v)) : nlohmann::json(v)}};
  }
  return {{"cause", x.cause},
          {"title", x.title},
          {"time_lost_s", x.time_lost_s},
          {"time_lost_pct", x.time_lost_pct},
          {"evidence", std::move(evidence)},
          {"fix", x.fix},
          {"fix_value", std::move(fix_value)},
          {"confidence", x.confidence},
          {"info", x.info},
          {"sites", SitesJson(x.sites)},
          {"prediction", x.prediction ? PredictionJson(*x.prediction) : nlohmann::json(nullptr)},
          {"check", x.check ? FixCheckJson(*x.check) : nlohmann::json(nullptr)},
          {"demoted", x.demoted}};
}

}  // namespace

// The rules read Features only; the Run stays in the signature for rules that
// will need raw spans or samples.
std::vector<Finding> Diagnose(const Run& /*run*/, const Features& features,
                              const AnalysisOptions& options) {
  std::vector<Finding> found;
  for (const Rule& rule : Rules()) {
    if (std::optional<Finding> x = rule(features, options)) found.push_back(std::move(*x));
  }
  return RankFindings(std::move(found), options.min_time_lost_pct);
}

std::vector<Finding> RankFindings(std::vector<Finding> findings, double min_time_lost_pct) {
  std::vector<Finding> ranked, info;
  for (Finding& x : findings) {
    if (x.info) {
      info.push_back(std::move(x));
    } else if (x.time_lost_pct >= min_time_lost_pct) {
      ranked.push_back(std::move(x));
    }
  }
  // A finding whose fix was applied and gave no reliable gain goes last.
  std::stable_sort(ranked.begin(), ranked.end(), [](const Finding& a, const Finding& b) {
    if (a.demoted != b.demoted) return b.demoted;
    return a.time_lost_s > b.time_lost_s;
  });
  ranked.insert(ranked.end(), std::make_move_iterator(info.begin()),
                std::make_move_iterator(info.end()));
  return ranked;
}

Analysis Analyze(const Run& run, const AnalysisOptions& options) {
  Analysis a;
  a.features = ComputeFeatures(run);
  a.findings = Diagnose(run, a.features, options);
  a.min_time_lost_pct = options.min_time_lost_pct;
  return a;
}

nlohmann::json AnalysisJson(const Run& run, const Analysis& analysis) {
  nlohmann::json findings = nlohmann::json::array();
  for (const Finding& x : analysis.findings) findings.push_back(FindingJson(x));
  return {{"run", run.meta.dir},
          {"duration_s", analysis.features.duration_s},
          {"features", analysis.features.ToJson()},
          {"findings", std::move(findings)}};
}

}  // namespace saturate::doctor
