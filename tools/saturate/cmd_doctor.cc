// saturate doctor [--out RUN] [--fail-on CAUSE>N%]... -- CMD ARGS...: runs a
// command under watch (and trace, through SATURATE_RUN_DIR), then explains
// why the device idled: findings ranked by time lost, with the fix.
// saturate report RUN: the same analysis, re-rendered from a run directory.
//
// Both write RUN/findings.json and RUN/report.html (temp file, fsync,
// rename) and print the summary on stdout. doctor --check-fix first applies
// the top finding's fix where it is a flag of the command and re-runs it A/B
// (tune's trials, RUN/check-fix/), recording the measured gain against the
// prediction on the finding (src/doctor/check_fix.h).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>

#include "base/file.h"
#include "cli.h"
#include "doctor/analysis.h"
#include "doctor/check_fix.h"
#include "doctor/gate.h"
#include "doctor/report.h"
#include "doctor/run.h"
#include "ranks/analysis.h"
#include "tune/space.h"
#include "tune/tuner.h"
#include "tune_trials.h"
#include "watch_session.h"

namespace saturate::cli {
namespace {

struct ReportFlags {
  std::vector<std::string> fail_on;
  double min_pct = doctor::AnalysisOptions{}.min_time_lost_pct;
  int top = 5;
  bool no_html = false;
};

void AddReportFlags(CLI::App* cmd, ReportFlags* f) {
  cmd->add_option("--fail-on", f->fail_on,
                  "Exit 1 when a cause costs more than a threshold: CAUSE>N% (of the run) or "
                  "CAUSE>Ns; CAUSE is a cause id or 'any'. Repeatable.")
      ->allow_extra_args(false);  // one gate per --fail-on, so a command may follow
  cmd->add_option("--min-pct", f->min_pct, "Report causes costing at least this % of the run")
      ->capture_default_str();
  cmd->add_option("--top", f->top, "Findings listed in the terminal summary")
      ->capture_default_str();
  cmd->add_flag("--no-html", f->no_html, "Do not write report.html");
}

Result<std::vector<doctor::Gate>> ParseGates(const std::vector<std::string>& texts) {
  std::vector<doctor::Gate> gates;
  for (const std::string& text : texts) {
    SATURATE_ASSIGN_OR_RETURN(doctor::Gate gate, doctor::ParseGate(text));
    gates.push_back(gate);
  }
  return gates;
}

// The analysis of `run_dir` (a single run or a multi-rank job's rank folders
// merged, docs/ranks.md); its warnings go to stderr.
Result<ranks::DirAnalysis> Analyse(const std::string& run_dir, const ReportFlags& f) {
  doctor::AnalysisOptions options;
  options.min_time_lost_pct = f.min_pct;
  SATURATE_ASSIGN_OR_RETURN(ranks::DirAnalysis dir, ranks::AnalyzeDir(run_dir, options));
  for (const std::string& w : dir.warnings)
    std::fprintf(stderr, "saturate doctor: %s\n", w.c_str());
  return dir;
}

// Writes findings.json and report.html into `run_dir`, prints the summary;
// `*gates_failed` says whether a --fail-on gate failed.
Status WriteAndPrint(const std::string& run_dir, const ReportFlags& f,
                     const ranks::DirAnalysis& dir, bool* gates_failed) {
  SATURATE_ASSIGN_OR_RETURN(std::vector<doctor::Gate> gates, ParseGates(f.fail_on));
  const doctor::Run& run = dir.run;
  const doctor::Analysis& analysis = dir.analysis;
  SATURATE_RETURN_IF_ERROR(WriteFileAtomic(run_dir + "/findings.json",
                                           doctor::AnalysisJson(run, analysis).dump(2) + "\n"));
  if (!f.no_html) {
    SATURATE_RETURN_IF_ERROR(
        WriteFileAtomic(run_dir + "/report.html", doctor::RenderHtml(run, analysis)));
  }
  const bool color = isatty(STDOUT_FILENO) != 0;
  std::fputs(doctor::RenderSummary(run, analysis, color, f.top).c_str(), stdout);
  std::printf("findings: %s/findings.json%s%s\n", run_dir.c_str(),
              f.no_html ? "" : "   report: ", f.no_html ? "" : (run_dir + "/report.html").c_str());
  // Gates count every finding, also those under the reporting threshold.
  const std::vector<std::string> failed = doctor::FailedGates(gates, dir.all_findings);
  for (const std::string& line : failed) std::printf("gate failed: %s\n", line.c_str());
  *gates_failed = !failed.empty();
  return Status::OK();
}

Status AnalyseRun(const std::string& run_dir, const ReportFlags& f, bool* gates_failed) {
  SATURATE_ASSIGN_OR_RETURN(ranks::DirAnalysis dir, Analyse(run_dir, f));
  return WriteAndPrint(run_dir, f, dir, gates_failed);
}

// ---- --check-fix ---------------------------------------------------------------------

struct CheckFlags {
  bool enabled = false;
  std::string seconds;  // each re-run's budget; "": the doctor run's length, 5 s to 2 min
  int rounds = 2;       // A/B rounds after the first pair
};

// The first measured finding with a prediction whose fix is a flag of the
// command: its index and the change; else why the top one is not.
Result<std::pair<size_t, doctor::KnobChange>> ChooseFix(const doctor::Analysis& a,
                                                        const std::vector<std::string>& argv) {
  std::optional<Status> first_reason;
  for (size_t i = 0; i < a.findings.size(); ++i) {
    const doctor::Finding& x = a.findings[i];
    if (x.info || !x.prediction) continue;
    Result<doctor::KnobChange> c = doctor::KnobForFix(x, a.features, argv);
    if (c.ok()) return std::make_pair(i, *c);
    if (!first_reason) first_reason = c.status();
  }
  return first_reason ? *first_reason
                      : Status::Unimplemented("no finding predicts a gain: nothing to check");
}

// The measured speedup of the fix: the A/B rounds' ratio when they ran, else
// the two search trials' (the fix was not better than the start).
std::pair<double, bool> MeasuredGain(const nlohmann::json& tune, const doctor::KnobChange& c) {
  const nlohmann::json& v = tune.value("verify", nlohmann::json::object());
  if (v.value("rounds", 0) > 0 && v.value("ratio", 0.0) > 0) {
    return {v["ratio"].get<double>(), v.value("reliable_gain", false)};
  }
  double from = 0, to = 0;
  for (const nlohmann::json& t : tune.value("trials", nlohmann::json::array())) {
    if (!t.contains("throughput") || t.contains("verify_round")) continue;
    const std::string value = t["config"].value(c.knob, std::string());
    if (value == c.from) {
      from = t["throughput"].get<double>();
    } else if (value == c.to) {
      to = t["throughput"].get<double>();
    }
  }
  return {from > 0 ? to / from : 0.0, false};
}

// Applies the top mappable fix by re-running the command A/B (tune's trials
// in RUN/check-fix/), records predicted vs measured on the finding, and
// demotes it when the gain is not reliable.
Status CheckFix(const std::string& run_dir, const WatchFlags& watch, const CheckFlags& check,
                ranks::DirAnalysis* dir, int* exit_code) {
  Result<std::pair<size_t, doctor::KnobChange>> chosen =
      ChooseFix(dir->analysis, dir->run.meta.command);
  if (!chosen.ok()) {
    std::fprintf(stderr, "saturate doctor: --check-fix: %s\n",
                 std::string(chosen.status().message()).c_str());
    return Status::OK();
  }
  const auto& [index, change] = *chosen;
  tune::CommandTuneOptions o;
  SATURATE_ASSIGN_OR_RETURN(tune::Param param,
                            tune::ParseParam(change.knob + "=" + change.from + "," + change.to));
  o.space.params = {param};
  o.start = {{change.knob, change.from}};
  o.mode = tune::SearchOptions::Mode::kGrid;
  o.verify_rounds = check.rounds;
  o.command = change.command;
  const double run_s = std::clamp(dir->analysis.features.duration_s, 5.0, 120.0);
  o.trial_ns = int64_t(run_s * 1e9);
  if (!check.seconds.empty()) {
    SATURATE_ASSIGN_OR_RETURN(o.trial_ns, ParseSeconds("--check-seconds", check.seconds));
  }
  SATURATE_ASSIGN_OR_RETURN(o.interval_ns, ParseDurationNs(watch.interval));
  o.gpus = !watch.no_gpu;
  o.nvml_library = watch.nvml_library;
  o.auto_instrument = !watch.no_auto;
  o.root = run_dir + "/check-fix";
  std::fprintf(stderr,
               "saturate doctor: --check-fix: %s %s -> %s (%s%s), %d A/B rounds of %.3g s; "
               "trials in %s\n",
               change.knob.c_str(), change.from.c_str(), change.to.c_str(), change.flag.c_str(),
               change.flag.ends_with("=") ? "" : " ...", check.rounds, double(o.trial_ns) / 1e9,
               o.root.c_str());
  SATURATE_ASSIGN_OR_RETURN(std::unique_ptr<tune::CommandTuner> tuner,
                            tune::CommandTuner::Create(std::move(o)));
  ProgressBar bar("check-fix", "runs");
  SATURATE_ASSIGN_OR_RETURN(tune::CommandTuneResult r, tuner->Run(PrintTrials("doctor", &bar)));
  bar.Finish();
  SATURATE_RETURN_IF_ERROR(tune::WriteTuneFiles(run_dir + "/check-fix", r.report, false));
  if (r.cancelled) *exit_code = kExitCancelled;

  doctor::FixCheck result;
  result.knob = change.knob;
  result.flag = change.flag;
  result.from = change.from;
  result.to = change.to;
  result.tune_dir = run_dir + "/check-fix";
  const auto [measured, reliable] = MeasuredGain(r.report, change);
  doctor::Analysis& a = dir->analysis;
  doctor::JudgeCheck(*a.findings[index].prediction, measured, reliable, &result);
  // A batch change measures how much of the step really was fixed.
  if (change.knob == "batch_size") {  // both integers (KnobForFix), the start >= 1
    const double k = std::stod(change.to) / std::stod(change.from);
    if (std::optional<double> fixed = doctor::FixedShareFromSpeedup(k, measured)) {
      result.verdict +=
          " (measured fixed share of the step: " + std::to_string(int(std::lround(100 * *fixed))) +
          "%)";
    }
  }
  a.findings =
      doctor::ApplyCheck(std::move(a.findings), index, std::move(result), a.min_time_lost_pct);
  return Status::OK();
}

void RegisterDoctorCommand(CLI::App& app, int* exit_code) {
  auto watch = std::make_shared<WatchFlags>();
  auto report = std::make_shared<ReportFlags>();
  CLI::App* cmd = app.add_subcommand(
      "doctor",
      "Run a training command under watch and trace, then explain why the GPU idled: which\n"
      "cause, the time it cost and the fix (docs/diagnosis.md).\n"
      "  saturate doctor -- python train.py\n"
      "  saturate doctor --fail-on 'input_pipeline>5%' -- python train.py   # a CI gate\n"
      "  saturate doctor --check-fix -- python train.py -j 0    # apply the fix, measure it\n"
      "Exits with the command's exit code when it failed, else 1 when a --fail-on gate "
      "failed, else 0.");
  AddCommonWatchFlags(cmd, watch.get());
  cmd->add_option("-o,--out", watch->out, "Run directory (default: runs/doctor-DATE-TIME)");
  AddReportFlags(cmd, report.get());
  auto check = std::make_shared<CheckFlags>();
  cmd->add_flag("--check-fix", check->enabled,
                "Apply the top finding's fix where it is a flag of the command (workers, batch "
                "size, prefetch), re-run A/B and report the measured gain against the "
                "prediction; a fix without a reliable gain is demoted");
  cmd->add_option("--check-seconds", check->seconds,
                  "Each --check-fix re-run's length (default: the doctor run's, 5 s to 2 min)");
  cmd->add_option("--check-rounds", check->rounds, "A/B rounds of --check-fix")
      ->capture_default_str()
      ->check(CLI::Range(0, 10));
  cmd->add_option("command", watch->command, "The training command, after --")->required();
  cmd->callback([exit_code, watch, report, check] {
    watch->no_view = true;  // the command's own output stays readable
    // Bad gates are reported before the training runs, not after.
    Status s = ParseGates(report->fail_on).status();
    std::string run_dir;
    if (s.ok()) s = RunWatched("doctor", *watch, exit_code, &run_dir);
    bool gates_failed = false;
    Result<ranks::DirAnalysis> dir = s.ok() ? Analyse(run_dir, *report) : s;
    if (dir.ok() && check->enabled && *exit_code == kExitOk) {
      s = CheckFix(run_dir, *watch, *check, &*dir, exit_code);
    }
    if (s.ok()) s = dir.status();
    if (s.ok()) s = WriteAndPrint(run_dir, *report, *dir, &gates_failed);
    if (!s.ok()) {
      *exit_code = ReportError("doctor", s);
    } else if (*exit_code == kExitOk && gates_failed) {
      *exit_code = kExitProblems;
    }
  });
}

void RegisterReportCommand(CLI::App& app, int* exit_code) {
  auto run_dir = std::make_shared<std::string>();
  auto report = std::make_shared<ReportFlags>();
  CLI::App* cmd = app.add_subcommand(
      "report",
      "Analyse a run directory again (from saturate doctor or watch): summary, findings.json "
      "and report.html.\n"
      "  saturate report runs/doctor-20261123-101500 --fail-on any>10%");
  cmd->add_option("run", *run_dir, "The run directory")->required();
  AddReportFlags(cmd, report.get());
  cmd->callback([exit_code, run_dir, report] {
    bool gates_failed = false;
    Status s = AnalyseRun(*run_dir, *report, &gates_failed);
    if (!s.ok()) {
      *exit_code = ReportError("report", s);
    } else if (gates_failed) {
      *exit_code = kExitProblems;
    }
  });
}

}  // namespace

void RegisterDoctor(CLI::App& app, int* exit_code) {
  RegisterDoctorCommand(app, exit_code);
  RegisterReportCommand(app, exit_code);
}

}  // namespace saturate::cli
