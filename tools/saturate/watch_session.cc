#include "watch_session.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "cli.h"
#include "job/runner.h"
#include "ranks/rank_scanner.h"
#include "saturate/watch/watcher.h"
#include "watch/job_labels.h"
#include "watch/metrics_server.h"
#include "watch/snapshot.h"

namespace saturate::cli {
namespace {

// The live view on a terminal (redrawn in place), or one plain line per
// refresh otherwise; on stderr, so the command's stdout stays clean. A
// banner (the latest HANG alert) stays under the redrawn screen.
class View {
 public:
  View(bool quiet) : quiet_(quiet), screen_(isatty(STDERR_FILENO) != 0) {}
  void Draw(const watch::Watcher& w) {
    if (quiet_ || w.stats().samples == 0) return;
    if (screen_) {
      std::fprintf(stderr, "\033[H\033[2J%s%s", w.Render(/*screen=*/true).c_str(), banner_.c_str());
    } else {
      std::fprintf(stderr, "%s\n", w.Render(/*screen=*/false).c_str());
    }
    std::fflush(stderr);
  }
  void SetBanner(std::string text) { banner_ = std::move(text); }

 private:
  bool quiet_, screen_;
  std::string banner_;
};

// --hang-timeout: a duration, or "0"/"off" for no hang watch.
Result<int64_t> ParseHangTimeoutNs(const std::string& text) {
  if (text == "0" || text == "0s" || text == "off") return int64_t{0};
  Result<int64_t> ns = ParseDurationNs(text);
  if (!ns.ok()) return ns.status().WithContext("--hang-timeout");
  return ns;
}

// The hang watch of a multi-rank job recorded into the run directory: not
// without one, not when turned off, and, when saturate runs as a rank itself,
// only in each node's local rank 0 (hang.json in its node folder).
std::unique_ptr<ranks::HangWatch> MakeHangWatch(const job::JobOptions& o, int64_t hang_ns) {
  if (o.run_dir.empty() || hang_ns <= 0) return nullptr;
  ranks::HangWatchOptions h;
  h.run_dir = o.run_dir;
  h.stall_ns = hang_ns;
  if (o.rank) {
    if (o.rank->local_rank != 0) return nullptr;
    h.host = o.rank->host;
    h.hang_json = o.run_dir + "/node-" + o.rank->host + "/hang.json";
  }
  return std::make_unique<ranks::HangWatch>(h);
}

// "saturate watch: HANG: no rank has stepped for 62 s; rank 1 ..." and its
// stack lines; "saturate watch: HANG over: steps resumed after 75 s ...".
void ReportHang(const std::string& name, const ranks::HangEvent& e, bool quiet, View* view) {
  const bool stalled = e.kind == ranks::HangEvent::Kind::kStalled;
  const std::string line =
      "saturate " + name + (stalled ? ": HANG: " : ": HANG over: ") + e.message + "\n";
  view->SetBanner(stalled ? "\n" + line : "");
  if (quiet) return;
  std::fputs(line.c_str(), stderr);
  if (!e.saved.ok()) {
    std::fprintf(stderr, "saturate %s: %s\n", name.c_str(), e.saved.ToString().c_str());
  }
  std::fflush(stderr);
}

Result<job::JobOptions> MakeOptions(const WatchFlags& f) {
  job::JobOptions o;
  SATURATE_ASSIGN_OR_RETURN(o.interval_ns, ParseDurationNs(f.interval));
  if (f.pid != 0 && !f.command.empty()) {
    return Status::InvalidArgument("give either --pid or a command after --, not both");
  }
  if (f.pid < 0) return Status::InvalidArgument("--pid must be positive");
  if (f.pid > 0 && kill(f.pid, 0) != 0 && errno == ESRCH) {
    return Status::NotFound("--pid " + std::to_string(f.pid) + ": no such process");
  }
  o.run_dir = f.no_record ? "" : f.out;
  if (!f.command.empty()) o.rank = base::RankFromEnv();  // inside `srun`/`mpirun`
  o.pid = f.pid;
  o.argv = f.command;
  o.gpus = !f.no_gpu;
  o.nvml_library = f.nvml_library;
  o.auto_instrument = !f.no_auto;
  SATURATE_ASSIGN_OR_RETURN(
      watch::JobLabels job,
      watch::JobLabelsWithFlags([](const char* n) { return std::getenv(n); }, f.labels));
  o.job_labels = std::move(job.labels);
  o.job_gpus = std::move(job.gpus);
  // --duration ends a watch of a pid or of the host; a command ends by itself.
  if (!f.duration.empty() && f.command.empty()) {
    SATURATE_ASSIGN_OR_RETURN(o.time_budget_ns, ParseDurationNs(f.duration));
  } else if (!f.duration.empty()) {
    SATURATE_RETURN_IF_ERROR(ParseDurationNs(f.duration).status());
  }
  return o;
}

}  // namespace

std::string DefaultRunDir(const std::string& prefix) {
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::localtime(&now));
  return "runs/" + prefix + "-" + stamp;
}

void AddNoAutoFlag(CLI::App* cmd, bool* no_auto) {
  cmd->add_flag("--no-auto", *no_auto,
                "Do not inject the Python auto-instrumentation bootstrap (docs/auto.md)");
}

void AddCommonWatchFlags(CLI::App* cmd, WatchFlags* f) {
  cmd->add_option("--interval", f->interval, "Sampling interval, e.g. 100ms, 1s")
      ->capture_default_str();
  cmd->add_option("--prometheus", f->prometheus,
                  "Serve metrics at http://[ADDR:]PORT/metrics (ADDR defaults to 127.0.0.1)");
  cmd->add_option("--label", f->labels,
                  "key=value label on every exported series (repeatable); job_id and user "
                  "come from Slurm, namespace and pod from Kubernetes (POD_NAME, "
                  "POD_NAMESPACE), run_id from torchrun (docs/fleet.md)")
      ->allow_extra_args(false);  // one label per --label, so a command may follow
  cmd->add_flag("--no-gpu", f->no_gpu, "Do not load NVML");
  cmd->add_option("--nvml-library", f->nvml_library,
                  "Path of libnvidia-ml (default: libnvidia-ml.so.1, then .so)");
  AddNoAutoFlag(cmd, &f->no_auto);
  cmd->add_option("--hang-timeout", f->hang_timeout,
                  "A multi-rank job whose ranks all stop stepping this long gets a HANG line "
                  "naming the hung or dead rank, with its Python stack, and RUN/hang.json "
                  "(0: off)")
      ->capture_default_str();
}

// The series of the metrics page read from the job's spans files
// (saturate_loader_*, saturate_remote_*, saturate_job_precision_bits): the
// files followed once a second on the watch loop's thread, the page fragment
// handed to the endpoint's thread.
class SpansMetrics {
 public:
  // `run_dir` "": none (no page, no scans).
  SpansMetrics(const std::string& run_dir, watch::Labels host_labels)
      : host_labels_(std::move(host_labels)) {
    if (!run_dir.empty()) {
      scanner_.emplace(run_dir, /*max_read_bytes=*/16 << 20, /*root_as_rank0=*/true);
    }
  }

  void Poll(std::chrono::steady_clock::time_point now) {
    if (!scanner_ || now < next_scan_) return;
    next_scan_ = now + std::chrono::seconds(1);
    std::map<int, std::map<std::string, int64_t>> by_rank;
    std::map<int, int64_t> bits_by_rank;
    for (ranks::RankProgress& r : scanner_->Scan()) {
      if (!r.loader_counters.empty()) by_rank[r.rank] = std::move(r.loader_counters);
      if (r.precision_bits > 0) bits_by_rank[r.rank] = r.precision_bits;
    }
    std::string page = watch::LoaderPrometheus(host_labels_, by_rank) +
                       watch::JobPrecisionPrometheus(host_labels_, bits_by_rank);
    std::lock_guard<std::mutex> lock(mu_);
    page_ = std::move(page);
  }

  std::string page() const {
    std::lock_guard<std::mutex> lock(mu_);
    return page_;
  }

 private:
  watch::Labels host_labels_;
  std::optional<ranks::RankScanner> scanner_;
  std::chrono::steady_clock::time_point next_scan_;
  mutable std::mutex mu_;
  std::string page_;
};

Status RunWatched(const std::string& name, WatchFlags f, int* exit_code, std::string* run_dir) {
  if (f.out.empty() && !f.no_record) f.out = DefaultRunDir(name);
  SATURATE_ASSIGN_OR_RETURN(job::JobOptions options, MakeOptions(f));
  *run_dir = options.run_dir;
  SATURATE_ASSIGN_OR_RETURN(int64_t refresh_ns, ParseDurationNs(f.refresh));
  SATURATE_ASSIGN_OR_RETURN(int64_t hang_ns, ParseHangTimeoutNs(f.hang_timeout));

  SATURATE_ASSIGN_OR_RETURN(std::unique_ptr<job::Job> job, job::Job::Start(options));
  const watch::Watcher& watcher = job->watcher();
  std::unique_ptr<ranks::HangWatch> hang = MakeHangWatch(options, hang_ns);
  // The job's progress as the hang watch last saw it, for the endpoint's thread.
  std::atomic<int64_t> steps{0};
  std::atomic<bool> stalled{false};
  std::unique_ptr<watch::MetricsServer> server;
  SpansMetrics from_spans(f.prometheus.empty() ? "" : options.run_dir, watcher.HostLabels());
  if (!f.prometheus.empty()) {
    SATURATE_ASSIGN_OR_RETURN(watch::ListenAddress address,
                              watch::ParseListenAddress(f.prometheus));
    SATURATE_ASSIGN_OR_RETURN(
        server, watch::MetricsServer::Start(address, [&watcher, &steps, &stalled, &from_spans] {
          std::string page = watcher.PrometheusText();
          if (const int64_t n = steps.load(); n > 0) {
            page += watch::JobProgressPrometheus(watcher.HostLabels(), n, stalled.load());
          }
          return page + from_spans.page();
        }));
  }
  if (!f.quiet) {
    std::fprintf(stderr, "saturate %s: %s; every %s", name.c_str(), watcher.gpu_status().c_str(),
                 f.interval.c_str());
    if (!options.run_dir.empty())
      std::fprintf(stderr, "; recording to %s", options.run_dir.c_str());
    if (options.rank) {
      std::fprintf(stderr, "; rank %d of %d (%s) on %s%s", options.rank->rank,
                   options.rank->world_size, options.rank->launcher.c_str(),
                   options.rank->host.c_str(),
                   options.rank->local_rank == 0 ? ", sampling this node" : "");
    }
    if (server) std::fprintf(stderr, "; metrics at %s", server->url().c_str());
    std::fprintf(stderr, "\n");
  }

  View view(f.quiet || f.no_view);
  auto next_draw = std::chrono::steady_clock::now();
  SATURATE_ASSIGN_OR_RETURN(job::JobResult result, job->Run([&] {
    const auto now = std::chrono::steady_clock::now();
    if (hang) {  // cheap between its scans, once a second
      const int64_t now_ns =
          std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
      for (const ranks::HangEvent& e : hang->Poll(now_ns)) {
        ReportHang(name, e, f.quiet, &view);
      }
      steps = hang->steps();
      stalled = hang->stalled();
    }
    from_spans.Poll(now);
    if (now >= next_draw) {
      view.Draw(watcher);
      next_draw += std::chrono::nanoseconds(refresh_ns);
    }
  }));
  if (hang) {
    for (const ranks::HangEvent& e : hang->Finish()) ReportHang(name, e, f.quiet, &view);
  }
  server.reset();
  *exit_code = result.exit_code;
  if (!f.quiet) {
    const watch::WatchStats s = watcher.stats();
    std::fprintf(
        stderr, "saturate %s: %llu samples in %.1f s, sampler CPU %.2f%% of one core%s%s\n",
        name.c_str(), static_cast<unsigned long long>(s.samples), double(s.elapsed_ns) / 1e9,
        s.elapsed_ns > 0 ? 100.0 * double(s.sampler_cpu_ns) / double(s.elapsed_ns) : 0.0,
        options.run_dir.empty() ? "" : "; run directory ", options.run_dir.c_str());
  }
  return Status::OK();
}

}  // namespace saturate::cli
