#include "doctor/checkpoint_ranks.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <tuple>
#include <utility>

namespace saturate::doctor {
namespace {

constexpr double kMs = 1e6;  // ns per ms

int64_t Arg(const Span& s, const char* key, int64_t fallback) {
  auto it = s.args.find(key);
  return it == s.args.end() ? fallback : it->second;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string Ms(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, ms >= 10 ? "%.0f ms" : "%.1f ms", ms);
  return buf;
}

struct RawSave {
  int64_t start_ns = 0, save_ns = 0, write_start_ns = 0, write_ns = 0;
  bool has_write = false;
};

// One rank's saves by (step, seq), each with its n-th write of that step.
std::map<std::pair<int64_t, int64_t>, RawSave> RankSaves(const std::vector<Span>& spans) {
  std::map<std::pair<int64_t, int64_t>, RawSave> saves;
  std::map<int64_t, std::vector<std::pair<int64_t, int64_t>>> by_step;  // step -> (start, seq)
  std::map<int64_t, std::vector<const Span*>> writes;                   // step -> writes
  for (const Span& s : spans) {
    if (s.kind != SpanKind::kCheckpoint) continue;
    const int64_t step = Arg(s, "step", -1);
    if (step < 0) continue;
    if (s.name == "checkpoint_save") {
      const int64_t seq = Arg(s, "seq", -1);
      if (seq < 0) continue;
      RawSave& r = saves[{step, seq}];
      r.start_ns = s.start_ns;
      r.save_ns = s.dur_ns;
      by_step[step].emplace_back(s.start_ns, seq);
    } else if (s.name == "checkpoint_write") {
      writes[step].push_back(&s);
    }
  }
  for (auto& [step, list] : by_step) {
    std::sort(list.begin(), list.end());
    auto& w = writes[step];
    std::sort(w.begin(), w.end(),
              [](const Span* a, const Span* b) { return a->start_ns < b->start_ns; });
    for (size_t i = 0; i < list.size() && i < w.size(); ++i) {
      RawSave& r = saves[{step, list[i].second}];
      r.write_start_ns = w[i]->start_ns;
      r.write_ns = w[i]->dur_ns;
      r.has_write = true;
    }
  }
  return saves;
}

}  // namespace

std::vector<SaveRanks> CheckpointSavesByRank(
    const std::map<int, std::vector<Span>>& spans_by_rank) {
  std::map<std::pair<int64_t, int64_t>, double> commit_ms;  // (step, seq) -> manifest write
  std::map<int, std::map<std::pair<int64_t, int64_t>, RawSave>> per_rank;
  for (const auto& [rank, spans] : spans_by_rank) {
    per_rank[rank] = RankSaves(spans);
    for (const Span& s : spans) {
      if (s.kind == SpanKind::kCheckpoint && s.name == "checkpoint_commit") {
        commit_ms[{Arg(s, "step", -1), Arg(s, "seq", -1)}] += s.dur_ns / kMs;
      }
    }
  }
  std::vector<SaveRanks> out;
  for (const auto& [key, commit] : commit_ms) {
    std::vector<std::pair<int, RawSave>> parts;
    for (const auto& [rank, saves] : per_rank) {
      auto it = saves.find(key);
      if (it != saves.end() && it->second.has_write) parts.emplace_back(rank, it->second);
    }
    if (parts.size() < 2) continue;
    int64_t origin = std::numeric_limits<int64_t>::max();
    for (const auto& [rank, r] : parts) origin = std::min(origin, r.start_ns);
    SaveRanks save;
    save.step = key.first;
    save.seq = key.second;
    save.commit_ms = commit;
    double last_done = -1;
    for (const auto& [rank, r] : parts) {
      RankSaveTimes t;
      t.rank = rank;
      t.start_ms = (r.start_ns - origin) / kMs;
      t.snapshot_ms = r.save_ns / kMs;
      t.write_ms = r.write_ns / kMs;
      t.done_ms = (r.write_start_ns + r.write_ns - origin) / kMs;
      if (t.done_ms > last_done) {
        last_done = t.done_ms;
        save.slowest_rank = rank;
      }
      save.ranks.push_back(t);
    }
    std::vector<double> others_start, others_snapshot, others_write;
    const RankSaveTimes* slow = nullptr;
    double waited_sum = 0;
    for (RankSaveTimes& t : save.ranks) {
      t.waited_ms = last_done - t.done_ms;
      if (t.rank == save.slowest_rank) {
        slow = &t;
        continue;
      }
      waited_sum += t.waited_ms;
      save.max_waited_ms = std::max(save.max_waited_ms, t.waited_ms);
      others_start.push_back(t.start_ms);
      others_snapshot.push_back(t.snapshot_ms);
      others_write.push_back(t.write_ms);
    }
    save.others_waited_ms = waited_sum / double(save.ranks.size() - 1);
    // Where the slowest rank lost its time against the others' median.
    const std::tuple<const char*, double, double> phases[] = {
        {"arrival", slow->start_ms, Median(others_start)},
        {"snapshot", slow->snapshot_ms, Median(others_snapshot)},
        {"write", slow->write_ms, Median(others_write)}};
    double best = -std::numeric_limits<double>::infinity();
    for (const auto& [name, mine, theirs] : phases) {
      if (mine - theirs > best) {
        best = mine - theirs;
        save.slowest_phase = name;
        save.slowest_phase_ms = mine;
        save.others_phase_ms = theirs;
      }
    }
    out.push_back(std::move(save));
  }
  std::sort(out.begin(), out.end(), [](const SaveRanks& a, const SaveRanks& b) {
    return std::tie(a.seq, a.step) < std::tie(b.seq, b.step);
  });
  return out;
}

std::string DescribeSave(const SaveRanks& save) {
  std::string text =
      "save " + std::to_string(save.step) + ": rank " + std::to_string(save.slowest_rank) + " ";
  if (save.slowest_phase == "arrival") {
    text += "reached it " + Ms(save.slowest_phase_ms - save.others_phase_ms) + " after the others";
  } else if (save.slowest_phase == "snapshot") {
    text += "snapshotted " + Ms(save.slowest_phase_ms) + " (the others " +
            Ms(save.others_phase_ms) + ")";
  } else {
    text += "wrote its files in " + Ms(save.slowest_phase_ms) + " (the others " +
            Ms(save.others_phase_ms) + ")";
  }
  std::vector<int> others;
  for (const RankSaveTimes& t : save.ranks) {
    if (t.rank != save.slowest_rank) others.push_back(t.rank);
  }
  text += others.size() == 1 ? "; rank " : "; ranks ";
  for (size_t i = 0; i < others.size(); ++i) {
    text += (i ? ", " : "") + std::to_string(others[i]);
  }
  text += " waited " + Ms(save.others_waited_ms);
  if (others.size() > 1) text += " on average (up to " + Ms(save.max_waited_ms) + ")";
  text += " for it at the commit barrier";
  return text;
}

void AddCheckpointRanks(const std::vector<SaveRanks>& saves, double duration_s,
                        std::vector<Finding>* findings, double min_wait_ms, size_t max_lines) {
  std::vector<const SaveRanks*> waiting;
  for (const SaveRanks& s : saves) {
    if (s.max_waited_ms >= min_wait_ms) waiting.push_back(&s);
  }
  if (waiting.empty()) return;
  std::map<int, int> slowest_count;
  double waited_ms = 0;
  for (const SaveRanks* s : waiting) {
    ++slowest_count[s->slowest_rank];
    waited_ms += s->others_waited_ms;
  }
  const auto top = std::max_element(slowest_count.begin(), slowest_count.end(),
                                    [](auto& a, auto& b) { return a.second < b.second; });
  const int rank = top->first;
  const double per_save_ms = waited_ms / double(saves.size());
  Finding* target = nullptr;
  for (Finding& f : *findings) {
    const bool straggler = !f.evidence.empty() && f.evidence.front().key == "straggler_rank";
    if (f.cause == "checkpoint_stall" && !straggler) {
      target = &f;
      break;
    }
  }
  const std::string who = "rank " + std::to_string(rank) + " was the slowest in " +
                          std::to_string(top->second) + " of " + std::to_string(saves.size()) +
                          " saves";
  if (target == nullptr) {
    Finding f =
        NewFinding("checkpoint_stall", "Checkpoint commits wait for the slowest rank: " + who, 0,
                   duration_s, 0.8);
    f.info = true;
    f.fix =
        "Even out what each rank saves and where it writes: the global commit waits for the "
        "last rank's files.";
    findings->push_back(std::move(f));
    target = &findings->back();
  } else {
    target->title += "; " + who;
  }
  target->evidence.push_back({"checkpoint_slowest_rank", double(rank), "",
                              "the rank the commit barrier waited for most (" + who + ")"});
  target->evidence.push_back({"checkpoint_slowest_saves", double(top->second), "",
                              "saves in which that rank committed its files last"});
  target->evidence.push_back({"checkpoint_others_waited_ms_per_save", per_save_ms, "ms",
                              "the other ranks' mean wait for the slowest one, per save"});
  std::vector<const SaveRanks*> lines = waiting;
  std::stable_sort(lines.begin(), lines.end(), [](const SaveRanks* a, const SaveRanks* b) {
    return a->others_waited_ms > b->others_waited_ms;
  });
  if (lines.size() > max_lines) lines.resize(max_lines);
  std::sort(lines.begin(), lines.end(), [](const SaveRanks* a, const SaveRanks* b) {
    return std::tie(a->seq, a->step) < std::tie(b->seq, b->step);
  });
  for (const SaveRanks* s : lines) {
    target->evidence.push_back({"save_" + std::to_string(s->step) + "_others_waited_ms",
                                s->others_waited_ms, "ms", DescribeSave(*s)});
  }
}

}  // namespace saturate::doctor
