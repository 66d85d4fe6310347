// What `saturate watch` and `saturate doctor` share around the job runner
// (src/job/runner.h, which starts, samples and stops the command as it does
// for every tune trial): their flags, the Prometheus endpoint, the live view,
// the start and end lines, and the hang watch of a multi-rank job
// (src/ranks/rank_scanner.h: a "HANG:" line and RUN/hang.json while it runs).
// Thread-safety: RunWatched from one thread at a time (one job per process).
#ifndef SATURATE_TOOLS_SATURATE_WATCH_SESSION_H_
#define SATURATE_TOOLS_SATURATE_WATCH_SESSION_H_

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "saturate/base/status.h"

namespace saturate::cli {

struct WatchFlags {
  std::string interval = "100ms";
  std::string out;
  bool no_record = false;
  int pid = 0;
  std::string prometheus;
  std::string duration;
  bool no_gpu = false;
  std::string nvml_library;
  bool no_auto = false;
  bool quiet = false;
  bool no_view = false;
  std::string refresh = "500ms";
  std::string hang_timeout = "60s";  // "0": no hang watch
  std::vector<std::string> labels;   // --label key=value
  std::vector<std::string> command;
};

// The flags both commands take: --interval, --prometheus, --label, --no-gpu,
// --nvml-library, --no-auto and --hang-timeout.
void AddCommonWatchFlags(CLI::App* cmd, WatchFlags* flags);

// --no-auto (watch, doctor, tune): no Python auto-instrumentation bootstrap.
void AddNoAutoFlag(CLI::App* cmd, bool* no_auto);

// "runs/<prefix>-YYYYmmdd-HHMMSS".
std::string DefaultRunDir(const std::string& prefix);

// Runs the watch until the command or pid ends (or the duration passes, or
// SIGINT/SIGTERM without a command). The command's environment gets
// SATURATE_RUN_DIR (absolute) so that the trace library records its spans
// into the same run directory, and the auto-instrumentation bootstrap
// (RUN_DIR/.auto) unless --no-auto. `*exit_code` is the command's exit code.
// When the run directory gets rank folders (a torchrun/Slurm job), no rank
// stepping for --hang-timeout prints "saturate <name>: HANG: ..." (unless
// --quiet) and writes RUN/hang.json (RUN/node-<host>/hang.json when saturate
// runs as a rank itself; then only local rank 0 watches).
// Messages are prefixed "saturate <name>:".
Status RunWatched(const std::string& name, WatchFlags flags, int* exit_code, std::string* run_dir);

}  // namespace saturate::cli

#endif  // SATURATE_TOOLS_SATURATE_WATCH_SESSION_H_
