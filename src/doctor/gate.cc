#include "doctor/gate.h"

#include <algorithm>
#include <charconv>
#include <cstdio>

namespace saturate::doctor {

const std::vector<std::string>& CauseIds() {
  static const std::vector<std::string> ids = {
      "parallelism",      "input_pipeline",  "model_config", "memory",
      "communication",    "idle_allocation", "monitoring",   "host_to_device_copy",
      "checkpoint_stall", "cpu_contention",  "io_bound",     "throttling",
      "launch_bound",     "recompile"};
  return ids;
}

Result<Gate> ParseGate(std::string_view text) {
  const std::string flag = "--fail-on '" + std::string(text) + "'";
  const size_t gt = text.find('>');
  if (gt == std::string_view::npos || gt == 0) {
    return Status::InvalidArgument(flag + ": use CAUSE>N% or CAUSE>Ns, e.g. input_pipeline>5%");
  }
  Gate gate;
  gate.cause = std::string(text.substr(0, gt));
  const auto& ids = CauseIds();
  if (gate.cause != "any" && std::find(ids.begin(), ids.end(), gate.cause) == ids.end()) {
    std::string known = "any";
    for (const std::string& id : ids) known += ", " + id;
    return Status::InvalidArgument(flag + ": unknown cause '" + gate.cause + "' (one of " + known +
                                   ")");
  }
  std::string_view number = text.substr(gt + 1);
  if (number.ends_with('%')) {
    gate.percent = true;
  } else if (!number.ends_with('s')) {
    return Status::InvalidArgument(flag + ": give the threshold a unit, % of the run or s");
  }
  number.remove_suffix(1);
  const auto [end, ec] =
      std::from_chars(number.data(), number.data() + number.size(), gate.threshold);
  if (ec != std::errc() || end != number.data() + number.size() || gate.threshold < 0) {
    return Status::InvalidArgument(flag + ": '" + std::string(number) +
                                   "' is not a non-negative number");
  }
  return gate;
}

std::vector<std::string> FailedGates(const std::vector<Gate>& gates,
                                     const std::vector<Finding>& findings) {
  std::vector<std::string> failed;
  for (const Gate& gate : gates) {
    for (const Finding& f : findings) {
      if (gate.cause != "any" && gate.cause != f.cause) continue;
      const double lost = gate.percent ? f.time_lost_pct : f.time_lost_s;
      if (lost <= gate.threshold) continue;
      char line[256];
      std::snprintf(line, sizeof(line), "%s lost %.1f%s of the run (gate: %s>%g%s)",
                    f.cause.c_str(), lost, gate.percent ? "%" : " s", gate.cause.c_str(),
                    gate.threshold, gate.percent ? "%" : "s");
      failed.emplace_back(line);
    }
  }
  return failed;
}

}  // namespace saturate::doctor
