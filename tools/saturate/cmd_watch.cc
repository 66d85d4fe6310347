// saturate watch [--interval 100ms] [--out RUN_DIR] [--pid PID | -- CMD ARGS...]:
// samples GPUs and host while a command (or a process, or nothing but the
// host) runs, records a run directory, shows a live view and optionally
// serves Prometheus metrics.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <thread>

#include "cli.h"
#include "saturate/watch/watcher.h"
#include "watch/child.h"
#include "watch/metrics_server.h"

namespace saturate::cli {
namespace {

struct WatchFlags {
  std::string interval = "100ms";
  std::string out;
  bool no_record = false;
  int pid = 0;
  std::string prometheus;
  std::string duration;
  bool no_gpu = false;
  std::string nvml_library;
  bool quiet = false;
  bool no_view = false;
  std::string refresh = "500ms";
  std::vector<std::string> command;
};

std::atomic<int> g_stop_signal{0};
void OnStopSignal(int sig) { g_stop_signal.store(sig); }

std::string DefaultRunDir() {
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::localtime(&now));
  return std::string("runs/watch-") + stamp;
}

// Where the watch ends: the command's exit, the process's, a signal or the duration.
class Ending {
 public:
  Ending(std::optional<watch::Child>* child, int pid, int64_t duration_ns)
      : child_(child), pid_(pid), deadline_(duration_ns > 0 ? Now() + duration_ns : 0) {}

  // The exit code to return once the watch should end, else nullopt.
  Result<std::optional<int>> Check() {
    if (*child_) return (*child_)->Poll();
    if (g_stop_signal.load() != 0) return std::optional<int>(kExitCancelled);
    if (pid_ > 0 && kill(pid_, 0) != 0 && errno == ESRCH) return std::optional<int>(kExitOk);
    if (deadline_ > 0 && Now() >= deadline_) return std::optional<int>(kExitOk);
    return std::optional<int>();
  }

 private:
  static int64_t Now() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  std::optional<watch::Child>* child_;
  int pid_;
  int64_t deadline_;
};

// The live view on a terminal (redrawn in place), or one plain line per
// refresh otherwise; on stderr, so the command's stdout stays clean.
class View {
 public:
  View(bool quiet) : quiet_(quiet), screen_(isatty(STDERR_FILENO) != 0) {}
  void Draw(const watch::Watcher& w) {
    if (quiet_ || w.stats().samples == 0) return;
    if (screen_) {
      std::fprintf(stderr, "\033[H\033[2J%s", w.Render(/*screen=*/true).c_str());
    } else {
      std::fprintf(stderr, "%s\n", w.Render(/*screen=*/false).c_str());
    }
    std::fflush(stderr);
  }

 private:
  bool quiet_, screen_;
};

Result<watch::WatchOptions> MakeOptions(const WatchFlags& f) {
  watch::WatchOptions o;
  SATURATE_ASSIGN_OR_RETURN(o.interval_ns, ParseDurationNs(f.interval));
  if (f.pid != 0 && !f.command.empty()) {
    return Status::InvalidArgument("give either --pid or a command after --, not both");
  }
  if (f.pid < 0) return Status::InvalidArgument("--pid must be positive");
  if (f.pid > 0 && kill(f.pid, 0) != 0 && errno == ESRCH) {
    return Status::NotFound("--pid " + std::to_string(f.pid) + ": no such process");
  }
  o.run_dir = f.no_record ? "" : (f.out.empty() ? DefaultRunDir() : f.out);
  o.pid = f.pid;
  o.command = f.command;
  o.gpus = !f.no_gpu;
  o.nvml_library = f.nvml_library;
  return o;
}

Status RunWatchLoop(const WatchFlags& f, int* exit_code) {
  SATURATE_ASSIGN_OR_RETURN(watch::WatchOptions options, MakeOptions(f));
  SATURATE_ASSIGN_OR_RETURN(int64_t refresh_ns, ParseDurationNs(f.refresh));
  int64_t duration_ns = 0;
  if (!f.duration.empty()) {
    SATURATE_ASSIGN_OR_RETURN(duration_ns, ParseDurationNs(f.duration));
  }

  // The command starts first so that the watcher follows its process tree
  // from the first sample.
  std::optional<watch::Child> child;
  if (!f.command.empty()) {
    SATURATE_ASSIGN_OR_RETURN(watch::Child c, watch::Child::Spawn(f.command));
    options.pid = c.pid();
    child.emplace(std::move(c));
  } else {
    signal(SIGINT, OnStopSignal);  // stop watching, record, exit 130
    signal(SIGTERM, OnStopSignal);
  }
  SATURATE_ASSIGN_OR_RETURN(auto watcher, watch::Watcher::Start(options));
  std::unique_ptr<watch::MetricsServer> server;
  if (!f.prometheus.empty()) {
    SATURATE_ASSIGN_OR_RETURN(watch::ListenAddress address,
                              watch::ParseListenAddress(f.prometheus));
    SATURATE_ASSIGN_OR_RETURN(server, watch::MetricsServer::Start(
                                          address, [&w = *watcher] { return w.PrometheusText(); }));
  }
  if (!f.quiet) {
    std::fprintf(stderr, "saturate watch: %s; every %s", watcher->gpu_status().c_str(),
                 f.interval.c_str());
    if (!options.run_dir.empty())
      std::fprintf(stderr, "; recording to %s", options.run_dir.c_str());
    if (server) std::fprintf(stderr, "; metrics at %s", server->url().c_str());
    std::fprintf(stderr, "\n");
  }

  View view(f.quiet || f.no_view);
  Ending ending(&child, options.pid, duration_ns);
  auto next_draw = std::chrono::steady_clock::now();
  while (true) {
    SATURATE_ASSIGN_OR_RETURN(std::optional<int> code, ending.Check());
    if (code) {
      *exit_code = *code;
      break;
    }
    if (std::chrono::steady_clock::now() >= next_draw) {
      view.Draw(*watcher);
      next_draw += std::chrono::nanoseconds(refresh_ns);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  server.reset();
  SATURATE_RETURN_IF_ERROR(watcher->Stop(child ? std::optional<int>(*exit_code) : std::nullopt));
  if (!f.quiet) {
    const watch::WatchStats s = watcher->stats();
    std::fprintf(stderr,
                 "saturate watch: %llu samples in %.1f s, sampler CPU %.2f%% of one core%s%s\n",
                 static_cast<unsigned long long>(s.samples), double(s.elapsed_ns) / 1e9,
                 s.elapsed_ns > 0 ? 100.0 * double(s.sampler_cpu_ns) / double(s.elapsed_ns) : 0.0,
                 options.run_dir.empty() ? "" : "; run directory ", options.run_dir.c_str());
  }
  return Status::OK();
}

}  // namespace

void RegisterWatch(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<WatchFlags>();
  CLI::App* cmd = app.add_subcommand(
      "watch",
      "Sample GPUs (NVML) and host (/proc) while a command runs: live view, run directory, "
      "Prometheus.\n"
      "  saturate watch -- python train.py --lr 0.1\n"
      "  saturate watch --pid 4242 --prometheus 9400\n"
      "With a command, exits with the command's exit code.");
  cmd->add_option("--interval", f->interval, "Sampling interval, e.g. 100ms, 1s")
      ->capture_default_str();
  cmd->add_option("-o,--out", f->out, "Run directory (default: runs/watch-DATE-TIME)");
  cmd->add_flag("--no-record", f->no_record, "Keep no run directory");
  cmd->add_option("--pid", f->pid, "Watch this running process and its children");
  cmd->add_option("--prometheus", f->prometheus,
                  "Serve metrics at http://[ADDR:]PORT/metrics (ADDR defaults to 127.0.0.1)");
  cmd->add_option("--duration", f->duration, "Stop after this long (without a command or pid)");
  cmd->add_option("--refresh", f->refresh, "How often the view is redrawn")->capture_default_str();
  cmd->add_flag("--no-gpu", f->no_gpu, "Do not load NVML");
  cmd->add_option("--nvml-library", f->nvml_library,
                  "Path of libnvidia-ml (default: libnvidia-ml.so.1, then .so)");
  cmd->add_flag("--no-view", f->no_view,
                "No live view (keeps a command's own output readable); start and end lines only");
  cmd->add_flag("-q,--quiet", f->quiet, "No view, no start and end lines");
  cmd->add_option("command", f->command, "The command to run and watch, after --");
  cmd->callback([exit_code, f] {
    Status s = RunWatchLoop(*f, exit_code);
    if (!s.ok()) *exit_code = ReportError("watch", s);
  });
}

}  // namespace saturate::cli
