// Step marks recorded so far in a run directory, for budgets counted in
// steps (saturate tune --trial-steps). Two writers record the same line
// format ({"ph":"step",...}, docs/trace.md):
//   spans-<pid>.jsonl        the trace library and explicit saturate.step()
//   spans-<pid>-auto.jsonl   the Python auto-instrumentation (docs/auto.md)
// A job that marks its steps itself is often auto-instrumented as well; the
// same steps must not count twice. So the explicit marks count when there
// are any, else the automatic ones.
//
// Thread-safety: a pure read of the directory; safe while writers append
// (a partly written last line is not a mark yet).
#ifndef SATURATE_JOB_STEPS_H_
#define SATURATE_JOB_STEPS_H_

#include <cstdint>
#include <string>

namespace saturate::job {

struct StepMarks {
  int64_t explicit_marks = 0;  // in spans-<pid>.jsonl
  int64_t auto_marks = 0;      // in spans-<pid>-auto.jsonl
  // The steps the job made: explicit marks if any, else the automatic ones.
  int64_t steps() const { return explicit_marks > 0 ? explicit_marks : auto_marks; }
};

// Reads every spans file in `run_dir`, or in `run_dir`/rank-0 for a
// multi-rank job (docs/ranks.md: each rank takes the job's steps); a
// missing directory has no marks.
StepMarks CountStepMarks(const std::string& run_dir);

}  // namespace saturate::job

#endif  // SATURATE_JOB_STEPS_H_
