#include "ranks/monitor.h"

#include <algorithm>
#include <cstdio>
#include <set>

namespace saturate::ranks {
namespace {

constexpr double kNsPerS = 1e9;

std::string Seconds(int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.0f s", double(ns) / kNsPerS);
  return buf;
}

bool Dead(const RankProgress& r) { return !r.missing && (r.exited || !r.alive); }

// "(host vm, pid 4242)", "(pid 4242)" or "".
std::string Where(const RankProgress& r) {
  if (r.pid == 0 && r.host.empty()) return "";
  std::string s = " (";
  if (!r.host.empty()) s += "host " + r.host + (r.pid ? ", " : "");
  if (r.pid) s += "pid " + std::to_string(r.pid);
  return s + ")";
}

// "0", "0, 2, 3".
std::string RankList(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

// "rank 0 waits" / "ranks 0, 2 wait".
std::string RanksVerb(const std::vector<int>& ranks, const char* one, const char* many) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + RankList(ranks) + " " +
         (ranks.size() == 1 ? one : many);
}

// "10" or "10-12": these ranks' last steps.
std::string StepNumbers(const std::vector<const RankProgress*>& ranks) {
  if (ranks.empty()) return "";
  int64_t lo = ranks[0]->last_step, hi = lo;
  for (const RankProgress* r : ranks) {
    lo = std::min(lo, r->last_step);
    hi = std::max(hi, r->last_step);
  }
  return lo == hi ? std::to_string(lo) : std::to_string(lo) + "-" + std::to_string(hi);
}

// "step 10" or "steps 10-12".
std::string StepRange(const std::vector<const RankProgress*>& ranks) {
  const std::string n = StepNumbers(ranks);
  return (n.find('-') == std::string::npos ? "step " : "steps ") + n;
}

const RankProgress* FindRank(const HangAlert& a, int rank) {
  for (const RankProgress& r : a.ranks) {
    if (r.rank == rank) return &r;
  }
  return nullptr;
}

std::vector<const RankProgress*> Others(const HangAlert& a, bool skip_dead) {
  std::vector<const RankProgress*> out;
  for (const RankProgress& r : a.ranks) {
    if (r.rank == a.suspect_rank || (skip_dead && Dead(r))) continue;
    out.push_back(&r);
  }
  return out;
}

std::vector<int> RanksOf(const std::vector<const RankProgress*>& ranks) {
  std::vector<int> out;
  for (const RankProgress* r : ranks) out.push_back(r->rank);
  return out;
}

// Library frames: an installed package or the standard library.
bool LibraryFile(std::string_view file) {
  return file.find("-packages/") != std::string_view::npos ||
         file.find("/lib/python") != std::string_view::npos || file.starts_with("<frozen ");
}

// The verdict line (without the stacks).
std::string Verdict(const HangAlert& a) {
  std::string s = "no rank has stepped for " + Seconds(a.stalled_ns) + "; ";
  const RankProgress* suspect = FindRank(a, a.suspect_rank);
  if (suspect == nullptr) {
    std::vector<const RankProgress*> all;
    for (const RankProgress& r : a.ranks) all.push_back(&r);
    bool all_dead = !all.empty();
    for (const RankProgress* r : all) all_dead = all_dead && Dead(*r);
    if (all_dead) return s + "every rank has exited";
    return s + "all ranks stopped at " + StepRange(all) +
           " and none exited: no single rank is behind (they may all wait on the same thing, "
           "e.g. shared storage, or a phase without steps outlasts the hang timeout)";
  }
  const std::string who = "rank " + std::to_string(suspect->rank) + Where(*suspect);
  if (a.kind == HangKind::kDead) {
    s += who + (suspect->exited ? " exited" : " is gone (no exit record: killed?)");
    s += suspect->step_marks > 0 ? " after step " + std::to_string(suspect->last_step)
                                 : " before its first step";
    const std::vector<const RankProgress*> waiting = Others(a, /*skip_dead=*/true);
    if (!waiting.empty()) {
      s += " while " + RanksVerb(RanksOf(waiting), "waits", "wait") + " (at " + StepRange(waiting) +
           ")";
    }
    std::vector<int> also;
    for (const RankProgress& r : a.ranks) {
      if (Dead(r) && r.rank != suspect->rank) also.push_back(r.rank);
    }
    if (!also.empty()) s += "; " + RanksVerb(also, "has left too", "have left too");
    return s;
  }
  const std::vector<const RankProgress*> others = Others(a, /*skip_dead=*/false);
  if (suspect->missing) {
    s += "rank " + std::to_string(suspect->rank) + " has recorded nothing while the others " +
         "reached " + StepRange(others) + ": it is hung, or never started";
    return s;
  }
  if (a.basis == "stacks") {
    std::vector<const RankProgress*> all = others;
    all.push_back(suspect);
    s += who + " is not in a collective while the others wait in one (at " + StepRange(all) +
         "): it is hung";
  } else {
    s += who + " stopped at step " + std::to_string(suspect->last_step) + ", the others at " +
         StepNumbers(others) + ": it is hung";
  }
  if (a.stacks.count(suspect->rank) != 0) {
    s += "; its stack: " + suspect->stacks_path;
  } else if (!suspect->stacks_path.empty() && suspect->pid != 0) {
    s += "; for its stack: kill -USR2 " + std::to_string(suspect->pid) +
         (suspect->host.empty() ? "" : " on " + suspect->host) + ", then read " +
         suspect->stacks_path;
  }
  return s;
}

// "torch/autograd/graph.py" (from its package), "threading.py" (the standard
// library), "train.py": enough to find the file, short enough for one line.
std::string ShortPath(std::string_view path) {
  size_t cut = std::string_view::npos;
  for (std::string_view marker : {"site-packages/", "dist-packages/"}) {
    const size_t at = path.rfind(marker);
    if (at != std::string_view::npos) cut = at + marker.size();
  }
  if (cut == std::string_view::npos) {
    const size_t lib = path.rfind("/lib/python");
    const size_t slash = lib == std::string_view::npos ? path.rfind('/') : path.find('/', lib + 5);
    if (slash != std::string_view::npos) cut = slash + 1;
  }
  if (cut != std::string_view::npos) path.remove_prefix(cut);
  return std::string(path);
}

// "waits in _engine_run_backward (torch/autograd/graph.py:825), from train.py:75 in main".
std::string WhereItWaits(const std::vector<StackFrame>& frames) {
  if (frames.empty()) return "no Python frame";
  const StackFrame& top = frames.front();
  std::string s = (WaitsInCollective(frames) ? "waits in " : "in ") + top.function + " (" +
                  ShortPath(top.file) + ":" + std::to_string(top.line) + ")";
  for (size_t i = 1; i < frames.size(); ++i) {
    if (!LibraryFile(frames[i].file)) {
      s += ", from " + FormatFrame(frames[i]);
      break;
    }
  }
  return s;
}

void Compose(HangAlert* a) {
  a->message = Verdict(*a);
  auto suspect = a->stacks.find(a->suspect_rank);
  if (suspect != a->stacks.end() && !suspect->second.empty()) {
    a->message += "\n  rank " + std::to_string(a->suspect_rank) + " (innermost first):";
    for (const StackFrame& f : suspect->second) a->message += "\n    " + FormatFrame(f);
  }
  for (const auto& [rank, frames] : a->stacks) {
    if (rank == a->suspect_rank) continue;
    a->message += "\n  rank " + std::to_string(rank) + ": " + WhereItWaits(frames);
  }
}

}  // namespace

std::string_view HangKindName(HangKind kind) {
  switch (kind) {
    case HangKind::kDead:
      return "dead";
    case HangKind::kHung:
      return "hung";
    case HangKind::kUnknown:
      break;
  }
  return "unknown";
}

HangAlert ClassifyStall(std::vector<RankProgress> ranks, int64_t stalled_ns) {
  HangAlert a;
  a.stalled_ns = stalled_ns;
  std::sort(ranks.begin(), ranks.end(),
            [](const RankProgress& x, const RankProgress& y) { return x.rank < y.rank; });
  int world = 0;
  std::set<int> present;
  for (const RankProgress& r : ranks) {
    world = std::max(world, r.world_size);
    present.insert(r.rank);
  }
  for (int r = 0; r < world; ++r) {
    if (present.count(r) != 0) continue;
    RankProgress p;
    p.rank = r;
    p.world_size = world;
    p.missing = true;
    ranks.push_back(p);
  }
  std::sort(ranks.begin(), ranks.end(),
            [](const RankProgress& x, const RankProgress& y) { return x.rank < y.rank; });
  a.ranks = std::move(ranks);

  // Dead: the first to leave (the fewest steps) of those that left.
  const RankProgress* dead = nullptr;
  size_t dead_count = 0;
  for (const RankProgress& r : a.ranks) {
    if (!Dead(r)) continue;
    ++dead_count;
    if (dead == nullptr || r.last_step < dead->last_step) dead = &r;
  }
  if (dead != nullptr && dead_count < a.ranks.size()) {
    a.kind = HangKind::kDead;
    a.suspect_rank = dead->rank;
    a.basis = dead->exited ? "exit" : "gone";
  } else if (dead == nullptr && a.ranks.size() >= 2) {
    // Hung: the one rank behind all the others.
    const RankProgress* low = &a.ranks.front();
    for (const RankProgress& r : a.ranks) {
      if (r.last_step < low->last_step) low = &r;
    }
    int at_low = 0;
    for (const RankProgress& r : a.ranks) at_low += r.last_step == low->last_step ? 1 : 0;
    if (at_low == 1) {
      a.kind = HangKind::kHung;
      a.suspect_rank = low->rank;
      a.basis = "steps";
    }
  }
  Compose(&a);
  return a;
}

MonitorEvent ProgressMonitor::Update(const std::vector<RankProgress>& ranks, int64_t now_ns) {
  MonitorEvent event;
  if (!started_) {
    started_ = true;
    last_step_ns_ = last_write_ns_ = now_ns;
  }
  bool stepped = false, wrote = false;
  int64_t most_marks = 0;
  bool all_dead = !ranks.empty();
  const RankProgress* leader = nullptr;
  for (const RankProgress& r : ranks) {
    Seen& seen = seen_[r.rank];
    if (r.step_marks > seen.step_marks) stepped = true;
    if (r.file_bytes != seen.file_bytes) wrote = true;
    seen = {r.step_marks, r.file_bytes};
    most_marks = std::max(most_marks, r.step_marks);
    all_dead = all_dead && Dead(r);
    if (leader == nullptr || r.last_step > leader->last_step) leader = &r;
  }
  if (stepped) {
    if (stalled_) {
      stalled_ = false;
      event.kind = MonitorEvent::Kind::kRecovered;
      event.message = "steps resumed after " + Seconds(now_ns - last_step_ns_) + " (rank " +
                      std::to_string(leader->rank) + " at step " +
                      std::to_string(leader->last_step) + ")";
    }
    last_step_ns_ = now_ns;
  }
  if (stepped || wrote) last_write_ns_ = now_ns;
  if (stalled_ || stall_ns_ <= 0 || most_marks < 2 || all_dead) return event;
  if (now_ns - last_write_ns_ < stall_ns_ || now_ns - last_step_ns_ < stall_ns_) return event;
  stalled_ = true;
  event.kind = MonitorEvent::Kind::kStalled;
  event.alert = ClassifyStall(ranks, now_ns - last_step_ns_);
  event.message = event.alert.message;
  return event;
}

std::vector<StackFrame> ParseStackDump(std::string_view text, size_t max_frames) {
  struct Block {
    std::string thread;
    bool current = false;
    std::vector<StackFrame> frames;
  };
  std::vector<Block> blocks;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const bool current = line.starts_with("Current thread ");
    if (current || line.starts_with("Thread ") || line.starts_with("Stack (")) {
      Block b;
      b.current = current || line.starts_with("Stack (");
      const size_t id_at = line.find("0x");
      b.thread = id_at == std::string_view::npos
                     ? ""
                     : std::string(line.substr(id_at, line.find(' ', id_at) - id_at));
      // A thread seen again starts a newer dump: keep only that one.
      for (const Block& seen : blocks) {
        if (!b.thread.empty() && seen.thread == b.thread) {
          blocks.clear();
          break;
        }
      }
      blocks.push_back(std::move(b));
      continue;
    }
    if (blocks.empty() || !line.starts_with("  File \"")) continue;
    const size_t file_end = line.rfind("\", line ");
    if (file_end == std::string_view::npos || file_end < 8) continue;
    StackFrame f;
    f.file = std::string(line.substr(8, file_end - 8));
    std::string_view rest = line.substr(file_end + 8);
    size_t digits = 0;
    while (digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9') {
      f.line = f.line * 10 + (rest[digits] - '0');
      ++digits;
    }
    rest.remove_prefix(digits);
    if (rest.starts_with(" in ")) f.function = std::string(rest.substr(4));
    blocks.back().frames.push_back(std::move(f));
  }
  const Block* main = nullptr;
  int best = -1;
  for (const Block& b : blocks) {
    if (b.frames.empty()) continue;
    const StackFrame& outer = b.frames.back();
    const bool thread_start =
        outer.function.starts_with("_bootstrap") && outer.file.ends_with("threading.py");
    const int score =
        (outer.function == "<module>" ? 4 : 0) + (thread_start ? 0 : 2) + (b.current ? 1 : 0);
    if (score >= best) {  // ties: the later block, from the newer dump
      best = score;
      main = &b;
    }
  }
  std::vector<StackFrame> out;
  if (main == nullptr) return out;
  for (const StackFrame& f : main->frames) {
    if (out.size() >= max_frames) break;
    if (f.file.ends_with("saturate_autotrace.py") || f.file.ends_with("sitecustomize.py")) {
      continue;
    }
    out.push_back(f);
  }
  return out;
}

bool WaitsInCollective(const std::vector<StackFrame>& frames) {
  if (frames.empty()) return false;
  const StackFrame& f = frames.front();
  static const char* const kWaitingFiles[] = {
      "torch/distributed/", "torch/nn/parallel/", "torch/autograd/", "horovod/", "deepspeed/comm/",
  };
  for (const char* part : kWaitingFiles) {
    if (f.file.find(part) != std::string::npos) return true;
  }
  return f.function == "backward" && f.file.ends_with("torch/_tensor.py");
}

std::string FormatFrame(const StackFrame& f) {
  std::string s = ShortPath(f.file) + ":" + std::to_string(f.line) + " in " + f.function;
  if (!f.source.empty()) s += ": " + f.source;
  return s;
}

void AddStacks(std::map<int, std::vector<StackFrame>> stacks, HangAlert* a) {
  for (auto it = stacks.begin(); it != stacks.end();) {
    it = it->second.empty() ? stacks.erase(it) : std::next(it);
  }
  a->stacks = std::move(stacks);
  if (a->kind != HangKind::kDead) {
    // Stacks decide when exactly one rank is not in a collective while others are.
    std::vector<int> busy;
    size_t waiting = 0;
    for (const auto& [rank, frames] : a->stacks) {
      if (WaitsInCollective(frames)) {
        ++waiting;
      } else {
        busy.push_back(rank);
      }
    }
    if (busy.size() == 1 && waiting >= 1 && FindRank(*a, busy[0]) != nullptr) {
      a->kind = HangKind::kHung;
      a->suspect_rank = busy[0];
      a->basis = "stacks";
    }
  }
  Compose(a);
}

nlohmann::json HangJson(const HangAlert& a, int64_t t_unix_ns) {
  nlohmann::json j = {
      {"t_unix_ns", t_unix_ns},
      {"stalled_s", double(a.stalled_ns) / kNsPerS},
      {"suspect_rank", a.suspect_rank >= 0 ? nlohmann::json(a.suspect_rank) : nlohmann::json()},
      {"kind", HangKindName(a.kind)},
      {"basis", a.basis},
      {"message", a.message},
  };
  nlohmann::json stacks = nlohmann::json::object();
  for (const auto& [rank, frames] : a.stacks) {
    nlohmann::json lines = nlohmann::json::array();
    for (const StackFrame& f : frames) lines.push_back(FormatFrame(f));
    stacks[std::to_string(rank)] = std::move(lines);
  }
  j["stacks"] = std::move(stacks);
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankProgress& r : a.ranks) {
    nlohmann::json e = {{"rank", r.rank},           {"host", r.host},     {"pid", r.pid},
                        {"last_step", r.last_step}, {"exited", r.exited}, {"alive", r.alive}};
    if (r.missing) e["missing"] = true;
    ranks.push_back(std::move(e));
  }
  j["ranks"] = std::move(ranks);
  return j;
}

}  // namespace saturate::ranks
