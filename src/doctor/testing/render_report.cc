// render_report: writes the report of the synthetic run (report_fixture.h)
// for tests/e2e/report_chromium.sh to open in a browser, and prints the
// terminal summary. One command-line argument carries a <script> element so
// the browser test can check that nothing from the run becomes markup.
//
// usage: render_report OUT.html [--healthy]
#include <cstdio>
#include <cstring>

#include "base/file.h"
#include "doctor/report.h"
#include "doctor/testing/report_fixture.h"

int main(int argc, char** argv) {
  using namespace saturate::doctor;
  if (argc < 2 || argc > 3 || (argc == 3 && std::strcmp(argv[2], "--healthy") != 0)) {
    std::fprintf(stderr, "usage: render_report OUT.html [--healthy]\n");
    return 2;
  }
  Run run = testing::SyntheticRun();
  run.meta.command.push_back("--note=<script>alert('x')</script>");
  Analysis analysis = testing::SyntheticAnalysis();
  if (argc == 3) analysis.findings.clear();
  const saturate::Status written = saturate::WriteFileAtomic(argv[1], RenderHtml(run, analysis));
  if (!written.ok()) {
    std::fprintf(stderr, "render_report: %s\n", written.ToString().c_str());
    return 1;
  }
  std::fputs(RenderSummary(run, analysis).c_str(), stdout);
  return 0;
}
