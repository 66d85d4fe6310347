// A synthetic run and its analysis for the report's tests and the
// render_report driver: a 62.3 s run on one GPU whose utilization saw-tooths
// because the training loop waits for batches, with step phases, idle gaps
// and two findings. Built by hand, so report tests need no rules.
//
// Thread-safety: reentrant functions returning fresh values.
#ifndef SATURATE_DOCTOR_TESTING_REPORT_FIXTURE_H_
#define SATURATE_DOCTOR_TESTING_REPORT_FIXTURE_H_

#include "doctor/analysis.h"
#include "doctor/run.h"

namespace saturate::doctor::testing {

Run SyntheticRun();
Analysis SyntheticAnalysis();

}  // namespace saturate::doctor::testing

#endif  // SATURATE_DOCTOR_TESTING_REPORT_FIXTURE_H_
