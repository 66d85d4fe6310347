#include "tune/search.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "base/testing.h"

namespace saturate::tune {
namespace {

// A synthetic training job. The GPU's rate grows with the batch and
// saturates, bf16 is 1.6x faster and halves activation memory; the loader's
// rate grows with threads up to 6 cores and then falls (contention), and
// prefetch 1 costs 20%. Throughput is the slower of the two, in samples/s.
struct Surface {
  double gpu_peak = 6000;
  double memory_limit = 1024;  // samples of fp32 activations that fit
  double noise = 0.02;         // relative, normal

  bool Fits(const Config& c) const {
    const double per_sample = c.at("amp") == "bf16" ? 0.5 : 1.0;
    return *NumberOf(c, "batch") * per_sample <= memory_limit;
  }
  double Truth(const Config& c) const {
    const double batch = *NumberOf(c, "batch");
    const double gpu = gpu_peak * batch / (batch + 128) * (c.at("amp") == "bf16" ? 1.6 : 1.0);
    const double t = *NumberOf(c, "threads");
    double loader = t <= 6 ? 1000 * t : 6000 - 150 * (t - 6);
    if (c.count("prefetch") && *NumberOf(c, "prefetch") < 2) loader *= 0.8;
    return std::min(gpu, loader);
  }
};

struct Driver {
  const Surface& surface;
  std::mt19937 rng;
  std::normal_distribution<double> normal{0.0, 1.0};
  std::vector<Config> proposed;

  Outcome Run(const Proposal& p) {
    proposed.push_back(p.config);
    if (!surface.Fits(p.config)) return Outcome{false, std::nullopt, 0};
    // A shorter trial measures with more noise.
    const double sd = surface.noise / std::sqrt(p.budget_fraction);
    return Outcome{true, surface.Truth(p.config) * (1 + sd * normal(rng)), sd};
  }

  // Runs the search to its end; returns the recommendation.
  std::optional<Config> Search(Strategy& s, size_t limit = 1000) {
    while (std::optional<Proposal> p = s.Next()) {
      s.Report(Run(*p));
      if (proposed.size() > limit) break;
    }
    return s.Best();
  }
};

Space BigSpace() {
  return *ParseSpace({"amp=off,bf16", "batch=32..2048:x2", "threads=1..32:x2", "prefetch=1,2,4"});
}

double BestTruth(const Space& space, const Surface& surface) {
  double best = 0;
  for (const Config& c : space.Grid()) {
    if (surface.Fits(c)) best = std::max(best, surface.Truth(c));
  }
  return best;
}

TEST(SearchTest, SmallSpacesAreSearchedAsAGrid) {
  const Space space = *ParseSpace({"threads=2,4,8", "amp=off,bf16", "batch=256"});
  const Config start = FirstConfig(space);
  auto s = MakeStrategy(space, start, {});
  EXPECT_EQ(s->name(), "grid");
  EXPECT_EQ(s->EstimatedTrials(), 6u);
  Surface surface;
  Driver d{surface, std::mt19937(1)};
  const std::optional<Config> best = d.Search(*s);
  EXPECT_EQ(d.proposed.size(), 6u);
  EXPECT_EQ(d.proposed[0], start);  // the start is measured first
  ASSERT_TRUE(best);
  // fp32 at batch 256 tops out at 4000 samples/s; bf16 lets 8 threads' 5700 through.
  EXPECT_EQ(ConfigText(*best), "amp=bf16 batch=256 threads=8");
}

TEST(SearchTest, GridSkipsLargerBatchesAfterAFailure) {
  const Space space = *ParseSpace({"amp=off", "batch=256..4096:x2", "threads=2"});
  Surface surface;  // fp32 fits up to 1024
  Driver d{surface, std::mt19937(2)};
  auto s = MakeStrategy(space, FirstConfig(space), {});
  const std::optional<Config> best = d.Search(*s);
  ASSERT_EQ(d.proposed.size(), 4u);  // 256, 512, 1024 fit; 2048 fails; 4096 skipped
  EXPECT_EQ(d.proposed.back().at("batch"), "2048");
  EXPECT_FALSE(s->trials().back().outcome.feasible);
  EXPECT_TRUE(best);
}

// The adaptive search on 2 x 7 x 6 x 3 = 252 points, 2% noise, 50 seeds:
// it finds a configuration within 8% of the true optimum nearly always, in a
// small fraction of the grid's trials, and never proposes a batch size larger
// than one that failed at the same precision.
TEST(SearchTest, AdaptiveFindsNearOptimumWithFewTrials) {
  const Space space = BigSpace();
  Surface surface;
  const double optimum = BestTruth(space, surface);
  int near = 0;
  size_t most_trials = 0;
  for (int seed = 0; seed < 50; ++seed) {
    // Loader and GPU are not both the bottleneck at the start (coordinate
    // descent cannot leave a point where every single knob is blocked by
    // another resource; docs/tune.md).
    Config start = FirstConfig(space, {{"batch", "64"}, {"threads", "4"}, {"prefetch", "2"}});
    auto s = MakeStrategy(space, start, {});
    ASSERT_EQ(s->name(), "adaptive");
    Driver d{surface, std::mt19937(static_cast<unsigned>(seed))};
    const std::optional<Config> best = d.Search(*s);
    ASSERT_TRUE(best);
    near += surface.Truth(*best) >= 0.92 * optimum;
    most_trials = std::max(most_trials, d.proposed.size());
    for (const Trial& failed : s->trials()) {
      if (failed.outcome.feasible) continue;
      for (const Trial& t : s->trials()) {
        if (t.proposal.config.at("amp") == failed.proposal.config.at("amp")) {
          EXPECT_LE(*NumberOf(t.proposal.config, "batch"),
                    *NumberOf(failed.proposal.config, "batch"));
        }
      }
    }
  }
  EXPECT_GE(near, 47);
  EXPECT_LE(most_trials, 45u);
}

TEST(SearchTest, ScreeningDropsDominatedValues) {
  const Space space = *ParseSpace({"threads=1..32:x2", "batch=512", "amp=off"});
  Surface surface;
  surface.noise = 0;
  Driver d{surface, std::mt19937(3)};
  SearchOptions options;
  options.mode = SearchOptions::Mode::kAdaptive;
  auto s = MakeStrategy(space, FirstConfig(space), options);
  const std::optional<Config> best = d.Search(*s);
  ASSERT_TRUE(best);
  // fp32 at batch 512 runs 4800 samples/s: 8 threads (5700) feed it, 16 (4500) almost.
  EXPECT_EQ(best->at("threads"), "8");
  // The start at the full budget; 2, 4, 8, 16 screened, then 32 (two values
  // in a row without gain) ends the sweep; only the best two screened values
  // (8 and 16) get a full-budget trial.
  std::vector<std::string> screened, full;
  for (const Trial& t : s->trials()) {
    (t.proposal.budget_fraction < 1 ? screened : full).push_back(t.proposal.config.at("threads"));
  }
  EXPECT_EQ(screened, (std::vector<std::string>{"2", "4", "8", "16", "32"}));
  EXPECT_EQ(full, (std::vector<std::string>{"1", "8", "16"}));
}

TEST(SearchTest, FlatSurfaceStopsEarlyAndKeepsTheStart) {
  const Space space = BigSpace();
  const Config start = FirstConfig(space, {{"batch", "64"}, {"threads", "2"}, {"prefetch", "2"}});
  int kept = 0;
  for (int seed = 0; seed < 20; ++seed) {
    std::mt19937 rng(static_cast<unsigned>(seed));
    std::normal_distribution<double> normal(0.0, 0.01);
    auto s = MakeStrategy(space, start, {});
    size_t n = 0;
    while (std::optional<Proposal> p = s->Next()) {
      s->Report(Outcome{true, 1000 * (1 + normal(rng)), 0.01});
      ++n;
    }
    EXPECT_LT(n, 30u);  // one pass, sweeps cut short by `patience`
    kept += *s->Best() == start;
  }
  EXPECT_GE(kept, 18);
}

TEST(SearchTest, MaxTrialsCapsTheSearch) {
  const Space space = BigSpace();
  SearchOptions options;
  options.max_trials = 5;
  Surface surface;
  Driver d{surface, std::mt19937(4)};
  auto s = MakeStrategy(space, FirstConfig(space), options);
  d.Search(*s);
  EXPECT_EQ(d.proposed.size(), 5u);
  EXPECT_EQ(s->EstimatedTrials(), 5u);
}

TEST(SearchTest, BeatsNeedsMoreThanTheNoise) {
  EXPECT_TRUE(Beats({true, 110, 0}, {true, 100, 0}, 0.03));
  EXPECT_FALSE(Beats({true, 102, 0}, {true, 100, 0}, 0.03));
  EXPECT_FALSE(Beats({true, 110, 0.05}, {true, 100, 0.05}, 0.03));  // noisy trials need more
  EXPECT_TRUE(Beats({true, 1, 0}, {false, std::nullopt, 0}, 0.03));
  EXPECT_FALSE(Beats({false, std::nullopt, 0}, {true, 1, 0}, 0.03));
}

TEST(SearchTest, GradientAccumulationKeepsTheEffectiveBatch) {
  EXPECT_EQ(GradientAccumulation(1024, 256), 4);
  EXPECT_EQ(GradientAccumulation(256, 256), 1);
  EXPECT_EQ(GradientAccumulation(128, 256), 1);
  EXPECT_EQ(GradientAccumulation(1000, 0), 1);
}

}  // namespace
}  // namespace saturate::tune
