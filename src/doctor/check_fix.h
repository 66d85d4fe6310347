// Check-fix: turning a finding's fix into a change of the command's own
// flags, and judging the re-runs. `saturate doctor --check-fix` applies the
// top finding whose fix maps to a knob (num_workers, batch size, prefetch),
// re-runs the command A/B through tune's trials, and records the measured
// gain against the finding's prediction; a fix that gives no reliable gain is
// demoted. The mapping and the judgement are pure functions, tested here; the
// runs are the CLI's (tools/saturate/cmd_doctor.cc).
//
// Thread-safety: plain values and reentrant functions.
#ifndef SATURATE_DOCTOR_CHECK_FIX_H_
#define SATURATE_DOCTOR_CHECK_FIX_H_

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "doctor/analysis.h"
#include "saturate/base/status.h"

namespace saturate::doctor {

// Where argv passes a value: "-j 0" (flag "-j", value at index+1),
// "--workers=0" (flag "--workers=", same index) or "-j0" (flag "-j", same
// index, attached).
struct FlagValue {
  size_t index = 0;  // the argv element holding the value
  std::string flag;  // "-j", "--workers="
  std::string value;
  bool attached = false;  // "-j0": the value follows the flag in one element
};

// The first of `flags` in argv that carries `value` (any integer value when
// `value` is empty). "-j" also matches attached ("-j4").
std::optional<FlagValue> FindFlagValue(const std::vector<std::string>& argv,
                                       const std::set<std::string_view>& flags,
                                       std::optional<std::string> value);

// The command-line flags of each knob, as public training scripts spell them.
const std::set<std::string_view>& WorkerFlags();
const std::set<std::string_view>& BatchFlags();
const std::set<std::string_view>& PrefetchFlags();

// A finding's fix as one flag of the command changed.
struct KnobChange {
  std::string knob;  // the tune parameter: "num_workers", "batch_size", "prefetch_factor"
  std::string flag;
  std::string from, to;
  std::vector<std::string> command;  // argv with the value replaced by "{knob}"
};

// The change for finding `x` of a run of `argv`; Unimplemented saying
// why when its fix is not a flag of the command (no fix_value, a knob with
// no flag, or no flag carrying the value the run used).
Result<KnobChange> KnobForFix(const Finding& x, const Features& f,
                              const std::vector<std::string>& argv);

// Measured against predicted: the gains (speedup - 1) agree within
// `tolerance` of the predicted gain, or within 3 points (the noise of short
// re-runs). An upper-bound prediction is met when the measured gain reaches
// (1 - tolerance) of it. Fills the FixCheck's judgement and verdict.
void JudgeCheck(const Prediction& predicted, double measured_speedup, bool reliable_gain,
                FixCheck* check, double tolerance = 0.3);

// The fixed per-step share a batch change x`k` implies when it gave
// `speedup` in samples/s: speedup = k / (fixed + k (1 - fixed)) solved for
// fixed, in [0, 1]; nullopt when k <= 1 or nothing was measured.
std::optional<double> FixedShareFromSpeedup(double k, double speedup);

// Records `check` on `findings[index]`, demotes it when the gain was not
// reliable, and re-ranks the findings.
std::vector<Finding> ApplyCheck(std::vector<Finding> findings, size_t index, FixCheck check,
                                double min_time_lost_pct);

}  // namespace saturate::doctor

#endif  // SATURATE_DOCTOR_CHECK_FIX_H_
