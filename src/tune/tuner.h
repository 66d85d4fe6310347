// Tuner: the trials of `saturate tune` and `saturate tune feed`, and the
// tune.json they produce (schema: docs/tune.md).
//
//   CommandTuner  runs the training command once per configuration a
//                 Strategy (search.h) proposes, each trial a run directory
//                 ROOT/trial-NNN recorded by the job runner (job/runner.h) and
//                 measured by measure.h; then verifies the best against the
//                 start by A/B re-runs (verify.h) and recommends the argv, the
//                 environment and gradient accumulation.
//   RunFeedSweep  the input pipeline alone: a threads sweep, the knee
//                 (knee.h), then prefetch depths at the knee; the caller
//                 measures each point.
// Nothing here prints: each finished trial goes to an `on_trial` callback
// (the CLI prints its line and a progress bar from it).
//
// Ownership: a CommandTuner owns its Strategy. Thread-safety: one thread.
#ifndef SATURATE_TUNE_TUNER_H_
#define SATURATE_TUNE_TUNER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "saturate/base/status.h"
#include "tune/search.h"
#include "tune/space.h"

namespace saturate::tune {

// A trial just finished: its tune.json row, how many trials ended so far and
// about how many there will be in all.
struct TrialProgress {
  const nlohmann::json& row;
  size_t done = 0;
  size_t estimated = 0;
};
using TrialCallback = std::function<void(const TrialProgress&)>;

struct CommandTuneOptions {
  std::vector<std::string> command;  // argv with {NAME} placeholders
  Space space;
  Config start;  // the starting configuration (the A of the A/B)
  SearchOptions::Mode mode = SearchOptions::Mode::kAuto;
  double noise_pct = 3;         // gains below this are noise
  size_t max_trials = 0;        // 0: no limit
  std::string metric;           // a regex whose first group is the throughput; "": step marks
  double warmup_pct = 20;       // share of steps (or metric readings) skipped
  int verify_rounds = 2;        // A/B rounds; 0: none
  int64_t effective_batch = 0;  // 0: the start's batch

  // Each trial's budget: time, and steps when > 0; both scale with a
  // screening trial's budget fraction.
  int64_t trial_ns = 60'000'000'000;
  int64_t trial_steps = 0;
  int64_t grace_ns = 5'000'000'000;

  int64_t interval_ns = 100'000'000;
  bool gpus = true;
  std::string nvml_library;
  bool auto_instrument = true;  // one bootstrap in ROOT/.auto for all trials
  std::string root;             // created if missing
};

struct CommandTuneResult {
  nlohmann::json report;   // tune.json
  bool cancelled = false;  // Ctrl-C reached a trial; the search stopped there
  bool found = false;      // a best configuration (and a recommendation) exists
};

class CommandTuner {
 public:
  // Checks the options, creates the root folder and the search strategy.
  static Result<std::unique_ptr<CommandTuner>> Create(CommandTuneOptions options);
  ~CommandTuner();

  std::string strategy_name() const;  // "grid", "adaptive"
  size_t configurations() const;
  size_t estimated_trials() const;  // the search's, without the verify rounds

  // Runs the search, then the verification. Call once.
  Result<CommandTuneResult> Run(const TrialCallback& on_trial);

  class Impl;

 private:
  explicit CommandTuner(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// ---- tune feed ----

struct FeedPoint {
  double samples_per_s = 0;
  double cpu_cores = 0;
  double wait_pct = 0;  // of the measured time, the consumer waiting
  uint64_t batches = 0;
};

struct FeedSweepOptions {
  std::string dataset;  // recorded in tune.json
  std::string root;     // recorded in tune.json
  uint64_t batch_size = 64;
  double trial_seconds = 3;
  uint64_t warmup_batches = 2;
  std::vector<int> threads;   // ascending, >= 1
  std::vector<int> prefetch;  // the first is used in the threads sweep
};

// Measures the loader at (threads, prefetch).
using FeedMeasure = std::function<Result<FeedPoint>(int threads, int prefetch)>;

// The threads sweep at the first prefetch, the knee, then the other prefetch
// depths at the knee; the shallowest depth within 3% of the best wins.
// Returns tune.json.
Result<nlohmann::json> RunFeedSweep(const FeedSweepOptions& options, const FeedMeasure& measure,
                                    const TrialCallback& on_trial);

// Writes ROOT/tune.json and, when `html`, ROOT/report.html (each atomically).
Status WriteTuneFiles(const std::string& root, const nlohmann::json& result, bool html);

}  // namespace saturate::tune

#endif  // SATURATE_TUNE_TUNER_H_
