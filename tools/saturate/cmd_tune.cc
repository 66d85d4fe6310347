// saturate tune --param NAME=VALUES... -- CMD ARGS...: short measured trials
// of a training command over loader threads, prefetch, batch size and
// precision; a recommendation verified by A/B re-runs.
// saturate tune feed DATASET: the same for the input pipeline alone,
// in-process, with the knee of throughput against threads.
//
// Each trial is a run directory (runs/tune-DATE/trial-NNN/) that `saturate
// report` can open. The trials, the search and tune.json are src/tune/tuner.h;
// this file parses the flags and prints the trial lines and the summary.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli.h"
#include "feed/measure.h"
#include "feed_run.h"
#include "remote_flags.h"
#include "saturate/feed/loader.h"
#include "tune/measure.h"
#include "tune/report.h"
#include "tune/search.h"
#include "tune/space.h"
#include "tune/tuner.h"
#include "tune_trials.h"
#include "watch_session.h"

namespace saturate::cli {
namespace {

using nlohmann::json;

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
  bool no_auto = false;
  bool no_html = false;
  std::vector<std::string> command;
};

// tune.json and report.html, then the summary table on stdout.
Status WriteOutputs(const std::string& root, const json& result, bool html) {
  SATURATE_RETURN_IF_ERROR(tune::WriteTuneFiles(root, result, html));
  std::fputs(tune::RenderTable(result, isatty(STDOUT_FILENO) != 0).c_str(), stdout);
  std::printf("results: %s/tune.json%s%s\n", root.c_str(), html ? "   report: " : "",
              html ? (root + "/report.html").c_str() : "");
  return Status::OK();
}

Result<tune::CommandTuneOptions> MakeTuneOptions(const TuneFlags& f) {
  tune::CommandTuneOptions o;
  SATURATE_ASSIGN_OR_RETURN(o.space, tune::ParseSpace(f.params));
  SATURATE_ASSIGN_OR_RETURN(tune::Config overrides,
                            tune::ParseConfig(o.space, f.baseline, "--baseline"));
  o.start = tune::FirstConfig(o.space, overrides);
  SATURATE_ASSIGN_OR_RETURN(o.trial_ns, ParseSeconds("--trial-seconds", f.trial_seconds));
  SATURATE_ASSIGN_OR_RETURN(o.grace_ns, ParseSeconds("--grace", f.grace));
  SATURATE_ASSIGN_OR_RETURN(o.interval_ns, ParseSeconds("--interval", f.interval));
  if (f.trial_steps < 0) return Status::InvalidArgument("--trial-steps must be positive");
  o.trial_steps = f.trial_steps;
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
  o.noise_pct = f.noise_pct;
  o.max_trials = f.max_trials;
  if (!f.metric.empty()) SATURATE_RETURN_IF_ERROR(tune::MetricScanner::Create(f.metric).status());
  o.metric = f.metric;
  if (f.verify_rounds < 0) return Status::InvalidArgument("--verify-rounds must be 0 or more");
  o.verify_rounds = f.verify_rounds;
  if (!(f.warmup_pct >= 0 && f.warmup_pct < 100)) {
    return Status::InvalidArgument("--warmup-pct must be in [0, 100)");
  }
  o.warmup_pct = f.warmup_pct;
  o.effective_batch = f.effective_batch;
  o.command = f.command;
  o.gpus = !f.no_gpu;
  o.nvml_library = f.nvml_library;
  o.auto_instrument = !f.no_auto;
  o.root = f.out.empty() ? DefaultRunDir("tune") : f.out;
  return o;
}

Result<int> RunTune(const TuneFlags& f) {
  SATURATE_ASSIGN_OR_RETURN(tune::CommandTuneOptions options, MakeTuneOptions(f));
  const std::string root = options.root;
  const int64_t trial_ns = options.trial_ns;
  SATURATE_ASSIGN_OR_RETURN(std::unique_ptr<tune::CommandTuner> tuner,
                            tune::CommandTuner::Create(std::move(options)));
  std::fprintf(stderr,
               "saturate tune: %zu configurations, %s search (about %zu trials of %.3g s), then %d "
               "verify rounds; trials in %s\n",
               tuner->configurations(), tuner->strategy_name().c_str(), tuner->estimated_trials(),
               double(trial_ns) / 1e9, f.verify_rounds, root.c_str());
  ProgressBar bar("tune", "trials");
  SATURATE_ASSIGN_OR_RETURN(tune::CommandTuneResult r, tuner->Run(PrintTrials("tune", &bar)));
  bar.Finish();
  SATURATE_RETURN_IF_ERROR(WriteOutputs(root, r.report, !f.no_html));
  if (r.cancelled) return int(kExitCancelled);
  return r.found ? int(kExitOk) : int(kExitProblems);
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
  remote::RemoteOptions remote;
};

// The loader at `threads` x `prefetch` for `seconds`, epochs repeating; the
// first `warmup` batches are not timed.
Result<tune::FeedPoint> FeedTrial(const FeedTuneFlags& f, int threads, int prefetch,
                                  double seconds) {
  feed::LoaderOptions o;
  o.dataset = f.dataset;
  o.batch_size = f.batch;
  o.threads = threads;
  o.prefetch = prefetch;
  o.remote = f.remote;
  SATURATE_ASSIGN_OR_RETURN(o.fields, ParseTransforms(f.transforms));
  ProgressBar bar("indexing JPEGs", "image");  // the first trial on files read where they lie
  o.open_progress = [&](uint64_t done, uint64_t total) { bar.Update(done, total); };
  auto opened = feed::Loader::Open(o);
  bar.Finish();
  SATURATE_ASSIGN_OR_RETURN(std::unique_ptr<feed::Loader> loader, std::move(opened));
  SATURATE_ASSIGN_OR_RETURN(feed::FeedMeasurement m,
                            feed::MeasureFeed(*loader, {.warmup = f.warmup, .seconds = seconds}));
  return tune::FeedPoint{m.samples_per_s(), m.cpu_cores, m.wait_pct(), m.timed_batches(f.warmup)};
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
  tune::FeedSweepOptions o;
  SATURATE_ASSIGN_OR_RETURN(o.threads,
                            IntValues("threads", f.threads.empty() ? DefaultThreads() : f.threads));
  SATURATE_ASSIGN_OR_RETURN(o.prefetch, IntValues("prefetch", f.prefetch));
  SATURATE_ASSIGN_OR_RETURN(int64_t trial_ns, ParseSeconds("--trial-seconds", f.trial_seconds));
  o.trial_seconds = double(trial_ns) / 1e9;
  o.dataset = f.dataset;
  o.batch_size = f.batch;
  o.warmup_batches = f.warmup;
  o.root = f.out.empty() ? DefaultRunDir("tune-feed") : f.out;
  std::error_code ec;
  std::filesystem::create_directories(o.root, ec);
  if (ec) return Status::IOError("cannot create " + o.root + ": " + ec.message());
  std::fprintf(stderr,
               "saturate tune feed: %zu thread counts at prefetch %d, then %zu prefetch depths; "
               "%s each\n",
               o.threads.size(), o.prefetch.front(), o.prefetch.size() - 1,
               f.trial_seconds.c_str());
  ProgressBar bar("tune feed", "trials");
  auto measure = [&f, seconds = o.trial_seconds](int threads, int prefetch) {
    return FeedTrial(f, threads, prefetch, seconds);
  };
  SATURATE_ASSIGN_OR_RETURN(json result,
                            tune::RunFeedSweep(o, measure, PrintTrials("tune feed", &bar)));
  bar.Finish();
  SATURATE_RETURN_IF_ERROR(WriteOutputs(o.root, result, !f.no_html));
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
  cmd->add_option("DATASET", f->dataset, "Dataset directory, s3://bucket/prefix or http(s)://")
      ->required();
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
  AddRemoteFlags(cmd, &f->remote);
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
  AddNoAutoFlag(cmd, &f->no_auto);
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
