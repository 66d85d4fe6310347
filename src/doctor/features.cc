// ComputeFeatures: the measurements the rules read, from a Run. Three
// sources, each optional: the metric samples (GPUs, host, process tree), the
// spans and step marks of the training thread, and the loader's counters.
// docs/diagnosis.md defines each feature.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <string_view>
#include <tuple>

#include "doctor/analysis.h"
#include "doctor/check_fix.h"

namespace saturate::doctor {
namespace {

constexpr double kNsPerS = 1e9;
// Below this a GPU counts as idle: the gaps of the saw-tooth.
constexpr double kIdleUtilPct = 10;
// Below this a GPU counts as unused (idle allocation) ...
constexpr double kUnusedUtilPct = 5;
// ... for stretches at least this long (or half the run): shorter ones are
// the saw-tooth of a starved GPU, which the data rules explain.
constexpr int64_t kLongIdleNs = 5'000'000'000;
// A data_wait shorter than this is the normal hand-over of a ready batch,
// not a gap.
constexpr int64_t kMinWaitGapNs = 1'000'000;
// At most this many points in a chart timeline.
constexpr size_t kMaxTimelinePoints = 1000;

const std::set<std::string_view> kCopyPhases = {"copy", "h2d", "to_device", "host_to_device",
                                                "transfer"};
// Phase names the user may choose, and the torch.distributed collectives the
// auto-instrumentation names its spans after.
const std::set<std::string_view> kCommPhases = {"comm",
                                                "allreduce",
                                                "all_reduce",
                                                "communication",
                                                "reduce",
                                                "sync_grads",
                                                "broadcast",
                                                "barrier",
                                                "all_gather",
                                                "all_gather_into_tensor",
                                                "reduce_scatter",
                                                "reduce_scatter_tensor",
                                                "all_to_all",
                                                "all_to_all_single",
                                                "gather",
                                                "scatter",
                                                "all_gather_object",
                                                "broadcast_object_list"};
// Steps shown in the report's waterfall.
constexpr size_t kWaterfallSteps = 8;
const std::set<std::string_view> kThrottleReasons = {"sw_power_cap", "hw_slowdown", "sw_thermal",
                                                     "hw_thermal", "hw_power_brake"};

double Seconds(int64_t ns) { return double(ns) / kNsPerS; }

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// A stretch of one thread's time attributed to one span name.
struct Segment {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  std::string name;
};

struct Interval {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
};

// Self time: each instant goes to the innermost span covering it (the one
// that started last), as a profiler's "self" column does. So a user "data"
// phase that wraps the loader's data_wait is split into data_wait and the
// rest of "data", and nested phases never count twice.
std::vector<Segment> SelfTime(const std::vector<const Span*>& spans) {
  struct Event {
    int64_t t_ns;
    bool start;
    size_t index;
  };
  std::vector<Event> events;
  events.reserve(spans.size() * 2);
  for (size_t i = 0; i < spans.size(); ++i) {
    if (spans[i]->dur_ns <= 0) continue;
    events.push_back({spans[i]->start_ns, true, i});
    events.push_back({spans[i]->start_ns + spans[i]->dur_ns, false, i});
  }
  std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    return std::tie(a.t_ns, a.start) < std::tie(b.t_ns, b.start);  // ends first
  });
  // Ordered so that the innermost active span is the last: latest start,
  // then earliest end.
  std::set<std::tuple<int64_t, int64_t, size_t>> active;
  auto key = [&](size_t i) {
    return std::make_tuple(spans[i]->start_ns, -(spans[i]->start_ns + spans[i]->dur_ns), i);
  };
  std::vector<Segment> segments;
  int64_t prev_ns = 0;
  for (const Event& e : events) {
    if (!active.empty() && e.t_ns > prev_ns) {
      const std::string& name = spans[std::get<2>(*active.rbegin())]->name;
      if (!segments.empty() && segments.back().end_ns == prev_ns && segments.back().name == name) {
        segments.back().end_ns = e.t_ns;
      } else {
        segments.push_back({prev_ns, e.t_ns, name});
      }
    }
    if (e.start) {
      active.insert(key(e.index));
    } else {
      active.erase(key(e.index));
    }
    prev_ns = e.t_ns;
  }
  return segments;
}

int64_t Overlap(int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
  return std::max<int64_t>(0, std::min(a1, b1) - std::max(a0, b0));
}

// Adds the part of [start, end) in each bin of width `bin_ns` to `bins`.
void AddToBins(int64_t start_ns, int64_t end_ns, int64_t bin_ns, std::vector<double>* bins) {
  if (end_ns <= start_ns || bins->empty()) return;
  const int64_t last = int64_t(bins->size()) - 1;
  for (int64_t b = std::clamp<int64_t>(start_ns / bin_ns, 0, last); b <= last; ++b) {
    if (b * bin_ns >= end_ns) break;
    (*bins)[b] += double(Overlap(start_ns, end_ns, b * bin_ns, (b + 1) * bin_ns));
  }
}

Histogram GapHistogram(const std::vector<double>& gaps_s) {
  Histogram h;
  h.upper_edges = {0.01, 0.05, 0.1, 0.5, 1, 2, 5};
  h.counts.assign(h.upper_edges.size() + 1, 0);
  for (double g : gaps_s) {
    auto it = std::lower_bound(h.upper_edges.begin(), h.upper_edges.end(), g);
    ++h.counts[it - h.upper_edges.begin()];
  }
  return h;
}

// The saw-tooth's period: idle gaps that start at a steady interval
// (coefficient of variation of the intervals < 0.3, at least 4 gaps).
std::optional<double> Period(const std::vector<double>& gap_starts_s) {
  if (gap_starts_s.size() < 4) return std::nullopt;
  std::vector<double> intervals;
  for (size_t i = 1; i < gap_starts_s.size(); ++i) {
    intervals.push_back(gap_starts_s[i] - gap_starts_s[i - 1]);
  }
  const double mean = std::accumulate(intervals.begin(), intervals.end(), 0.0) / intervals.size();
  if (mean <= 0) return std::nullopt;
  double var = 0;
  for (double x : intervals) var += (x - mean) * (x - mean);
  const double cv = std::sqrt(var / intervals.size()) / mean;
  if (cv >= 0.3) return std::nullopt;
  return Median(intervals);
}

// Averages consecutive points so a chart gets at most kMaxTimelinePoints.
std::vector<std::pair<double, double>> Downsample(std::vector<std::pair<double, double>> points) {
  if (points.size() <= kMaxTimelinePoints) return points;
  const size_t per = (points.size() + kMaxTimelinePoints - 1) / kMaxTimelinePoints;
  std::vector<std::pair<double, double>> out;
  for (size_t i = 0; i < points.size(); i += per) {
    const size_t end = std::min(points.size(), i + per);
    double t = 0, v = 0;
    for (size_t k = i; k < end; ++k) {
      t += points[k].first;
      v += points[k].second;
    }
    out.emplace_back(t / double(end - i), v / double(end - i));
  }
  return out;
}

// ---- The training thread and its steps ---------------------------------------

struct Training {
  std::optional<int> pid;
  std::optional<int64_t> tid;
  std::vector<Interval> steps;  // consecutive, ascending
  bool pseudo_step = false;     // no marks: the thread's span range stands in
  Interval window;
};

bool CountsForTraining(const Span& s) { return s.kind == SpanKind::kUser || s.name == "data_wait"; }

// The process with the most step marks trains; within it, the thread with the
// most user and data_wait time runs the steps (marks carry no thread in
// Run). Without marks, the thread with the most such time overall.
Training FindTraining(const Run& run) {
  Training t;
  size_t most_marks = 0;
  for (const auto& [pid, marks] : run.step_marks_ns) {
    if (marks.size() > most_marks) {
      most_marks = marks.size();
      t.pid = pid;
    }
  }
  std::map<std::pair<int, int64_t>, int64_t> busy_ns;
  for (const Span& s : run.spans) {
    if (CountsForTraining(s) && (!t.pid || s.pid == *t.pid)) busy_ns[{s.pid, s.tid}] += s.dur_ns;
  }
  int64_t best = -1;
  for (const auto& [thread, ns] : busy_ns) {
    if (ns > best) {
      best = ns;
      t.pid = thread.first;
      t.tid = thread.second;
    }
  }
  if (most_marks >= 2) {
    // The first mark only opens the window: the first step has no known
    // start, and it carries the warm-up (compilation, autotuning) anyway.
    const std::vector<int64_t>& marks = run.step_marks_ns.at(*t.pid);
    for (size_t i = 1; i < marks.size(); ++i) {
      if (marks[i] > marks[i - 1]) t.steps.push_back({marks[i - 1], marks[i]});
    }
  } else if (t.tid) {
    Interval range{INT64_MAX, INT64_MIN};
    for (const Span& s : run.spans) {
      if (s.pid != *t.pid || s.tid != *t.tid || !CountsForTraining(s)) continue;
      range.start_ns = std::min(range.start_ns, s.start_ns);
      range.end_ns = std::max(range.end_ns, s.start_ns + s.dur_ns);
    }
    if (range.end_ns > range.start_ns) {
      t.steps.push_back(range);
      t.pseudo_step = true;
    }
  }
  t.window = t.steps.empty() ? Interval{0, run.meta.duration_ns}
                             : Interval{t.steps.front().start_ns, t.steps.back().end_ns};
  return t;
}

std::vector<const Span*> ThreadSpans(const Run& run, const Training& t) {
  std::vector<const Span*> spans;
  if (!t.tid) return spans;
  for (const Span& s : run.spans) {
    if (s.pid == *t.pid && s.tid == *t.tid && s.name != "load_batch") spans.push_back(&s);
  }
  return spans;
}

// Up to kWaterfallSteps consecutive steps around the median one, each as the
// self-time segments that filled it.
std::vector<StepWaterfall> Waterfall(const Training& t, const std::vector<Segment>& segments) {
  std::vector<size_t> order(t.steps.size());
  std::iota(order.begin(), order.end(), 0);
  auto length = [&](size_t i) { return t.steps[i].end_ns - t.steps[i].start_ns; };
  std::nth_element(order.begin(), order.begin() + long(order.size() / 2), order.end(),
                   [&](size_t a, size_t b) { return length(a) < length(b); });
  const size_t median = order[order.size() / 2];
  const size_t first = median > kWaterfallSteps / 2 ? median - kWaterfallSteps / 2 : 0;
  const size_t last = std::min(t.steps.size(), first + kWaterfallSteps);
  std::vector<StepWaterfall> rows;
  for (size_t i = first; i < last; ++i) {
    const Interval& step = t.steps[i];
    StepWaterfall row{int64_t(i) + 1, Seconds(step.start_ns), Seconds(length(i)), {}};
    for (const Segment& seg : segments) {
      const int64_t ns = Overlap(seg.start_ns, seg.end_ns, step.start_ns, step.end_ns);
      if (ns <= 0) continue;
      const int64_t offset = std::max(seg.start_ns, step.start_ns) - step.start_ns;
      row.segments.emplace_back(seg.name, Seconds(offset), Seconds(ns));
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

// Step phases, data wait, copy and communication time, and (without GPUs)
// device busy as the share of step time outside data wait.
void StepFeatures(const Run& run, const Training& t, Features* f) {
  f->training_pid = t.pid;
  f->training_tid = t.tid;
  if (!t.pseudo_step) f->steps = int64_t(t.steps.size());
  if (t.steps.empty()) return;
  f->active_s = Seconds(t.window.end_ns - t.window.start_ns);

  int64_t step_total_ns = 0;
  std::vector<double> step_s;
  for (const Interval& s : t.steps) {
    step_total_ns += s.end_ns - s.start_ns;
    step_s.push_back(Seconds(s.end_ns - s.start_ns));
  }
  if (!t.pseudo_step) {
    f->step_time_median_s = Median(step_s);
    f->step_time_mean_s = Seconds(step_total_ns) / double(t.steps.size());
  }

  const std::vector<const Span*> spans = ThreadSpans(run, t);
  f->has_spans = !spans.empty();
  if (!f->has_spans) return;
  // The loader's own measure wins over a user phase around it (no double count).
  const bool loader_wait =
      std::any_of(spans.begin(), spans.end(), [](const Span* s) { return s->name == "data_wait"; });
  auto is_wait = [&](const std::string& name) {
    return loader_wait ? name == "data_wait" : (name == "data" || name == "data_wait");
  };

  const std::vector<Segment> segments = SelfTime(spans);
  std::map<std::string, int64_t> phase_ns;
  int64_t wait_ns = 0;
  // Windows for the CPU-run device-busy timeline: 1 s, wider for long runs.
  const int64_t window_len = t.window.end_ns - t.window.start_ns;
  const int64_t bin_ns = std::max<int64_t>(
      1'000'000'000, (window_len + int64_t(kMaxTimelinePoints) - 1) / int64_t(kMaxTimelinePoints));
  const size_t bins = size_t((window_len + bin_ns - 1) / bin_ns);
  std::vector<double> covered_ns(bins, 0), waited_ns(bins, 0);
  std::vector<double> gaps_s, gap_starts_s;

  size_t k = 0;
  for (const Interval& step : t.steps) {
    AddToBins(step.start_ns - t.window.start_ns, step.end_ns - t.window.start_ns, bin_ns,
              &covered_ns);
    while (k < segments.size() && segments[k].end_ns <= step.start_ns) ++k;
    for (size_t i = k; i < segments.size() && segments[i].start_ns < step.end_ns; ++i) {
      const Segment& seg = segments[i];
      const int64_t ns = Overlap(seg.start_ns, seg.end_ns, step.start_ns, step.end_ns);
      phase_ns[seg.name] += ns;
      if (!is_wait(seg.name)) continue;
      wait_ns += ns;
      const int64_t s0 = std::max(seg.start_ns, step.start_ns);
      AddToBins(s0 - t.window.start_ns, s0 + ns - t.window.start_ns, bin_ns, &waited_ns);
    }
  }
  // Idle gaps of a CPU run: the data waits themselves.
  for (const Segment& seg : segments) {
    if (!is_wait(seg.name) || seg.end_ns - seg.start_ns < kMinWaitGapNs) continue;
    gaps_s.push_back(Seconds(seg.end_ns - seg.start_ns));
    gap_starts_s.push_back(Seconds(seg.start_ns));
  }

  int64_t named_ns = 0, copy_ns = 0, comm_ns = 0;
  for (const auto& [name, ns] : phase_ns) {
    named_ns += ns;
    f->phases.push_back({name, Seconds(ns), 100.0 * double(ns) / double(step_total_ns)});
    const std::string lower = Lower(name);
    if (kCopyPhases.contains(lower)) copy_ns += ns;
    if (kCommPhases.contains(lower)) comm_ns += ns;
  }
  if (step_total_ns > named_ns) {
    const int64_t other = step_total_ns - named_ns;
    f->phases.push_back({"other", Seconds(other), 100.0 * double(other) / double(step_total_ns)});
  }
  std::sort(f->phases.begin(), f->phases.end(),
            [](const PhaseShare& a, const PhaseShare& b) { return a.total_s > b.total_s; });

  if (!t.pseudo_step) f->waterfall = Waterfall(t, segments);

  // Without a data phase the wait is unknown, not zero.
  const bool wait_measured =
      std::any_of(spans.begin(), spans.end(), [&](const Span* s) { return is_wait(s->name); });
  if (wait_measured) {
    f->data_wait_s = Seconds(wait_ns);
    f->data_wait_pct = 100.0 * double(wait_ns) / double(step_total_ns);
  }
  f->copy_s = Seconds(copy_ns);
  f->copy_pct = 100.0 * double(copy_ns) / double(step_total_ns);
  f->comm_s = Seconds(comm_ns);
  f->comm_pct = 100.0 * double(comm_ns) / double(step_total_ns);
  if (!t.pseudo_step) {
    f->compute_per_step_s = Seconds(step_total_ns - wait_ns) / double(t.steps.size());
  }

  if (f->gpu_count == 0 && wait_measured) {
    f->device_busy_pct = 100.0 - *f->data_wait_pct;
    for (size_t b = 0; b < bins; ++b) {
      if (covered_ns[b] <= 0) continue;
      const double t_s = Seconds(t.window.start_ns + int64_t(b) * bin_ns) + Seconds(bin_ns) / 2;
      f->device_busy_timeline.emplace_back(t_s, 100.0 * (1.0 - waited_ns[b] / covered_ns[b]));
    }
    f->idle_gaps_s = GapHistogram(gaps_s);
    f->idle_period_s = Period(gap_starts_s);
    f->interior_idle_s = std::accumulate(gaps_s.begin(), gaps_s.end(), 0.0);
    f->interior_idle_gaps = int64_t(gaps_s.size());
  }
}

// Checkpoint spans that stall training: those on the training thread (an
// asynchronous writer's spans on its own thread cost the steps nothing).
// What the steps right after each save lose beyond their median length
// (dirty pages written back, caches refilled): a cost of the save outside
// its span. The steps holding a save, or within kAfterSaveSteps after one,
// are compared with the median of the others. A step's data wait is left
// out: it is the loader's (and a save lets the loader get ahead, if anything);
// in a data-bound run its spread would read as a cost of the saves.
constexpr size_t kAfterSaveSteps = 3;

// Each step's time outside data waits (`waits`: intervals by start).
std::vector<int64_t> StepNsOutsideWaits(const std::vector<Interval>& steps,
                                        const std::vector<Interval>& waits) {
  std::vector<int64_t> out;
  out.reserve(steps.size());
  size_t w = 0;
  for (const Interval& step : steps) {
    while (w < waits.size() && waits[w].end_ns <= step.start_ns) ++w;
    int64_t ns = step.end_ns - step.start_ns;
    for (size_t i = w; i < waits.size() && waits[i].start_ns < step.end_ns; ++i) {
      ns -= Overlap(waits[i].start_ns, waits[i].end_ns, step.start_ns, step.end_ns);
    }
    out.push_back(std::max<int64_t>(0, ns));
  }
  return out;
}

std::optional<double> PostCheckpointSlowdown(const std::vector<Interval>& saves,
                                             const std::vector<Interval>& steps,
                                             const std::vector<Interval>& waits) {
  const std::vector<int64_t> step_ns = StepNsOutsideWaits(steps, waits);
  if (saves.empty() || steps.size() < 2 * kAfterSaveSteps) return std::nullopt;
  std::vector<int> after(steps.size(), -1);  // steps since the last save ended, -1: none near
  size_t k = 0;
  for (const Interval& save : saves) {
    while (k < steps.size() && steps[k].end_ns <= save.start_ns) ++k;
    // The steps holding the save (0), then the next ones (1, 2, ...).
    int n = 0;
    for (size_t i = k; i < steps.size() && n < int(kAfterSaveSteps); ++i) {
      if (steps[i].start_ns < save.end_ns) {
        after[i] = 0;
      } else {
        after[i] = ++n;
      }
    }
  }
  std::vector<int64_t> clean;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (after[i] < 0) clean.push_back(step_ns[i]);
  }
  if (clean.size() < kAfterSaveSteps) return std::nullopt;
  std::nth_element(clean.begin(), clean.begin() + clean.size() / 2, clean.end());
  const int64_t median_ns = clean[clean.size() / 2];
  int64_t extra_ns = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (after[i] > 0) extra_ns += std::max<int64_t>(0, step_ns[i] - median_ns);
  }
  return Seconds(extra_ns);
}

// The index of the step whose interval holds `t_ns`: steps before the first
// one count as 0, after the last as steps.size(); SIZE_MAX if there are none.
size_t StepHolding(const std::vector<Interval>& steps, int64_t t_ns) {
  if (steps.empty()) return SIZE_MAX;
  if (t_ns >= steps.back().end_ns) return steps.size();
  auto after = std::upper_bound(steps.begin(), steps.end(), t_ns,
                                [](int64_t v, const Interval& s) { return v < s.start_ns; });
  return after == steps.begin() ? 0 : static_cast<size_t>(after - steps.begin() - 1);
}

void CheckpointFeatures(const Run& run, const Training& t, Features* f) {
  if (!t.tid) return;
  std::vector<Interval> spans, waits;
  for (const Span& s : run.spans) {
    if (s.pid != *t.pid || s.tid != *t.tid) continue;
    if (s.kind == SpanKind::kCheckpoint || Lower(s.name) == "checkpoint") {
      spans.push_back({s.start_ns, s.start_ns + s.dur_ns});
    } else if (s.name == "data_wait") {
      waits.push_back({s.start_ns, s.start_ns + s.dur_ns});
    }
  }
  if (spans.empty()) return;
  // Time is the union, so a checkpoint span nested in another counts once.
  // Saves that begin within one step are one checkpoint: frameworks write
  // several files each time (Hugging Face's Trainer: the weights, then
  // torch.save of the optimizer, scheduler, RNG state and arguments).
  int64_t total_ns = 0, end_ns = INT64_MIN;
  size_t last_step = SIZE_MAX;
  for (const Interval& s : spans) {  // already by start (Run.spans is sorted)
    const size_t step = t.pseudo_step ? SIZE_MAX : StepHolding(t.steps, s.start_ns);
    if (s.start_ns >= end_ns && (step == SIZE_MAX || step != last_step)) ++f->checkpoints;
    last_step = step;
    total_ns += std::max<int64_t>(0, s.end_ns - std::max(s.start_ns, end_ns));
    end_ns = std::max(end_ns, s.end_ns);
  }
  f->checkpoint_s = Seconds(total_ns);
  f->checkpoint_after_s = PostCheckpointSlowdown(spans, t.steps, waits);
}

// ---- Samples -------------------------------------------------------------------

bool InWindow(const SamplePoint& s, const Interval& w) {
  return s.t_ns >= w.start_ns && s.t_ns <= w.end_ns;
}

// The samples the means are taken over: the training window when it holds
// any, else all (a run with one step mark, or marks on another clock).
std::vector<const SamplePoint*> WindowSamples(const Run& run, const Interval& w) {
  std::vector<const SamplePoint*> out;
  for (const SamplePoint& s : run.samples) {
    if (InWindow(s, w)) out.push_back(&s);
  }
  if (out.empty()) {
    for (const SamplePoint& s : run.samples) out.push_back(&s);
  }
  return out;
}

// The training process's threads waiting for a CPU, and its cores, over the
// samples that measured the wait. saturate's own threads in it (a Loader's
// workers) are left out: their waits show as data waits, priced there.
void TrainingRunqWait(const std::vector<const SamplePoint*>& samples, const Training& t,
                      Features* f) {
  if (!t.pid) return;
  double wait = 0, cpu = 0;
  int n = 0;
  for (const SamplePoint* s : samples) {
    for (const SamplePoint::Member& m : s->members) {
      if (m.pid != *t.pid || !m.runq_wait_cores) continue;
      wait += std::max(0.0, *m.runq_wait_cores - m.saturate_runq_wait_cores);
      cpu += std::max(0.0, m.cpu_pct / 100.0 - m.saturate_cpu_cores);
      ++n;
    }
  }
  if (n == 0) return;
  f->training_runq_wait_cores = wait / n;
  f->training_cpu_cores = cpu / n;
}

void HostFeatures(const Run& run, const Training& t, Features* f) {
  const std::vector<const SamplePoint*> samples = WindowSamples(run, t.window);
  if (samples.empty()) return;
  double busy = 0, iowait = 0, disk = 0, disk_peak = 0, tree = 0, other = 0, pressure = 0;
  double runq = 0;
  int tree_n = 0, pressure_n = 0, runq_n = 0;
  for (const SamplePoint* s : samples) {
    busy += s->cpu_busy_pct;
    if (s->tree_runq_wait_cores) {
      runq += *s->tree_runq_wait_cores;
      ++runq_n;
    }
    if (s->cpu_pressure_pct) {
      pressure += *s->cpu_pressure_pct;
      ++pressure_n;
    }
    iowait += s->cpu_iowait_pct;
    disk += s->disk_read_bytes_per_s;
    disk_peak = std::max(disk_peak, s->disk_read_bytes_per_s);
    if (!s->tree_cpu_pct) continue;
    const double tree_cores = *s->tree_cpu_pct / 100.0;
    tree += tree_cores;
    other += std::max(0.0, s->cpu_busy_pct * f->cpus / 100.0 - tree_cores);
    ++tree_n;
  }
  const double n = double(samples.size());
  f->host_cpu_busy_pct = busy / n;
  f->host_iowait_pct = iowait / n;
  if (pressure_n > 0) f->cpu_pressure_pct = pressure / pressure_n;
  if (runq_n > 0) f->tree_runq_wait_cores = runq / runq_n;
  TrainingRunqWait(samples, t, f);
  f->disk_read_mb_per_s = disk / n / 1e6;
  f->disk_read_peak_mb_per_s = disk_peak / 1e6;
  if (tree_n > 0) {
    f->tree_cpu_cores = tree / tree_n;
    if (f->cpus > 0) f->other_cpu_cores = other / tree_n;
  }
  // Headroom and peak RSS over the whole run: a spike at start-up counts.
  std::optional<double> headroom, rss, available;
  for (const SamplePoint& s : run.samples) {
    if (s.mem_total_bytes > 0) {
      const double pct = 100.0 * double(s.mem_available_bytes) / double(s.mem_total_bytes);
      headroom = std::min(headroom.value_or(pct), pct);
      available = std::min(available.value_or(1e300), double(s.mem_available_bytes));
    }
    if (s.tree_rss_bytes) rss = std::max(rss.value_or(0), double(*s.tree_rss_bytes));
  }
  f->mem_headroom_pct = headroom;
  f->tree_rss_max_bytes = rss;
  f->mem_available_min_bytes = available;
}

// Per-sample mean utilization over the GPUs with `use[index]` set.
std::vector<std::pair<int64_t, double>> MeanGpuUtil(const Run& run, const std::vector<bool>& use) {
  std::vector<std::pair<int64_t, double>> out;
  for (const SamplePoint& s : run.samples) {
    double sum = 0;
    int n = 0;
    for (const GpuPoint& g : s.gpus) {
      if (g.lost || !g.util_pct || g.index < 0 || size_t(g.index) >= use.size()) continue;
      if (!use[g.index]) continue;
      sum += *g.util_pct;
      ++n;
    }
    if (n > 0) out.emplace_back(s.t_ns, sum / n);
  }
  return out;
}

void GpuFeatures(const Run& run, const Training& t, Features* f) {
  int gpus = f->gpu_count;
  for (const SamplePoint& s : run.samples) {
    for (const GpuPoint& g : s.gpus) gpus = std::max(gpus, g.index + 1);
  }
  f->gpu_count = gpus;
  if (gpus == 0) return;

  std::vector<double> busy_sum(gpus, 0), max_clock(gpus, 0);
  std::vector<int64_t> busy_n(gpus, 0), idle_since_ns(gpus, -1), long_idle_ns(gpus, 0);
  // Long idle stretches count inside the training window only: the start-up
  // before the first step (imports, CUDA context, model build) and the
  // tear-down leave every GPU idle, and on a short run they outweigh the
  // training (an H200 run: 11 s of start-up, 6 s of training at 97% busy).
  const Interval& w = t.window;
  const int64_t window_ns = w.end_ns - w.start_ns;
  const int64_t long_idle_ns_min = std::min(kLongIdleNs, window_ns / 2);
  auto end_idle = [&](int g, int64_t t_ns) {
    if (idle_since_ns[g] < 0) return;
    const int64_t len = Overlap(idle_since_ns[g], t_ns, w.start_ns, w.end_ns);
    if (len >= long_idle_ns_min) long_idle_ns[g] += len;
    idle_since_ns[g] = -1;
  };
  int64_t busy_samples = 0, throttled = 0;
  std::set<std::string> reasons;
  for (const SamplePoint& s : run.samples) {
    for (const GpuPoint& g : s.gpus) {
      if (g.lost || g.index < 0 || g.index >= gpus) continue;
      if (g.sm_clock_mhz) max_clock[g.index] = std::max(max_clock[g.index], *g.sm_clock_mhz);
      const uint64_t total =
          g.memory_total_bytes.value_or(size_t(g.index) < run.meta.gpu_memory_total_bytes.size()
                                            ? run.meta.gpu_memory_total_bytes[g.index]
                                            : 0);
      if (g.memory_used_bytes && total > 0) {
        const double pct = 100.0 * double(*g.memory_used_bytes) / double(total);
        f->gpu_memory_used_max_pct = std::max(f->gpu_memory_used_max_pct.value_or(0), pct);
      }
      if (!g.util_pct) continue;
      if (*g.util_pct >= kUnusedUtilPct) {
        end_idle(g.index, s.t_ns);
      } else if (idle_since_ns[g.index] < 0) {
        idle_since_ns[g.index] = s.t_ns;
      }
      if (InWindow(s, t.window)) {
        busy_sum[g.index] += *g.util_pct;
        ++busy_n[g.index];
      }
    }
  }
  if (!run.samples.empty()) {
    const int64_t end_ns = run.samples.back().t_ns + std::max<int64_t>(run.meta.interval_ns, 0);
    for (int g = 0; g < gpus; ++g) end_idle(g, end_ns);
  }
  // Throttling needs the highest clock first, hence a second pass.
  double clock_loss = 0;
  int64_t clock_n = 0;
  for (const SamplePoint& s : run.samples) {
    for (const GpuPoint& g : s.gpus) {
      if (g.lost || !g.util_pct || *g.util_pct < kIdleUtilPct || g.index < 0 || g.index >= gpus)
        continue;
      ++busy_samples;
      bool limited = false;
      for (const std::string& r : g.clocks_event_reasons) {
        if (kThrottleReasons.contains(r)) {
          limited = true;
          reasons.insert(r);
        }
      }
      if (!limited) continue;
      ++throttled;
      if (g.sm_clock_mhz && max_clock[g.index] > 0) {
        clock_loss += 100.0 * (1.0 - *g.sm_clock_mhz / max_clock[g.index]);
        ++clock_n;
      }
    }
  }
  for (int i = 0; i < gpus; ++i) {
    f->gpu_busy_pct.push_back(busy_n[i] ? busy_sum[i] / double(busy_n[i]) : 0);
    f->gpu_idle_pct.push_back(
        window_ns > 0 ? std::min(100.0, 100.0 * double(long_idle_ns[i]) / double(window_ns)) : 0);
  }
  if (busy_samples > 0) {
    f->throttled_pct = 100.0 * double(throttled) / double(busy_samples);
    f->throttle_reasons.assign(reasons.begin(), reasons.end());
    if (clock_n > 0) f->throttle_clock_loss_pct = clock_loss / double(clock_n);
  }

  // Device busy and its chart: the mean over all GPUs, so GPUs held idle
  // pull it down.
  double all_sum = 0;
  int64_t all_count = 0;
  for (int i = 0; i < gpus; ++i) {
    all_sum += busy_sum[i];
    all_count += busy_n[i];
  }
  if (all_count > 0) f->device_busy_pct = all_sum / double(all_count);
  std::vector<std::pair<double, double>> timeline;
  for (const auto& [t_ns, pct] : MeanGpuUtil(run, std::vector<bool>(gpus, true))) {
    timeline.emplace_back(Seconds(t_ns), pct);
  }
  f->device_busy_timeline = Downsample(std::move(timeline));

  // Idle gaps are read from the GPUs in use: one held idle all along (its
  // own finding) would hide the saw-tooth of the one that trains.
  std::vector<bool> used(gpus);
  bool any_used = false;
  for (int i = 0; i < gpus; ++i) any_used |= (used[i] = f->gpu_idle_pct[i] < 50);
  if (!any_used) used.assign(gpus, true);
  const std::vector<std::pair<int64_t, double>> util = MeanGpuUtil(run, used);
  if (util.empty()) return;

  // Idle gaps: stretches below kIdleUtilPct; a gap lasts from its first idle
  // sample to the next busy one.
  std::vector<double> gaps_s, interior_starts_s;
  for (size_t i = 0; i < util.size();) {
    if (util[i].second >= kIdleUtilPct) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < util.size() && util[j].second < kIdleUtilPct) ++j;
    const int64_t end_ns = j < util.size()
                               ? util[j].first
                               : util.back().first + std::max<int64_t>(run.meta.interval_ns, 0);
    const double gap_s = Seconds(end_ns - util[i].first);
    gaps_s.push_back(gap_s);
    if (i > 0 && j < util.size()) {
      f->interior_idle_s += gap_s;
      ++f->interior_idle_gaps;
      interior_starts_s.push_back(Seconds(util[i].first));
    }
    i = j;
  }
  f->idle_gaps_s = GapHistogram(gaps_s);
  f->idle_period_s = Period(interior_starts_s);
}

// GPM activity counters over the steady state: the training window's samples
// of busy GPUs that have them, with the utilization of those same samples
// (the rules compare the two).
void GpmFeatures(const Run& run, const Training& t, Features* f) {
  double util = 0, sm = 0, occupancy = 0, tensor = 0, dram = 0;
  int64_t n = 0, occupancy_n = 0, tensor_n = 0, dram_n = 0;
  for (const SamplePoint* s : WindowSamples(run, t.window)) {
    for (const GpuPoint& g : s->gpus) {
      if (g.lost || !g.util_pct || *g.util_pct < kIdleUtilPct || !g.sm_active_pct) continue;
      util += *g.util_pct;
      sm += *g.sm_active_pct;
      ++n;
      auto add = [](const std::optional<double>& v, double* sum, int64_t* count) {
        if (!v) return;
        *sum += *v;
        ++*count;
      };
      add(g.sm_occupancy_pct, &occupancy, &occupancy_n);
      add(g.tensor_active_pct, &tensor, &tensor_n);
      add(g.dram_active_pct, &dram, &dram_n);
    }
  }
  f->gpm_samples = n;
  if (n == 0) return;
  f->gpm_util_pct = util / double(n);
  f->gpm_sm_active_pct = sm / double(n);
  if (occupancy_n > 0) f->gpm_sm_occupancy_pct = occupancy / double(occupancy_n);
  if (tensor_n > 0) f->gpm_tensor_active_pct = tensor / double(tensor_n);
  if (dram_n > 0) f->gpm_dram_active_pct = dram / double(dram_n);
}

// The torch DataLoader the training thread waited on most, as the
// auto-instrumentation saw it: its configuration, and the CPU cost per sample
// of its fetches (in the training process when num_workers=0, else in the
// workers).
void TorchLoaderFeatures(const Run& run, const Training& t, Features* f) {
  std::map<int64_t, int64_t> wait_ns;   // loader_id -> data_wait on the training thread
  std::map<int64_t, int64_t> first_ns;  // ... of which for a pass's first batch, in the window
  std::map<int64_t, int64_t> passes;
  std::map<int64_t, std::vector<int64_t>> batch_samples;  // ... the batches' leading dimension
  int64_t load_ns = 0, samples = 0, window_load_ns = 0;
  // The fetching threads' CPU time (arg cpu_ns), when every fetch has it.
  int64_t load_cpu_ns = 0, window_load_cpu_ns = 0;
  bool cpu_recorded = true;
  // The same, leaving out each fetching thread's first fetch: a worker's
  // start (imports, first-touch page faults after the fork) costs 2-3x a
  // steady fetch in the accuracy suite's runs, once per start, not per sample.
  std::set<std::pair<int, int64_t>> fetched;  // (pid, tid) seen
  int64_t steady_cpu_ns = 0, steady_samples = 0;
  for (const Span& s : run.spans) {
    if (!s.auto_source) continue;
    if (s.name == "data_wait" && t.tid && s.pid == *t.pid && s.tid == *t.tid) {
      auto id = s.args.find("loader_id");
      const int64_t loader_id = id == s.args.end() ? -1 : id->second;
      wait_ns[loader_id] += s.dur_ns;
      if (auto n = s.args.find("samples"); n != s.args.end() && n->second > 0) {
        batch_samples[loader_id].push_back(n->second);
      }
      const int64_t in_window_ns =
          Overlap(s.start_ns, s.start_ns + s.dur_ns, t.window.start_ns, t.window.end_ns);
      if (auto batch = s.args.find("batch");
          batch != s.args.end() && batch->second == 1 && in_window_ns > 0) {
        first_ns[loader_id] += in_window_ns;
        ++passes[loader_id];
      }
    } else if (s.name == "load_batch") {
      auto n = s.args.find("samples");
      load_ns += s.dur_ns;
      samples += n == s.args.end() ? 1 : n->second;
      const int64_t in_window_ns =
          Overlap(s.start_ns, s.start_ns + s.dur_ns, t.window.start_ns, t.window.end_ns);
      window_load_ns += in_window_ns;
      if (auto cpu = s.args.find("cpu_ns"); cpu != s.args.end() && cpu->second >= 0) {
        load_cpu_ns += cpu->second;
        if (!fetched.insert({s.pid, s.tid}).second) {
          steady_cpu_ns += cpu->second;
          steady_samples += n == s.args.end() ? 1 : n->second;
        }
        // The part of the fetch's CPU inside the window, in proportion.
        if (s.dur_ns > 0) {
          window_load_cpu_ns +=
              int64_t(double(cpu->second) * double(in_window_ns) / double(s.dur_ns));
        }
      } else {
        cpu_recorded = false;
      }
    }
  }
  const DataLoaderInfo* loader = nullptr;
  int64_t most = -1;
  for (const DataLoaderInfo& d : run.dataloaders) {
    if (t.pid && d.pid != *t.pid) continue;
    auto it = wait_ns.find(d.loader_id);
    const int64_t ns = it == wait_ns.end() ? 0 : it->second;
    if (ns > most) {
      most = ns;
      loader = &d;
    }
  }
  if (!loader) return;
  auto get = [&](const char* key) -> std::optional<int64_t> {
    auto it = loader->values.find(key);
    if (it == loader->values.end() || it->second < 0) return std::nullopt;
    return it->second;
  };
  f->loader_kind = "torch";
  f->loader_site = loader->site;
  if (std::optional<int64_t> workers = get("num_workers")) {
    f->loader_workers_flag = WorkersFlag(run.meta.command, *workers);
  }
  f->loader_batch_size = get("batch_size");
  // A loader built with a batch_sampler has no batch_size (Accelerate's, in
  // Hugging Face's Trainer): the median batch the training thread got.
  if (std::vector<int64_t>& got = batch_samples[loader->loader_id];
      !f->loader_batch_size && !got.empty()) {
    std::nth_element(got.begin(), got.begin() + got.size() / 2, got.end());
    f->loader_batch_size = got[got.size() / 2];
  }
  f->loader_threads = get("num_workers");
  if (f->loader_threads.value_or(0) > 0) f->loader_prefetch = get("prefetch_factor");
  if (std::optional<int64_t> pin = get("pin_memory")) f->loader_pin_memory = *pin != 0;
  if (std::optional<int64_t> keep = get("persistent_workers")) {
    f->loader_persistent_workers = *keep != 0;
  }
  f->loader_first_batch_wait_s = Seconds(first_ns[loader->loader_id]);
  f->loader_passes = passes[loader->loader_id];
  // Per sample: the fetches' CPU time when recorded, else their wall time
  // (which holds reads that block, and time the thread was preempted).
  cpu_recorded = cpu_recorded && samples > 0;
  if (samples > 0) {
    f->loader_cpu_ns_per_sample = double(cpu_recorded ? load_cpu_ns : load_ns) / double(samples);
  }
  if (cpu_recorded) {
    f->loader_compute_ns_per_sample = steady_samples > 0
                                          ? double(steady_cpu_ns) / double(steady_samples)
                                          : f->loader_cpu_ns_per_sample;
  }
  const int64_t window_ns = t.window.end_ns - t.window.start_ns;
  if (window_ns > 0 && window_load_ns > 0) {
    f->loader_busy_cores = double(window_load_ns) / double(window_ns);
    if (cpu_recorded) f->loader_cpu_cores = double(window_load_cpu_ns) / double(window_ns);
  }
  if (f->loader_batch_size && f->steps > 0 && f->active_s > 0) {
    f->samples_per_s = double(*f->loader_batch_size) * double(f->steps) / f->active_s;
  }
}

// A remote dataset's request counters ("loader_remote" record): rate,
// latency, cache hits, the concurrency limit.
template <typename Get>
void RemoteFeatures(const Get& get, int64_t elapsed_ns, Features* f) {
  const std::optional<int64_t> requests = get("remote_requests");
  if (!requests) return;
  f->remote_concurrent_requests = get("remote_concurrent_requests");
  f->remote_retries = get("remote_retries");
  if (elapsed_ns > 0) {
    f->remote_mb_per_s =
        double(get("remote_bytes_fetched").value_or(0)) / 1e6 / Seconds(elapsed_ns);
  }
  if (*requests > 0) {
    f->remote_request_ms = double(get("remote_request_ns").value_or(0)) / 1e6 / double(*requests);
  }
  const int64_t hits = get("remote_cache_hits").value_or(0);
  const int64_t misses = get("remote_cache_misses").value_or(0);
  if (hits + misses > 0) f->remote_cache_hit_pct = 100.0 * double(hits) / double(hits + misses);
}

// The training process's loader, else the busiest one.
void LoaderFeatures(const Run& run, const Training& t, Features* f) {
  const LoaderCounters* loader = nullptr;
  for (const LoaderCounters& l : run.loaders) {
    if (t.pid && l.pid == *t.pid) loader = &l;
  }
  for (const LoaderCounters& l : run.loaders) {
    if (loader) break;
    loader = &l;
  }
  if (!loader) return TorchLoaderFeatures(run, t, f);
  f->loader_kind = "saturate";
  auto get = [&](const char* key) -> std::optional<int64_t> {
    auto it = loader->values.find(key);
    return it == loader->values.end() ? std::nullopt : std::optional<int64_t>(it->second);
  };
  f->loader_batch_size = get("batch_size");
  f->loader_threads = get("threads");
  f->loader_prefetch = get("prefetch");
  const int64_t samples = get("samples").value_or(0);
  const int64_t read = get("read_ns").value_or(0);
  const int64_t cpu = read + get("decode_ns").value_or(0) + get("transform_ns").value_or(0);
  if (samples > 0) {
    f->loader_cpu_ns_per_sample = double(cpu) / double(samples);
    f->loader_read_ns_per_sample = double(read) / double(samples);
    f->loader_compute_ns_per_sample = double(cpu - read) / double(samples);
    f->loader_decode_ns_per_sample = double(get("decode_ns").value_or(0)) / double(samples);
  }
  // The loader's lifetime: from its first span (else the watch's start) to
  // its last counters record.
  int64_t start_ns = 0;
  for (const Span& s : run.spans) {
    if (s.pid == loader->pid && s.kind == SpanKind::kLoader) {
      start_ns = s.start_ns;
      break;
    }
  }
  const int64_t elapsed_ns = loader->t_ns - start_ns;
  if (elapsed_ns > 0) {
    f->loader_busy_cores = double(cpu) / double(elapsed_ns);
    f->samples_per_s = double(samples) / Seconds(elapsed_ns);
  }
  RemoteFeatures(get, elapsed_ns, f);
}

// A DeviceLoader's JPEG decode split, from its last "loader_decode" record
// (docs/gpu.md, docs/trace.md): the mode, the GPU's share now, the images
// each side decoded, and the rates. The rates are decode="auto"'s
// measurements; without them, the GPU's from its images and decode time,
// and with decode="cpu" one thread's from the loader's decode time per sample.
void DecodeFeatures(const Run& run, Features* f) {
  auto it = run.counters.find("loader_decode");
  if (it == run.counters.end()) return;
  const std::map<std::string, int64_t>& r = it->second;
  auto get = [&](const char* key) {
    auto v = r.find(key);
    return v == r.end() ? int64_t{0} : v->second;
  };
  static const char* const kModes[] = {"cpu", "gpu", "auto"};
  const int64_t mode = get("decode_mode");
  if (mode < 0 || mode > 2) return;  // a mode this doctor does not know
  f->decode_mode = kModes[mode];
  f->decode_gpu_decoder = get("gpu_decoder") != 0;
  f->decode_cpu_images = get("cpu_decoded");
  f->decode_gpu_images = get("gpu_decoded");
  f->decode_gpu_fallbacks = get("gpu_decode_fallbacks");
  f->decode_gpu_share = double(get("gpu_permille")) / 1000;
  if (get("cpu_per_s_per_thread") > 0) {
    f->decode_cpu_per_s_per_thread = double(get("cpu_per_s_per_thread"));
  } else if (f->decode_mode == "cpu" && f->loader_decode_ns_per_sample &&
             *f->loader_decode_ns_per_sample > 0) {
    f->decode_cpu_per_s_per_thread = kNsPerS / *f->loader_decode_ns_per_sample;
  }
  if (get("gpu_per_s") > 0) {
    f->decode_gpu_per_s = double(get("gpu_per_s"));
  } else if (f->decode_gpu_images > 0 && get("gpu_decode_ns") > 0) {
    f->decode_gpu_per_s = double(f->decode_gpu_images) / Seconds(get("gpu_decode_ns"));
  }
}

// Per-site totals of auto spans named `name` on the training thread, largest first.
std::vector<SiteStat> SpanSites(const Run& run, const Training& t, std::string_view name,
                                double steps) {
  std::map<std::pair<std::string, std::string>, SiteStat> sites;
  for (const Span& s : run.spans) {
    if (!s.auto_source || s.name != name || !t.tid || s.pid != *t.pid || s.tid != *t.tid) continue;
    auto label = [&](const char* key, std::string_view absent) {
      auto it = s.labels.find(key);
      return it == s.labels.end() ? std::string(absent) : it->second;
    };
    const std::string site = label("site", "?"), op = label("op", name);
    SiteStat& x = sites[{site, op}];
    x.site = site;
    x.op = op;
    ++x.count;
    x.total_s += Seconds(s.dur_ns);
  }
  std::vector<SiteStat> out;
  for (auto& [key, x] : sites) {
    x.per_step = steps > 0 ? double(x.count) / steps : 0;
    out.push_back(std::move(x));
  }
  std::sort(out.begin(), out.end(),
            [](const SiteStat& a, const SiteStat& b) { return a.total_s > b.total_s; });
  return out;
}

// The start-up before the first step mark, and torch.compile's compilations
// in the training process: all of them, and those that ran during training.
void CompileFeatures(const Run& run, const Training& t, Features* f) {
  const bool marked = !t.steps.empty() && !t.pseudo_step;  // a window between step marks
  if (marked) f->startup_s = Seconds(t.window.start_ns);
  if (!t.pid) return;
  std::set<int64_t> steps;
  for (const Span& s : run.spans) {
    if (!s.auto_source || s.name != "compile" || s.pid != *t.pid) continue;
    ++f->compiles;
    f->compile_s += Seconds(s.dur_ns);
    const int64_t in_ns =
        Overlap(s.start_ns, s.start_ns + s.dur_ns, t.window.start_ns, t.window.end_ns);
    if (!marked || in_ns <= 0) continue;
    ++f->compiles_in_window;
    f->compile_in_window_s += Seconds(in_ns);
    // The window's step i runs from the (i+1)-th mark to the (i+2)-th.
    auto step = std::upper_bound(t.steps.begin(), t.steps.end(), s.start_ns,
                                 [](int64_t ns, const Interval& x) { return ns < x.end_ns; });
    steps.insert(int64_t(step - t.steps.begin()) + 2);
  }
  for (int64_t number : steps) {
    if (f->compile_steps.size() == kMaxCompileSteps) break;
    f->compile_steps.push_back(number);
  }
}

// What the auto-instrumentation captured, and the training process's host
// syncs, blocking saves and copies by call site.
void AutoFeatures(const Run& run, const Training& t, Features* f) {
  AutoSummary& a = f->auto_info;
  a.enabled = run.meta.auto_instrument;
  a.processes = int(run.auto_processes.size());
  for (const AutoProcess& p : run.auto_processes) {
    if (a.torch_version.empty() || (t.pid && p.pid == *t.pid)) a.torch_version = p.torch_version;
    a.missing.insert(p.missing.begin(), p.missing.end());
    a.errors += p.errors;
  }
  // Steps over the whole run, as the host sync totals are (per-step rates).
  const double steps =
      t.pid && run.step_marks_ns.contains(*t.pid) ? double(run.step_marks_ns.at(*t.pid).size()) : 0;
  for (const SyncSite& s : run.host_syncs) {
    if (t.pid && s.pid != *t.pid) continue;
    SiteStat& x = f->host_syncs.emplace_back(SiteStat{s.site, s.op, s.device, s.count,
                                                      steps > 0 ? double(s.count) / steps : 0,
                                                      Seconds(s.total_ns)});
    if (s.intervals > 0) x.step_share = std::min(1.0, double(s.steps) / double(s.intervals));
  }
  std::sort(f->host_syncs.begin(), f->host_syncs.end(),
            [](const SiteStat& x, const SiteStat& y) { return x.total_s > y.total_s; });
  f->checkpoint_sites = SpanSites(run, t, "checkpoint", steps);
  f->copy_sites = SpanSites(run, t, "copy", steps);

  int64_t bytes = 0, pageable = 0, copies = 0, blocking = 0;
  for (const Span& s : run.spans) {
    if (!s.auto_source || s.name != "copy" || !t.tid || s.pid != *t.pid) continue;
    auto arg = [&](const char* key) {
      auto it = s.args.find(key);
      return it == s.args.end() ? int64_t{0} : it->second;
    };
    bytes += arg("bytes");
    pageable += arg("pinned") ? 0 : arg("bytes");
    ++copies;
    blocking += arg("non_blocking") ? 0 : 1;
  }
  if (copies > 0) {
    f->copy_pageable_pct = bytes > 0 ? 100.0 * double(pageable) / double(bytes) : 0;
    f->copy_blocking_pct = 100.0 * double(blocking) / double(copies);
  }
}

// A user's "model" counter says what the job meant; the auto-instrumentation's
// "precision" record is what it saw.
void ModelFeatures(const Run& run, Features* f) {
  for (const char* name : {"model", "precision"}) {
    auto it = run.counters.find(name);
    if (it == run.counters.end()) continue;
    const auto& values = it->second;
    auto bits = values.find("precision_bits");
    if (bits == values.end()) continue;
    f->precision_bits = bits->second;
    f->precision_source = name;
    auto tf32 = values.find("tf32_matmul");
    f->tf32_matmul = tf32 != values.end() && tf32->second != 0;
    break;
  }
  if (auto it = run.counters.find("model_shapes"); it != run.counters.end()) {
    auto value = [&](const char* key) {
      auto v = it->second.find(key);
      return v == it->second.end() ? int64_t{0} : v->second;
    };
    const Features::ModelShapes m{value("conv_weights"), value("conv_nchw_weights"),
                                  value("matrix_weights"), value("matrix_unaligned_weights")};
    // Flattened parameters (FSDP) show neither kind: that says nothing.
    if (m.conv_weights + m.matrix_weights > 0) f->model_shapes = m;
  }
}

template <typename T>
void Put(nlohmann::json& j, const char* key, const std::optional<T>& v) {
  j[key] = v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

}  // namespace

Features ComputeFeatures(const Run& run) {
  Features f;
  f.duration_s = Seconds(run.meta.duration_ns);
  f.cpus = run.meta.cpus;
  f.gpu_count = run.meta.gpu_count;
  f.exit_code = run.meta.exit_code;
  f.idle_gaps_s = GapHistogram({});  // the same buckets whether or not there are gaps
  const Training training = FindTraining(run);
  f.active_s = f.duration_s;
  GpuFeatures(run, training, &f);
  GpmFeatures(run, training, &f);
  StepFeatures(run, training, &f);
  CheckpointFeatures(run, training, &f);
  HostFeatures(run, training, &f);
  LoaderFeatures(run, training, &f);
  DecodeFeatures(run, &f);
  AutoFeatures(run, training, &f);
  CompileFeatures(run, training, &f);
  ModelFeatures(run, &f);
  return f;
}

std::optional<std::string> WorkersFlag(const std::vector<std::string>& argv, int64_t value) {
  std::optional<FlagValue> at = FindFlagValue(argv, WorkerFlags(), std::to_string(value));
  if (!at) return std::nullopt;
  return at->flag;
}

nlohmann::json SitesJson(const std::vector<SiteStat>& sites) {
  nlohmann::json out = nlohmann::json::array();
  for (const SiteStat& x : sites) {
    nlohmann::json j = {{"site", x.site},
                        {"op", x.op},
                        {"count", x.count},
                        {"per_step", x.per_step},
                        {"total_s", x.total_s}};
    if (!x.device.empty()) j["device"] = x.device;
    if (x.step_share) j["step_share"] = *x.step_share;
    out.push_back(std::move(j));
  }
  return out;
}

nlohmann::json Features::ToJson() const {
  using json = nlohmann::json;
  json phases_json = json::array();
  for (const PhaseShare& p : phases) {
    phases_json.push_back(
        {{"name", p.name}, {"total_s", p.total_s}, {"pct_of_steps", p.pct_of_steps}});
  }
  json timeline = json::array();
  for (const auto& [t_s, pct] : device_busy_timeline) timeline.push_back({t_s, pct});
  json j = {
      {"duration_s", duration_s},
      {"cpus", cpus},
      {"gpu_count", gpu_count},
      {"active_s", active_s},
      {"device_busy_timeline", std::move(timeline)},
      {"idle_gaps_s", {{"upper_edges", idle_gaps_s.upper_edges}, {"counts", idle_gaps_s.counts}}},
      {"interior_idle_s", interior_idle_s},
      {"interior_idle_gaps", interior_idle_gaps},
      {"steps", steps},
      {"phases", std::move(phases_json)},
      {"has_spans", has_spans},
      {"checkpoints", checkpoints},
      {"gpu_busy_pct", gpu_busy_pct},
      {"gpu_idle_pct", gpu_idle_pct},
      {"throttle_reasons", throttle_reasons}};
  Put(j, "device_busy_pct", device_busy_pct);
  Put(j, "idle_period_s", idle_period_s);
  Put(j, "training_pid", training_pid);
  Put(j, "training_tid", training_tid);
  Put(j, "step_time_median_s", step_time_median_s);
  Put(j, "step_time_mean_s", step_time_mean_s);
  Put(j, "data_wait_s", data_wait_s);
  Put(j, "data_wait_pct", data_wait_pct);
  Put(j, "compute_per_step_s", compute_per_step_s);
  Put(j, "copy_s", copy_s);
  Put(j, "copy_pct", copy_pct);
  Put(j, "comm_s", comm_s);
  Put(j, "comm_pct", comm_pct);
  Put(j, "host_cpu_busy_pct", host_cpu_busy_pct);
  Put(j, "cpu_pressure_pct", cpu_pressure_pct);
  Put(j, "host_iowait_pct", host_iowait_pct);
  Put(j, "tree_cpu_cores", tree_cpu_cores);
  Put(j, "other_cpu_cores", other_cpu_cores);
  Put(j, "tree_runq_wait_cores", tree_runq_wait_cores);
  Put(j, "training_runq_wait_cores", training_runq_wait_cores);
  Put(j, "training_cpu_cores", training_cpu_cores);
  Put(j, "mem_headroom_pct", mem_headroom_pct);
  Put(j, "disk_read_mb_per_s", disk_read_mb_per_s);
  Put(j, "disk_read_peak_mb_per_s", disk_read_peak_mb_per_s);
  Put(j, "tree_rss_max_bytes", tree_rss_max_bytes);
  Put(j, "mem_available_min_bytes", mem_available_min_bytes);
  Put(j, "exit_code", exit_code);
  Put(j, "checkpoint_s", checkpoint_s);
  Put(j, "checkpoint_after_s", checkpoint_after_s);
  Put(j, "startup_s", startup_s);
  j["compiles"] = compiles;
  j["compile_s"] = compile_s;
  j["compiles_in_window"] = compiles_in_window;
  j["compile_in_window_s"] = compile_in_window_s;
  j["compile_steps"] = compile_steps;
  Put(j, "gpu_memory_used_max_pct", gpu_memory_used_max_pct);
  Put(j, "throttled_pct", throttled_pct);
  Put(j, "throttle_clock_loss_pct", throttle_clock_loss_pct);
  if (gpm_samples > 0) j["gpm_samples"] = gpm_samples;
  Put(j, "gpm_util_pct", gpm_util_pct);
  Put(j, "gpm_sm_active_pct", gpm_sm_active_pct);
  Put(j, "gpm_sm_occupancy_pct", gpm_sm_occupancy_pct);
  Put(j, "gpm_tensor_active_pct", gpm_tensor_active_pct);
  Put(j, "gpm_dram_active_pct", gpm_dram_active_pct);
  Put(j, "loader_batch_size", loader_batch_size);
  Put(j, "loader_threads", loader_threads);
  Put(j, "loader_prefetch", loader_prefetch);
  Put(j, "loader_cpu_ns_per_sample", loader_cpu_ns_per_sample);
  Put(j, "loader_read_ns_per_sample", loader_read_ns_per_sample);
  Put(j, "loader_busy_cores", loader_busy_cores);
  Put(j, "loader_compute_ns_per_sample", loader_compute_ns_per_sample);
  Put(j, "loader_cpu_cores", loader_cpu_cores);
  Put(j, "samples_per_s", samples_per_s);
  Put(j, "loader_decode_ns_per_sample", loader_decode_ns_per_sample);
  if (!decode_mode.empty()) {
    json decode = {{"mode", decode_mode},
                   {"gpu_decoder", decode_gpu_decoder},
                   {"cpu_images", decode_cpu_images},
                   {"gpu_images", decode_gpu_images},
                   {"gpu_fallbacks", decode_gpu_fallbacks}};
    Put(decode, "gpu_share", decode_gpu_share);
    Put(decode, "cpu_images_per_s_per_thread", decode_cpu_per_s_per_thread);
    Put(decode, "gpu_images_per_s", decode_gpu_per_s);
    j["decode"] = std::move(decode);
  }
  Put(j, "precision_bits", precision_bits);
  if (precision_bits) {
    j["precision_source"] = precision_source;
    j["tf32_matmul"] = tf32_matmul;
  }
  if (model_shapes) {
    j["model_shapes"] = {{"conv_weights", model_shapes->conv_weights},
                         {"conv_nchw_weights", model_shapes->conv_nchw_weights},
                         {"matrix_weights", model_shapes->matrix_weights},
                         {"matrix_unaligned_weights", model_shapes->matrix_unaligned_weights}};
  }
  json auto_json = {{"processes", auto_info.processes},
                    {"torch", auto_info.torch_version},
                    {"missing", auto_info.missing},
                    {"errors", auto_info.errors}};
  Put(auto_json, "enabled", auto_info.enabled);
  j["auto"] = std::move(auto_json);
  j["loader_kind"] = loader_kind;
  j["loader_site"] = loader_site;
  Put(j, "loader_pin_memory", loader_pin_memory);
  Put(j, "loader_persistent_workers", loader_persistent_workers);
  Put(j, "loader_first_batch_wait_s", loader_first_batch_wait_s);
  j["loader_passes"] = loader_passes;
  j["host_syncs"] = SitesJson(host_syncs);
  j["checkpoint_sites"] = SitesJson(checkpoint_sites);
  j["copy_sites"] = SitesJson(copy_sites);
  Put(j, "copy_pageable_pct", copy_pageable_pct);
  Put(j, "copy_blocking_pct", copy_blocking_pct);
  json rows = json::array();
  for (const StepWaterfall& w : waterfall) {
    json segments = json::array();
    for (const auto& [name, offset_s, dur_s] : w.segments)
      segments.push_back({name, offset_s, dur_s});
    rows.push_back({{"step", w.step},
                    {"start_s", w.start_s},
                    {"dur_s", w.dur_s},
                    {"segments", std::move(segments)}});
  }
  j["waterfall"] = std::move(rows);
  if (ranks.world_size > 0) j["ranks"] = RanksJson(ranks);
  return j;
}

nlohmann::json RanksJson(const RanksView& v) {
  using json = nlohmann::json;
  json rows = json::array();
  for (const RankRow& r : v.rows) {
    json row = {{"rank", r.rank},
                {"local_rank", r.local_rank},
                {"host", r.host},
                {"gpu", r.gpu},
                {"steps", r.step_s.size()},
                {"step_s", r.step_s},
                {"data_wait_s", r.data_wait_s},
                {"wait_s", r.wait_s},
                {"clock_offset_ms", r.clock_offset_ms},
                {"exited", r.exited},
                {"exception", r.exception},
                {"note", r.note}};
    Put(row, "exit_code", r.exit_code);
    rows.push_back(std::move(row));
  }
  json j = {{"world_size", v.world_size},
            {"hosts", v.hosts},
            {"clock_method", v.clock_method},
            {"residual_skew_ms", v.residual_skew_ms},
            {"others_wait_per_step_s", v.others_wait_per_step_s},
            {"straggler_reason", v.straggler_reason},
            {"rows", std::move(rows)}};
  Put(j, "straggler", v.straggler);
  return j;
}

}  // namespace saturate::doctor
