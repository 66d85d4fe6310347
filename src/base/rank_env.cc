#include "base/rank_env.h"

#include <unistd.h>

#include <cstdlib>
#include <limits>

namespace saturate::base {
namespace {

struct Launcher {
  const char* name;
  const char* rank;
  const char* local_rank;
  const char* world_size;
};

// In order of precedence (docs/ranks.md).
constexpr Launcher kLaunchers[] = {
    {"torchrun", "RANK", "LOCAL_RANK", "WORLD_SIZE"},
    {"slurm", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_STEP_NUM_TASKS"},
    {"mpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE"},
    {"pmi", "PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE"},
};

std::optional<int> ParseCount(const char* text) {
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value < 0 || value > std::numeric_limits<int>::max()) return std::nullopt;
  return static_cast<int>(value);
}

}  // namespace

std::optional<RankEnv> RankFromEnv(const GetEnv& getenv) {
  for (const Launcher& l : kLaunchers) {
    const char* rank_text = getenv(l.rank);
    // A Slurm batch script sets SLURM_PROCID too, but no step size: not a rank.
    if (rank_text == nullptr || getenv(l.world_size) == nullptr) continue;
    const std::optional<int> rank = ParseCount(rank_text);
    const std::optional<int> world = ParseCount(getenv(l.world_size));
    if (!rank || !world || *world < 2 || *rank >= *world) return std::nullopt;
    RankEnv env;
    env.rank = *rank;
    env.world_size = *world;
    env.local_rank = ParseCount(getenv(l.local_rank)).value_or(0);
    env.launcher = l.name;
    if (env.launcher == "torchrun" && getenv("TORCHELASTIC_RUN_ID") == nullptr)
      env.launcher = "env";
    env.host = HostName();
    return env;
  }
  return std::nullopt;
}

std::optional<RankEnv> RankFromEnv() {
  return RankFromEnv([](const char* name) { return std::getenv(name); });
}

std::string HostName() {
  const char* forced = std::getenv("SATURATE_HOSTNAME");
  if (forced != nullptr && *forced != '\0') return forced;
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

std::string RankDirName(int rank) { return "rank-" + std::to_string(rank); }

std::string RankRunDir(const std::string& run_dir, const std::optional<RankEnv>& rank) {
  if (!rank) return run_dir;
  const std::string name = RankDirName(rank->rank);
  std::string trimmed = run_dir;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  const size_t slash = trimmed.rfind('/');
  const std::string last = slash == std::string::npos ? trimmed : trimmed.substr(slash + 1);
  return last == name ? trimmed : trimmed + "/" + name;
}

}  // namespace saturate::base
