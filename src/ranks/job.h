// Job: the run directory of a multi-rank job (torchrun, Slurm, MPI) read as
// one Run per rank on one time axis (docs/ranks.md).
//
// Layout: each rank's spans in RUN/rank-<r>/ (their meta lines name the rank
// and host); node samples in RUN/meta.json + samples.jsonl (saturate wrapped
// the launcher) or RUN/<node>/meta.json (saturate ran inside each task, or
// per-node run directories gathered under RUN), with those nodes' rank
// folders beside or inside them. Every spans file is placed by its own
// wall-clock reading; hosts' clocks are then aligned by the end times of the
// collectives every rank leaves together (AlignClocks).
//
// LoadJob() is the only function here that touches the file system.
// Thread-safety: plain values and reentrant functions.
#ifndef SATURATE_RANKS_JOB_H_
#define SATURATE_RANKS_JOB_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "doctor/run.h"
#include "saturate/base/status.h"

namespace saturate::ranks {

struct RankRun {
  int rank = 0;
  int local_rank = 0;
  int world_size = 0;
  std::string host;
  std::string launcher;
  std::string cuda_visible_devices;  // of the rank's environment, when set
  std::string dir;                   // RUN/rank-<r>
  std::optional<int> exit_code;      // task.json (saturate ran inside the task)
  doctor::Run run;                   // its spans with its node's samples, on the job's axis
  int64_t clock_offset_ns = 0;       // added to its host's times by the alignment
};

struct ClockAlignment {
  // "one host" (a shared clock: nothing to align), "collectives" (ends of
  // blocking collectives), "backward" (DistributedDataParallel's backward ends
  // with the gradients' all-reduce) or "none" (nothing every rank leaves
  // together: times across hosts are as their clocks read).
  std::string method = "none";
  int events = 0;                                 // sync points matched across ranks
  std::map<std::string, int64_t> host_offset_ns;  // added to each host's times
  int64_t residual_skew_ns = 0;  // median spread of a sync point's ends after alignment
};

// What `saturate watch` saw while the job ran (RUN/hang.json, written by
// src/ranks/rank_scanner.h): a stall and the rank it suspected.
struct LiveHang {
  std::optional<int> suspect_rank;
  std::string kind;  // "dead", "hung", "unknown"
  double stalled_s = 0;
  std::vector<std::string> suspect_stack;  // its main thread's innermost frames, when dumped
};

struct Job {
  std::string dir;
  int world_size = 0;
  std::vector<RankRun> ranks;  // those found, by rank
  std::vector<int> missing_ranks;
  std::vector<std::string> hosts;  // in order of first rank
  ClockAlignment clock;
  std::vector<std::string> warnings;  // for the user: missing ranks, far-apart clocks, ...
  std::optional<LiveHang> hang;       // the latest stall that did not recover
};

// Whether `dir` holds rank folders (RUN/rank-<r>/ or RUN/<node>/rank-<r>/).
bool IsJobDir(const std::string& dir);

// Reads every rank and node, aligns the hosts' clocks and shifts each rank's
// Run by its host's offset. A rank folder that cannot be read, a missing
// rank or a torn file is a warning, not an error: the job shows what it has.
// NotFound when `dir` holds no rank folder.
Result<Job> LoadJob(const std::string& dir);

// One rank's sync points: the end times (ns, unaligned job axis) of the
// events every rank leaves at the same instant, in order.
struct SyncEnds {
  int rank = 0;
  std::string host;
  std::vector<int64_t> end_ns;
};

// Per-host offsets that bring each host's sync-point ends onto the reference
// host's (the first rank's). The offset of a host is the median, over the
// sync points all ranks have, of (reference host's median end - that host's
// median end). Pure.
ClockAlignment AlignClocks(const std::vector<SyncEnds>& ranks, const std::string& method);

// AlignClocks over the best sync points the ranks share (collectives, else
// DDP's backward), or none.
ClockAlignment AlignJob(const std::vector<RankRun>& ranks);

// The process that trained: the one with the most step marks (0: none).
int TrainingPid(const doctor::Run& run);

// Whether a span is a blocking torch.distributed collective (all_reduce,
// barrier, ...: every rank leaves it together).
bool IsBlockingCollective(const doctor::Span& span);

// The end times of a rank's sync points of `method`: "collectives" (blocking
// collectives of the training process) or "backward" (its backward spans,
// when a DistributedDataParallel model was built).
std::vector<int64_t> SyncPointEnds(const doctor::Run& run, const std::string& method);

// Adds `ns` to every time of a Run (spans, marks, samples, loader counters).
void ShiftRun(int64_t ns, doctor::Run* run);

}  // namespace saturate::ranks

#endif  // SATURATE_RANKS_JOB_H_
