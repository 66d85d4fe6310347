#include "ranks/analysis.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>

#include "doctor/checkpoint_ranks.h"

namespace saturate::ranks {
namespace {

constexpr double kNsPerS = 1e9;

std::string Fmt(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

// "41 ms", "1.2 s".
std::string Duration(double s) { return s >= 1 ? Fmt("%.1f s", s) : Fmt("%.0f ms", s * 1e3); }

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

template <typename F>
double MeanOver(const std::vector<RankStep>& steps, F field) {
  if (steps.empty()) return 0;
  double sum = 0;
  for (const RankStep& s : steps) sum += field(s);
  return sum / double(steps.size());
}

// The thread that trained: the one with the most data_wait/forward/backward
// spans of the training process (step marks carry no thread).
int64_t TrainingTid(const doctor::Run& run, int pid) {
  std::map<int64_t, int> count;
  for (const doctor::Span& s : run.spans) {
    if (s.pid == pid && (s.name == "data_wait" || s.name == "forward" || s.name == "backward"))
      ++count[s.tid];
  }
  int64_t tid = 0;
  int most = 0;
  for (const auto& [t, n] : count) {
    if (n > most) {
      most = n;
      tid = t;
    }
  }
  return tid;
}

// Adds the part of [start, end) inside each step to `field` of that step.
template <typename F>
void Spread(const std::vector<int64_t>& marks, int64_t start, int64_t end,
            std::vector<RankStep>* steps, F field) {
  auto it = std::upper_bound(marks.begin(), marks.end(), start);
  size_t i = it == marks.begin() ? 0 : size_t(it - marks.begin()) - 1;
  for (; i + 1 < marks.size() && marks[i] < end; ++i) {
    const int64_t lo = std::max(start, marks[i]), hi = std::min(end, marks[i + 1]);
    if (hi > lo) field((*steps)[i]) += double(hi - lo) / kNsPerS;
  }
}

// The step a time falls in; none before the first mark or after the last.
RankStep* StepAt(const std::vector<int64_t>& marks, int64_t t, std::vector<RankStep>* steps) {
  auto it = std::upper_bound(marks.begin(), marks.end(), t);
  if (it == marks.begin() || it == marks.end()) return nullptr;
  return &(*steps)[size_t(it - marks.begin()) - 1];
}

// Mean cores taken on a run's node by processes outside the watched tree.
std::optional<double> OtherCores(const doctor::Run& run) {
  double sum = 0;
  int n = 0;
  for (const doctor::SamplePoint& p : run.samples) {
    if (!p.tree_cpu_pct || run.meta.cpus <= 0) continue;
    sum += std::max(0.0, p.cpu_busy_pct * run.meta.cpus / 100 - *p.tree_cpu_pct / 100);
    ++n;
  }
  if (n == 0) return std::nullopt;
  return sum / n;
}

// The device a rank's copies went to most, as "cuda:1" (with the
// CUDA_VISIBLE_DEVICES that index counts within).
std::string GpuOf(const doctor::Run& run, int pid, const std::string& visible) {
  std::map<int64_t, int> count;
  for (const doctor::Span& s : run.spans) {
    if (s.name != "copy" || (pid != 0 && s.pid != pid)) continue;
    if (auto it = s.args.find("gpu"); it != s.args.end() && it->second >= 0) ++count[it->second];
  }
  if (count.empty()) return "";
  auto top = std::max_element(count.begin(), count.end(),
                              [](const auto& a, const auto& b) { return a.second < b.second; });
  std::string gpu = "cuda:" + std::to_string(top->first);
  if (!visible.empty()) gpu += " (CUDA_VISIBLE_DEVICES=" + visible + ")";
  return gpu;
}

RankSteps StepsOf(const RankRun& r) {
  RankSteps out;
  out.rank = r.rank;
  out.local_rank = r.local_rank;
  out.host = r.host;
  out.exit_code = r.exit_code;
  out.clock_offset_ms = double(r.clock_offset_ns) / 1e6;
  const doctor::Run& run = r.run;
  const int pid = TrainingPid(run);
  for (const doctor::ProcessExit& e : run.exits) {
    if (e.pid == pid) {
      out.exit_s = double(e.t_ns) / kNsPerS;
      out.exception = e.exception;
    }
  }
  int64_t last = 0;
  for (const doctor::Span& s : run.spans) last = std::max(last, s.start_ns + s.dur_ns);
  for (const auto& [p, marks] : run.step_marks_ns) {
    if (!marks.empty()) last = std::max(last, marks.back());
  }
  out.last_event_s = double(last) / kNsPerS;
  out.gpu = GpuOf(run, pid, r.cuda_visible_devices);
  out.host_other_cores = OtherCores(run);
  if (pid == 0) {
    out.note = "no step marks";
    return out;
  }
  const std::vector<int64_t>& marks = run.step_marks_ns.at(pid);
  for (size_t i = 1; i < marks.size(); ++i) {
    out.steps.push_back({.start_s = double(marks[i - 1]) / kNsPerS,
                         .dur_s = double(marks[i] - marks[i - 1]) / kNsPerS});
  }
  const int64_t tid = TrainingTid(run, pid);
  if (out.steps.empty()) {
    out.note = "fewer than two step marks";
    return out;
  }
  const bool ddp = run.counters.contains("ddp");
  for (const doctor::Span& s : run.spans) {
    if (s.pid != pid || (tid != 0 && s.tid != tid)) continue;
    const int64_t end = s.start_ns + s.dur_ns;
    if (s.name == "data_wait") {
      Spread(marks, s.start_ns, end, &out.steps,
             [](RankStep& x) -> double& { return x.data_wait_s; });
      // The batch belongs to the step it was fetched in.
      if (RankStep* step = StepAt(marks, end, &out.steps)) {
        if (auto a = s.args.find("samples"); a != s.args.end()) step->samples += a->second;
        if (auto a = s.args.find("elems"); a != s.args.end()) step->elems += a->second;
      }
    } else if (IsBlockingCollective(s) || (ddp && s.name == "backward")) {
      Spread(marks, s.start_ns, end, &out.steps, [](RankStep& x) -> double& { return x.sync_s; });
      if (s.name != "backward") {
        Spread(marks, s.start_ns, end, &out.steps,
               [](RankStep& x) -> double& { return x.collective_s; });
        RankStep* step = StepAt(marks, end, &out.steps);
        if (auto a = s.args.find("bytes"); step && a != s.args.end() && a->second > 0) {
          step->collective_bytes += a->second;
        }
      }
    } else if (s.kind == doctor::SpanKind::kCheckpoint) {
      Spread(marks, s.start_ns, end, &out.steps,
             [](RankStep& x) -> double& { return x.checkpoint_s; });
    }
  }
  return out;
}

// Time a rank spends on its own work in a step, by kind.
double Own(const RankStep& s) {
  return std::max(0.0, s.dur_s - s.sync_s - s.data_wait_s - s.checkpoint_s);
}

}  // namespace

std::vector<RankSteps> StepTable(const Job& job) {
  std::vector<RankSteps> table;
  size_t next = 0;
  for (int rank = 0; rank < job.world_size; ++rank) {
    if (next < job.ranks.size() && job.ranks[next].rank == rank) {
      table.push_back(StepsOf(job.ranks[next++]));
    } else {
      RankSteps missing;
      missing.rank = rank;
      missing.note = "rank directory missing";
      table.push_back(std::move(missing));
    }
  }
  ComputeWaits(&table);
  return table;
}

void ComputeWaits(std::vector<RankSteps>* table) {
  size_t steps = 0;
  for (const RankSteps& r : *table) steps = std::max(steps, r.steps.size());
  for (size_t k = 0; k < steps; ++k) {
    double least = INFINITY;
    int present = 0;
    for (const RankSteps& r : *table) {
      if (k < r.steps.size()) {
        least = std::min(least, r.steps[k].sync_s);
        ++present;
      }
    }
    for (RankSteps& r : *table) {
      if (k < r.steps.size()) r.steps[k].wait_s = present >= 2 ? r.steps[k].sync_s - least : 0;
    }
  }
}

std::optional<Straggler> FindStraggler(const std::vector<RankSteps>& table) {
  size_t steps = 0;
  int ranks_with_steps = 0;
  std::vector<double> durations;
  for (const RankSteps& r : table) {
    steps = std::max(steps, r.steps.size());
    ranks_with_steps += r.steps.empty() ? 0 : 1;
    for (const RankStep& s : r.steps) durations.push_back(s.dur_s);
  }
  if (ranks_with_steps < 2) return std::nullopt;
  // Waiting in each step is charged to the rank that came last (the least sync).
  std::map<int, double> charged;
  double total_wait = 0;
  for (size_t k = 0; k < steps; ++k) {
    const RankSteps* last = nullptr;
    double wait = 0;
    for (const RankSteps& r : table) {
      if (k >= r.steps.size()) continue;
      wait += r.steps[k].wait_s;
      if (last == nullptr || r.steps[k].sync_s < last->steps[k].sync_s) last = &r;
    }
    if (last != nullptr) charged[last->rank] += wait;
    total_wait += wait;
  }
  if (total_wait <= 0) return std::nullopt;
  auto top = std::max_element(charged.begin(), charged.end(),
                              [](const auto& a, const auto& b) { return a.second < b.second; });
  Straggler s;
  s.rank = top->first;
  s.wait_share = top->second / total_wait;
  s.lost_s = total_wait / ranks_with_steps;

  const RankSteps* me = nullptr;
  std::vector<const RankSteps*> others;
  for (const RankSteps& r : table) {
    if (r.steps.empty()) continue;
    if (r.rank == s.rank) {
      me = &r;
    } else {
      others.push_back(&r);
    }
  }
  double others_wait = 0;
  for (const RankSteps* o : others)
    others_wait += MeanOver(o->steps, [](const RankStep& x) { return x.wait_s; });
  s.others_wait_per_step_s = others.empty() ? 0 : others_wait / double(others.size());
  const double step_s = Median(durations);
  if (s.others_wait_per_step_s < std::max(1e-3, 0.05 * step_s) || s.wait_share < 0.6) {
    return std::nullopt;
  }

  // Why it comes last: the kind of its own time that exceeds the others' most.
  auto excess = [&](auto field) {
    std::vector<double> theirs;
    for (const RankSteps* o : others) theirs.push_back(MeanOver(o->steps, field));
    return MeanOver(me->steps, field) - Median(theirs);
  };
  const std::pair<const char*, double> kinds[] = {
      {"data_wait", excess([](const RankStep& x) { return x.data_wait_s; })},
      {"checkpoint", excess([](const RankStep& x) { return x.checkpoint_s; })},
      {"compute", excess([](const RankStep& x) { return Own(x); })}};
  const auto* reason =
      std::max_element(std::begin(kinds), std::end(kinds),
                       [](const auto& a, const auto& b) { return a.second < b.second; });
  s.reason = reason->first;
  s.excess_per_step_s = std::max(0.0, reason->second);
  std::vector<double> their_elems;
  for (const RankSteps* o : others)
    their_elems.push_back(MeanOver(o->steps, [](const RankStep& x) { return double(x.elems); }));
  const double mine = MeanOver(me->steps, [](const RankStep& x) { return double(x.elems); });
  if (Median(their_elems) > 0) s.elems_ratio = mine / Median(their_elems);
  if (s.reason == "compute" && s.elems_ratio >= 1.15) s.reason = "uneven_batches";
  // Slower compute where other work takes half a core or more than on the
  // others' nodes: the node, not the rank.
  std::vector<double> their_other;
  for (const RankSteps* o : others) {
    if (o->host_other_cores) their_other.push_back(*o->host_other_cores);
  }
  if (s.reason == "compute" && me->host_other_cores && !their_other.empty()) {
    s.host_other_cores = *me->host_other_cores - Median(their_other);
    if (s.host_other_cores >= 0.5) s.reason = "host";
  }
  return s;
}

std::optional<CollectiveCost> CollectiveCostOf(const std::vector<RankSteps>& table) {
  size_t steps = 0;
  std::vector<double> durations;
  for (const RankSteps& r : table) {
    steps = std::max(steps, r.steps.size());
    for (const RankStep& s : r.steps) durations.push_back(s.dur_s);
  }
  CollectiveCost c;
  double bytes = 0;
  size_t counted = 0;
  for (size_t k = 0; k < steps; ++k) {
    const RankStep* least = nullptr;
    for (const RankSteps& r : table) {
      if (k < r.steps.size() && (least == nullptr || r.steps[k].collective_s < least->collective_s))
        least = &r.steps[k];
    }
    if (least == nullptr) continue;
    c.total_s += least->collective_s;
    bytes += double(least->collective_bytes);
    ++counted;
  }
  if (counted == 0 || c.total_s <= 0) return std::nullopt;
  c.per_step_s = c.total_s / double(counted);
  c.bytes_per_step = bytes / double(counted);
  const double step_s = Median(durations);
  c.pct_of_step = step_s > 0 ? 100 * c.per_step_s / step_s : 0;
  return c;
}

doctor::RanksView ViewOf(const Job& job, const std::vector<RankSteps>& table,
                         const std::optional<Straggler>& straggler) {
  doctor::RanksView v;
  v.world_size = job.world_size;
  v.hosts = job.hosts;
  v.clock_method = job.clock.method;
  v.residual_skew_ms = double(job.clock.residual_skew_ns) / 1e6;
  for (const RankSteps& r : table) {
    doctor::RankRow row;
    row.rank = r.rank;
    row.local_rank = r.local_rank;
    row.host = r.host;
    row.gpu = r.gpu;
    for (const RankStep& s : r.steps) {
      row.step_s.push_back(s.dur_s);
      row.data_wait_s.push_back(s.data_wait_s);
      row.wait_s.push_back(s.wait_s);
    }
    row.clock_offset_ms = r.clock_offset_ms;
    row.exit_code = r.exit_code;
    row.exited = r.exit_s.has_value();
    row.exception = r.exception;
    row.note = r.note;
    v.rows.push_back(std::move(row));
  }
  if (straggler) {
    v.straggler = straggler->rank;
    v.others_wait_per_step_s = straggler->others_wait_per_step_s;
    v.straggler_reason = straggler->reason;
  }
  return v;
}

namespace {

void Add(doctor::Finding& x, std::string key, double value, std::string unit, std::string text) {
  x.evidence.push_back({std::move(key), value, std::move(unit), std::move(text)});
}

doctor::Finding StragglerFinding(const std::vector<RankSteps>& table, const Straggler& s,
                                 double duration_s) {
  const RankSteps* me = nullptr;
  for (const RankSteps& r : table) {
    if (r.rank == s.rank) me = &r;
  }
  const int others = int(std::count_if(table.begin(), table.end(), [&](const RankSteps& r) {
    return r.rank != s.rank && !r.steps.empty();
  }));
  const std::string who =
      "rank " + std::to_string(s.rank) + (me->host.empty() ? "" : " (" + me->host + ")");
  const std::string wait = "the other " + std::to_string(others) + " rank" +
                           (others == 1 ? "" : "s") + " wait " +
                           Duration(s.others_wait_per_step_s) + " a step for it";
  std::string cause = "communication", title, fix;
  if (s.reason == "data_wait") {
    cause = "input_pipeline";
    title = "Straggler: " + who + " waits longer for data; " + wait;
    fix =
        "Its data wait is " + Duration(s.excess_per_step_s) +
        " a step above the others'. Give its loader more workers (or saturate.Loader), and check " +
        (me->host.empty() ? std::string("its node") : me->host) +
        "'s storage and CPU: other work there, a slower disk or a remote mount. Every rank pays "
        "for the slowest one at the next all-reduce.";
  } else if (s.reason == "checkpoint") {
    cause = "checkpoint_stall";
    title = "Rank-" + std::to_string(s.rank) + "-only work: " + who + " saves checkpoints while " +
            wait;
    fix = "Saving costs " + Duration(s.excess_per_step_s) +
          " a step on that rank alone, and the others wait at the next collective. Save less "
          "often, save asynchronously (saturate.checkpoint writes in the background), or shard "
          "the save over all ranks (torch.distributed.checkpoint).";
  } else if (s.reason == "uneven_batches") {
    title = "Uneven batches: " + who + " gets " + Fmt("%.2g", s.elems_ratio) +
            "x the elements of the others, and " + wait;
    fix =
        "Balance the work per rank: bucket samples by length, pad to a common length, or "
        "split by token count rather than by sample count (the straggler does " +
        Fmt("%.0f%%", 100 * (s.elems_ratio - 1)) + " more work every step).";
  } else if (s.reason == "host") {
    title = "Straggler: " + who + " computes slower; other work on its node takes " +
            Fmt("%.1f", s.host_other_cores) + " cores more than on the others'; " + wait;
    fix = "Its own work takes " + Duration(s.excess_per_step_s) +
          " a step longer while processes outside the job use its node's CPUs. Find them "
          "(saturate watch on that node shows the host and the job apart), move them, or "
          "keep them off the training nodes; every rank pays for it at the next all-reduce.";
  } else if (s.rank == 0) {
    title =
        "Rank-0-only work: " + who + " spends longer outside data loading and collectives; " + wait;
    fix = "Rank 0 does " + Duration(s.excess_per_step_s) +
          " a step more work of its own: logging, metrics, evaluation or saving done only there. "
          "Do it every N steps, on all ranks at once, or in a background thread.";
  } else {
    title = "Straggler: " + who + " computes slower; " + wait;
    fix = "Its own work takes " + Duration(s.excess_per_step_s) +
          " a step longer. Check that GPU (clocks, throttling, memory errors) and other "
          "processes on its node; if the work per rank is uneven, balance it. Gradient "
          "accumulation with DDP's no_sync() makes the ranks meet less often.";
  }
  doctor::Finding x =
      doctor::NewFinding(cause, title, s.lost_s, duration_s, 0.5 + 0.4 * s.wait_share);
  Add(x, "straggler_rank", s.rank, "", "the rank the others wait for (straggler)");
  Add(x, "others_wait_ms_per_step", s.others_wait_per_step_s * 1e3, "ms",
      "the other ranks' mean wait per step at collectives");
  Add(x, "wait_share_pct", 100 * s.wait_share, "%", "of all waiting, in steps where it came last");
  Add(x, "excess_ms_per_step", s.excess_per_step_s * 1e3, "ms",
      "its extra " + s.reason + " time per step");
  if (s.elems_ratio > 0)
    Add(x, "elems_ratio", s.elems_ratio, "x", "its batch elements / the others' median");
  x.fix = fix;
  // When the straggler keeps pace, every rank's step loses its extra time:
  // the others stop waiting for it, and it stops taking longer.
  double step_s = 0;
  for (const RankStep& st : me->steps) step_s += st.dur_s / double(me->steps.size());
  if (step_s > s.excess_per_step_s && s.excess_per_step_s > 0) {
    x.prediction = doctor::SavingPrediction(
        duration_s, duration_s * s.excess_per_step_s / step_s, std::nullopt, "steps/s",
        "steps of " + Duration(step_s) + " lose the straggler's extra " +
            Duration(s.excess_per_step_s) + " of " + s.reason + " when it keeps pace",
        true);
  }
  return x;
}

// At most ~100 characters of an exception message, for a title.
std::string Clip(const std::string& text) {
  return text.size() <= 100 ? text : text.substr(0, 97) + "...";
}

// An exception a rank gets because another rank failed (the peer closed
// the connection, the collective timed out), not a cause of its own.
bool IsPeerFailure(const std::string& exception) {
  for (const char* word :
       {"closed by peer", "Connection reset", "timed out", "Timed out", "Timeout", "timeout",
        "NCCL", "DistBackendError", "ProcessGroup", "Broken pipe"}) {
    if (exception.find(word) != std::string::npos) return true;
  }
  return false;
}

// The rank that ended the job: one that exited while the others went on, else
// one whose own exception ended it, else one killed without a record while
// the others recorded theirs; the earliest such. Empty when none stands out.
const RankSteps* FirstToFail(const std::vector<RankSteps>& table, bool stalled, std::string* how) {
  const RankSteps* best = nullptr;
  int best_kind = 4;
  const bool others_recorded = std::any_of(table.begin(), table.end(),
                                           [](const RankSteps& r) { return r.exit_s.has_value(); });
  size_t most_steps = 0;
  bool others_blocked = stalled;
  for (const RankSteps& r : table) {
    most_steps = std::max(most_steps, r.steps.size());
    others_blocked = others_blocked || IsPeerFailure(r.exception);
  }
  for (const RankSteps& r : table) {
    if (r.steps.empty() && !r.exit_s) continue;
    // Leaving and dying count when the rank stopped short of the steps
    // another rank took, or the others then failed waiting for a peer or
    // stalled; a rank that ended with the rest did not stop the job.
    const bool short_of_others = r.steps.size() < most_steps || others_blocked;
    int kind = 4;
    if (r.exit_s && r.exception.empty() && short_of_others) kind = 1;
    if (r.exit_s && !r.exception.empty() && !IsPeerFailure(r.exception)) kind = 2;
    if (r.exit_code.value_or(0) != 0 && !r.exit_s) kind = 2;
    if (!r.exit_s && others_recorded && short_of_others) kind = 3;
    const double t = r.exit_s.value_or(r.last_event_s);
    if (kind < best_kind ||
        (kind == best_kind && best != nullptr && t < best->exit_s.value_or(best->last_event_s))) {
      best = &r;
      best_kind = kind;
    }
  }
  if (best == nullptr || best_kind == 4) return nullptr;
  if (best_kind == 1) {
    *how = "exited (through sys.exit or the end of its script) while the other ranks trained on";
  } else if (best->exit_s) {
    *how = "failed: " + best->exception;
  } else if (best->exit_code) {
    *how = "exited with code " + std::to_string(*best->exit_code);
  } else {
    *how = "died without exiting (killed, or crashed in native code)";
  }
  return best;
}

// A job that failed because one rank left, crashed or hung while the others
// blocked in their next collective.
std::optional<doctor::Finding> DeadRankFinding(const std::vector<RankSteps>& table,
                                               double duration_s, double job_end_s,
                                               std::optional<int> job_exit_code,
                                               const std::optional<LiveHang>& hang) {
  std::vector<double> durations;
  double progress_end_s = 0;
  int ranks = 0;
  bool failed = job_exit_code.value_or(1) != 0;
  for (const RankSteps& r : table) {
    for (const RankStep& s : r.steps) durations.push_back(s.dur_s);
    progress_end_s = std::max(progress_end_s, r.last_event_s);
    ranks += r.note == "rank directory missing" ? 0 : 1;
    failed = failed || r.exit_code.value_or(0) != 0 || !r.exception.empty();
  }
  // A job that ended well and whose ranks all ended well only finished slowly.
  if (!failed || durations.empty()) return std::nullopt;
  const double stalled_s = std::max(0.0, job_end_s - progress_end_s);
  const bool stalled = stalled_s >= std::max(5.0, 10 * Median(durations));
  std::string how;
  const RankSteps* culprit = FirstToFail(table, stalled, &how);
  // What saturate watch saw live outranks what the ends of the files suggest:
  // a hung rank is killed along with the ranks that timed out waiting for it.
  if (hang && hang->suspect_rank && hang->kind != "unknown") {
    for (const RankSteps& r : table) {
      if (r.rank != *hang->suspect_rank) continue;
      culprit = &r;
      how = (hang->kind == "dead" ? "died" : "hung") + std::string(" (seen while the job ran") +
            (hang->suspect_stack.empty() ? "" : ", at " + hang->suspect_stack.front()) + ")";
    }
  }
  if (culprit == nullptr && !stalled) return std::nullopt;
  if (culprit == nullptr) {
    for (const RankSteps& r : table) {
      if (!r.steps.empty() && (culprit == nullptr || r.last_event_s < culprit->last_event_s))
        culprit = &r;
    }
    how = "stopped first; the ranks hung";
  }
  // Marks, not full steps: the first mark ends step 1.
  const size_t marks = culprit->steps.empty() ? 0 : culprit->steps.size() + 1;
  std::string title = "Dead or hung rank: rank " + std::to_string(culprit->rank) + " " + Clip(how) +
                      " (after step " + std::to_string(marks) + ")";
  std::vector<std::string> victims;
  for (const RankSteps& r : table) {
    if (&r != culprit && !r.exception.empty()) victims.push_back(r.exception);
  }
  if (stalled) {
    title += "; the others made no progress for the last " + Duration(stalled_s) + " of the job";
  } else if (!victims.empty()) {
    title += "; the others then failed: " + Clip(victims.front());
  }
  doctor::Finding x = doctor::NewFinding(
      "idle_allocation", title,
      stalled ? stalled_s * double(std::max(0, ranks - 1)) / double(std::max(1, ranks)) : 0,
      duration_s, 0.7);
  // A failure costs the job whatever it has to redo, not only the stall: shown even when short.
  x.info = x.time_lost_pct < 2.0;
  Add(x, "rank", culprit->rank, "", "the rank that left, failed or stopped first");
  Add(x, "stalled_s", stalled_s, "s",
      "from the last recorded progress of any rank to the job's end");
  x.fix =
      "Every rank must run the same collectives: a rank that returns or exits early (an "
      "early stop decided on one rank, an exception caught on one rank, uneven data) leaves the "
      "others blocked until the process group's timeout, or failing when its connections close. "
      "Make such decisions collective (all_reduce a flag), give init_process_group a timeout you "
      "can afford, and run under `saturate watch`, which names a hung rank and dumps its stack "
      "while the job still runs.";
  return x;
}

}  // namespace

std::vector<doctor::Finding> DiagnoseRanks(const std::vector<RankSteps>& table,
                                           const std::optional<Straggler>& straggler,
                                           double duration_s, double job_end_s,
                                           std::optional<int> job_exit_code,
                                           const std::optional<LiveHang>& hang) {
  std::vector<doctor::Finding> out;
  if (straggler) out.push_back(StragglerFinding(table, *straggler, duration_s));
  if (std::optional<CollectiveCost> c = CollectiveCostOf(table);
      c && c->pct_of_step >= 10 && c->per_step_s >= 1e-3) {
    doctor::Finding x = doctor::NewFinding("communication",
                                           "Collectives take " + Duration(c->per_step_s) +
                                               " a step (" + Fmt("%.0f", c->pct_of_step) +
                                               "% of it) even on the last rank to arrive",
                                           c->total_s, duration_s, 0.8);
    Add(x, "collective_ms_per_step", c->per_step_s * 1e3, "ms",
        "the least time any rank spent in collectives, per step");
    Add(x, "collective_mb_per_step", c->bytes_per_step / 1e6, "MB", "bytes they carried per step");
    x.fix =
        "Send fewer, larger messages and overlap them with compute: let DDP all-reduce the "
        "gradients during backward (a larger bucket_cap_mb for many small tensors), all-reduce "
        "metrics every N steps instead of every step, and accumulate gradients over N steps "
        "with model.no_sync() so the ranks meet once every N steps.";
    out.push_back(std::move(x));
  }

  if (std::optional<doctor::Finding> x =
          DeadRankFinding(table, duration_s, job_end_s, job_exit_code, hang)) {
    out.push_back(std::move(*x));
  }
  return out;
}

namespace {

// Adds the cross-rank findings to the first rank's own, so one cause is one
// finding. A straggler that is the first rank, with a finding of the same
// cause of its own (its checkpoint stall, its data wait): the rank's own loss
// plus what the others lose waiting for it. Collectives: the cross-rank
// measure (the time no rank escapes) replaces the first rank's, which counts
// its waits as communication too; its fix, with numbers, is kept.
void MergeFindings(const std::vector<doctor::Finding>& cross, int first_rank,
                   std::vector<doctor::Finding>* findings) {
  for (const doctor::Finding& x : cross) {
    const std::string& key = x.evidence.empty() ? "" : x.evidence.front().key;
    const bool about_first = key == "straggler_rank" && x.evidence.front().value == first_rank;
    const bool collectives = key == "collective_ms_per_step";
    auto same = std::find_if(findings->begin(), findings->end(), [&](const doctor::Finding& f) {
      return (about_first || collectives) && f.cause == x.cause && !f.info;
    });
    if (same == findings->end()) {
      findings->push_back(x);
      continue;
    }
    doctor::Finding merged = x;
    merged.evidence.insert(merged.evidence.end(), same->evidence.begin(), same->evidence.end());
    merged.fix_value = same->fix_value;
    if (collectives) {
      merged.fix = same->fix + " All-reduce metrics every N steps, not every step.";
    } else {
      merged.time_lost_s += same->time_lost_s;
      merged.time_lost_pct += same->time_lost_pct;
      merged.sites = same->sites;
      merged.fix = same->fix + " Every other rank waits for it at the next collective.";
    }
    *same = std::move(merged);
  }
}

// Without GPUs, the first rank's `parallelism` finding counts the cores its
// own process left idle; when other ranks run on the same node they use
// them, so that advice does not hold there.
bool SharesCpusWithRanks(const Job& job, const doctor::Features& f) {
  if (f.gpu_count > 0) return false;
  return std::count_if(job.ranks.begin(), job.ranks.end(),
                       [&](const RankRun& r) { return r.host == job.ranks.front().host; }) > 1;
}

std::vector<doctor::Finding> WithoutCpuParallelism(std::vector<doctor::Finding> findings,
                                                   bool shared_cores) {
  if (shared_cores) {
    std::erase_if(findings, [](const doctor::Finding& f) { return f.cause == "parallelism"; });
  }
  return findings;
}

// The first rank's own comm-phase finding counts its waits for the other
// ranks as communication. The cross-rank measure (the least time any rank
// spent in collectives) replaces it when it is large enough to report; when
// it is not, the collectives themselves are cheap and the waits are the
// straggler's (or nobody's) cost, so the rank's own finding goes.
std::vector<doctor::Finding> WithoutOwnCommunication(std::vector<doctor::Finding> findings,
                                                     const std::vector<doctor::Finding>& cross) {
  auto key_of = [](const doctor::Finding& f) {
    return f.evidence.empty() ? std::string() : f.evidence.front().key;
  };
  const bool measured = std::any_of(cross.begin(), cross.end(), [&](const doctor::Finding& f) {
    return key_of(f) == "collective_ms_per_step";
  });
  if (!measured) {
    std::erase_if(findings, [&](const doctor::Finding& f) {
      return f.cause == "communication" && key_of(f) == "comm_pct";
    });
  }
  return findings;
}

}  // namespace

Result<DirAnalysis> AnalyzeDir(const std::string& dir, const doctor::AnalysisOptions& options) {
  DirAnalysis out;
  const doctor::AnalysisOptions all_options{.min_time_lost_pct = 0,
                                            .assumed_mtbf_s = options.assumed_mtbf_s};
  if (!IsJobDir(dir)) {
    SATURATE_ASSIGN_OR_RETURN(out.run, doctor::LoadRun(dir));
    out.warnings = out.run.warnings;
    out.analysis = doctor::Analyze(out.run, options);
    out.all_findings = doctor::Diagnose(out.run, out.analysis.features, all_options);
    return out;
  }
  SATURATE_ASSIGN_OR_RETURN(Job job, LoadJob(dir));
  out.warnings = job.warnings;
  if (job.ranks.empty()) return Status::NotFound(dir + ": no rank folder could be read");
  const std::vector<RankSteps> table = StepTable(job);
  const std::optional<Straggler> straggler = FindStraggler(table);
  std::map<int, std::vector<doctor::Span>> checkpoint_spans;  // a save's spans, rank by rank
  for (const RankRun& r : job.ranks) {
    for (const doctor::Span& s : r.run.spans) {
      if (s.kind == doctor::SpanKind::kCheckpoint) checkpoint_spans[r.rank].push_back(s);
    }
  }
  out.run = std::move(job.ranks.front().run);  // the first rank: its own causes and its node
  out.run.meta.dir = dir;
  out.analysis = doctor::Analyze(out.run, options);
  out.analysis.features.ranks = ViewOf(job, table, straggler);
  const std::vector<doctor::Finding> extra =
      DiagnoseRanks(table, straggler, out.analysis.features.duration_s,
                    out.analysis.features.duration_s, out.run.meta.exit_code, job.hang);
  const bool shared_cores = SharesCpusWithRanks(job, out.analysis.features);
  std::vector<doctor::Finding> found =
      WithoutOwnCommunication(WithoutCpuParallelism(out.analysis.findings, shared_cores), extra);
  MergeFindings(extra, job.ranks.front().rank, &found);
  doctor::AddCheckpointRanks(doctor::CheckpointSavesByRank(checkpoint_spans),
                             out.analysis.features.duration_s, &found);
  out.analysis.findings = doctor::RankFindings(std::move(found), options.min_time_lost_pct);
  // A straggler too small to report is not named in the report either.
  const bool reported = std::any_of(
      out.analysis.findings.begin(), out.analysis.findings.end(), [](const doctor::Finding& f) {
        return !f.evidence.empty() && f.evidence.front().key == "straggler_rank";
      });
  if (!reported) {
    out.analysis.features.ranks.straggler.reset();
    out.analysis.features.ranks.others_wait_per_step_s = 0;
    out.analysis.features.ranks.straggler_reason.clear();
  }
  std::vector<doctor::Finding> all = WithoutOwnCommunication(
      WithoutCpuParallelism(doctor::Diagnose(out.run, out.analysis.features, all_options),
                            shared_cores),
      extra);
  MergeFindings(extra, job.ranks.front().rank, &all);
  out.all_findings = doctor::RankFindings(std::move(all), 0);
  return out;
}

}  // namespace saturate::ranks
