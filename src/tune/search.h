// Search: which trial `saturate tune` runs next, decided from the results so
// far. Pure: a Strategy never runs anything; the caller runs the proposed
// trial and reports its outcome. Tests drive it with synthetic, noisy
// response surfaces.
//
// Two strategies:
//   grid      every point, each at the full budget; for small spaces
//             (<= SearchOptions::grid_max_points).
//   adaptive  coordinate descent over the knobs in the order they interact
//             (precision -> batch -> threads -> prefetch -> others; Role in
//             space.h). Each coordinate is swept ascending at a screening
//             budget; the sweep stops at the first infeasible batch size
//             (larger ones would not fit either) and when `patience` values
//             in a row gain less than the noise. The best `keep` screened
//             values are re-run at the full budget and the rest dropped
//             (successive halving with two rungs). A coordinate moves off its
//             current value only for a gain above the noise; a pass that moves
//             nothing ends the search.
//
// In both, a failed trial is infeasible; for the batch parameter, a failure
// also rules out the larger batch sizes with the same other settings
// (threads and prefetch aside, which do not change memory).
//
// Ownership: a Strategy copies the Space it is given. Thread-safety: one
// thread at a time.
#ifndef SATURATE_TUNE_SEARCH_H_
#define SATURATE_TUNE_SEARCH_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tune/space.h"

namespace saturate::tune {

struct Proposal {
  Config config;
  double budget_fraction = 1.0;  // of the full trial budget; < 1 for screening
  std::string stage;             // for people: "grid", "screen threads", "confirm batch", ...
};

struct Outcome {
  bool feasible = false;             // the trial ran to its budget or exited 0
  std::optional<double> throughput;  // higher is better; absent: nothing measured
  double noise_rel = 0;              // the measurement's relative standard error
};

struct SearchOptions {
  enum class Mode { kAuto, kGrid, kAdaptive };
  Mode mode = Mode::kAuto;
  size_t grid_max_points = 12;  // kAuto: grid up to this many points
  // Relative gains below this are noise (the floor; a trial's own noise may
  // raise it).
  double noise_rel = 0.03;
  int patience = 2;              // values in a row without gain before a sweep stops
  double screen_fraction = 0.5;  // budget of a screening trial
  int keep = 2;                  // screened values re-run at the full budget
  int max_passes = 3;            // coordinate descent passes over all knobs
  size_t max_trials = 0;         // 0: no limit
};

// One measured trial, as the strategy saw it.
struct Trial {
  Proposal proposal;
  Outcome outcome;
};

class Strategy {
 public:
  virtual ~Strategy() = default;

  // The next trial to run, or nullopt when the search is done.
  virtual std::optional<Proposal> Next() = 0;
  // The outcome of the trial Next() proposed last.
  virtual void Report(const Outcome& outcome) = 0;

  virtual std::string name() const = 0;  // "grid", "adaptive"
  // About how many trials the search will run in all (for a progress bar;
  // the adaptive search usually stops earlier).
  virtual size_t EstimatedTrials() const = 0;
  // The configuration to recommend: the best full-budget result, except that
  // the start is kept when it is within the noise of the best. Empty when no
  // full-budget trial was feasible.
  virtual std::optional<Config> Best() const = 0;

  const std::vector<Trial>& trials() const { return trials_; }

 protected:
  std::vector<Trial> trials_;
};

std::unique_ptr<Strategy> MakeStrategy(const Space& space, const Config& start,
                                       const SearchOptions& options);

// Whether `a` beats `b` by more than the noise of both (relative).
bool Beats(const Outcome& a, const Outcome& b, double noise_floor_rel);

// Micro-batches to accumulate so that `micro_batch` keeps an effective batch
// of `effective_batch`: round(effective / micro), at least 1.
int GradientAccumulation(double effective_batch, double micro_batch);

}  // namespace saturate::tune

#endif  // SATURATE_TUNE_SEARCH_H_
