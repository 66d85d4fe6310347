// Fuzzes what reads a run directory: doctor's loader, features, rules and
// renderers, and the trace export. The input is split at NUL bytes into
// meta.json, samples.jsonl and spans-1.jsonl. Reading may refuse the files
// (a Status); nothing may crash, and a run that loads must analyse, render
// and export.
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "doctor/analysis.h"
#include "doctor/report.h"
#include "doctor/run.h"
#include "trace/export.h"

namespace {

// The run directory the inputs are written to, removed when the fuzzer exits.
const std::string& Dir() {
  static const std::string dir = [] {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "saturate-run-fuzz.XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) abort();
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
  std::string_view parts[3];
  for (std::string_view& part : parts) {
    const size_t nul = rest.find('\0');
    part = rest.substr(0, nul);
    rest = nul == std::string_view::npos ? std::string_view() : rest.substr(nul + 1);
  }
  Write("meta.json", parts[0]);
  Write("samples.jsonl", parts[1]);
  Write("spans-1.jsonl", parts[2]);
  using namespace saturate;
  if (auto run = doctor::LoadRun(Dir()); run.ok()) {
    const doctor::Analysis analysis = doctor::Analyze(*run);
    (void)doctor::AnalysisJson(*run, analysis).dump();
    (void)doctor::RenderHtml(*run, analysis);
    (void)doctor::RenderSummary(*run, analysis);
  }
  if (auto trace = trace::ReadRunTrace(Dir()); trace.ok()) (void)trace::ChromeTrace(*trace).dump();
  return 0;
}
