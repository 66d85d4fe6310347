#include "tune/tuner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "base/file.h"
#include "doctor/run.h"
#include "job/runner.h"
#include "tune/knee.h"
#include "tune/measure.h"
#include "tune/report.h"
#include "tune/verify.h"

namespace saturate::tune {
namespace {

using nlohmann::json;

json ConfigJson(const Config& c) {
  json j = json::object();
  for (const auto& [k, v] : c) j[k] = v;
  return j;
}

json EnvJson(const Config& c) {
  json env = json::object();
  for (const auto& [k, v] : EnvFor(c)) env[k] = v;
  return env;
}

std::vector<std::string> Substituted(const std::vector<std::string>& argv, const Config& c) {
  std::vector<std::string> out;
  for (const std::string& a : argv) out.push_back(Substitute(a, c));
  return out;
}

std::string Fmt(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

Status CreateRoot(const std::string& root) {
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  if (ec) return Status::IOError("cannot create " + root + ": " + ec.message());
  return Status::OK();
}

}  // namespace

class CommandTuner::Impl {
 public:
  explicit Impl(CommandTuneOptions o) : o_(std::move(o)) {}

  Status Init() {
    if (o_.command.empty()) return Status::InvalidArgument("no command to tune");
    if (o_.root.empty()) return Status::InvalidArgument("no output folder");
    if (o_.verify_rounds < 0) return Status::InvalidArgument("verify rounds must be 0 or more");
    if (!o_.metric.empty()) SATURATE_RETURN_IF_ERROR(MetricScanner::Create(o_.metric).status());
    if (!(o_.noise_pct >= 0 && o_.noise_pct < 100)) {
      return Status::InvalidArgument("the noise must be in [0, 100) %");
    }
    SATURATE_RETURN_IF_ERROR(CreateRoot(o_.root));
    SearchOptions search;
    search.mode = o_.mode;
    search.noise_rel = o_.noise_pct / 100.0;
    search.max_trials = o_.max_trials;
    strategy_ = MakeStrategy(o_.space, o_.start, search);
    return Status::OK();
  }

  std::string strategy_name() const { return strategy_->name(); }
  size_t configurations() const { return o_.space.Size(); }
  size_t estimated_trials() const { return strategy_->EstimatedTrials(); }

  Result<CommandTuneResult> Run(const TrialCallback& on_trial) {
    json trials = json::array();
    size_t done = 0;
    const size_t verify_trials = 2 * size_t(o_.verify_rounds);
    auto total = [&] { return std::max(done + 1, strategy_->EstimatedTrials() + verify_trials); };
    while (std::optional<Proposal> p = strategy_->Next()) {
      Outcome outcome;
      SATURATE_ASSIGN_OR_RETURN(json row, Trial(p->config, p->budget_fraction, p->stage, &outcome));
      trials.push_back(row);
      strategy_->Report(outcome);
      const size_t estimated = total();
      ++done;
      if (on_trial) on_trial(TrialProgress{trials.back(), done, estimated});
      if (cancelled_) break;
    }

    json result = {{"mode", "command"},
                   {"command", o_.command},
                   {"dir", o_.root},
                   {"strategy", strategy_->name()},
                   {"unit", unit_},
                   {"metric", o_.metric.empty() ? json() : json(o_.metric)},
                   {"budget",
                    {{"trial_seconds", double(o_.trial_ns) / 1e9},
                     {"trial_steps", o_.trial_steps},
                     {"warmup_pct", o_.warmup_pct},
                     {"noise_pct", o_.noise_pct}}},
                   {"start", ConfigJson(o_.start)}};
    json params = json::array();
    for (const Param& p : o_.space.params) {
      params.push_back({{"name", p.name}, {"role", RoleName(p.role)}, {"values", p.values}});
    }
    result["params"] = params;
    const std::optional<Config> best = strategy_->Best();
    if (best) {
      for (json& row : trials) {
        if (row["config"] == ConfigJson(*best) && row["budget_fraction"] == 1.0 &&
            row.contains("throughput") && !result.contains("best")) {
          row["best"] = true;
          result["best"] = {{"config", ConfigJson(*best)},
                            {"trial", row["id"]},
                            {"throughput", row["throughput"]}};
        }
      }
      result["recommendation"] = Recommendation(*best);
      if (*best == o_.start) {
        result["verify"] = {{"rounds", 0},
                            {"reliable_gain", false},
                            {"verdict",
                             "no reliable gain: the starting configuration is the best within the "
                             "noise"}};
      } else if (o_.verify_rounds > 0 && !cancelled_) {
        SATURATE_ASSIGN_OR_RETURN(result["verify"],
                                  Verify(*best, &trials, &done, total(), on_trial));
      }
    }
    result["trials"] = trials;
    return CommandTuneResult{std::move(result), cancelled_, best.has_value()};
  }

 private:
  // Runs one trial and returns its tune.json row; `*outcome` for the search.
  Result<json> Trial(const Config& config, double fraction, const std::string& stage,
                     Outcome* outcome) {
    char name[32];
    std::snprintf(name, sizeof(name), "trial-%03d", ++trial_id_);
    const std::string dir = o_.root + "/" + name;

    job::JobOptions jo;
    jo.argv = Substituted(o_.command, config);
    jo.run_dir = dir;
    jo.auto_instrument = o_.auto_instrument;
    jo.bootstrap_dir = o_.root + "/.auto";
    jo.env = EnvFor(config);
    // Python buffers stdout into a pipe; a metric printed before SIGTERM would be lost.
    jo.env.emplace_back("PYTHONUNBUFFERED", "1");
    jo.interval_ns = o_.interval_ns;
    jo.gpus = o_.gpus;
    jo.nvml_library = o_.nvml_library;
    jo.capture_output = true;
    std::optional<MetricScanner> scanner;
    if (!o_.metric.empty()) {
      SATURATE_ASSIGN_OR_RETURN(MetricScanner s, MetricScanner::Create(o_.metric));
      scanner.emplace(std::move(s));
      jo.on_output = [&scanner](std::string_view chunk) { scanner->Add(chunk); };
    }
    jo.time_budget_ns = static_cast<int64_t>(double(o_.trial_ns) * fraction);
    jo.step_budget =
        o_.trial_steps > 0
            ? std::max<int64_t>(2,
                                static_cast<int64_t>(std::ceil(double(o_.trial_steps) * fraction)))
            : 0;
    jo.grace_ns = o_.grace_ns;
    SATURATE_ASSIGN_OR_RETURN(job::JobResult run, job::RunJob(std::move(jo)));
    std::vector<double> metric_values;
    if (scanner) {
      scanner->Finish();
      metric_values = scanner->values();
    }
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
    *outcome = Outcome{feasible, std::nullopt, 0};
    MeasureOptions mo;
    mo.warmup_fraction = o_.warmup_pct / 100.0;
    auto loaded = doctor::LoadRun(dir);
    if (loaded.ok()) {
      const Measurement m = MeasureRun(*loaded, mo);
      row["steps"] = m.steps;
      if (m.device_busy_pct) row["device_busy_pct"] = *m.device_busy_pct;
      if (m.gpu_memory_peak_bytes) row["gpu_memory_peak_bytes"] = *m.gpu_memory_peak_bytes;
      if (m.rss_peak_bytes) row["rss_peak_bytes"] = *m.rss_peak_bytes;
      if (m.cpu_cores) row["cpu_cores"] = *m.cpu_cores;
      std::optional<double> throughput = m.throughput;
      std::string unit = m.unit;
      double noise = m.noise_rel;
      // Steps of different batch sizes are not comparable; samples are.
      const Param* batch = o_.space.FindRole(Role::kBatch);
      if (throughput && unit == "steps/s" && batch != nullptr) {
        if (std::optional<double> b = NumberOf(config, batch->name)) {
          *throughput *= *b;
          unit = "samples/s";
        }
      }
      if (!o_.metric.empty()) {
        const std::optional<MetricValue> v = SteadyMetric(metric_values, mo);
        throughput = v ? std::optional<double>(v->value) : std::nullopt;
        noise = v ? v->noise_rel : 0;
        unit = "metric";
        row["metric_values"] = metric_values.size();
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
      row["note"] = o_.metric.empty()
                        ? "nothing measured: no step marks after the warm-up (saturate.step()), "
                          "and no --metric"
                        : "nothing measured: --metric matched no line of the output";
    }
    return row;
  }

  // The argv and environment to use, and gradient accumulation when the
  // micro-batch changed.
  json Recommendation(const Config& best) const {
    json r = {{"config", ConfigJson(best)}, {"argv", Substituted(o_.command, best)}};
    r["env"] = EnvJson(best);
    if (const Param* batch = o_.space.FindRole(Role::kBatch)) {
      const std::optional<double> micro = NumberOf(best, batch->name);
      const std::optional<double> was = NumberOf(o_.start, batch->name);
      const double effective =
          o_.effective_batch > 0 ? double(o_.effective_batch) : was.value_or(0);
      if (micro && effective > 0) {
        const int accumulate = GradientAccumulation(effective, *micro);
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

  // A/B: the start and the best, alternately, `verify_rounds` times.
  Result<json> Verify(const Config& best, json* trials, size_t* done, size_t total,
                      const TrialCallback& on_trial) {
    std::vector<double> a, b;
    for (int r = 0; r < o_.verify_rounds && !cancelled_; ++r) {
      for (int side = 0; side < 2; ++side) {
        Outcome o;
        const Config& c = side == 0 ? o_.start : best;
        SATURATE_ASSIGN_OR_RETURN(json row,
                                  Trial(c, 1.0, side == 0 ? "verify start" : "verify best", &o));
        row["verify_round"] = r + 1;
        trials->push_back(row);
        (side == 0 ? a : b).push_back(o.throughput.value_or(0));
        ++*done;
        if (on_trial) on_trial(TrialProgress{trials->back(), *done, total});
      }
    }
    const VerifyResult v = CompareAB(a, b);
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

  CommandTuneOptions o_;
  std::unique_ptr<Strategy> strategy_;
  int trial_id_ = 0;
  bool cancelled_ = false;
  std::string unit_;
};

CommandTuner::CommandTuner(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CommandTuner::~CommandTuner() = default;

Result<std::unique_ptr<CommandTuner>> CommandTuner::Create(CommandTuneOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  SATURATE_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<CommandTuner>(new CommandTuner(std::move(impl)));
}

std::string CommandTuner::strategy_name() const { return impl_->strategy_name(); }
size_t CommandTuner::configurations() const { return impl_->configurations(); }
size_t CommandTuner::estimated_trials() const { return impl_->estimated_trials(); }
Result<CommandTuneResult> CommandTuner::Run(const TrialCallback& on_trial) {
  return impl_->Run(on_trial);
}

// ---- tune feed ----

Result<json> RunFeedSweep(const FeedSweepOptions& o, const FeedMeasure& measure,
                          const TrialCallback& on_trial) {
  if (o.threads.empty() || o.prefetch.empty()) {
    return Status::InvalidArgument("tune feed needs thread counts and prefetch depths");
  }
  const int first_prefetch = o.prefetch.front();
  const size_t total = o.threads.size() + o.prefetch.size() - 1;
  json trials = json::array();
  int id = 0;
  auto trial = [&](int t, int p, const std::string& stage) -> Result<double> {
    SATURATE_ASSIGN_OR_RETURN(FeedPoint point, measure(t, p));
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
    if (on_trial) on_trial(TrialProgress{trials.back(), size_t(id), total});
    return point.samples_per_s;
  };
  std::vector<std::pair<double, double>> curve;
  for (int t : o.threads) {
    SATURATE_ASSIGN_OR_RETURN(double rate, trial(t, first_prefetch, "threads"));
    curve.emplace_back(t, rate);
  }
  const Knee knee = FindKnee(curve);
  const int knee_threads = o.threads[knee.knee];
  // Prefetch at the knee: the shallowest depth within the noise of the best.
  std::vector<std::pair<int, double>> depths = {{first_prefetch, curve[knee.knee].second}};
  for (size_t i = 1; i < o.prefetch.size(); ++i) {
    SATURATE_ASSIGN_OR_RETURN(double rate, trial(knee_threads, o.prefetch[i], "prefetch"));
    depths.emplace_back(o.prefetch[i], rate);
  }
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
  const Config best = {{"threads", std::to_string(knee_threads)},
                       {"prefetch", std::to_string(best_prefetch)}};
  for (json& row : trials) {
    if (row["config"] == ConfigJson(best)) {
      row["best"] = true;
      break;
    }
  }
  return json{
      {"mode", "feed"},
      {"dataset", o.dataset},
      {"dir", o.root},
      {"strategy", "threads sweep, then prefetch at the knee"},
      {"unit", "samples/s"},
      {"batch_size", o.batch_size},
      {"budget", {{"trial_seconds", o.trial_seconds}, {"warmup_batches", o.warmup_batches}}},
      {"params",
       {{{"name", "threads"}, {"role", "threads"}, {"values", o.threads}},
        {{"name", "prefetch"}, {"role", "prefetch"}, {"values", o.prefetch}}}},
      {"knee",
       {{"threads", knee_threads},
        {"best_threads", o.threads[knee.best]},
        {"shape", ShapeName(knee.shape)},
        {"words", knee.words}}},
      {"best", {{"config", ConfigJson(best)}, {"throughput", best_rate}}},
      {"recommendation",
       {{"config", ConfigJson(best)},
        {"argv",
         {"--threads", std::to_string(knee_threads), "--prefetch", std::to_string(best_prefetch)}},
        {"env", EnvJson(best)},
        {"note", "saturate.Loader(threads=" + std::to_string(knee_threads) +
                     ", prefetch=" + std::to_string(best_prefetch) + ")"}}},
      {"trials", trials}};
}

Status WriteTuneFiles(const std::string& root, const json& result, bool html) {
  SATURATE_RETURN_IF_ERROR(WriteFileAtomic(root + "/tune.json", result.dump(2) + "\n"));
  if (html) SATURATE_RETURN_IF_ERROR(WriteFileAtomic(root + "/report.html", RenderHtml(result)));
  return Status::OK();
}

}  // namespace saturate::tune
