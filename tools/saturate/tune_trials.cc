// The trial lines of `saturate tune` and `doctor --check-fix` (tune_trials.h).
#include "tune_trials.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace saturate::cli {
namespace {

using nlohmann::json;

std::string Fmt(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

// The line printed on stderr as each trial ends.
std::string TrialLine(const json& row, size_t estimated) {
  std::string line = "trial " + std::to_string(row["id"].get<int>()) + "/~" +
                     std::to_string(estimated) + " " + row["stage"].get<std::string>() + ": ";
  for (const auto& [k, v] : row["config"].items()) line += k + "=" + v.get<std::string>() + " ";
  line += "-> ";
  if (row.contains("throughput")) {
    line += Fmt("%.4g ", row["throughput"].get<double>()) + row.value("unit", std::string());
  } else {
    line += row["status"].get<std::string>();
    if (row["status"] == "failed")
      line += " (exit " + std::to_string(row["exit_code"].get<int>()) + ")";
  }
  return line;
}

}  // namespace

// Prints each trial's line above the progress bar.
tune::TrialCallback PrintTrials(const char* name, ProgressBar* bar) {
  return [name, bar](const tune::TrialProgress& p) {
    bar->Finish();
    std::fprintf(stderr, "saturate %s: %s\n", name, TrialLine(p.row, p.estimated).c_str());
    bar->Update(p.done, std::max(p.done, p.estimated));
  };
}

// "--trial-seconds 45" means seconds; "45s", "2min" work too.
Result<int64_t> ParseSeconds(const char* flag, const std::string& text) {
  const bool bare = !text.empty() && text.find_first_not_of("0123456789.") == std::string::npos;
  Result<int64_t> ns = ParseDurationNs(bare ? text + "s" : text);
  if (!ns.ok()) return ns.status().WithContext(flag);
  return ns;
}

}  // namespace saturate::cli
