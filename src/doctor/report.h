// Report: how doctor presents an Analysis to people. A short terminal
// summary (top findings first, one line each, then the fix) and a
// self-contained HTML page (inline SVG charts: device utilization timeline,
// step-phase breakdown, idle-gap histogram; no scripts or fetches from
// elsewhere; every string from the run is HTML-escaped).
//
// Thread-safety: reentrant pure functions.
#ifndef SATURATE_DOCTOR_REPORT_H_
#define SATURATE_DOCTOR_REPORT_H_

#include <string>
#include <string_view>

#include "doctor/analysis.h"
#include "doctor/run.h"

namespace saturate::doctor {

// `color`: ANSI colors for a terminal. `max_findings`: how many to list.
// Lines stay within 80 columns where words allow. Where the report and
// findings.json were written is left to the caller, which knows whether
// writing them succeeded.
std::string RenderSummary(const Run& run, const Analysis& analysis, bool color = false,
                          int max_findings = 5);

std::string RenderHtml(const Run& run, const Analysis& analysis);

// &, <, >, " and ' as entities.
std::string HtmlEscape(std::string_view text);

}  // namespace saturate::doctor

#endif  // SATURATE_DOCTOR_REPORT_H_
