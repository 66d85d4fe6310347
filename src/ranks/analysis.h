// Cross-rank analysis of a Job: each rank's steps side by side, who the
// others wait for and why, and the findings only a multi-rank view shows:
// a straggler (its data path, compute, uneven batches, or rank-0-only work
// such as checkpoints), and a rank that left or hung while the others
// blocked (docs/ranks.md, docs/diagnosis.md "Ranks").
//
// Waiting for other ranks: in a step, a rank's sync time is its time in
// blocking collectives, plus backward when a DistributedDataParallel model
// all-reduces there. The rank that arrives last waits least, so each rank's
// wait is its sync time minus the smallest one among the ranks at that step.
// This needs no clock alignment: only durations are compared.
//
// StepTable() reads Runs; everything else is pure over its RankSteps, so the
// rules are tested on synthetic tables. Thread-safety: reentrant functions.
#ifndef SATURATE_RANKS_ANALYSIS_H_
#define SATURATE_RANKS_ANALYSIS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "doctor/analysis.h"
#include "ranks/job.h"

namespace saturate::ranks {

struct RankStep {
  double start_s = 0;  // job axis
  double dur_s = 0;
  double data_wait_s = 0;   // DataLoader/loader waits of the training thread
  double sync_s = 0;        // collectives (+ DDP backward)
  double checkpoint_s = 0;  // blocking saves
  double collective_s = 0;  // explicit collectives alone (part of sync_s)
  int64_t collective_bytes = 0;
  double wait_s = 0;    // sync_s minus the step's smallest sync_s across ranks
  int64_t samples = 0;  // in the step's batch, when recorded
  int64_t elems = 0;
};

struct RankSteps {
  int rank = 0;
  int local_rank = 0;
  std::string host;
  std::string gpu;              // "cuda:1" (the device its copies went to); empty: none seen
  std::vector<RankStep> steps;  // step i: from the i-th to the (i+1)-th mark
  double last_event_s = 0;      // the rank's last recorded activity (job axis)
  // When its training process exited through exit handlers (sys.exit, the
  // end of its script, an uncaught exception), and that exception; empty
  // when it was killed or still ran when the job ended.
  std::optional<double> exit_s;
  std::string exception;
  std::optional<int> exit_code;
  double clock_offset_ms = 0;
  // Cores used on its node by processes outside the job (its node's samples:
  // host busy minus the watched tree), mean; empty without samples.
  std::optional<double> host_other_cores;
  std::string note;  // "rank directory missing", "no step marks", ...
};

// Who the others wait for.
struct Straggler {
  int rank = 0;
  double others_wait_per_step_s = 0;  // the other ranks' mean wait per step
  double wait_share = 0;              // of all waiting, the share in steps where it came last
  double lost_s = 0;                  // summed waits of all ranks / world size
  // "data_wait", "checkpoint", "uneven_batches", "host" (other work on its
  // node takes its cores) or "compute".
  std::string reason;
  double excess_per_step_s = 0;  // its extra time per step in `reason`, against the others
  double elems_ratio = 0;        // its batch elements / the others' median (0: unknown)
  double host_other_cores = 0;   // cores other work took on its node, over the others' nodes
};

// Per-rank step tables from the loaded ranks (missing ranks get a row with a
// note), with waits filled in.
std::vector<RankSteps> StepTable(const Job& job);

// Fills each step's wait_s from the ranks' sync_s at that step.
void ComputeWaits(std::vector<RankSteps>* table);

// The rank the others wait for most, when the wait is worth naming: at least
// 1 ms and 5% of the median step a step, and at least 60% of all waiting
// happens in steps where that rank came last.
std::optional<Straggler> FindStraggler(const std::vector<RankSteps>& table);

// Time in explicit collectives that no rank escapes: per step, the least
// collective time among the ranks (the last to arrive waits for nobody, so
// its time is the transfer itself).
struct CollectiveCost {
  double per_step_s = 0;
  double pct_of_step = 0;
  double total_s = 0;
  double bytes_per_step = 0;  // of the rank with the least time
};
std::optional<CollectiveCost> CollectiveCostOf(const std::vector<RankSteps>& table);

// The heat map and table data for the report.
doctor::RanksView ViewOf(const Job& job, const std::vector<RankSteps>& table,
                         const std::optional<Straggler>& straggler);

// Findings across ranks, with time lost as a share of `duration_s`: the
// straggler (cause by its reason), collectives costing >= 10% of the step
// and >= 1 ms (communication), and, in a job that failed (its exit code
// or a rank's is not 0; unknown counts as failed), a stall at its end of at
// least 5 s and 10 median steps: a rank left or hung while the others
// blocked in their next collective (idle_allocation). A rank that
// `saturate watch` saw hang or die while the job ran (`hang`) is named first.
std::vector<doctor::Finding> DiagnoseRanks(const std::vector<RankSteps>& table,
                                           const std::optional<Straggler>& straggler,
                                           double duration_s, double job_end_s,
                                           std::optional<int> job_exit_code,
                                           const std::optional<LiveHang>& hang = std::nullopt);

// A run directory analysed the way doctor reports it: a single run as
// doctor::Analyze does; a job as its first rank's analysis (with its node's
// samples) plus the cross-rank findings and features.ranks. `all_findings`
// are the findings before the min_time_lost_pct cut (for --fail-on gates).
struct DirAnalysis {
  doctor::Run run;
  doctor::Analysis analysis;
  std::vector<doctor::Finding> all_findings;
  std::vector<std::string> warnings;
};
Result<DirAnalysis> AnalyzeDir(const std::string& dir, const doctor::AnalysisOptions& options);

}  // namespace saturate::ranks

#endif  // SATURATE_RANKS_ANALYSIS_H_
