// A synthetic run and its analysis for the report's tests and the
// render_report driver: a 62.3 s run on one GPU whose utilization saw-tooths
// because the training loop waits for batches, with step phases, idle gaps
// and two findings. Built by hand, so report tests need no rules.
// SyntheticRanks() is a 4-rank job on two hosts for the report's Ranks
// section: rank 2 is slow (its data wait), the others wait for it, rank 3's
// directory is missing.
//
// Thread-safety: reentrant functions returning fresh values.
#ifndef SATURATE_DOCTOR_TESTING_REPORT_FIXTURE_H_
#define SATURATE_DOCTOR_TESTING_REPORT_FIXTURE_H_

#include "doctor/analysis.h"
#include "doctor/run.h"

namespace saturate::doctor::testing {

Run SyntheticRun();
Analysis SyntheticAnalysis();
// `steps` steps per rank (rank 2 a few fewer: it left early).
RanksView SyntheticRanks(int steps = 30);

}  // namespace saturate::doctor::testing

#endif  // SATURATE_DOCTOR_TESTING_REPORT_FIXTURE_H_
