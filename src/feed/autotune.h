// AutotuneController: picks the loader's worker thread count and prefetch
// depth online when LoaderOptions::threads / prefetch are 0 ("auto"). Like
// tf.data's AUTOTUNE, but every decision is a pure function of the measured
// windows and comes with a one-line human reason.
//
// What "auto" does
// ----------------
// Goal: the training step should not wait for data (consumer wait below 2% of
// wall time) while the loader uses as few threads as achieve that, so the
// cores stay with the training process.
//
// The loader measures the pipeline in windows (AutotuneSample: wall time,
// batches delivered, consumer time blocked in Next(), worker time spent
// reading + decoding + transforming, queue depth at the end) and feeds each
// one to Update(). Per window, with
//   wait = consumer_wait_ns / window_ns
//   busy = worker_busy_ns / (threads * window_ns)
//   rate = batches_delivered / window
// the controller does at most one thing:
//
//  * Ignore the window if it is shorter than 200 ms (50 ms for the first 3
//    usable windows, so that start-up decisions come within ~0.2 s) or
//    delivered fewer than 2 batches ("window too short"), if it is the first
//    usable one (pipeline start-up, "warming up"), or if it ran with settings
//    other than the last decision (the loader had not applied it yet). After 3
//    such mismatched windows in a row the controller adopts the loader's
//    settings.
//  * Size once, on the first window after the warm-up: the work the consumer
//    asks for is busy_threads / (1 - wait) threads' worth (the workers' busy
//    time per batch over the consumer's own time per batch; a consumer that
//    waits would go that much faster). Jump to that divided by 85% busy,
//    rounded up, within the limits and within the cores the rest of the
//    process leaves free (when process_cpu_util is known); but release
//    threads only if the consumer waited < 2%, and add them only if the
//    workers were > 85% busy (a bursty consumer waits on idle workers). The
//    loader starts "auto" at max_threads, so the first batches come as fast
//    as the machine allows and sizing only ever releases threads it does not
//    need; the rules below then adjust by one thread at a time.
//  * Add a thread when, for 2 windows in a row, the consumer waited > 5%,
//    the workers were > 85% busy and the ready queue was not full at the end
//    of the window (a throughput shortfall, not a burst). This is a
//    hill-climbing trial: the new count runs for 2 windows and is kept only if
//    the delivered rate rose over the windows before it by > 5% and by at
//    least a quarter of what a fully useful thread would bring (see
//    RequiredGain: 12.5% for 2 -> 3 threads with a large wait); otherwise the
//    controller reverts and does not try that count again for 16 windows
//    (doubling per repeated failure, up to 256), unless the wait share grows
//    by 10 points over what it was when the trial failed. Never above
//    max_threads, and never while the whole process already uses
//    >= cores - 0.5 cores (process_cpu_util, when known): more threads would
//    only contend with training.
//  * Double the prefetch depth when, for 2 windows in a row, the consumer
//    waited > 5% but the workers were not the bottleneck (<= 85% busy, or the
//    ready queue was full at the window's end): the consumer is bursty and a
//    deeper queue absorbs the bursts. Never above max_prefetch, and never so
//    that (prefetch + max_held_batches) * batch_bytes exceeds ram_cap_bytes.
//    Prefetch is never lowered: its buffers are already paid for.
//  * Release a thread when, for 3 windows in a row, the consumer waited < 2%
//    and the remaining threads would still be <= 75% busy (busy * threads /
//    (threads - 1) <= 0.75): do not oversubscribe the cores the training
//    process needs. Never below min_threads.
//  * Otherwise keep the settings ("steady").
// Between 2% and 5% wait nothing is added, and a thread is only released when
// the others would stay well below the 85% "saturated" mark: these gaps keep
// the settings from oscillating in a stationary regime.
//
// Default thread cap: max_threads = cores - reserved_cores (at least 1), with
// reserved_cores = 1, so the training process always keeps a core.
//
// Ownership: a value type; owns nothing external. Thread-safety: not
// thread-safe; one thread (the loader's tuning step) calls Update().
#ifndef SATURATE_FEED_AUTOTUNE_H_
#define SATURATE_FEED_AUTOTUNE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace saturate::feed {

// Bounds the controller never leaves. Normalized by the controller (see
// NormalizeLimits): the values it uses are available from limits().
struct AutotuneLimits {
  int cores = 1;           // logical cores the process may use
  int reserved_cores = 1;  // kept for the training process
  int min_threads = 1;
  int max_threads = 0;  // 0: DefaultMaxThreads(cores, reserved_cores)
  int max_prefetch = 16;
  int max_held_batches = 2;    // the loader's pool holds prefetch + this many buffers
  uint64_t batch_bytes = 0;    // bytes of one batch buffer
  uint64_t ram_cap_bytes = 0;  // cap on (prefetch + max_held_batches) * batch_bytes; 0: none
};

// One measurement window, computed by the loader from LoaderStats deltas.
struct AutotuneSample {
  uint64_t window_ns = 0;          // wall time of the window
  uint64_t batches_delivered = 0;  // batches handed to the consumer in the window
  uint64_t consumer_wait_ns = 0;   // consumer time blocked in Next() in the window
  uint64_t worker_busy_ns = 0;     // sum over workers of read + decode + transform time
  int threads = 0;                 // settings in force during the window
  int prefetch = 0;
  int ready_batches = 0;         // batches completed but not yet taken, at window end
  double process_cpu_util = -1;  // cores used by the whole process in the window; <0: unknown
};

struct AutotuneDecision {
  int threads = 0;
  int prefetch = 0;
  bool changed = false;  // threads or prefetch differ from the previous decision
  std::string reason;    // e.g. "consumer waited 23% with workers 97% busy: threads 2→3 (trial)"
};

// max(1, cores - reserved_cores).
int DefaultMaxThreads(int cores, int reserved_cores);

// The largest prefetch with (prefetch + max_held_batches) * batch_bytes <=
// ram_cap_bytes, capped at max_prefetch; at least 1 (a loader needs one batch
// in flight, even if the cap cannot be met). No cap: max_prefetch.
int MaxPrefetchForLimits(const AutotuneLimits& limits);

// Fills defaults and clamps: cores >= 1, reserved_cores >= 0, max_threads
// resolved (0 -> default) and >= 1, 1 <= min_threads <= max_threads,
// 1 <= max_prefetch <= MaxPrefetchForLimits(), max_held_batches >= 0.
AutotuneLimits NormalizeLimits(AutotuneLimits limits);

// The rise in delivered rate a trial thread must bring to be kept when going
// from `threads` to threads + 1 with the consumer waiting `wait_share`:
// max(kMinGain, kMinShareOfIdealGain * ideal), where the ideal gain of a fully
// useful thread is min(1 / threads, wait / (1 - wait)) (one more thread's
// output, or whatever removes the wait entirely).
double RequiredGain(int threads, double wait_share);

class AutotuneController {
 public:
  // Thresholds of the policy above (shares of wall time or of thread time).
  static constexpr uint64_t kMinWindowNs = 200'000'000;
  static constexpr uint64_t kStartupWindowNs = 50'000'000;  // the first kStartupWindows
  static constexpr int kStartupWindows = 3;
  static constexpr uint64_t kMinWindowBatches = 2;
  static constexpr int kWarmupWindows = 1;
  static constexpr int kMismatchesToAdopt = 3;
  static constexpr double kActWaitShare = 0.05;     // act above this wait
  static constexpr double kTargetWaitShare = 0.02;  // goal: wait below this
  static constexpr double kSaturatedBusyShare = 0.85;
  static constexpr double kShedMaxBusyShare = 0.75;  // busy of the others after a release
  // A trial thread must raise the delivered rate by kMinGain and by
  // kMinShareOfIdealGain of its ideal gain (RequiredGain).
  static constexpr double kMinGain = 0.05;
  static constexpr double kMinShareOfIdealGain = 0.25;
  static constexpr double kCpuSaturatedMarginCores = 0.5;
  static constexpr int kAddWindows = 2;       // consecutive windows before adding a thread
  static constexpr int kPrefetchWindows = 2;  // ... before raising prefetch
  static constexpr int kShedWindows = 3;      // ... before releasing a thread
  static constexpr int kTrialWindows = 2;     // windows a trial thread count is observed
  static constexpr int kBaselineWindows = 3;  // windows averaged for the rate before a trial
  static constexpr uint64_t kNoGainBackoffWindows = 16;
  static constexpr uint64_t kMaxNoGainBackoffWindows = 256;
  // A no-gain thread count is retried early if the wait share grows this much.
  static constexpr double kRetryWaitGrowth = 0.10;

  // `initial_threads` and `initial_prefetch` are clamped into the limits.
  AutotuneController(const AutotuneLimits& limits, int initial_threads, int initial_prefetch);

  // Consumes one window and returns the settings to use for the next one. A
  // pure function of the constructor arguments and the samples so far.
  AutotuneDecision Update(const AutotuneSample& sample);

  // The shortest window Update() uses now: short while starting up.
  uint64_t min_window_ns() const {
    return usable_windows_ < static_cast<uint64_t>(kStartupWindows) ? kStartupWindowNs
                                                                    : kMinWindowNs;
  }

  int threads() const { return threads_; }
  int prefetch() const { return prefetch_; }
  const AutotuneLimits& limits() const { return limits_; }

 private:
  struct NoGain {
    uint64_t retry_at_window = 0;  // usable-window index from which it may be tried again
    double wait_share = 0;         // wait share when the trial failed
    int failures = 0;
  };

  AutotuneDecision Decide(std::string reason, int threads, int prefetch);
  // The one-time jump to the threads the first measured window asks for.
  AutotuneDecision Size(const AutotuneSample& s, double wait, double busy_threads,
                        const std::string& seen);
  void ResetHistory();
  // Why `count` threads may not be tried now, or "" if it may.
  std::string NoGainBlock(int count, double wait_share) const;

  AutotuneLimits limits_;
  bool ram_caps_prefetch_ = false;  // the RAM cap, not max_prefetch, bounds prefetch
  int threads_ = 1;
  int prefetch_ = 1;
  uint64_t usable_windows_ = 0;  // windows that passed the length/settings checks
  bool sized_ = false;
  int mismatches_ = 0;
  // Windows at the current settings.
  std::vector<double> rates_per_s_;  // last kBaselineWindows delivered rates
  std::vector<double> waits_;        // and consumer wait shares
  int starved_streak_ = 0;
  int bursty_streak_ = 0;
  int idle_streak_ = 0;
  // The hill-climbing trial in progress, if any.
  bool trial_ = false;
  int trial_from_threads_ = 0;
  double trial_baseline_per_s_ = 0;
  double trial_baseline_wait_ = 0;
  int trial_windows_ = 0;
  std::map<int, NoGain> no_gain_;  // by thread count
};

}  // namespace saturate::feed

#endif  // SATURATE_FEED_AUTOTUNE_H_
