// RankEnv: which rank of a multi-process job this process is, read from the
// variables its launcher set: torchrun (RANK, LOCAL_RANK, WORLD_SIZE), a Slurm
// step (SLURM_PROCID, SLURM_LOCALID, SLURM_STEP_NUM_TASKS; a batch script has
// no step and is not a rank), Open MPI (OMPI_COMM_WORLD_*) or PMI (PMI_RANK,
// PMI_SIZE). The first launcher whose rank variable is set wins, so torchrun
// started by srun names its own ranks. The same rules are in the Python
// bootstrap (python/saturate/_bootstrap/saturate_autotrace.py); docs/ranks.md.
//
// Thread-safety: pure functions (RankFromEnv reads the environment).
#ifndef SATURATE_BASE_RANK_ENV_H_
#define SATURATE_BASE_RANK_ENV_H_

#include <functional>
#include <optional>
#include <string>

namespace saturate::base {

struct RankEnv {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  std::string launcher;  // "torchrun", "env" (RANK without torchrun), "slurm", "mpi", "pmi"
  std::string host;      // HostName()
};

using GetEnv = std::function<const char*(const char*)>;

// Empty unless this process is one rank of a job of two or more (a value
// that is not a number, or a rank outside the world, counts as no rank).
std::optional<RankEnv> RankFromEnv(const GetEnv& getenv);
std::optional<RankEnv> RankFromEnv();  // the process's environment

// $SATURATE_HOSTNAME when set (containers, tests), else gethostname().
std::string HostName();

// "rank-3": the subdirectory of the run directory a rank records into.
std::string RankDirName(int rank);

// Where a process records spans under `run_dir`: `run_dir`/rank-<r> for a
// rank, `run_dir` itself otherwise (or when it already is that rank's folder).
std::string RankRunDir(const std::string& run_dir, const std::optional<RankEnv>& rank);

}  // namespace saturate::base

#endif  // SATURATE_BASE_RANK_ENV_H_
