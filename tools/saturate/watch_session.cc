#include "watch_session.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <optional>
#include <thread>

#include "cli.h"
#include "saturate/watch/watcher.h"
#include "watch/child.h"
#include "watch/metrics_server.h"

namespace saturate::cli {
namespace {

std::atomic<int> g_stop_signal{0};
void OnStopSignal(int sig) { g_stop_signal.store(sig); }

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
  o.run_dir = f.no_record ? "" : f.out;
  o.pid = f.pid;
  o.command = f.command;
  o.gpus = !f.no_gpu;
  o.nvml_library = f.nvml_library;
  return o;
}

}  // namespace

std::string DefaultRunDir(const std::string& prefix) {
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::localtime(&now));
  return "runs/" + prefix + "-" + stamp;
}

void AddCommonWatchFlags(CLI::App* cmd, WatchFlags* f) {
  cmd->add_option("--interval", f->interval, "Sampling interval, e.g. 100ms, 1s")
      ->capture_default_str();
  cmd->add_option("--prometheus", f->prometheus,
                  "Serve metrics at http://[ADDR:]PORT/metrics (ADDR defaults to 127.0.0.1)");
  cmd->add_flag("--no-gpu", f->no_gpu, "Do not load NVML");
  cmd->add_option("--nvml-library", f->nvml_library,
                  "Path of libnvidia-ml (default: libnvidia-ml.so.1, then .so)");
}

Status RunWatched(const std::string& name, WatchFlags f, int* exit_code, std::string* run_dir) {
  if (f.out.empty() && !f.no_record) f.out = DefaultRunDir(name);
  SATURATE_ASSIGN_OR_RETURN(watch::WatchOptions options, MakeOptions(f));
  *run_dir = options.run_dir;
  SATURATE_ASSIGN_OR_RETURN(int64_t refresh_ns, ParseDurationNs(f.refresh));
  int64_t duration_ns = 0;
  if (!f.duration.empty()) {
    SATURATE_ASSIGN_OR_RETURN(duration_ns, ParseDurationNs(f.duration));
  }

  // The command starts first so that the watcher follows its process tree
  // from the first sample.
  std::optional<watch::Child> child;
  if (!f.command.empty()) {
    watch::ChildOptions child_options;
    if (!options.run_dir.empty()) {
      child_options.env = {{"SATURATE_RUN_DIR", std::filesystem::absolute(options.run_dir)}};
    }
    SATURATE_ASSIGN_OR_RETURN(watch::Child c, watch::Child::Spawn(f.command, child_options));
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
    std::fprintf(stderr, "saturate %s: %s; every %s", name.c_str(), watcher->gpu_status().c_str(),
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
    std::fprintf(
        stderr, "saturate %s: %llu samples in %.1f s, sampler CPU %.2f%% of one core%s%s\n",
        name.c_str(), static_cast<unsigned long long>(s.samples), double(s.elapsed_ns) / 1e9,
        s.elapsed_ns > 0 ? 100.0 * double(s.sampler_cpu_ns) / double(s.elapsed_ns) : 0.0,
        options.run_dir.empty() ? "" : "; run directory ", options.run_dir.c_str());
  }
  return Status::OK();
}

}  // namespace saturate::cli
