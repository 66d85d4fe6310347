// The Python auto-instrumentation bootstrap (docs/auto.md): the two files of
// python/saturate/_bootstrap, compiled into the library at build time
// (embed_bootstrap.cmake), written into a folder at run time, and the
// environment that makes any Python process the job starts import them:
// PYTHONPATH=<folder> in front of the parent's, SATURATE_AUTO=1. The
// recorder reads SATURATE_RUN_DIR for where to write.
//
// It is injected into every command (bash scripts, srun, torchrun and
// accelerate start Python under the hood), unless the user turns it off.
//
// Thread-safety: BootstrapFiles() and BootstrapEnv() are pure; WriteBootstrap
// writes files (one writer per folder at a time).
#ifndef SATURATE_JOB_BOOTSTRAP_H_
#define SATURATE_JOB_BOOTSTRAP_H_

#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "saturate/base/status.h"

namespace saturate::job {

// ("NAME", "value") pairs set in a child's environment.
using EnvVars = std::vector<std::pair<std::string, std::string>>;

struct BootstrapFile {
  std::string_view name;  // "sitecustomize.py"
  std::string_view content;
};

// The embedded files (defined in the generated bootstrap_files.cc).
std::span<const BootstrapFile> BootstrapFiles();

// The variables that load the bootstrap from `dir` (absolute): PYTHONPATH
// with `dir` first, then `parent_pythonpath` when it is set and not empty;
// SATURATE_AUTO=1.
EnvVars BootstrapEnv(const std::string& dir, const char* parent_pythonpath);

// Creates `dir` (and parents), writes the files into it (each atomically) and
// returns BootstrapEnv(absolute dir, this process's PYTHONPATH).
Result<EnvVars> WriteBootstrap(const std::string& dir);

// A run directory for a command that records itself and is not sampled
// (`saturate run-instrumented`): creates `run_dir`, writes a meta.json
// without samples unless one is there already (an outer watch's), so that
// `saturate report` can place the spans (the run ends at its last event),
// writes the bootstrap into RUN/.auto and returns the command's variables:
// the bootstrap's and SATURATE_RUN_DIR (absolute). `pid` is the command's.
Result<EnvVars> PrepareInstrumentedRun(const std::string& run_dir,
                                       const std::vector<std::string>& command, int pid);

}  // namespace saturate::job

#endif  // SATURATE_JOB_BOOTSTRAP_H_
