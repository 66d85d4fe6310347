// Report: how `saturate tune` presents its results, both rendered from the
// tune.json object (docs/tune.md gives its fields) so the terminal, the JSON
// and the HTML never disagree. A terminal table of trials (parameters ->
// throughput, noise, device busy, memory, CPU; the best marked) with the
// recommendation, and a self-contained HTML page (inline SVG charts from
// doctor/svg.h: throughput and CPU against threads, throughput and memory
// against batch size; every string from the results is HTML-escaped).
//
// Thread-safety: reentrant pure functions.
#ifndef SATURATE_TUNE_REPORT_H_
#define SATURATE_TUNE_REPORT_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace saturate::tune {

std::string RenderTable(const nlohmann::json& result, bool color = false);
std::string RenderHtml(const nlohmann::json& result);

// The argv as a shell would need it typed.
std::string ShellLine(const std::vector<std::string>& argv);

}  // namespace saturate::tune

#endif  // SATURATE_TUNE_REPORT_H_
