// saturate doctor [--out RUN] [--fail-on CAUSE>N%]... -- CMD ARGS...: runs a
// command under watch (and trace, through SATURATE_RUN_DIR), then explains
// why the device idled: findings ranked by time lost, with the fix.
// saturate report RUN: the same analysis, re-rendered from a run directory.
//
// Both write RUN/findings.json and RUN/report.html (temp file, fsync,
// rename) and print the summary on stdout.
#include <unistd.h>

#include <cstdio>
#include <memory>

#include "base/file.h"
#include "cli.h"
#include "doctor/analysis.h"
#include "doctor/gate.h"
#include "doctor/report.h"
#include "doctor/run.h"
#include "ranks/analysis.h"
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

// Analyses `run_dir`, writes findings.json and report.html into it, prints
// the summary; `*gates_failed` says whether a --fail-on gate failed.
Status AnalyseRun(const std::string& run_dir, const ReportFlags& f, bool* gates_failed) {
  SATURATE_ASSIGN_OR_RETURN(std::vector<doctor::Gate> gates, ParseGates(f.fail_on));
  doctor::AnalysisOptions options;
  options.min_time_lost_pct = f.min_pct;
  // A single run, or a multi-rank job's rank folders merged (docs/ranks.md).
  SATURATE_ASSIGN_OR_RETURN(ranks::DirAnalysis dir, ranks::AnalyzeDir(run_dir, options));
  for (const std::string& w : dir.warnings)
    std::fprintf(stderr, "saturate doctor: %s\n", w.c_str());
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

void RegisterDoctorCommand(CLI::App& app, int* exit_code) {
  auto watch = std::make_shared<WatchFlags>();
  auto report = std::make_shared<ReportFlags>();
  CLI::App* cmd = app.add_subcommand(
      "doctor",
      "Run a training command under watch and trace, then explain why the GPU idled: which\n"
      "cause, the time it cost and the fix (docs/diagnosis.md).\n"
      "  saturate doctor -- python train.py\n"
      "  saturate doctor --fail-on 'input_pipeline>5%' -- python train.py   # a CI gate\n"
      "Exits with the command's exit code when it failed, else 1 when a --fail-on gate "
      "failed, else 0.");
  AddCommonWatchFlags(cmd, watch.get());
  cmd->add_option("-o,--out", watch->out, "Run directory (default: runs/doctor-DATE-TIME)");
  AddReportFlags(cmd, report.get());
  cmd->add_option("command", watch->command, "The training command, after --")->required();
  cmd->callback([exit_code, watch, report] {
    watch->no_view = true;  // the command's own output stays readable
    // Bad gates are reported before the training runs, not after.
    Status s = ParseGates(report->fail_on).status();
    std::string run_dir;
    if (s.ok()) s = RunWatched("doctor", *watch, exit_code, &run_dir);
    bool gates_failed = false;
    if (s.ok()) s = AnalyseRun(run_dir, *report, &gates_failed);
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
