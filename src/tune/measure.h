// Measure: what one tune trial achieved, read from its run directory (a
// doctor::Run) and, with --metric, from numbers the command printed.
//
// Throughput is the steady state: the first `warmup_fraction` of the trial's
// steps (at least `warmup_steps`) are skipped, because start-up (imports,
// compilation, the loader filling its queue, cudnn autotuning) says nothing
// about the speed of the configuration. Step throughput comes from the step
// marks of the training process (the one with the most); when its loader
// recorded a batch size it is samples/s, else steps/s. The noise is the
// relative standard error of the rate over a few equal stretches of steps.
//
// Thread-safety: plain values and pure functions.
#ifndef SATURATE_TUNE_MEASURE_H_
#define SATURATE_TUNE_MEASURE_H_

#include <cstdint>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "doctor/run.h"
#include "saturate/base/status.h"

namespace saturate::tune {

struct MeasureOptions {
  double warmup_fraction = 0.2;  // of the steps (or metric values) to skip
  int64_t warmup_steps = 1;      // skip at least this many steps
};

struct Measurement {
  std::optional<double> throughput;
  std::string unit;                   // "samples/s", "steps/s" or "metric"
  double noise_rel = 0;               // relative standard error of `throughput`
  int64_t steps = 0;                  // step marks of the training process (all of them)
  int64_t measured_steps = 0;         // after the warm-up
  std::optional<int64_t> batch_size;  // from the training process's loader counters
  std::optional<double> device_busy_pct;
  std::optional<uint64_t> gpu_memory_peak_bytes;  // max over samples, the fullest GPU
  std::optional<uint64_t> rss_peak_bytes;         // the process tree
  std::optional<double> cpu_cores;                // the process tree, mean
  double duration_s = 0;
};

// Everything from the run; throughput from its step marks.
Measurement MeasureRun(const doctor::Run& run, const MeasureOptions& options = {});

// A steady-state value from the numbers a --metric regex captured, in
// output order: the median of those after the warm-up (the last value alone
// when there are fewer than 3). nullopt when there are none.
struct MetricValue {
  double value = 0;
  double noise_rel = 0;
};
std::optional<MetricValue> SteadyMetric(const std::vector<double>& values,
                                        const MeasureOptions& options = {});

// Collects the first capture group of `regex` (the whole match when it has
// none) on each line of `text` that matches and parses as a number.
class MetricScanner {
 public:
  static Result<MetricScanner> Create(const std::string& pattern);
  // Feeds output; lines are scanned once complete.
  void Add(std::string_view chunk);
  void Finish();  // scans a last, unterminated line
  const std::vector<double>& values() const { return values_; }

 private:
  explicit MetricScanner(std::regex re) : re_(std::move(re)) {}
  void ScanLine(const std::string& line);
  std::regex re_;
  std::string partial_;
  std::vector<double> values_;
};

}  // namespace saturate::tune

#endif  // SATURATE_TUNE_MEASURE_H_
