// Who waited for whom during a sharded save (saturate.DistCheckpointer,
// docs/checkpoint.md): one save's checkpoint spans lined up across ranks.
//
// Each rank records, per save, `checkpoint_save` on its training thread (the
// blocking part: flattening and the snapshot copy; args step, seq) and
// `checkpoint_write` on its writer thread (its files written and committed;
// arg step); rank 0's coordinator records `checkpoint_commit` (the global
// manifest; args step, seq) once every rank's files are in. A save is
// (step, seq); the n-th write of a step on a rank belongs to that rank's n-th
// save of the step. The commit barrier waits for the rank whose files are
// committed last: each other rank waited (its end of write) to (the slowest
// one's). Which part of the slowest rank's save made it late is the one
// where it exceeds the other ranks' median most: reaching the save
// ("arrival"), the snapshot, or the write.
//
// Pure functions over spans already on one time axis (ranks::LoadJob);
// unit-tested on a recorded 2-rank run (testing/checkpoint_ranks/).
// Thread-safety: reentrant functions over values.
#ifndef SATURATE_DOCTOR_CHECKPOINT_RANKS_H_
#define SATURATE_DOCTOR_CHECKPOINT_RANKS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "doctor/analysis.h"
#include "doctor/run.h"

namespace saturate::doctor {

// One rank's part of one save. Times in ms from the save's first
// checkpoint_save start over all ranks.
struct RankSaveTimes {
  int rank = 0;
  double start_ms = 0;     // when it reached the save
  double snapshot_ms = 0;  // checkpoint_save: the training thread blocked
  double write_ms = 0;     // checkpoint_write: its files written and committed
  double done_ms = 0;      // end of its write: its files are in
  double waited_ms = 0;    // the slowest rank's done_ms minus its own
};

struct SaveRanks {
  int64_t step = 0;
  int64_t seq = 0;
  std::vector<RankSaveTimes> ranks;  // by rank; only ranks with both spans
  int slowest_rank = 0;              // whose files were committed last
  std::string slowest_phase;         // "arrival", "snapshot" or "write"
  double slowest_phase_ms = 0;       // its time there (arrival: after the first rank)
  double others_phase_ms = 0;        // the other ranks' median there
  double others_waited_ms = 0;       // mean over the other ranks
  double max_waited_ms = 0;
  double commit_ms = 0;  // rank 0's global manifest write (0: not recorded)
};

// The saves every one of at least two ranks recorded, with a global commit
// span, by (step, seq). `spans_by_rank`: each rank's spans (any kinds; only
// the checkpoint ones above are read).
std::vector<SaveRanks> CheckpointSavesByRank(const std::map<int, std::vector<Span>>& spans_by_rank);

// "save 3: rank 1 snapshotted 402 ms (the others 2 ms); rank 0 waited 396 ms
// for it at the commit barrier".
std::string DescribeSave(const SaveRanks& save);

// Adds what the saves show to the checkpoint finding of `findings` (cause
// checkpoint_stall, not the straggler one): evidence `checkpoint_slowest_rank`,
// `checkpoint_slowest_saves`, `checkpoint_others_waited_ms_per_save`, and one
// `save_<step>_others_waited_ms` line per save (the `max_lines` with the
// longest waits, in step order), and the slowest rank in its title. Without
// such a finding an info finding of that cause is added. Nothing when no
// save made another rank wait at least `min_wait_ms`.
void AddCheckpointRanks(const std::vector<SaveRanks>& saves, double duration_s,
                        std::vector<Finding>* findings, double min_wait_ms = 1.0,
                        size_t max_lines = 6);

}  // namespace saturate::doctor

#endif  // SATURATE_DOCTOR_CHECKPOINT_RANKS_H_
