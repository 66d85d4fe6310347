#include "tune/search.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace saturate::tune {
namespace {

bool Measured(const Outcome& o) { return o.feasible && o.throughput.has_value(); }

// Whether a failed trial of `failed` rules out `config`: the same settings
// apart from the loader's (threads, prefetch do not change device memory) and
// a batch at least as large.
bool RuledOutBy(const Space& space, const Config& failed, const Config& config) {
  const Param* batch = space.FindRole(Role::kBatch);
  if (batch == nullptr || !batch->numeric) return false;
  for (const Param& p : space.params) {
    if (p.role == Role::kBatch || p.role == Role::kThreads || p.role == Role::kPrefetch) continue;
    if (failed.at(p.name) != config.at(p.name)) return false;
  }
  const std::optional<double> f = NumberOf(failed, batch->name);
  const std::optional<double> c = NumberOf(config, batch->name);
  return f && c && *c >= *f;
}

// The full-budget result to recommend (see Strategy::Best).
std::optional<Config> BestOf(const std::vector<Trial>& trials, const Config& start,
                             double noise_rel) {
  const Trial* best = nullptr;
  const Trial* start_trial = nullptr;
  for (const Trial& t : trials) {
    if (t.proposal.budget_fraction < 1.0 || !Measured(t.outcome)) continue;
    if (best == nullptr || *t.outcome.throughput > *best->outcome.throughput) best = &t;
    if (t.proposal.config == start) start_trial = &t;
  }
  if (best == nullptr) return std::nullopt;
  if (start_trial != nullptr && !Beats(best->outcome, start_trial->outcome, noise_rel)) {
    return start;
  }
  return best->proposal.config;
}

class GridStrategy : public Strategy {
 public:
  GridStrategy(const Space& space, const Config& start, const SearchOptions& options)
      : space_(space), start_(start), options_(options), points_(space.Grid()) {
    // The start first: every other point is compared with it.
    const auto it = std::find(points_.begin(), points_.end(), start_);
    if (it != points_.end()) std::rotate(points_.begin(), it, it + 1);
  }

  std::optional<Proposal> Next() override {
    while (next_ < points_.size()) {
      if (options_.max_trials > 0 && trials_.size() >= options_.max_trials) return std::nullopt;
      const Config& c = points_[next_++];
      const bool ruled_out = std::any_of(trials_.begin(), trials_.end(), [&](const Trial& t) {
        return !t.outcome.feasible && RuledOutBy(space_, t.proposal.config, c);
      });
      if (ruled_out) continue;
      pending_ = Proposal{c, 1.0, "grid"};
      return pending_;
    }
    return std::nullopt;
  }

  void Report(const Outcome& outcome) override { trials_.push_back({pending_, outcome}); }
  std::string name() const override { return "grid"; }
  size_t EstimatedTrials() const override {
    return options_.max_trials > 0 ? std::min(points_.size(), options_.max_trials) : points_.size();
  }
  std::optional<Config> Best() const override {
    return BestOf(trials_, start_, options_.noise_rel);
  }

 private:
  Space space_;
  Config start_;
  SearchOptions options_;
  std::vector<Config> points_;
  size_t next_ = 0;
  Proposal pending_;
};

// A coordinate sweep of AdaptiveStrategy (at namespace scope: clang 14 cannot
// construct a nested struct with member initializers inside std::optional).
struct Sweep {
  std::vector<std::string> order;  // the coordinate's values, ascending
  size_t pos = 0;
  bool stopped = false;
  std::optional<Outcome> best;
  int flat = 0;  // values in a row since the last gain
  std::vector<std::pair<std::string, Outcome>> screened;
  bool screening = false;
  std::vector<std::string> confirm;
  size_t confirm_pos = 0;
  bool confirm_chosen = false;
};

// Coordinate descent with screening; see the header.
class AdaptiveStrategy : public Strategy {
 public:
  AdaptiveStrategy(const Space& space, const Config& start, const SearchOptions& options)
      : space_(space), start_(start), current_(start), options_(options) {
    for (size_t i = 0; i < space_.params.size(); ++i) {
      if (space_.params[i].values.size() > 1) coords_.push_back(i);
    }
  }

  std::optional<Proposal> Next() override {
    if (done_) return std::nullopt;
    if (options_.max_trials > 0 && trials_.size() >= options_.max_trials) {
      done_ = true;
      return std::nullopt;
    }
    if (!current_outcome_) return Propose(current_, 1.0, "start", Kind::kStart);
    while (true) {
      // Done when every knob is settled: none moved since each was last
      // swept (the knob that moved last is settled given the others).
      if (settled_ >= coords_.size()) {
        done_ = true;
        return std::nullopt;
      }
      if (coord_ >= coords_.size()) {
        if (pass_ + 1 >= options_.max_passes) {
          done_ = true;
          return std::nullopt;
        }
        ++pass_;
        coord_ = 0;
      }
      if (!sweep_) StartSweep();
      if (std::optional<Proposal> p = ContinueSweep()) return p;
      if (std::optional<Proposal> p = ContinueConfirm()) return p;
      settled_ = Decide() ? 1 : settled_ + 1;
      sweep_.reset();
      ++coord_;
    }
  }

  void Report(const Outcome& outcome) override {
    trials_.push_back({pending_, outcome});
    Remember(pending_, outcome);
    switch (pending_kind_) {
      case Kind::kStart:
        current_outcome_ = outcome;
        break;
      case Kind::kScreen:
        Absorb(pending_.config.at(Name()), outcome);
        ++sweep_->pos;
        break;
      case Kind::kConfirm:
        ++sweep_->confirm_pos;
        break;
    }
  }

  std::string name() const override { return "adaptive"; }

  size_t EstimatedTrials() const override {
    size_t n = 1;
    for (size_t i : coords_) {
      const size_t others = space_.params[i].values.size() - 1;
      n += others;
      if (Screening(others)) n += static_cast<size_t>(options_.keep);
    }
    return options_.max_trials > 0 ? std::min(n, options_.max_trials) : n;
  }

  std::optional<Config> Best() const override {
    // The descent's current point is its answer; it moved only for real gains.
    if (current_outcome_ && Measured(*current_outcome_)) return current_;
    return BestOf(trials_, start_, options_.noise_rel);
  }

 private:
  enum class Kind { kStart, kScreen, kConfirm };

  const Param& Coord() const { return space_.params[coords_[coord_]]; }
  const std::string& Name() const { return Coord().name; }

  // Screening saves time only when more values are swept than promoted.
  bool Screening(size_t values_to_sweep) const {
    return options_.screen_fraction < 1.0 && values_to_sweep > static_cast<size_t>(options_.keep);
  }

  Proposal Propose(const Config& c, double fraction, const std::string& stage, Kind kind) {
    pending_ = Proposal{c, fraction, stage};
    pending_kind_ = kind;
    return pending_;
  }

  Config With(const std::string& value) const {
    Config c = current_;
    c[Name()] = value;
    return c;
  }

  // The most thorough result known for `c` with at least `fraction` of the budget.
  std::optional<Outcome> Cached(const Config& c, double fraction) const {
    const auto it = cache_.find(ConfigText(c));
    if (it == cache_.end() || it->second.first < fraction) return std::nullopt;
    return it->second.second;
  }

  void Remember(const Proposal& p, const Outcome& o) {
    auto& slot = cache_[ConfigText(p.config)];
    if (p.budget_fraction >= slot.first) slot = {p.budget_fraction, o};
  }

  bool RuledOut(const Config& c) const {
    return std::any_of(trials_.begin(), trials_.end(), [&](const Trial& t) {
      return !t.outcome.feasible && RuledOutBy(space_, t.proposal.config, c);
    });
  }

  void StartSweep() {
    sweep_.emplace();
    sweep_->order = Coord().values;
    sweep_->screening = Screening(sweep_->order.size() - 1);
  }

  double ScreenFraction() const { return sweep_->screening ? options_.screen_fraction : 1.0; }

  // Records a value's result; stops the sweep at an infeasible batch size or
  // when `patience` values in a row gained less than the noise.
  void Absorb(const std::string& value, const Outcome& o) {
    Sweep& s = *sweep_;
    s.screened.emplace_back(value, o);
    if (!o.feasible) {
      if (Coord().role == Role::kBatch) s.stopped = true;
      return;
    }
    if (!Measured(o)) return;
    if (!s.best || Beats(o, *s.best, options_.noise_rel)) {
      if (!s.best || *o.throughput > *s.best->throughput) s.best = o;
      s.flat = 0;
    } else {
      if (*o.throughput > *s.best->throughput) s.best = o;
      if (++s.flat >= options_.patience) s.stopped = true;
    }
  }

  std::optional<Proposal> ContinueSweep() {
    Sweep& s = *sweep_;
    while (s.pos < s.order.size() && !s.stopped) {
      const std::string& value = s.order[s.pos];
      const Config c = With(value);
      if (value == current_.at(Name())) {
        Absorb(value, *current_outcome_);
      } else if (RuledOut(c)) {
        s.stopped = true;  // and every larger batch size
        break;
      } else if (std::optional<Outcome> o = Cached(c, ScreenFraction())) {
        Absorb(value, *o);
      } else {
        return Propose(c, ScreenFraction(),
                       std::string(s.screening ? "screen " : "sweep ") + Name(), Kind::kScreen);
      }
      ++s.pos;
    }
    return std::nullopt;
  }

  // Successive halving's second rung: the best `keep` screened values again
  // at the full budget; the rest are dropped.
  std::optional<Proposal> ContinueConfirm() {
    Sweep& s = *sweep_;
    if (!s.screening) return std::nullopt;
    if (!s.confirm_chosen) {
      s.confirm_chosen = true;
      std::vector<std::pair<std::string, Outcome>> ranked;
      // Values the current one clearly beats are dropped without a full trial.
      for (const auto& [value, o] : s.screened) {
        if (Measured(o) && value != current_.at(Name()) &&
            !Beats(*current_outcome_, o, options_.noise_rel)) {
          ranked.emplace_back(value, o);
        }
      }
      std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
        return *a.second.throughput > *b.second.throughput;
      });
      for (size_t i = 0; i < ranked.size() && i < static_cast<size_t>(options_.keep); ++i) {
        s.confirm.push_back(ranked[i].first);
      }
    }
    while (s.confirm_pos < s.confirm.size()) {
      const Config c = With(s.confirm[s.confirm_pos]);
      if (Cached(c, 1.0)) {
        ++s.confirm_pos;
        continue;
      }
      return Propose(c, 1.0, "confirm " + Name(), Kind::kConfirm);
    }
    return std::nullopt;
  }

  // Moves the coordinate when a full-budget value beats the current one by
  // more than the noise: to the first value (the fewest threads, the smallest
  // batch) within the noise of the best, since the rest cost more for gains
  // that may not be real. Returns whether it moved.
  bool Decide() {
    const Sweep& s = *sweep_;
    std::vector<std::pair<std::string, Outcome>> full;
    std::optional<Outcome> best;
    for (const std::string& value : s.order) {
      if (value == current_.at(Name())) continue;
      const std::optional<Outcome> o = Cached(With(value), 1.0);
      if (!o || !Measured(*o)) continue;
      full.emplace_back(value, *o);
      if (!best || *o->throughput > *best->throughput) best = o;
    }
    if (!best || !Beats(*best, *current_outcome_, options_.noise_rel)) return false;
    for (const auto& [value, o] : full) {
      if (!Beats(*best, o, options_.noise_rel) && Beats(o, *current_outcome_, options_.noise_rel)) {
        current_[Name()] = value;
        current_outcome_ = o;
        return true;
      }
    }
    return false;  // unreachable: the best itself qualifies
  }

  Space space_;
  Config start_;
  Config current_;
  std::optional<Outcome> current_outcome_;  // current_'s full-budget result
  SearchOptions options_;
  std::vector<size_t> coords_;  // parameters with more than one value, in role order
  size_t coord_ = 0;
  int pass_ = 0;
  size_t settled_ = 0;  // knobs swept in a row without a move (the mover counts)
  bool done_ = false;
  std::optional<Sweep> sweep_;
  std::map<std::string, std::pair<double, Outcome>> cache_;  // config text -> (fraction, outcome)
  Proposal pending_;
  Kind pending_kind_ = Kind::kStart;
};

}  // namespace

bool Beats(const Outcome& a, const Outcome& b, double noise_floor_rel) {
  if (!Measured(a)) return false;
  if (!Measured(b)) return true;
  const double noise = std::max(noise_floor_rel, 2.0 * std::hypot(a.noise_rel, b.noise_rel));
  return *a.throughput > *b.throughput * (1.0 + noise);
}

int GradientAccumulation(double effective_batch, double micro_batch) {
  if (!(micro_batch > 0) || !(effective_batch > micro_batch)) return 1;
  return std::max(1, static_cast<int>(std::lround(effective_batch / micro_batch)));
}

std::unique_ptr<Strategy> MakeStrategy(const Space& space, const Config& start,
                                       const SearchOptions& options) {
  const bool grid =
      options.mode == SearchOptions::Mode::kGrid ||
      (options.mode == SearchOptions::Mode::kAuto && space.Size() <= options.grid_max_points);
  if (grid) return std::make_unique<GridStrategy>(space, start, options);
  return std::make_unique<AdaptiveStrategy>(space, start, options);
}

}  // namespace saturate::tune
