// Fuzzes what reads a multi-rank job's run directory (docs/ranks.md): the
// rank folders' loader, clock alignment, per-rank steps, cross-rank rules,
// the report and the per-rank trace export. The input is split at NUL bytes
// into meta.json, rank-0/spans-1.jsonl, rank-1/spans-2.jsonl and
// rank-1/task.json. Reading may refuse the files (a Status); nothing may
// crash, and a job that loads must analyse, render and export.
#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "doctor/report.h"
#include "ranks/analysis.h"
#include "trace/export.h"

namespace {

const std::string& Dir() {
  static const std::string dir = [] {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "saturate-job-fuzz.XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) abort();
    std::filesystem::create_directories(pattern + "/rank-0");
    std::filesystem::create_directories(pattern + "/rank-1");
    return pattern;
  }();
  static const int registered = std::atexit([] {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  });
  (void)registered;
  return dir;
}

void Write(const std::string& name, std::string_view text) {
  std::ofstream(Dir() + "/" + name, std::ios::binary | std::ios::trunc) << text;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  const char* names[] = {"meta.json", "rank-0/spans-1.jsonl", "rank-1/spans-2.jsonl",
                         "rank-1/task.json"};
  for (const char* name : names) {
    const size_t nul = rest.find('\0');
    Write(name, rest.substr(0, nul));
    rest = nul == std::string_view::npos ? std::string_view() : rest.substr(nul + 1);
  }
  using namespace saturate;
  if (auto dir = ranks::AnalyzeDir(Dir(), {}); dir.ok()) {
    (void)doctor::AnalysisJson(dir->run, dir->analysis).dump();
    (void)doctor::RenderHtml(dir->run, dir->analysis);
    (void)doctor::RenderSummary(dir->run, dir->analysis);
  }
  if (auto job = trace::ReadJobTrace(Dir()); job.ok()) (void)trace::ChromeJobTrace(*job).dump();
  return 0;
}
