// Synthetic runs for the doctor's tests: a machine, a training loop of steps
// made of named phases, metric samples as functions of time and loader
// counters, so each rule's scenario reads as a few lines. Times are seconds
// on the run axis.
//
// Thread-safety: not thread-safe; use from the test's thread.
#ifndef SATURATE_DOCTOR_TESTING_RUN_BUILDER_H_
#define SATURATE_DOCTOR_TESTING_RUN_BUILDER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "doctor/run.h"

namespace saturate::doctor::testing {

constexpr uint64_t kGiB = uint64_t(1) << 30;

// One phase of a step. `inner` (optional) is a span nested at the phase's
// start, e.g. the loader's data_wait inside a user "data" phase.
struct Phase {
  std::string name;
  double seconds = 0;
  SpanKind kind = SpanKind::kUser;
  std::string inner_name = {};
  double inner_seconds = 0;
  SpanKind inner_kind = SpanKind::kLoader;
};

class RunBuilder {
 public:
  static constexpr int kPid = 100;    // the training process
  static constexpr int64_t kTid = 1;  // its step thread

  RunBuilder();  // 16 CPUs, 64 GiB, no GPU, 100 ms samples, training starts at 1 s

  RunBuilder& Cpus(int cpus);
  RunBuilder& Gpus(int count, uint64_t memory_total_bytes = 80 * kGiB);
  RunBuilder& ExitCode(int code);
  // Appends `count` steps on the training thread, each `phases` back to back
  // plus `gap_seconds` in no phase ("other"), with a step mark at each end.
  RunBuilder& Steps(int count, const std::vector<Phase>& phases, double gap_seconds = 0);
  // Appends `seconds` with no span and no step mark.
  RunBuilder& Pause(double seconds);
  // A span anywhere (another thread, another process).
  RunBuilder& AddSpan(std::string name, SpanKind kind, int pid, int64_t tid, double start_s,
                      double seconds);
  // The training process's last loader counters record, taken at the end.
  RunBuilder& Loader(std::map<std::string, int64_t> values);
  RunBuilder& Counter(const std::string& name, std::map<std::string, int64_t> values);
  // Samples every 100 ms from 0 to the end. Each starts from defaults (CPU
  // 30% busy, 0.5% iowait, half the memory available, the tree at 4 cores
  // and 4 GiB; GPUs 95% busy, a quarter of their memory used) and `fill`
  // changes what the scenario needs.
  RunBuilder& Samples(std::function<void(double t_s, SamplePoint& sample)> fill);

  // Whether `t_s` falls inside a span named `name` on the training thread.
  bool InPhase(double t_s, std::string_view name) const;
  double now_s() const { return now_s_; }

  Run Build() const;  // ends 1 s after the last step

 private:
  Run run_;
  double now_s_ = 1.0;
  std::function<void(double, SamplePoint&)> fill_;
  std::map<std::string, int64_t> loader_;
  bool has_loader_ = false;
};

}  // namespace saturate::doctor::testing

#endif  // SATURATE_DOCTOR_TESTING_RUN_BUILDER_H_
