// render_report: writes the report of the synthetic run (report_fixture.h)
// for tests/e2e/report_chromium.sh to open in a browser, and prints the
// terminal summary. One command-line argument carries a <script> element so
// the browser test can check that nothing from the run becomes markup.
//
// usage: render_report OUT.html [--healthy | --ranks]   (--ranks: a 4-rank job)
#include <cstdio>
#include <cstring>

#include "base/file.h"
#include "doctor/report.h"
#include "doctor/testing/report_fixture.h"

int main(int argc, char** argv) {
  using namespace saturate::doctor;
  const bool healthy = argc == 3 && std::strcmp(argv[2], "--healthy") == 0;
  const bool ranks = argc == 3 && std::strcmp(argv[2], "--ranks") == 0;
  if (argc < 2 || argc > 3 || (argc == 3 && !healthy && !ranks)) {
    std::fprintf(stderr, "usage: render_report OUT.html [--healthy | --ranks]\n");
    return 2;
  }
  Run run = testing::SyntheticRun();
  run.meta.command.push_back("--note=<script>alert('x')</script>");
  Analysis analysis = testing::SyntheticAnalysis();
  if (healthy) analysis.findings.clear();
  if (ranks) analysis.features.ranks = testing::SyntheticRanks();
  const saturate::Status written = saturate::WriteFileAtomic(argv[1], RenderHtml(run, analysis));
  if (!written.ok()) {
    std::fprintf(stderr, "render_report: %s\n", written.ToString().c_str());
    return 1;
  }
  std::fputs(RenderSummary(run, analysis).c_str(), stdout);
  return 0;
}
