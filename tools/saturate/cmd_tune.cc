// saturate tune --param NAME=VALUES... -- CMD ARGS...: short measured trials
// of a training command over loader threads, prefetch, batch size and
// precision; a recommendation verified by A/B re-runs.
// saturate tune feed DATASET: the same for the input pipeline alone,
// in-process, with the knee of throughput against threads.
//
// Each trial is a run directory (runs/tune-DATE/trial-NNN/) that `saturate
// report` can open. The decisions are in src/tune (pure); this file runs the
// trials and writes tune.json and report.html (temp file, fsync, rename).
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "base/file.h"
#include "cli.h"
#include "doctor/run.h"
#include "feed_run.h"
#include "saturate/feed/loader.h"
#include "saturate/watch/watcher.h"
#include "tune/knee.h"
#include "tune/measure.h"
#include "tune/report.h"
#include "tune/search.h"
#include "tune/space.h"
#include "tune/verify.h"
#include "watch/child.h"
#include "watch_session.h"

namespace saturate::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr size_t kOutputTailLines = 12;

// ---- flags --------------------------------------------------------------------------

struct TuneFlags {
  std::vector<std::string> params;
  std::vector<std::string> baseline;
  std::string trial_seconds = "60s";
  int64_t trial_steps = 0;
  std::string metric;
  std::string strategy = "auto";
  double noise_pct = 3;
  int verify_rounds = 2;
  size_t max_trials = 0;
  double warmup_pct = 20;
  int64_t effective_batch = 0;
  std::string grace = "5s";
  std::string out;
  std::string interval = "100ms";
  bool no_gpu = false;
  std::string nvml_library;
  bool no_html = false;
  std::vector<std::string> command;
};

struct Budget {
  int64_t trial_ns = 0;
  int64_t trial_steps = 0;
  int64_t grace_ns = 0;
  int64_t interval_ns = 0;
};

// ---- one trial of the command ----------------------------------------------------------

// What a trial produced, before it becomes a tune.json row.
struct TrialRun {
  int exit_code = 0;
  std::string ended_by;  // "exit", "time" or "steps" (the budget ended it)
  bool cancelled = false;
  std::vector<std::string> output_tail;
  std::vector<double> metric_values;
  double wall_s = 0;
};

// Step marks recorded so far in the trial's spans files (for --trial-steps).
int64_t CountStepMarks(const std::string& dir) {
  int64_t n = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename();
    if (name.rfind("spans-", 0) != 0) continue;
    std::ifstream in(entry.path());
    std::string line;
    while (std::getline(in, line)) {
      // The trace library writes compact JSON; tolerate a space after ':'.
      n += line.find("\"ph\":\"step\"") != std::string::npos ||
           line.find("\"ph\": \"step\"") != std::string::npos;
    }
  }
  return n;
}

// The command's combined output: to output.log, the metric scanner and a
// tail kept for failure reports.
class OutputSink {
 public:
  OutputSink(const std::string& log_path, tune::MetricScanner* scanner)
      : log_(log_path, std::ios::binary), scanner_(scanner) {}
  void Add(std::string_view chunk) {
    log_.write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    if (scanner_ != nullptr) scanner_->Add(chunk);
    tail_.append(chunk);
    if (tail_.size() > 16384) tail_.erase(0, tail_.size() - 16384);
  }
  std::vector<std::string> TailLines() {
    if (scanner_ != nullptr) scanner_->Finish();
    log_.flush();
    std::vector<std::string> lines;
    size_t start = 0;
    while (start < tail_.size()) {
      size_t nl = tail_.find('\n', start);
      if (nl == std::string::npos) nl = tail_.size();
      if (nl > start) lines.push_back(tail_.substr(start, nl - start));
      start = nl + 1;
    }
    if (lines.size() > kOutputTailLines) {
      lines.erase(lines.begin(), lines.end() - static_cast<long>(kOutputTailLines));
    }
    return lines;
  }

 private:
  std::ofstream log_;
  tune::MetricScanner* scanner_;
  std::string tail_;
};

// Reads what is in the pipe now; false at end of file.
bool Drain(int fd, OutputSink* sink) {
  char buf[8192];
  while (true) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
      sink->Add(std::string_view(buf, static_cast<size_t>(n)));
      continue;
    }
    if (n == 0) return false;
    return errno == EAGAIN || errno == EINTR;
  }
}

// Runs `argv` under a Watcher into `dir` until it exits or the budget
// (scaled by `fraction`) ends it: SIGTERM, then SIGKILL after the grace.
Result<TrialRun> RunCommandTrial(const TuneFlags& f, const Budget& budget,
                                 const std::vector<std::string>& argv,
                                 const std::vector<std::pair<std::string, std::string>>& env,
                                 double fraction, const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IOError("cannot create " + dir + ": " + ec.message());
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return Status::FromErrno("pipe", errno);
  watch::ChildOptions child_options;
  child_options.output_fd = pipe_fds[1];
  child_options.env = env;
  child_options.env.emplace_back("SATURATE_RUN_DIR", fs::absolute(dir));
  // Python buffers stdout into a pipe; a metric printed before SIGTERM would be lost.
  child_options.env.emplace_back("PYTHONUNBUFFERED", "1");
  auto child = watch::Child::Spawn(argv, child_options);
  close(pipe_fds[1]);
  if (!child.ok()) {
    close(pipe_fds[0]);
    return child.status();
  }
  fcntl(pipe_fds[0], F_SETFL, fcntl(pipe_fds[0], F_GETFL) | O_NONBLOCK);
  watch::WatchOptions wo;
  wo.interval_ns = budget.interval_ns;
  wo.run_dir = dir;
  wo.pid = child->pid();
  wo.command = argv;
  wo.gpus = !f.no_gpu;
  wo.nvml_library = f.nvml_library;
  auto watcher = watch::Watcher::Start(wo);
  if (!watcher.ok()) {
    close(pipe_fds[0]);
    return watcher.status();
  }

  std::optional<tune::MetricScanner> scanner;
  if (!f.metric.empty()) scanner.emplace(*tune::MetricScanner::Create(f.metric));
  OutputSink sink(dir + "/output.log", scanner ? &*scanner : nullptr);
  TrialRun run;
  const auto start = std::chrono::steady_clock::now();
  const auto deadline =
      start + std::chrono::nanoseconds(static_cast<int64_t>(double(budget.trial_ns) * fraction));
  const int64_t steps_budget =
      budget.trial_steps > 0
          ? std::max<int64_t>(
                2, static_cast<int64_t>(std::ceil(double(budget.trial_steps) * fraction)))
          : 0;
  auto next_step_count = start;
  bool open = true;
  while (true) {
    if (open) open = Drain(pipe_fds[0], &sink);
    SATURATE_ASSIGN_OR_RETURN(std::optional<int> code, child->Poll());
    if (code) {
      run.exit_code = *code;
      run.ended_by = "exit";
      break;
    }
    const auto now = std::chrono::steady_clock::now();
    std::string over;
    if (now >= deadline) over = "time";
    if (over.empty() && steps_budget > 0 && now >= next_step_count) {
      next_step_count = now + std::chrono::milliseconds(250);
      if (CountStepMarks(dir) >= steps_budget) over = "steps";
    }
    if (!over.empty()) {
      SATURATE_ASSIGN_OR_RETURN(run.exit_code, child->Terminate(budget.grace_ns));
      run.ended_by = over;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // What the command wrote before it ended; a grandchild holding the pipe
  // open must not keep us here.
  for (int i = 0; i < 10 && open; ++i) {
    open = Drain(pipe_fds[0], &sink);
    if (open) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  close(pipe_fds[0]);
  run.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  SATURATE_RETURN_IF_ERROR((*watcher)->Stop(run.exit_code));
  run.output_tail = sink.TailLines();
  if (scanner) run.metric_values = scanner->values();
  // Ctrl-C reached the command (it shares our terminal): the user wants out.
  run.cancelled = run.ended_by == "exit" && run.exit_code == 128 + SIGINT;
  return run;
}

// ---- the tune loop ---------------------------------------------------------------------

json ConfigJson(const tune::Config& c) {
  json j = json::object();
  for (const auto& [k, v] : c) j[k] = v;
  return j;
}

std::vector<std::string> Substituted(const std::vector<std::string>& argv, const tune::Config& c) {
  std::vector<std::string> out;
  for (const std::string& a : argv) out.push_back(tune::Substitute(a, c));
  return out;
}

class Tuner {
 public:
  Tuner(TuneFlags f, tune::Space space, tune::Config start, Budget budget, std::string root)
      : f_(std::move(f)),
        space_(std::move(space)),
        start_(std::move(start)),
        budget_(budget),
        root_(std::move(root)) {}

  // Runs one trial and returns its tune.json row; `*outcome` for the search.
  Result<json> Trial(const tune::Config& config, double fraction, const std::string& stage,
                     tune::Outcome* outcome) {
    char name[32];
    std::snprintf(name, sizeof(name), "trial-%03d", ++trial_id_);
    const std::string dir = root_ + "/" + name;
    SATURATE_ASSIGN_OR_RETURN(TrialRun run,
                              RunCommandTrial(f_, budget_, Substituted(f_.command, config),
                                              tune::EnvFor(config), fraction, dir));
    if (run.cancelled) cancelled_ = true;
    json row = {{"id", trial_id_},
                {"dir", dir},
                {"stage", stage},
                {"config", ConfigJson(config)},
                {"budget_fraction", fraction},
                {"exit_code", run.exit_code},
                {"ended_by", run.ended_by},
                {"wall_s", run.wall_s}};
    const bool feasible = run.ended_by != "exit" || run.exit_code == 0;
    *outcome = tune::Outcome{feasible, std::nullopt, 0};
    tune::MeasureOptions mo;
    mo.warmup_fraction = f_.warmup_pct / 100.0;
    auto loaded = doctor::LoadRun(dir);
    if (loaded.ok()) {
      const tune::Measurement m = tune::MeasureRun(*loaded, mo);
      row["steps"] = m.steps;
      if (m.device_busy_pct) row["device_busy_pct"] = *m.device_busy_pct;
      if (m.gpu_memory_peak_bytes) row["gpu_memory_peak_bytes"] = *m.gpu_memory_peak_bytes;
      if (m.rss_peak_bytes) row["rss_peak_bytes"] = *m.rss_peak_bytes;
      if (m.cpu_cores) row["cpu_cores"] = *m.cpu_cores;
      std::optional<double> throughput = m.throughput;
      std::string unit = m.unit;
      double noise = m.noise_rel;
      // Steps of different batch sizes are not comparable; samples are.
      const tune::Param* batch = space_.FindRole(tune::Role::kBatch);
      if (throughput && unit == "steps/s" && batch != nullptr) {
        if (std::optional<double> b = tune::NumberOf(config, batch->name)) {
          *throughput *= *b;
          unit = "samples/s";
        }
      }
      if (!f_.metric.empty()) {
        const std::optional<tune::MetricValue> v = tune::SteadyMetric(run.metric_values, mo);
        throughput = v ? std::optional<double>(v->value) : std::nullopt;
        noise = v ? v->noise_rel : 0;
        unit = "metric";
        row["metric_values"] = run.metric_values.size();
      }
      if (throughput && feasible) {
        outcome->throughput = throughput;
        outcome->noise_rel = noise;
        row["throughput"] = *throughput;
        row["noise_pct"] = 100.0 * noise;
      }
      row["unit"] = unit;
      if (unit_.empty() && throughput) unit_ = unit;
    } else {
      row["note"] = loaded.status().ToString();
    }
    row["status"] = !feasible ? "failed" : outcome->throughput ? "ok" : "unmeasured";
    if (!feasible || !outcome->throughput) row["output_tail"] = run.output_tail;
    if (feasible && !outcome->throughput) {
      row["note"] = f_.metric.empty()
                        ? "nothing measured: no step marks after the warm-up (saturate.step()), "
                          "and no --metric"
                        : "nothing measured: --metric matched no line of the output";
    }
    return row;
  }

  bool cancelled() const { return cancelled_; }
  const std::string& unit() const { return unit_; }

 private:
  TuneFlags f_;
  tune::Space space_;
  tune::Config start_;
  Budget budget_;
  std::string root_;
  int trial_id_ = 0;
  bool cancelled_ = false;
  std::string unit_;
};

std::string Fmt(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

// The line printed on stderr as each trial ends.
std::string TrialLine(const json& row, size_t estimated) {
  std::string line = "trial " + std::to_string(row["id"].get<int>()) + "/~" +
                     std::to_string(estimated) + " " + row["stage"].get<std::string>() + ": ";
  for (const auto& [k, v] : row["config"].items()) line += k + "=" + v.get<std::string>() + " ";
  line += "-> ";
  if (row.contains("throughput")) {
    line += Fmt("%.4g ", row["throughput"].get<double>()) + row.value("unit", std::string());
  } else {
    line += row["status"].get<std::string>();
    if (row["status"] == "failed")
      line += " (exit " + std::to_string(row["exit_code"].get<int>()) + ")";
  }
  return line;
}

// "--trial-seconds 45" means seconds; "45s", "2min" work too.
Result<int64_t> ParseSeconds(const char* flag, const std::string& text) {
  const bool bare = !text.empty() && text.find_first_not_of("0123456789.") == std::string::npos;
  Result<int64_t> ns = ParseDurationNs(bare ? text + "s" : text);
  if (!ns.ok()) return ns.status().WithContext(flag);
  return ns;
}

Result<Budget> MakeBudget(const TuneFlags& f) {
  Budget b;
  SATURATE_ASSIGN_OR_RETURN(b.trial_ns, ParseSeconds("--trial-seconds", f.trial_seconds));
  SATURATE_ASSIGN_OR_RETURN(b.grace_ns, ParseSeconds("--grace", f.grace));
  SATURATE_ASSIGN_OR_RETURN(b.interval_ns, ParseSeconds("--interval", f.interval));
  if (f.trial_steps < 0) return Status::InvalidArgument("--trial-steps must be positive");
  b.trial_steps = f.trial_steps;
  return b;
}

Result<tune::SearchOptions> MakeSearchOptions(const TuneFlags& f) {
  tune::SearchOptions o;
  if (f.strategy == "auto") {
    o.mode = tune::SearchOptions::Mode::kAuto;
  } else if (f.strategy == "grid") {
    o.mode = tune::SearchOptions::Mode::kGrid;
  } else if (f.strategy == "adaptive") {
    o.mode = tune::SearchOptions::Mode::kAdaptive;
  } else {
    return Status::InvalidArgument("--strategy '" + f.strategy + "': use auto, grid or adaptive");
  }
  if (!(f.noise_pct >= 0 && f.noise_pct < 100)) {
    return Status::InvalidArgument("--noise-pct must be in [0, 100)");
  }
  o.noise_rel = f.noise_pct / 100.0;
  o.max_trials = f.max_trials;
  return o;
}

// The recommendation: the argv and environment to use, and gradient
// accumulation when the micro-batch changed.
json Recommendation(const TuneFlags& f, const tune::Space& space, const tune::Config& start,
                    const tune::Config& best) {
  json r = {{"config", ConfigJson(best)}, {"argv", Substituted(f.command, best)}};
  json env = json::object();
  for (const auto& [k, v] : tune::EnvFor(best)) env[k] = v;
  r["env"] = env;
  if (const tune::Param* batch = space.FindRole(tune::Role::kBatch)) {
    const std::optional<double> micro = tune::NumberOf(best, batch->name);
    const std::optional<double> was = tune::NumberOf(start, batch->name);
    const double effective = f.effective_batch > 0 ? double(f.effective_batch) : was.value_or(0);
    if (micro && effective > 0) {
      const int accumulate = tune::GradientAccumulation(effective, *micro);
      r["effective_batch"] = effective;
      r["gradient_accumulation"] = accumulate;
      if (accumulate > 1) {
        r["note"] = Fmt("accumulate gradients over %.0f micro-batches", accumulate) + " of " +
                    Fmt("%.0f", *micro) + " to keep the effective batch of " +
                    Fmt("%.0f", effective);
      } else if (*micro > effective) {
        r["note"] = "the batch grows from " + Fmt("%.0f", effective) + " to " +
                    Fmt("%.0f", *micro) +
                    ": scale the learning rate (or warm it up) to keep convergence";
      }
    }
  }
  return r;
}

Result<json> Verify(Tuner& tuner, int rounds, const tune::Config& start, const tune::Config& best,
                    json* trials, ProgressBar* bar, size_t* done, size_t total) {
  std::vector<double> a, b;
  for (int r = 0; r < rounds && !tuner.cancelled(); ++r) {
    for (int side = 0; side < 2; ++side) {
      tune::Outcome o;
      const tune::Config& c = side == 0 ? start : best;
      SATURATE_ASSIGN_OR_RETURN(
          json row, tuner.Trial(c, 1.0, side == 0 ? "verify start" : "verify best", &o));
      row["verify_round"] = r + 1;
      trials->push_back(row);
      (side == 0 ? a : b).push_back(o.throughput.value_or(0));
      bar->Finish();
      std::fprintf(stderr, "saturate tune: %s\n", TrialLine(row, total).c_str());
      bar->Update(++*done, total);
    }
  }
  const tune::VerifyResult v = tune::CompareAB(a, b);
  return json{{"rounds", v.rounds},
              {"start", a},
              {"best", b},
              {"ratio", v.ratio},
              {"ratio_min", v.ratio_min},
              {"ratio_max", v.ratio_max},
              {"noise_pct", 100 * v.noise_rel},
              {"reliable_gain", v.reliable_gain},
              {"verdict", v.verdict}};
}

Status WriteOutputs(const std::string& root, const json& result, bool html) {
  SATURATE_RETURN_IF_ERROR(WriteFileAtomic(root + "/tune.json", result.dump(2) + "\n"));
  if (html)
    SATURATE_RETURN_IF_ERROR(WriteFileAtomic(root + "/report.html", tune::RenderHtml(result)));
  std::fputs(tune::RenderTable(result, isatty(STDOUT_FILENO) != 0).c_str(), stdout);
  std::printf("results: %s/tune.json%s%s\n", root.c_str(), html ? "   report: " : "",
              html ? (root + "/report.html").c_str() : "");
  return Status::OK();
}

Result<int> RunTune(const TuneFlags& f) {
  SATURATE_ASSIGN_OR_RETURN(tune::Space space, tune::ParseSpace(f.params));
  SATURATE_ASSIGN_OR_RETURN(tune::Config overrides,
                            tune::ParseConfig(space, f.baseline, "--baseline"));
  const tune::Config start = tune::FirstConfig(space, overrides);
  SATURATE_ASSIGN_OR_RETURN(Budget budget, MakeBudget(f));
  SATURATE_ASSIGN_OR_RETURN(tune::SearchOptions options, MakeSearchOptions(f));
  if (!f.metric.empty()) SATURATE_RETURN_IF_ERROR(tune::MetricScanner::Create(f.metric).status());
  if (f.verify_rounds < 0) return Status::InvalidArgument("--verify-rounds must be 0 or more");
  if (!(f.warmup_pct >= 0 && f.warmup_pct < 100)) {
    return Status::InvalidArgument("--warmup-pct must be in [0, 100)");
  }
  const std::string root = f.out.empty() ? DefaultRunDir("tune") : f.out;
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return Status::IOError("cannot create " + root + ": " + ec.message());

  std::unique_ptr<tune::Strategy> strategy = tune::MakeStrategy(space, start, options);
  std::fprintf(stderr,
               "saturate tune: %zu configurations, %s search (about %zu trials of %.3g s), then %d "
               "verify rounds; trials in %s\n",
               space.Size(), strategy->name().c_str(), strategy->EstimatedTrials(),
               double(budget.trial_ns) / 1e9, f.verify_rounds, root.c_str());
  Tuner tuner(f, space, start, budget, root);
  json trials = json::array();
  ProgressBar bar("tune", "trials");
  size_t done = 0;
  auto total = [&] {
    return std::max(done + 1, strategy->EstimatedTrials() + 2 * size_t(f.verify_rounds));
  };
  while (std::optional<tune::Proposal> p = strategy->Next()) {
    tune::Outcome outcome;
    SATURATE_ASSIGN_OR_RETURN(json row,
                              tuner.Trial(p->config, p->budget_fraction, p->stage, &outcome));
    trials.push_back(row);
    strategy->Report(outcome);
    bar.Finish();
    std::fprintf(stderr, "saturate tune: %s\n", TrialLine(row, total()).c_str());
    bar.Update(++done, total());
    if (tuner.cancelled()) break;
  }

  json result = {{"mode", "command"},
                 {"command", f.command},
                 {"dir", root},
                 {"strategy", strategy->name()},
                 {"unit", tuner.unit()},
                 {"metric", f.metric.empty() ? json() : json(f.metric)},
                 {"budget",
                  {{"trial_seconds", double(budget.trial_ns) / 1e9},
                   {"trial_steps", budget.trial_steps},
                   {"warmup_pct", f.warmup_pct},
                   {"noise_pct", f.noise_pct}}},
                 {"start", ConfigJson(start)}};
  json params = json::array();
  for (const tune::Param& p : space.params) {
    params.push_back({{"name", p.name}, {"role", tune::RoleName(p.role)}, {"values", p.values}});
  }
  result["params"] = params;
  const std::optional<tune::Config> best = strategy->Best();
  if (best) {
    for (json& row : trials) {
      if (row["config"] == ConfigJson(*best) && row["budget_fraction"] == 1.0 &&
          row.contains("throughput") && !result.contains("best")) {
        row["best"] = true;
        result["best"] = {
            {"config", ConfigJson(*best)}, {"trial", row["id"]}, {"throughput", row["throughput"]}};
      }
    }
    result["recommendation"] = Recommendation(f, space, start, *best);
    if (*best == start) {
      result["verify"] = {{"rounds", 0},
                          {"reliable_gain", false},
                          {"verdict",
                           "no reliable gain: the starting configuration is the best within the "
                           "noise"}};
    } else if (f.verify_rounds > 0 && !tuner.cancelled()) {
      SATURATE_ASSIGN_OR_RETURN(result["verify"], Verify(tuner, f.verify_rounds, start, *best,
                                                         &trials, &bar, &done, total()));
    }
  }
  bar.Finish();
  result["trials"] = trials;
  SATURATE_RETURN_IF_ERROR(WriteOutputs(root, result, !f.no_html));
  if (tuner.cancelled()) return int(kExitCancelled);
  return best ? int(kExitOk) : int(kExitProblems);
}

// ---- tune feed ---------------------------------------------------------------------------

struct FeedTuneFlags {
  std::string dataset;
  std::string threads;  // a --param spec: "1,2,4" or "1..16:x2"
  std::string prefetch = "2,4,8";
  uint64_t batch = 64;
  std::string trial_seconds = "3s";
  uint64_t warmup = 2;
  std::vector<std::string> transforms;
  std::string out;
  bool no_html = false;
};

struct FeedPoint {
  double samples_per_s = 0;
  double cpu_cores = 0;
  double wait_pct = 0;  // of the measured time, the consumer waiting
  uint64_t batches = 0;
};

// The loader at `threads` x `prefetch` for `seconds`, epochs repeating; the
// first `warmup` batches are not timed.
Result<FeedPoint> FeedTrial(const FeedTuneFlags& f, int threads, int prefetch, double seconds) {
  feed::LoaderOptions o;
  o.dataset = f.dataset;
  o.batch_size = f.batch;
  o.threads = threads;
  o.prefetch = prefetch;
  SATURATE_ASSIGN_OR_RETURN(o.fields, ParseTransforms(f.transforms));
  SATURATE_ASSIGN_OR_RETURN(std::unique_ptr<feed::Loader> loader, feed::Loader::Open(o));
  SATURATE_ASSIGN_OR_RETURN(FeedMeasurement m,
                            MeasureFeed(*loader, {.warmup = f.warmup, .seconds = seconds}));
  return FeedPoint{m.samples_per_s(), m.cpu_cores, m.wait_pct(), m.timed_batches(f.warmup)};
}

Result<std::vector<int>> IntValues(const std::string& name, const std::string& spec) {
  SATURATE_ASSIGN_OR_RETURN(tune::Param p, tune::ParseParam(name + "=" + spec));
  std::vector<int> out;
  for (double v : p.numbers) {
    if (v < 1 || v != std::floor(v)) {
      return Status::InvalidArgument("--" + name + " '" + spec + "': use whole numbers >= 1");
    }
    out.push_back(int(v));
  }
  if (out.empty()) return Status::InvalidArgument("--" + name + " '" + spec + "': no values");
  return out;
}

std::string DefaultThreads() {
  const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
  std::string spec = "1";
  for (unsigned t = 2; t <= cpus; t *= 2) spec += "," + std::to_string(t);
  if ((cpus & (cpus - 1)) != 0) spec += "," + std::to_string(cpus);
  return spec;
}

Result<int> RunTuneFeed(const FeedTuneFlags& f) {
  SATURATE_ASSIGN_OR_RETURN(std::vector<int> threads,
                            IntValues("threads", f.threads.empty() ? DefaultThreads() : f.threads));
  SATURATE_ASSIGN_OR_RETURN(std::vector<int> prefetch, IntValues("prefetch", f.prefetch));
  SATURATE_ASSIGN_OR_RETURN(int64_t trial_ns, ParseSeconds("--trial-seconds", f.trial_seconds));
  const double seconds = double(trial_ns) / 1e9;
  const std::string root = f.out.empty() ? DefaultRunDir("tune-feed") : f.out;
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return Status::IOError("cannot create " + root + ": " + ec.message());
  const int first_prefetch = prefetch.front();
  const size_t total = threads.size() + prefetch.size() - 1;
  std::fprintf(stderr,
               "saturate tune feed: %zu thread counts at prefetch %d, then %zu prefetch depths; "
               "%s each\n",
               threads.size(), first_prefetch, prefetch.size() - 1, f.trial_seconds.c_str());
  ProgressBar bar("tune feed", "trials");
  json trials = json::array();
  int id = 0;
  auto trial = [&](int t, int p, const std::string& stage) -> Result<json> {
    SATURATE_ASSIGN_OR_RETURN(FeedPoint point, FeedTrial(f, t, p, seconds));
    json row = {{"id", ++id},
                {"stage", stage},
                {"config", {{"threads", std::to_string(t)}, {"prefetch", std::to_string(p)}}},
                {"budget_fraction", 1.0},
                {"status", "ok"},
                {"throughput", point.samples_per_s},
                {"unit", "samples/s"},
                {"cpu_cores", point.cpu_cores},
                {"wait_pct", point.wait_pct},
                {"batches", point.batches}};
    trials.push_back(row);
    bar.Finish();
    std::fprintf(stderr, "saturate tune feed: %s\n", TrialLine(row, total).c_str());
    bar.Update(size_t(id), total);
    return row;
  };
  std::vector<std::pair<double, double>> curve;
  for (int t : threads) {
    SATURATE_ASSIGN_OR_RETURN(json row, trial(t, first_prefetch, "threads"));
    curve.emplace_back(t, row["throughput"].get<double>());
  }
  const tune::Knee knee = tune::FindKnee(curve);
  const int knee_threads = threads[knee.knee];
  // Prefetch at the knee: the shallowest depth within the noise of the best.
  std::vector<std::pair<int, double>> depths = {{first_prefetch, curve[knee.knee].second}};
  for (size_t i = 1; i < prefetch.size(); ++i) {
    SATURATE_ASSIGN_OR_RETURN(json row, trial(knee_threads, prefetch[i], "prefetch"));
    depths.emplace_back(prefetch[i], row["throughput"].get<double>());
  }
  bar.Finish();
  double best_depth_rate = 0;
  for (const auto& [d, r] : depths) best_depth_rate = std::max(best_depth_rate, r);
  int best_prefetch = first_prefetch;
  double best_rate = 0;
  for (const auto& [d, r] : depths) {
    if (r >= best_depth_rate * 0.97 && (best_rate == 0 || d < best_prefetch)) {
      best_prefetch = d;
      best_rate = r;
    }
  }
  const tune::Config best = {{"threads", std::to_string(knee_threads)},
                             {"prefetch", std::to_string(best_prefetch)}};
  for (json& row : trials) {
    if (row["config"] == ConfigJson(best)) {
      row["best"] = true;
      break;
    }
  }
  json env = json::object();
  for (const auto& [k, v] : tune::EnvFor(best)) env[k] = v;
  json result = {
      {"mode", "feed"},
      {"dataset", f.dataset},
      {"dir", root},
      {"strategy", "threads sweep, then prefetch at the knee"},
      {"unit", "samples/s"},
      {"batch_size", f.batch},
      {"budget", {{"trial_seconds", seconds}, {"warmup_batches", f.warmup}}},
      {"params",
       {{{"name", "threads"}, {"role", "threads"}, {"values", threads}},
        {{"name", "prefetch"}, {"role", "prefetch"}, {"values", prefetch}}}},
      {"knee",
       {{"threads", knee_threads},
        {"best_threads", threads[knee.best]},
        {"shape", tune::ShapeName(knee.shape)},
        {"words", knee.words}}},
      {"best", {{"config", ConfigJson(best)}, {"throughput", best_rate}}},
      {"recommendation",
       {{"config", ConfigJson(best)},
        {"argv",
         {"--threads", std::to_string(knee_threads), "--prefetch", std::to_string(best_prefetch)}},
        {"env", env},
        {"note", "saturate.Loader(threads=" + std::to_string(knee_threads) +
                     ", prefetch=" + std::to_string(best_prefetch) + ")"}}},
      {"trials", trials}};
  SATURATE_RETURN_IF_ERROR(WriteOutputs(root, result, !f.no_html));
  return int(kExitOk);
}

// ---- registration -------------------------------------------------------------------------

void RegisterTuneFeed(CLI::App* tune_cmd, int* exit_code) {
  auto f = std::make_shared<FeedTuneFlags>();
  CLI::App* cmd = tune_cmd->add_subcommand(
      "feed",
      "Sweep the loader's threads (then prefetch at the knee) on a dataset, in-process, and show\n"
      "where more threads stop helping or start to hurt.\n"
      "  saturate tune feed data/train.sat --threads 1..16:x2 --prefetch 2,4,8 -t "
      "image:crop=random,size=224");
  cmd->add_option("DATASET", f->dataset, "Dataset directory")->required();
  cmd->add_option("--threads", f->threads,
                  "Thread counts: a list 1,2,4 or a range 1..32:x2 (default: powers of 2 up to "
                  "the CPUs)");
  cmd->add_option("--prefetch", f->prefetch, "Prefetch depths (the first is used in the sweep)")
      ->capture_default_str();
  cmd->add_option("-b,--batch", f->batch, "Batch size")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--trial-seconds", f->trial_seconds, "Time per trial, e.g. 3s")
      ->capture_default_str();
  cmd->add_option("--warmup", f->warmup, "Batches not timed at each trial's start")
      ->capture_default_str();
  cmd->add_option("-t,--transform", f->transforms,
                  "Per-field transform FIELD:OPTION,... as in bench feed (repeatable)");
  cmd->add_option("-o,--out", f->out, "Output directory (default: runs/tune-feed-DATE-TIME)");
  cmd->add_flag("--no-html", f->no_html, "Do not write report.html");
  cmd->callback([exit_code, f] {
    Result<int> r = RunTuneFeed(*f);
    *exit_code = r.ok() ? *r : ReportError("tune feed", r.status());
  });
}

}  // namespace

void RegisterTune(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<TuneFlags>();
  CLI::App* cmd = app.add_subcommand(
      "tune",
      "Find the loader threads, prefetch, batch size and precision that keep the GPU busy, by\n"
      "short measured trials of your command, then verify the gain (docs/tune.md).\n"
      "Values reach each trial as {NAME} in the arguments and as SATURATE_TUNE_NAME.\n"
      "  saturate tune --param threads=1,2,4,8 -- python train.py --workers {threads}\n"
      "  saturate tune --param amp=off,bf16 --param batch=32..1024:x2 --param threads=2..16:x2 \\\n"
      "      --trial-seconds 45 -- python train.py\n"
      "  saturate tune --param threads=1,2 --metric 'rate=([0-9.]+)' -- ./bench --threads "
      "{threads}\n"
      "  saturate tune feed data/train.sat\n"
      "Exit: 0 with a recommendation, 1 when no trial succeeded, 2 on bad flags, 130 when\n"
      "interrupted.");
  cmd->add_option("--param", f->params,
                  "NAME=v1,v2,... or NAME=a..b:xK or NAME=a..b:+K (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--baseline", f->baseline,
                  "NAME=VALUE: the starting configuration (default: each parameter's first "
                  "value); repeatable")
      ->allow_extra_args(false);
  cmd->add_option("--trial-seconds", f->trial_seconds, "Budget per trial, e.g. 45s, 2min")
      ->capture_default_str();
  cmd->add_option("--trial-steps", f->trial_steps,
                  "End a trial after this many steps (saturate.step() marks); the time budget "
                  "still applies");
  cmd->add_option("--metric", f->metric,
                  "Throughput from the command's output: a regex whose first group is the "
                  "number (higher is better); default: step marks");
  cmd->add_option("--strategy", f->strategy,
                  "auto (grid up to 12 configurations, else adaptive), grid or adaptive")
      ->capture_default_str();
  cmd->add_option("--noise-pct", f->noise_pct, "Gains below this % are noise")
      ->capture_default_str();
  cmd->add_option("--verify-rounds", f->verify_rounds,
                  "A/B rounds re-running the start and the recommendation (0: none)")
      ->capture_default_str();
  cmd->add_option("--max-trials", f->max_trials, "Stop the search after this many trials");
  cmd->add_option("--warmup-pct", f->warmup_pct,
                  "Share of each trial's steps (or metric readings) skipped as warm-up")
      ->capture_default_str();
  cmd->add_option("--effective-batch", f->effective_batch,
                  "The batch size training must keep (default: the start's batch); gradient "
                  "accumulation is suggested to keep it");
  cmd->add_option("--grace", f->grace, "Time between SIGTERM and SIGKILL at a trial's end")
      ->capture_default_str();
  cmd->add_option("-o,--out", f->out, "Output directory (default: runs/tune-DATE-TIME)");
  cmd->add_option("--interval", f->interval, "Sampling interval")->capture_default_str();
  cmd->add_flag("--no-gpu", f->no_gpu, "Do not load NVML");
  cmd->add_option("--nvml-library", f->nvml_library, "Path of libnvidia-ml");
  cmd->add_flag("--no-html", f->no_html, "Do not write report.html");
  cmd->add_option("command", f->command, "The training command, after --");
  RegisterTuneFeed(cmd, exit_code);
  cmd->callback([cmd, exit_code, f] {
    if (!cmd->get_subcommands().empty()) return;  // tune feed ran
    if (f->command.empty()) {
      *exit_code = ReportError(
          "tune", Status::InvalidArgument("give the command to tune after --, e.g. saturate "
                                          "tune --param threads=1,2,4 -- python train.py"));
      return;
    }
    Result<int> r = RunTune(*f);
    *exit_code = r.ok() ? *r : ReportError("tune", r.status());
  });
}

}  // namespace saturate::cli
