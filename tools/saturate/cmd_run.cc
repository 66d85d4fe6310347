// saturate run-instrumented [-o RUN] -- CMD ARGS...: for jobs launched some
// other way (an sbatch script, a site launcher): records the command's Python
// steps into a run directory with the auto-instrumentation bootstrap, then
// becomes the command (execvp), so its exit status, output and signals are
// exactly the command's. No sampling: `saturate watch` or `saturate doctor`
// around the launcher add that. It writes a meta.json without samples, so
// `saturate report RUN` can place the spans (src/job/bootstrap.h).
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "cli.h"
#include "job/bootstrap.h"
#include "watch_session.h"

namespace saturate::cli {
namespace {

struct RunFlags {
  std::string out;
  std::vector<std::string> command;
};

// Returns only on failure.
Status RunInstrumented(const RunFlags& f) {
  if (f.command.empty() || f.command[0].empty()) {
    return Status::InvalidArgument(
        "give the command after --, e.g. saturate run-instrumented -- python train.py");
  }
  std::string dir = f.out;
  if (dir.empty()) {
    const char* env = std::getenv("SATURATE_RUN_DIR");
    dir = env != nullptr && *env != '\0' ? env : DefaultRunDir("run");
  }
  SATURATE_ASSIGN_OR_RETURN(job::EnvVars env,
                            job::PrepareInstrumentedRun(dir, f.command, getpid()));
  for (const auto& [name, value] : env) {
    if (setenv(name.c_str(), value.c_str(), 1) != 0) return Status::FromErrno("setenv", errno);
  }
  std::vector<char*> argv;
  for (const std::string& a : f.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::fflush(nullptr);
  execvp(argv[0], argv.data());
  const int err = errno;
  if (err == ENOENT) return Status::NotFound(f.command[0] + ": command not found");
  return Status::FromErrno("cannot run " + f.command[0], err);
}

}  // namespace

void RegisterRun(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<RunFlags>();
  CLI::App* cmd = app.add_subcommand(
      "run-instrumented",
      "Run a command with the Python auto-instrumentation (docs/auto.md) recording into a run\n"
      "directory, for jobs you launch yourself (inside an sbatch script, under your own\n"
      "launcher). saturate replaces itself with the command: the exit status, output and\n"
      "signals are the command's. The run directory is -o, else $SATURATE_RUN_DIR, else\n"
      "runs/run-DATE-TIME; open it with saturate report or trace.\n"
      "  saturate run-instrumented -o runs/job-$SLURM_JOB_ID -- python train.py\n"
      "  srun saturate run-instrumented -- torchrun --nproc-per-node 8 train.py");
  cmd->add_option("-o,--out", f->out,
                  "Run directory (default: $SATURATE_RUN_DIR, else runs/run-DATE-TIME)");
  cmd->add_option("command", f->command, "The command to run, after --");
  cmd->callback(
      [exit_code, f] { *exit_code = ReportError("run-instrumented", RunInstrumented(*f)); });
}

}  // namespace saturate::cli
