// Job: the one way saturate runs and watches a training command, shared by
// `saturate watch`, `saturate doctor` and every `saturate tune` trial:
//   1. the command starts as an argv (never a shell) with SATURATE_RUN_DIR
//      (absolute), the Python auto-instrumentation bootstrap (bootstrap.h,
//      unless turned off) and any extra variables in its environment;
//      signals saturate receives are forwarded to it (watch/child.h);
//   2. a Watcher samples its process tree, the host and the GPUs into the
//      run directory (meta.json records whether auto-instrumentation was on);
//   3. its output is inherited, or captured through a pipe into
//      RUN_DIR/output.log, an observer and a tail of lines;
//   4. it ends by itself, or at a budget: a time deadline or a number of step
//      marks (steps.h, polled every 250 ms), with SIGTERM then, after a
//      grace, SIGKILL;
//   5. the run directory is finished with its exit code.
// Without a command, a Job follows a running pid (or only the host) until the
// pid ends, the time budget passes or SIGINT/SIGTERM arrive.
// Nothing here prints: callers draw views and lines from on_tick and the
// result.
//
// Ownership: a Job owns the child process, the Watcher and the output pipe;
// destroying a Job before Run() returns kills and reaps the child.
// Thread-safety: Start() and Run() from one thread; watcher()'s const methods
// from any thread while the job runs (a Prometheus endpoint). One Job with a
// command at a time per process (signal forwarding is process-wide).
#ifndef SATURATE_JOB_RUNNER_H_
#define SATURATE_JOB_RUNNER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/rank_env.h"
#include "job/bootstrap.h"
#include "saturate/base/status.h"

namespace saturate::watch {
class Watcher;
}

namespace saturate::job {

struct JobOptions {
  std::vector<std::string> argv;  // the command; empty: follow `pid`, or only the host
  int pid = 0;                    // with no command: the process to follow (0: none)
  std::string run_dir;            // "": record nothing (and no bootstrap)
  // Set when saturate itself runs as one rank of a job (`srun saturate watch`,
  // base::RankFromEnv()): the command's bootstrap and output go to
  // RUN_DIR/rank-<r>/, and only local rank 0 samples, into RUN_DIR/node-<host>/,
  // so a node is sampled once however many ranks it runs (docs/ranks.md).
  std::optional<base::RankEnv> rank;

  // The auto-instrumentation bootstrap, written into `bootstrap_dir`
  // ("": RUN_DIR/.auto). Off without a run directory.
  bool auto_instrument = true;
  std::string bootstrap_dir;
  EnvVars env;  // more variables for the command (they win over the ones above)

  // Sampling.
  int64_t interval_ns = 100'000'000;
  bool gpus = true;          // false: do not load NVML
  std::string nvml_library;  // "": libnvidia-ml.so.1, then .so
  // Labels on the exported series (watch::WatchOptions::job_labels).
  std::vector<std::pair<std::string, std::string>> job_labels;
  std::optional<std::vector<int>> job_gpus;

  // Output: inherited, or (capture_output, needs run_dir) stdout and stderr
  // together into RUN_DIR/output.log, `on_output` and the result's tail.
  bool capture_output = false;
  std::function<void(std::string_view chunk)> on_output;
  size_t tail_lines = 12;

  // Budget: 0 is none. The step budget counts the step marks in the run
  // directory (steps.h); the time budget also ends a pid or host watch.
  int64_t time_budget_ns = 0;
  int64_t step_budget = 0;
  int64_t grace_ns = 5'000'000'000;  // SIGTERM, then SIGKILL after this
};

struct JobResult {
  // The command's exit code as a shell reports it (128 + signal when a
  // signal ended it); with no command 0, or 130 when a signal stopped the watch.
  int exit_code = 0;
  std::string ended_by;    // "exit", "time", "steps" or "signal" (watch without a command)
  bool cancelled = false;  // the user wants out: Ctrl-C reached the command, or SIGINT/SIGTERM
  double wall_s = 0;
  std::vector<std::string> output_tail;  // the last lines of captured output
};

class Job {
 public:
  // Writes the bootstrap, starts the command (its start comes first, so the
  // Watcher follows its tree from the first sample), then the Watcher.
  // A command that does not exist is NotFound ("NAME: command not found").
  static Result<std::unique_ptr<Job>> Start(JobOptions options);
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  // Runs until the job ends, then stops the Watcher and finishes the run
  // directory. `on_tick`, if given, is called from this thread about every
  // 20 ms meanwhile (e.g. to redraw a view). Call once.
  Result<JobResult> Run(const std::function<void()>& on_tick = nullptr);

  const watch::Watcher& watcher() const;
  int pid() const;  // the command's, or the followed pid (0: none)
  // Whether the bootstrap was injected (a command, a run directory, not turned off).
  bool auto_instrumented() const;

  class Impl;

 private:
  explicit Job(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Start() then Run().
Result<JobResult> RunJob(JobOptions options, const std::function<void()>& on_tick = nullptr);

}  // namespace saturate::job

#endif  // SATURATE_JOB_RUNNER_H_
