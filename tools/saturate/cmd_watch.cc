// saturate watch [--interval 100ms] [--out RUN_DIR] [--pid PID | -- CMD ARGS...]:
// samples GPUs and host while a command (or a process, or nothing but the
// host) runs, records a run directory, shows a live view and optionally
// serves Prometheus metrics.
#include "cli.h"
#include "watch_session.h"

namespace saturate::cli {

void RegisterWatch(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<WatchFlags>();
  CLI::App* cmd = app.add_subcommand(
      "watch",
      "Sample GPUs (NVML) and host (/proc) while a command runs: live view, run directory, "
      "Prometheus.\n"
      "  saturate watch -- python train.py --lr 0.1\n"
      "  saturate watch --pid 4242 --prometheus 9400\n"
      "With a command, exits with the command's exit code.");
  AddCommonWatchFlags(cmd, f.get());
  cmd->add_option("-o,--out", f->out, "Run directory (default: runs/watch-DATE-TIME)");
  cmd->add_flag("--no-record", f->no_record, "Keep no run directory");
  cmd->add_option("--pid", f->pid, "Watch this running process and its children");
  cmd->add_option("--duration", f->duration, "Stop after this long (without a command or pid)");
  cmd->add_option("--refresh", f->refresh, "How often the view is redrawn")->capture_default_str();
  cmd->add_flag("--no-view", f->no_view,
                "No live view (keeps a command's own output readable); start and end lines only");
  cmd->add_flag("-q,--quiet", f->quiet, "No view, no start and end lines");
  cmd->add_option("command", f->command, "The command to run and watch, after --");
  cmd->callback([exit_code, f] {
    std::string run_dir;
    Status s = RunWatched("watch", *f, exit_code, &run_dir);
    if (!s.ok()) *exit_code = ReportError("watch", s);
  });
}

}  // namespace saturate::cli
