// Fuzzes what reads a multi-rank job's run directory (docs/ranks.md): the
// rank folders' loader, clock alignment, per-rank steps, cross-rank rules,
// the report and the per-rank trace export. The input is split at NUL bytes
// into meta.json, rank-0/spans-1.jsonl, rank-1/spans-2.jsonl and
// rank-1/task.json. Reading may refuse the files (a Status); nothing may
// crash, and a job that loads must analyse, render and export.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "doctor/report.h"
#include "fuzz_dir.h"
#include "ranks/analysis.h"
#include "trace/export.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace saturate;
  const std::string& dir = fuzz::ScratchDir("saturate-job-fuzz");
  std::filesystem::create_directories(dir + "/rank-0");
  std::filesystem::create_directories(dir + "/rank-1");
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  for (const char* name :
       {"meta.json", "rank-0/spans-1.jsonl", "rank-1/spans-2.jsonl", "rank-1/task.json"}) {
    const size_t nul = rest.find('\0');
    fuzz::WriteFile(dir, name, rest.substr(0, nul));
    rest = nul == std::string_view::npos ? std::string_view() : rest.substr(nul + 1);
  }
  if (auto a = ranks::AnalyzeDir(dir, {}); a.ok()) {
    (void)doctor::AnalysisJson(a->run, a->analysis).dump();
    (void)doctor::RenderHtml(a->run, a->analysis);
    (void)doctor::RenderSummary(a->run, a->analysis);
  }
  if (auto job = trace::ReadJobTrace(dir); job.ok()) (void)trace::ChromeJobTrace(*job).dump();
  return 0;
}
