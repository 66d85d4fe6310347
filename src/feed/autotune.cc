#include "feed/autotune.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <utility>

namespace saturate::feed {
namespace {

// "23%".
std::string Pct(double share) {
  return std::to_string(static_cast<long long>(std::llround(share * 100))) + "%";
}

// "7.8".
std::string OneDecimal(double x) {
  const long long tenths = std::llround(x * 10);
  return std::to_string(tenths / 10) + "." + std::to_string(std::llabs(tenths % 10));
}

std::string Arrow(int from, int to) { return std::to_string(from) + "→" + std::to_string(to); }

double Mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

}  // namespace

double RequiredGain(int threads, double wait_share) {
  const double t = std::max(1, threads);
  const double w = std::clamp(wait_share, 0.0, 0.99);
  const double ideal = std::min(1 / t, w / (1 - w));
  return std::max(AutotuneController::kMinGain, AutotuneController::kMinShareOfIdealGain * ideal);
}

int DefaultMaxThreads(int cores, int reserved_cores) {
  return std::max(1, cores - std::max(0, reserved_cores));
}

int MaxPrefetchForLimits(const AutotuneLimits& limits) {
  int cap = std::max(1, limits.max_prefetch);
  if (limits.ram_cap_bytes > 0 && limits.batch_bytes > 0) {
    const uint64_t fit_buffers = limits.ram_cap_bytes / limits.batch_bytes;
    const uint64_t held = static_cast<uint64_t>(std::max(0, limits.max_held_batches));
    const uint64_t fit = fit_buffers > held ? fit_buffers - held : 0;
    cap = static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(cap), fit));
  }
  return std::max(1, cap);
}

AutotuneLimits NormalizeLimits(AutotuneLimits limits) {
  limits.cores = std::max(1, limits.cores);
  limits.reserved_cores = std::max(0, limits.reserved_cores);
  if (limits.max_threads <= 0) {
    limits.max_threads = DefaultMaxThreads(limits.cores, limits.reserved_cores);
  }
  limits.min_threads = std::clamp(limits.min_threads, 1, limits.max_threads);
  limits.max_held_batches = std::max(0, limits.max_held_batches);
  limits.max_prefetch = MaxPrefetchForLimits(limits);
  return limits;
}

AutotuneController::AutotuneController(const AutotuneLimits& limits, int initial_threads,
                                       int initial_prefetch)
    : limits_(NormalizeLimits(limits)),
      ram_caps_prefetch_(limits_.max_prefetch < std::max(1, limits.max_prefetch)) {
  threads_ = std::clamp(initial_threads, limits_.min_threads, limits_.max_threads);
  prefetch_ = std::clamp(initial_prefetch, 1, limits_.max_prefetch);
}

void AutotuneController::ResetHistory() {
  rates_per_s_.clear();
  waits_.clear();
  starved_streak_ = bursty_streak_ = idle_streak_ = 0;
}

AutotuneDecision AutotuneController::Decide(std::string reason, int threads, int prefetch) {
  threads = std::clamp(threads, limits_.min_threads, limits_.max_threads);
  prefetch = std::clamp(prefetch, 1, limits_.max_prefetch);
  AutotuneDecision d;
  d.changed = threads != threads_ || prefetch != prefetch_;
  if (d.changed) ResetHistory();
  threads_ = d.threads = threads;
  prefetch_ = d.prefetch = prefetch;
  d.reason = std::move(reason);
  return d;
}

std::string AutotuneController::NoGainBlock(int count, double wait_share) const {
  auto it = no_gain_.find(count);
  if (it == no_gain_.end()) return "";
  const NoGain& ng = it->second;
  if (usable_windows_ >= ng.retry_at_window) return "";
  if (wait_share >= ng.wait_share + kRetryWaitGrowth) return "";
  return std::to_string(count) + " threads gave no gain; retry in " +
         std::to_string(ng.retry_at_window - usable_windows_) + " windows";
}

AutotuneDecision AutotuneController::Size(const AutotuneSample& s, double wait, double busy_threads,
                                          const std::string& seen) {
  sized_ = true;
  ResetHistory();  // a start-up window: not a baseline for the rules that follow
  // Busy time per batch over the consumer's own time per batch.
  const double asked = busy_threads / std::max(0.01, 1 - wait);
  int target = static_cast<int>(std::ceil(asked / kSaturatedBusyShare - 1e-9));
  std::string why = seen + ": the consumer asks for " + OneDecimal(asked) + " threads' work";
  if (s.process_cpu_util >= 0) {
    // The rest of the process (training) keeps its cores.
    const double free_cores = limits_.cores - std::max(0.0, s.process_cpu_util - busy_threads);
    const int fit = std::max(1, static_cast<int>(std::floor(free_cores + 0.25)));
    if (target > fit) {
      target = fit;
      why += ", " + std::to_string(fit) + " cores free";
    }
  }
  target = std::clamp(target, limits_.min_threads, limits_.max_threads);
  // Only release threads the consumer does not wait for, and only add them
  // where the workers are the bottleneck (a bursty consumer waits on idle
  // workers: deeper prefetch helps it, not threads).
  const bool busy = busy_threads / threads_ > kSaturatedBusyShare;
  if ((target < threads_ && wait >= kTargetWaitShare) || (target > threads_ && !busy)) {
    return Decide(why + ", but it waits with the workers " + Pct(busy_threads / threads_) +
                      " busy: threads " + std::to_string(threads_) + " kept (sized)",
                  threads_, prefetch_);
  }
  return Decide(why + ": threads " + Arrow(threads_, target) + " (sized)", target, prefetch_);
}

AutotuneDecision AutotuneController::Update(const AutotuneSample& s) {
  if (s.window_ns < min_window_ns() || s.batches_delivered < kMinWindowBatches) {
    return Decide("window too short (" + std::to_string(s.window_ns / 1'000'000) + " ms, " +
                      std::to_string(s.batches_delivered) + " batches): unchanged",
                  threads_, prefetch_);
  }
  if (s.threads != threads_ || s.prefetch != prefetch_) {
    if (++mismatches_ < kMismatchesToAdopt) {
      return Decide("window ran with threads " + std::to_string(s.threads) + ", prefetch " +
                        std::to_string(s.prefetch) + " instead of " + std::to_string(threads_) +
                        ", " + std::to_string(prefetch_) + ": ignored",
                    threads_, prefetch_);
    }
    // The loader keeps other settings: take them as the new starting point.
    mismatches_ = 0;
    trial_ = false;
    ResetHistory();
    threads_ = std::clamp(s.threads, limits_.min_threads, limits_.max_threads);
    prefetch_ = std::clamp(s.prefetch, 1, limits_.max_prefetch);
    AutotuneDecision d = Decide("adopted the loader's threads " + std::to_string(s.threads) +
                                    ", prefetch " + std::to_string(s.prefetch),
                                threads_, prefetch_);
    d.changed = s.threads != threads_ || s.prefetch != prefetch_;
    return d;
  }
  mismatches_ = 0;
  ++usable_windows_;
  if (usable_windows_ <= static_cast<uint64_t>(kWarmupWindows)) {
    return Decide("warming up", threads_, prefetch_);
  }

  const double window_s = static_cast<double>(s.window_ns) * 1e-9;
  const double wait =
      std::min(1.0, static_cast<double>(s.consumer_wait_ns) / static_cast<double>(s.window_ns));
  const double busy_threads =
      static_cast<double>(s.worker_busy_ns) / static_cast<double>(s.window_ns);
  const double busy = busy_threads / threads_;
  const double rate = static_cast<double>(s.batches_delivered) / window_s;
  const bool queue_full = s.ready_batches >= prefetch_;

  rates_per_s_.push_back(rate);
  waits_.push_back(wait);
  if (rates_per_s_.size() > static_cast<size_t>(kBaselineWindows)) {
    rates_per_s_.erase(rates_per_s_.begin());
    waits_.erase(waits_.begin());
  }
  const bool starved = wait > kActWaitShare && busy > kSaturatedBusyShare && !queue_full;
  const bool bursty = wait > kActWaitShare && !starved;
  const bool idle = wait < kTargetWaitShare && threads_ > limits_.min_threads &&
                    busy_threads / (threads_ - 1) <= kShedMaxBusyShare;
  starved_streak_ = starved ? starved_streak_ + 1 : 0;
  bursty_streak_ = bursty ? bursty_streak_ + 1 : 0;
  idle_streak_ = idle ? idle_streak_ + 1 : 0;

  const std::string seen = "consumer waited " + Pct(wait) + " with workers " + Pct(busy) + " busy";
  if (!sized_) return Size(s, wait, busy_threads, seen);

  if (trial_) {
    ++trial_windows_;
    if (trial_windows_ < kTrialWindows) {
      return Decide(seen + ": observing threads " + Arrow(trial_from_threads_, threads_) + " (" +
                        std::to_string(trial_windows_) + "/" + std::to_string(kTrialWindows) + ")",
                    threads_, prefetch_);
    }
    trial_ = false;
    const double gain = Mean(rates_per_s_) / trial_baseline_per_s_ - 1;
    const double need = RequiredGain(trial_from_threads_, trial_baseline_wait_);
    if (gain > need) {
      no_gain_.erase(threads_);
      return Decide(seen + ": threads " + Arrow(trial_from_threads_, threads_) +
                        " raised throughput " + Pct(gain) + ", kept",
                    threads_, prefetch_);
    }
    NoGain& ng = no_gain_[threads_];
    const uint64_t backoff =
        std::min(kMaxNoGainBackoffWindows, kNoGainBackoffWindows << std::min(ng.failures, 8));
    ng.failures++;
    ng.wait_share = trial_baseline_wait_;
    ng.retry_at_window = usable_windows_ + backoff;
    return Decide(seen + ": threads " + Arrow(trial_from_threads_, threads_) +
                      " changed throughput " + Pct(gain) + " (need >" + Pct(need) + "), reverted " +
                      Arrow(threads_, trial_from_threads_) + "; not retrying " +
                      std::to_string(threads_) + " for " + std::to_string(backoff) + " windows",
                  trial_from_threads_, prefetch_);
  }

  if (starved_streak_ >= kAddWindows) {
    if (threads_ >= limits_.max_threads) {
      return Decide(seen + ": threads at max " + std::to_string(limits_.max_threads), threads_,
                    prefetch_);
    }
    if (s.process_cpu_util >= 0 && s.process_cpu_util >= limits_.cores - kCpuSaturatedMarginCores) {
      return Decide(seen + ": process uses " + OneDecimal(s.process_cpu_util) + " of " +
                        std::to_string(limits_.cores) + " cores, not adding threads",
                    threads_, prefetch_);
    }
    const std::string block = NoGainBlock(threads_ + 1, wait);
    if (!block.empty()) return Decide(seen + ": " + block, threads_, prefetch_);
    trial_ = true;
    trial_from_threads_ = threads_;
    trial_baseline_per_s_ = Mean(rates_per_s_);
    trial_baseline_wait_ = Mean(waits_);
    trial_windows_ = 0;
    return Decide(seen + ": threads " + Arrow(threads_, threads_ + 1) + " (trial)", threads_ + 1,
                  prefetch_);
  }

  if (bursty_streak_ >= kPrefetchWindows) {
    const std::string why =
        seen + (queue_full ? " and " + std::to_string(s.ready_batches) + " batches ready" : "");
    if (prefetch_ >= limits_.max_prefetch) {
      return Decide(why + ": prefetch at max " + std::to_string(limits_.max_prefetch) +
                        (ram_caps_prefetch_ ? " (RAM cap)" : ""),
                    threads_, prefetch_);
    }
    const int next = std::min(2 * prefetch_, limits_.max_prefetch);
    return Decide(why + ": prefetch " + Arrow(prefetch_, next), threads_, next);
  }

  if (idle_streak_ >= kShedWindows) {
    return Decide(seen + ": threads " + Arrow(threads_, threads_ - 1), threads_ - 1, prefetch_);
  }

  return Decide(seen + ": steady", threads_, prefetch_);
}

}  // namespace saturate::feed
