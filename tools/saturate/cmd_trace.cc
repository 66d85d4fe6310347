// saturate trace export RUN [--chrome OUT.json]: a run directory's spans (and
// its utilization samples) as Chrome trace JSON, for https://ui.perfetto.dev
// or chrome://tracing; a job's (RUN/rank-<r>/) as one process per rank and
// per node on one time axis. The conversion lives in src/trace/export.h.
#include <cstdint>
#include <iostream>
#include <map>
#include <string>

#include "cli.h"
#include "ranks/job.h"
#include "trace/export.h"

namespace saturate::cli {
namespace {

struct TraceExportFlags {
  std::string run_dir;
  std::string chrome;  // default RUN/trace.json
  bool quiet = false;
};

int RunTraceExport(const TraceExportFlags& f) {
  const std::string out = f.chrome.empty() ? f.run_dir + "/trace.json" : f.chrome;
  // A job's hosts' clocks, aligned as doctor aligns them (docs/ranks.md).
  std::map<std::string, int64_t> host_offset_ns;
  if (ranks::IsJobDir(f.run_dir)) {
    Result<ranks::Job> job = ranks::LoadJob(f.run_dir);
    if (job.ok()) host_offset_ns = job->clock.host_offset_ns;
  }
  auto summary = trace::ExportChromeTrace(f.run_dir, out, host_offset_ns);
  if (!summary.ok()) return ReportError("trace export", summary.status());
  for (const std::string& note : summary->notes)
    std::cerr << "saturate trace export: " << note << "\n";
  if (!f.quiet) {
    std::cout << out << ": " << summary->spans << " spans, " << summary->steps << " step marks, "
              << summary->counters << " counter records from " << summary->files
              << " spans file(s)";
    if (summary->ranks > 0) std::cout << " of " << summary->ranks << " rank(s)";
    if (summary->samples > 0) std::cout << ", " << summary->samples << " utilization samples";
    if (summary->nodes > 0) std::cout << " of " << summary->nodes << " node(s)";
    std::cout << "\nopen it in https://ui.perfetto.dev (or chrome://tracing)\n";
  }
  return kExitOk;
}

}  // namespace

void RegisterTrace(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "trace", "Work with the step-phase spans a run recorded (RUN/spans-<pid>.jsonl)");
  cmd->require_subcommand(1);

  auto f = std::make_shared<TraceExportFlags>();
  CLI::App* exp = cmd->add_subcommand(
      "export",
      "Write a run's spans, step marks, loader counters and host/GPU utilization as Chrome "
      "trace JSON (a job with RUN/rank-<r>/ folders: one process per rank and per node).\n"
      "  saturate trace export runs/exp1 --chrome exp1.json   # then open it in "
      "https://ui.perfetto.dev");
  exp->add_option("RUN", f->run_dir, "Run directory")->required();
  exp->add_option("--chrome", f->chrome, "Output file (default: RUN/trace.json)");
  exp->add_flag("-q,--quiet", f->quiet, "Print nothing on success");
  exp->callback([exit_code, f] { *exit_code = RunTraceExport(*f); });
}

}  // namespace saturate::cli
