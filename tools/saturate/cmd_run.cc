// saturate run-instrumented [-o RUN] -- CMD ARGS...: for jobs launched some
// other way (an sbatch script, a site launcher): records the command's Python
// steps into a run directory with the auto-instrumentation bootstrap, then
// becomes the command (execvp), so its exit status, output and signals are
// exactly the command's. No sampling: `saturate watch` or `saturate doctor`
// around the launcher add that. It writes a meta.json without samples, so
// `saturate report RUN` can place the spans.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/file.h"
#include "cli.h"
#include "job/bootstrap.h"
#include "watch_session.h"

namespace saturate::cli {
namespace {

struct RunFlags {
  std::string out;
  std::vector<std::string> command;
};

// What `saturate report` needs to place the spans (docs/watch.md's meta.json,
// without samples or an end: the run ends at its last event). The pid is the
// command's, which execvp keeps. A run directory that has one already (an
// outer saturate watch or doctor) keeps it.
Status WriteMetaIfMissing(const std::string& dir, const std::vector<std::string>& command) {
  const std::string path = dir + "/meta.json";
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) return Status::OK();
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  const auto since_epoch = [](auto clock_now) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(clock_now.time_since_epoch())
        .count();
  };
  const nlohmann::json meta = {
      {"saturate_version", "0.1.0"},
      {"recorder", "saturate run-instrumented"},
      {"host", host},
      {"cpus", sysconf(_SC_NPROCESSORS_ONLN)},
      {"command", command},
      {"pid", getpid()},
      {"auto_instrument", true},
      {"start_unix_ns", since_epoch(std::chrono::system_clock::now())},
      {"start_monotonic_ns", since_epoch(std::chrono::steady_clock::now())},
      {"schema", "docs/watch.md"}};
  return WriteFileAtomic(path, meta.dump(2) + "\n");
}

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
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IOError("cannot create " + dir + ": " + ec.message());
  const std::string absolute = std::filesystem::absolute(dir, ec).lexically_normal().string();
  if (ec) return Status::IOError("cannot resolve " + dir + ": " + ec.message());
  SATURATE_RETURN_IF_ERROR(WriteMetaIfMissing(absolute, f.command));
  SATURATE_ASSIGN_OR_RETURN(job::EnvVars env, job::WriteBootstrap(absolute + "/.auto"));
  env.emplace_back("SATURATE_RUN_DIR", absolute);
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
