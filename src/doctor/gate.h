// Gate: a CI rule on doctor's findings, e.g. `input_pipeline>5%` (fail when
// input_pipeline costs more than 5% of the run) or `any>30s` (fail when any
// cause costs more than 30 seconds). Parsed from --fail-on and checked
// against an Analysis; pure.
//
// Thread-safety: plain values and reentrant functions.
#ifndef SATURATE_DOCTOR_GATE_H_
#define SATURATE_DOCTOR_GATE_H_

#include <string>
#include <string_view>
#include <vector>

#include "doctor/analysis.h"
#include "saturate/base/status.h"

namespace saturate::doctor {

// The cause ids findings use (docs/diagnosis.md).
const std::vector<std::string>& CauseIds();

struct Gate {
  std::string cause;  // a cause id, or "any"
  double threshold = 0;
  bool percent = false;  // threshold in % of the run, else in seconds
};

// "CAUSE>N%" or "CAUSE>Ns"; CAUSE is a cause id or "any".
Result<Gate> ParseGate(std::string_view text);

// One line per finding that exceeds a gate, e.g. "input_pipeline lost 12.0% of
// the run (gate: input_pipeline>5%)"; empty when every gate holds. Findings
// below the report threshold still count.
std::vector<std::string> FailedGates(const std::vector<Gate>& gates,
                                     const std::vector<Finding>& findings);

}  // namespace saturate::doctor

#endif  // SATURATE_DOCTOR_GATE_H_
