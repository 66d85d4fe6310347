#include "ranks/job.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <system_error>

#include "base/file.h"
#include "base/json_lines.h"
#include "trace/export.h"

namespace saturate::ranks {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr std::string_view kRankPrefix = "rank-";

std::optional<int> RankOfDirName(const std::string& name) {
  if (name.rfind(kRankPrefix, 0) != 0 || name.size() == kRankPrefix.size()) return std::nullopt;
  const std::string digits = name.substr(kRankPrefix.size());
  if (!std::all_of(digits.begin(), digits.end(), ::isdigit) || digits.size() > 9)
    return std::nullopt;
  return std::atoi(digits.c_str());
}

std::vector<fs::path> SortedSubdirs(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_directory(ec) && e.path().filename().string()[0] != '.') out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool HasMeta(const fs::path& dir) {
  std::error_code ec;
  return fs::exists(dir / "meta.json", ec);
}

// A node's samples: a directory with meta.json, and the host it names.
struct NodeDir {
  std::string dir;
  std::string host;
  int64_t start_unix_ns = 0;
  std::string version;
};

std::optional<NodeDir> ReadNode(const fs::path& dir, std::vector<std::string>* warnings) {
  Result<std::string> text = ReadFileToString((dir / "meta.json").string());
  if (!text.ok()) {
    warnings->push_back(text.status().ToString());
    return std::nullopt;
  }
  const json meta = json::parse(*text, nullptr, false);
  if (!meta.is_object()) {
    warnings->push_back((dir / "meta.json").string() +
                        ": not valid JSON; its samples are left out");
    return std::nullopt;
  }
  NodeDir n;
  n.dir = dir.string();
  n.host = JsonValueOr(meta, "host", "");
  n.start_unix_ns = JsonValueOr(meta, "start_unix_ns", int64_t{0});
  n.version = JsonValueOr(meta, "saturate_version", "");
  return n;
}

// A rank folder's identity, from the first of its spans files whose meta
// line names the rank, and its task.json.
struct RankDir {
  int rank = 0;
  std::string dir;
  int local_rank = 0;
  int world_size = 0;
  std::string host;
  std::string launcher;
  std::string cuda_visible_devices;
  std::optional<int> exit_code;
  int64_t first_unix_ns = 0;  // the earliest meta line's wall clock
};

void ReadRankIdentity(RankDir* r, std::vector<std::string>* warnings) {
  std::error_code ec;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(r->dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("spans-", 0) == 0 && e.path().extension() == ".jsonl") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& path : files) {
    Result<std::string> text = ReadFileToString(path.string());
    if (!text.ok()) continue;
    const size_t eol = text->find('\n');
    const json meta = json::parse(text->substr(0, eol), nullptr, false);
    if (!meta.is_object() || JsonValueOr(meta, "ph", "") != "M") continue;
    const int64_t unix_ns = JsonValueOr(meta, "unix_ns", int64_t{0});
    if (unix_ns > 0 && (r->first_unix_ns == 0 || unix_ns < r->first_unix_ns)) {
      r->first_unix_ns = unix_ns;
    }
    auto it = meta.find("rank");
    if (it == meta.end() || !it->is_object() || !r->host.empty()) continue;
    if (JsonValueOr(*it, "rank", -1) != r->rank) {
      warnings->push_back(path.string() + ": names rank " +
                          std::to_string(JsonValueOr(*it, "rank", -1)) + " inside " + r->dir +
                          "; the folder's rank is kept");
    }
    r->local_rank = JsonValueOr(*it, "local_rank", 0);
    r->world_size = JsonValueOr(*it, "world_size", 0);
    r->host = JsonValueOr(*it, "host", "");
    r->launcher = JsonValueOr(*it, "launcher", "");
    r->cuda_visible_devices = JsonValueOr(*it, "cuda_visible_devices", "");
  }
  if (Result<std::string> task = ReadFileToString(r->dir + "/task.json"); task.ok()) {
    const json t = json::parse(*task, nullptr, false);
    if (t.is_object() && t.contains("exit_code") && t["exit_code"].is_number_integer()) {
      r->exit_code = t["exit_code"].get<int>();
    }
    if (r->host.empty() && t.is_object()) r->host = JsonValueOr(t, "host", "");
  }
  if (files.empty()) warnings->push_back(r->dir + ": no spans files (the rank recorded nothing)");
}

// Rank folders at `dir` and inside its node folders, and those nodes.
void Discover(const fs::path& dir, std::vector<RankDir>* ranks, std::vector<fs::path>* nodes) {
  if (HasMeta(dir)) nodes->push_back(dir);
  for (const fs::path& sub : SortedSubdirs(dir)) {
    if (std::optional<int> r = RankOfDirName(sub.filename().string())) {
      ranks->push_back({.rank = *r, .dir = sub.string()});
    } else if (HasMeta(sub)) {
      nodes->push_back(sub);
      for (const fs::path& inner : SortedSubdirs(sub)) {
        if (std::optional<int> inner_rank = RankOfDirName(inner.filename().string())) {
          ranks->push_back({.rank = *inner_rank, .dir = inner.string()});
        }
      }
    }
  }
}

int64_t Median(std::vector<int64_t> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

std::string Millis(int64_t ns) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f ms", double(ns) / 1e6);
  return buf;
}

std::string Seconds(int64_t ns) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.3f s", double(ns) / 1e9);
  return buf;
}

// The latest unrecovered stall of RUN/hang.json or RUN/<node>/hang.json.
std::optional<LiveHang> ReadHang(const fs::path& dir) {
  std::vector<fs::path> paths = {dir / "hang.json"};
  for (const fs::path& sub : SortedSubdirs(dir)) paths.push_back(sub / "hang.json");
  std::optional<LiveHang> latest;
  int64_t latest_ns = 0;
  for (const fs::path& path : paths) {
    Result<std::string> text = ReadFileToString(path.string());
    if (!text.ok()) continue;
    const json h = json::parse(*text, nullptr, false);
    if (!h.is_object() || JsonValueOr(h, "recovered", false)) continue;
    const int64_t t = JsonValueOr(h, "t_unix_ns", int64_t{0});
    if (latest && t <= latest_ns) continue;
    LiveHang hang;
    if (auto it = h.find("suspect_rank"); it != h.end() && it->is_number_integer()) {
      hang.suspect_rank = it->get<int>();
    }
    hang.kind = JsonValueOr(h, "kind", "");
    hang.stalled_s = JsonValueOr(h, "stalled_s", 0.0);
    if (hang.suspect_rank) {
      const json stacks = h.value("stacks", json::object());
      const std::string key = std::to_string(*hang.suspect_rank);
      if (stacks.is_object() && stacks.contains(key) && stacks[key].is_array()) {
        for (const json& line : stacks[key]) {
          if (line.is_string()) hang.suspect_stack.push_back(line.get<std::string>());
        }
      }
    }
    latest = std::move(hang);
    latest_ns = t;
  }
  return latest;
}

}  // namespace

// Sync points every rank leaves together: blocking collectives, else DDP's
// backward; at least three on every rank, or none are used.
ClockAlignment AlignJob(const std::vector<RankRun>& ranks) {
  for (const std::string method : {"collectives", "backward"}) {
    std::vector<SyncEnds> ends;
    bool usable = !ranks.empty();
    for (const RankRun& r : ranks) {
      ends.push_back({r.rank, r.host, SyncPointEnds(r.run, method)});
      usable = usable && ends.back().end_ns.size() >= 3 &&
               (method == "collectives" || r.run.counters.contains("ddp"));
    }
    if (usable) return AlignClocks(ends, method);
  }
  std::vector<SyncEnds> none;
  for (const RankRun& r : ranks) none.push_back({r.rank, r.host, {}});
  return AlignClocks(none, "none");
}

bool IsJobDir(const std::string& dir) {
  std::vector<RankDir> ranks;
  std::vector<fs::path> nodes;
  Discover(dir, &ranks, &nodes);
  return !ranks.empty();
}

int TrainingPid(const doctor::Run& run) {
  int pid = 0;
  size_t most = 0;
  for (const auto& [p, marks] : run.step_marks_ns) {
    if (marks.size() > most) {
      most = marks.size();
      pid = p;
    }
  }
  return pid;
}

bool IsBlockingCollective(const doctor::Span& s) {
  static const std::set<std::string> kNames = {"all_reduce",
                                               "all_gather",
                                               "all_gather_into_tensor",
                                               "reduce_scatter",
                                               "reduce_scatter_tensor",
                                               "broadcast",
                                               "barrier",
                                               "all_to_all",
                                               "all_to_all_single",
                                               "reduce",
                                               "gather",
                                               "scatter",
                                               "all_gather_object",
                                               "broadcast_object_list",
                                               "monitored_barrier"};
  if (!kNames.contains(s.name)) return false;
  auto it = s.args.find("async_op");
  return it == s.args.end() || it->second == 0;
}

std::vector<int64_t> SyncPointEnds(const doctor::Run& run, const std::string& method) {
  const int pid = TrainingPid(run);
  std::vector<int64_t> ends;
  for (const doctor::Span& s : run.spans) {
    if (pid != 0 && s.pid != pid) continue;
    const bool sync = method == "collectives" ? IsBlockingCollective(s) : s.name == "backward";
    if (sync) ends.push_back(s.start_ns + s.dur_ns);
  }
  std::sort(ends.begin(), ends.end());
  return ends;
}

ClockAlignment AlignClocks(const std::vector<SyncEnds>& ranks, const std::string& method) {
  ClockAlignment a;
  std::set<std::string> hosts;
  size_t points = SIZE_MAX;
  for (const SyncEnds& r : ranks) {
    hosts.insert(r.host);
    points = std::min(points, r.end_ns.size());
  }
  if (ranks.empty()) return a;
  for (const std::string& h : hosts) a.host_offset_ns[h] = 0;
  if (hosts.size() == 1) {
    a.method = "one host";
    return a;
  }
  if (points == 0 || points == SIZE_MAX) return a;  // "none"
  a.method = method;
  a.events = static_cast<int>(points);
  const std::string& reference = ranks.front().host;
  // Per sync point, each host's median end; offsets from their differences.
  std::map<std::string, std::vector<int64_t>> diffs;
  for (size_t k = 0; k < points; ++k) {
    std::map<std::string, std::vector<int64_t>> ends;
    for (const SyncEnds& r : ranks) ends[r.host].push_back(r.end_ns[k]);
    const int64_t ref = Median(ends[reference]);
    for (auto& [host, e] : ends) diffs[host].push_back(ref - Median(e));
  }
  for (auto& [host, d] : diffs) a.host_offset_ns[host] = Median(d);
  std::vector<int64_t> spreads;
  for (size_t k = 0; k < points; ++k) {
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (const SyncEnds& r : ranks) {
      const int64_t t = r.end_ns[k] + a.host_offset_ns[r.host];
      lo = std::min(lo, t);
      hi = std::max(hi, t);
    }
    spreads.push_back(hi - lo);
  }
  a.residual_skew_ns = Median(spreads);
  return a;
}

void ShiftRun(int64_t ns, doctor::Run* run) {
  if (ns == 0) return;
  for (doctor::SamplePoint& p : run->samples) p.t_ns += ns;
  for (doctor::Span& s : run->spans) s.start_ns += ns;
  for (auto& [pid, marks] : run->step_marks_ns) {
    for (int64_t& t : marks) t += ns;
  }
  for (doctor::LoaderCounters& c : run->loaders) c.t_ns += ns;
}

Result<Job> LoadJob(const std::string& dir) {
  Job job;
  job.dir = dir;
  std::vector<RankDir> found;
  std::vector<fs::path> node_paths;
  Discover(dir, &found, &node_paths);
  if (found.empty()) return Status::NotFound(dir + ": no rank-<r>/ folders (not a multi-rank run)");

  std::vector<NodeDir> nodes;
  std::set<std::string> versions;
  for (const fs::path& p : node_paths) {
    if (std::optional<NodeDir> n = ReadNode(p, &job.warnings)) {
      if (!n->version.empty()) versions.insert(n->version);
      nodes.push_back(std::move(*n));
    }
  }
  if (versions.size() > 1) {
    std::string list;
    for (const std::string& v : versions) list += (list.empty() ? "" : ", ") + v;
    job.warnings.push_back("nodes ran different saturate versions (" + list +
                           "): the merge reads what every version wrote, but check the nodes");
  }

  std::map<int, RankDir> by_rank;
  for (RankDir& r : found) {
    ReadRankIdentity(&r, &job.warnings);
    if (by_rank.contains(r.rank)) {
      job.warnings.push_back(r.dir + ": rank " + std::to_string(r.rank) + " also in " +
                             by_rank[r.rank].dir + " (two runs in one folder?); the first is kept");
      continue;
    }
    job.world_size = std::max(job.world_size, r.world_size);
    by_rank[r.rank] = r;
  }
  job.world_size = std::max(job.world_size, by_rank.rbegin()->first + 1);

  // The job's axis starts at the earliest node start (else the earliest file).
  int64_t origin = 0;
  for (const NodeDir& n : nodes) {
    if (n.start_unix_ns > 0 && (origin == 0 || n.start_unix_ns < origin)) origin = n.start_unix_ns;
  }
  for (const auto& [rank, r] : by_rank) {
    if (origin == 0 || (r.first_unix_ns > 0 && r.first_unix_ns < origin)) origin = r.first_unix_ns;
  }

  for (auto& [rank, r] : by_rank) {
    const NodeDir* node = nullptr;
    for (const NodeDir& n : nodes) {
      if (n.host == r.host || (nodes.size() == 1 && r.host.empty())) node = &n;
    }
    if (node == nullptr && !nodes.empty()) {
      job.warnings.push_back(r.dir + ": no node samples for host '" + r.host +
                             "' (its node folder was not gathered); its spans alone are used");
    }
    Result<doctor::Run> run = doctor::LoadRunFrom(
        {.meta_dir = node ? node->dir : "", .spans_dir = r.dir, .origin_unix_ns = origin});
    if (!run.ok()) {
      job.warnings.push_back(r.dir + ": " + run.status().ToString() + "; the rank is left out");
      job.missing_ranks.push_back(rank);
      continue;
    }
    for (const std::string& w : run->warnings) job.warnings.push_back(w);
    run->warnings.clear();
    if (std::find(job.hosts.begin(), job.hosts.end(), r.host) == job.hosts.end()) {
      job.hosts.push_back(r.host);
    }
    job.ranks.push_back({.rank = rank,
                         .local_rank = r.local_rank,
                         .world_size = r.world_size,
                         .host = r.host,
                         .launcher = r.launcher,
                         .cuda_visible_devices = r.cuda_visible_devices,
                         .dir = r.dir,
                         .exit_code = r.exit_code,
                         .run = std::move(run).value()});
  }
  for (int rank = 0; rank < job.world_size; ++rank) {
    if (!by_rank.contains(rank)) {
      job.missing_ranks.push_back(rank);
      job.warnings.push_back(dir + ": rank-" + std::to_string(rank) + "/ is missing (of " +
                             std::to_string(job.world_size) +
                             " ranks): that rank recorded nothing here, or its node's folder "
                             "was not gathered");
    }
  }
  std::sort(job.missing_ranks.begin(), job.missing_ranks.end());

  job.clock = AlignJob(job.ranks);
  job.hang = ReadHang(dir);
  for (RankRun& r : job.ranks) {
    r.clock_offset_ns = job.clock.host_offset_ns[r.host];
    ShiftRun(r.clock_offset_ns, &r.run);
  }
  for (const auto& [host, offset] : job.clock.host_offset_ns) {
    if (std::llabs(offset) >= 1'000'000'000) {
      job.warnings.push_back("host " + host + "'s clock is " + Seconds(std::llabs(offset)) +
                             (offset > 0 ? " behind" : " ahead of") + " the first rank's host" +
                             (offset > 0 ? "'s" : "") + "; corrected from " +
                             std::to_string(job.clock.events) + " " + job.clock.method +
                             " ends, residual skew " + Millis(job.clock.residual_skew_ns));
    }
  }
  if (job.clock.method == "none" && job.hosts.size() > 1) {
    job.warnings.push_back(
        "ranks ran on " + std::to_string(job.hosts.size()) +
        " hosts with no collectives to align their clocks by: times across hosts are as each "
        "clock read them");
  }
  return job;
}

}  // namespace saturate::ranks
