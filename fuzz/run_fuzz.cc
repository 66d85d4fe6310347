// Fuzzes what reads a run directory: doctor's loader, features, rules and
// renderers, and the trace export. The input is split at NUL bytes into
// meta.json, samples.jsonl and spans-1.jsonl. Reading may refuse the files
// (a Status); nothing may crash, and a run that loads must analyse, render
// and export.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "doctor/analysis.h"
#include "doctor/report.h"
#include "doctor/run.h"
#include "fuzz_dir.h"
#include "trace/export.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  std::string_view parts[3];
  for (std::string_view& part : parts) {
    const size_t nul = rest.find('\0');
    part = rest.substr(0, nul);
    rest = nul == std::string_view::npos ? std::string_view() : rest.substr(nul + 1);
  }
  using namespace saturate;
  const std::string& dir = fuzz::ScratchDir("saturate-run-fuzz");
  fuzz::WriteFile(dir, "meta.json", parts[0]);
  fuzz::WriteFile(dir, "samples.jsonl", parts[1]);
  fuzz::WriteFile(dir, "spans-1.jsonl", parts[2]);
  if (auto run = doctor::LoadRun(dir); run.ok()) {
    const doctor::Analysis analysis = doctor::Analyze(*run);
    (void)doctor::AnalysisJson(*run, analysis).dump();
    (void)doctor::RenderHtml(*run, analysis);
    (void)doctor::RenderSummary(*run, analysis);
  }
  if (auto trace = trace::ReadRunTrace(dir); trace.ok()) (void)trace::ChromeTrace(*trace).dump();
  return 0;
}
