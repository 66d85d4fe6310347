#include "ranks/rank_scanner.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <tuple>

#include "base/file.h"
#include "base/json_lines.h"
#include "base/rank_env.h"

namespace saturate::ranks {
namespace {

namespace fs = std::filesystem;

// "rank-3" -> 3; -1 for anything else.
int RankOfDir(const std::string& name) {
  if (!name.starts_with("rank-") || name.size() == 5) return -1;
  int rank = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || rank > 1'000'000) return -1;
    rank = rank * 10 + (name[i] - '0');
  }
  return rank;
}

// "spans-4242.jsonl", "spans-4242-auto.jsonl" -> 4242; 0 for other names.
int PidOfSpansFile(const std::string& name) {
  if (!name.starts_with("spans-") || !name.ends_with(".jsonl")) return 0;
  int pid = 0;
  for (size_t i = 6; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) {
    pid = pid * 10 + (name[i] - '0');
  }
  return pid;
}

// The rank folders of `run_dir`: RUN/rank-<r> and RUN/<node>/rank-<r>.
std::vector<std::pair<int, std::string>> RankDirs(const std::string& run_dir) {
  std::vector<std::pair<int, std::string>> out;
  std::error_code ec;
  for (fs::directory_iterator it(run_dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_directory(ec)) continue;
    const std::string name = it->path().filename().string();
    if (const int rank = RankOfDir(name); rank >= 0) {
      out.emplace_back(rank, it->path().string());
      continue;
    }
    if (name.starts_with(".")) continue;
    std::error_code sub_ec;
    for (fs::directory_iterator sub(it->path(), sub_ec), sub_end; !sub_ec && sub != sub_end;
         sub.increment(sub_ec)) {
      const int rank = RankOfDir(sub->path().filename().string());
      if (rank >= 0 && sub->is_directory(sub_ec)) out.emplace_back(rank, sub->path().string());
    }
  }
  return out;
}

// The value of "ph" in a spans line, without parsing it.
char PhaseOf(std::string_view line) {
  const size_t at = line.find("\"ph\":\"");
  return at == std::string_view::npos || at + 6 >= line.size() ? '\0' : line[at + 6];
}

std::string SourceLine(const std::string& path, int line,
                       std::map<std::string, std::vector<std::string>>* cache) {
  auto it = cache->find(path);
  if (it == cache->end()) {
    std::vector<std::string> lines;
    struct stat st;
    if (stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size < (8 << 20)) {
      std::ifstream in(path);
      for (std::string l; std::getline(in, l);) lines.push_back(std::move(l));
    }
    it = cache->emplace(path, std::move(lines)).first;
  }
  if (line < 1 || size_t(line) > it->second.size()) return "";
  std::string s = it->second[size_t(line) - 1];
  const size_t first = s.find_first_not_of(" \t");
  s = first == std::string::npos ? "" : s.substr(first);
  const size_t comment = s.find("  #");  // a trailing comment, by PEP 8's spacing
  if (comment != std::string::npos) s.resize(comment);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r')) s.pop_back();
  if (s.size() > 100) s = s.substr(0, 97) + "...";
  return s;
}

int64_t UnixNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A loader's values that are levels now, not totals so far.
bool IsLoaderGauge(const std::string& key) {
  return key == "threads" || key == "prefetch" || key == "batch_size" ||
         key == "remote_in_flight" || key == "remote_concurrent_requests";
}

// A device loader's "loader_decode" values that are levels now: its decode
// mode, whether nvJPEG opened, the GPU's share of the split and the rates
// behind it.
bool IsDecodeGauge(const std::string& key) {
  return key == "device" || key == "decode_mode" || key == "gpu_decoder" || key == "gpu_permille" ||
         key == "cpu_per_s_per_thread" || key == "gpu_per_s";
}

// Adds one process file's loaders (or device loaders' decode records) to a
// rank's counters: totals summed, gauges of the one that reported last
// (`latest_ns`, per rank and kind of record).
template <typename Loaders, typename IsGauge>
void AddLoaderValues(const Loaders& loaders, IsGauge is_gauge, int64_t* latest_ns,
                     std::map<std::string, int64_t>* counters) {
  for (const auto& [id, loader] : loaders) {
    for (const auto& [key, value] : loader.values) {
      if (!is_gauge(key)) (*counters)[key] += value;
    }
    if (loader.ts_ns >= *latest_ns) {
      *latest_ns = loader.ts_ns;
      for (const auto& [key, value] : loader.values) {
        if (is_gauge(key)) (*counters)[key] = value;
      }
    }
  }
}

}  // namespace

RankScanner::RankScanner(std::string run_dir, uint64_t max_read_bytes, bool root_as_rank0)
    : run_dir_(std::move(run_dir)),
      max_read_bytes_(max_read_bytes),
      root_as_rank0_(root_as_rank0) {}

void RankScanner::Line(std::string_view line, File* f) {
  switch (PhaseOf(line)) {
    case 's': {  // "step"
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!j.is_object() || JsonValueOr(j, "ph", "") != "step") return;
      const int64_t step = JsonValueOr(j, "step", int64_t{0});
      ++f->step_marks;
      if (step >= f->last_step) {
        f->last_step = step;
        f->last_step_ns = JsonValueOr(j, "ts_ns", int64_t{0});
      }
      return;
    }
    case 'M': {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_object()) return;
      if (j.contains("pid") && j["pid"].is_number_integer()) f->pid = j["pid"].get<int>();
      if (j.contains("unix_ns") && j.contains("ts_ns")) {
        // Wrapping, not undefined, for values no real clock has.
        f->unix_minus_monotonic_ns = int64_t(uint64_t(JsonValueOr(j, "unix_ns", int64_t{0})) -
                                             uint64_t(JsonValueOr(j, "ts_ns", int64_t{0})));
      }
      if (j.contains("rank") && j["rank"].is_object()) {
        f->host = JsonValueOr(j["rank"], "host", f->host);
        f->world_size = JsonValueOr(j["rank"], "world_size", f->world_size);
      }
      if (j.contains("stacks") && j["stacks"].is_string()) {
        const std::string name = j["stacks"].get<std::string>();
        if (name.find('/') == std::string::npos) f->stacks = name;  // only inside its folder
      }
      return;
    }
    case 'C':
      if (line.find("\"name\":\"exit\"") != std::string_view::npos) {
        f->exited = true;
      } else if (line.find("\"name\":\"loader") != std::string_view::npos) {
        LoaderCounters(line, f);
      } else if (line.find("\"name\":\"precision\"") != std::string_view::npos ||
                 line.find("\"name\":\"model\"") != std::string_view::npos) {
        PrecisionCounters(line, f);
      }
      return;
    default:
      return;
  }
}

// A "loader" or "loader_remote" record: {"args": {"loader_id": N, ...}};
// a device loader's "loader_decode" record: {"args": {"decoder_id": N, ...}}.
void RankScanner::LoaderCounters(std::string_view line, File* f) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("args") || !j["args"].is_object()) return;
  const std::string name = JsonValueOr(j, "name", std::string());
  const bool decode = name == "loader_decode";
  if (name != "loader" && name != "loader_remote" && !decode) return;
  const nlohmann::json& args = j["args"];
  const char* id_key = decode ? "decoder_id" : "loader_id";
  File::Loader& loader = (decode ? f->decoders : f->loaders)[JsonValueOr(args, id_key, int64_t{0})];
  // Threads buffer their records apart, so a file's records are not in time
  // order (a loader's last record, written as it closes, may come before one
  // its stage wrote earlier): an older record changes nothing.
  const int64_t ts_ns = JsonValueOr(j, "ts_ns", int64_t{0});
  if (ts_ns < loader.ts_ns) return;
  loader.ts_ns = ts_ns;
  for (const auto& [key, value] : args.items()) {
    if (key != id_key && value.is_number_integer()) loader.values[key] = value.get<int64_t>();
  }
}

// A user's "model" or the auto-instrumentation's "precision" record:
// {"args": {"precision_bits": N, ...}}. The training thread writes both, in
// order, so the last one read is the latest.
void RankScanner::PrecisionCounters(std::string_view line, File* f) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("args") || !j["args"].is_object()) return;
  const int64_t bits = JsonValueOr(j["args"], "precision_bits", int64_t{0});
  if (bits <= 0) return;
  (JsonValueOr(j, "name", std::string()) == "model" ? f->model_bits : f->auto_bits) = bits;
}

void RankScanner::Read(File* f, const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return;
  }
  const uint64_t size = uint64_t(st.st_size);
  if (size < f->offset) {  // replaced or truncated: start over
    File fresh;
    fresh.rank = f->rank;
    fresh.dir = f->dir;
    fresh.pid = f->pid;
    *f = std::move(fresh);
  }
  f->size = size;
  const uint64_t n = std::min(size - f->offset, max_read_bytes_);
  if (n == 0) {
    close(fd);
    return;
  }
  std::string chunk(n, '\0');
  uint64_t got = 0;
  while (got < n) {
    const ssize_t r = pread(fd, chunk.data() + got, n - got, off_t(f->offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += uint64_t(r);
  }
  close(fd);
  chunk.resize(got);
  f->offset += got;
  bytes_read_ += got;
  std::string text = std::move(f->partial);
  text += chunk;
  const size_t last_newline = text.rfind('\n');
  if (last_newline == std::string::npos) {
    f->partial = std::move(text);
    return;
  }
  f->partial = text.substr(last_newline + 1);
  std::string_view lines(text.data(), last_newline);
  size_t pos = 0;
  while (pos <= lines.size()) {
    size_t end = lines.find('\n', pos);
    if (end == std::string_view::npos) end = lines.size();
    if (end > pos) Line(lines.substr(pos, end - pos), f);
    pos = end + 1;
  }
}

std::vector<RankProgress> RankScanner::Scan() {
  std::vector<std::pair<int, std::string>> dirs = RankDirs(run_dir_);
  if (dirs.empty() && root_as_rank0_) dirs.emplace_back(0, run_dir_);
  for (const auto& [rank, dir] : dirs) {
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (PidOfSpansFile(name) == 0) continue;
      const std::string path = it->path().string();
      auto [file, inserted] = files_.try_emplace(path);
      if (inserted) {
        file->second.rank = rank;
        file->second.dir = dir;
        file->second.pid = PidOfSpansFile(name);
      }
      Read(&file->second, path);
    }
  }

  // Per rank, per pid: a process's auto and explicit files together.
  struct Proc {
    int64_t step_marks = 0, last_step = 0, last_step_unix_ns = 0;
    bool exited = false, has_meta_rank = false;
    std::string stacks, dir;
  };
  std::map<int, std::map<int, Proc>> procs;
  std::map<int, RankProgress> ranks;
  std::map<int, int64_t> latest_loader_ns, latest_decoder_ns;
  std::map<int, int64_t> model_bits, auto_bits;
  for (const auto& [path, f] : files_) {
    RankProgress& r = ranks[f.rank];
    r.rank = f.rank;
    r.world_size = std::max(r.world_size, f.world_size);
    if (r.host.empty()) r.host = f.host;
    r.file_bytes += f.size;
    AddLoaderValues(f.loaders, IsLoaderGauge, &latest_loader_ns[f.rank], &r.loader_counters);
    AddLoaderValues(f.decoders, IsDecodeGauge, &latest_decoder_ns[f.rank], &r.loader_counters);
    if (f.model_bits) model_bits[f.rank] = f.model_bits;
    if (f.auto_bits) auto_bits[f.rank] = f.auto_bits;
    Proc& p = procs[f.rank][f.pid];
    p.dir = f.dir;
    p.step_marks = std::max(p.step_marks, f.step_marks);
    if (f.step_marks > 0 && f.last_step >= p.last_step) {
      p.last_step = f.last_step;
      p.last_step_unix_ns = f.last_step_ns + f.unix_minus_monotonic_ns;
    }
    p.exited = p.exited || f.exited;
    p.has_meta_rank = p.has_meta_rank || !f.host.empty();
    if (!f.stacks.empty()) p.stacks = f.stacks;
  }
  std::vector<RankProgress> out;
  for (auto& [rank, r] : ranks) {
    const auto model = model_bits.find(rank);  // the job's own word first; 0: neither
    r.precision_bits = model != model_bits.end() ? model->second : auto_bits[rank];
    // The training process: the most step marks; before any, the one that
    // dumps stacks (the rank's main process), else one that named its rank.
    int best_pid = 0;
    const Proc* best = nullptr;
    for (const auto& [pid, p] : procs[rank]) {
      auto key = [](const Proc& q) {
        return std::make_tuple(q.step_marks, !q.stacks.empty(), q.has_meta_rank);
      };
      if (best == nullptr || key(p) > key(*best)) {
        best = &p;
        best_pid = pid;
      }
    }
    if (best != nullptr) {
      r.pid = best_pid;
      r.step_marks = best->step_marks;
      r.last_step = best->last_step;
      r.last_step_unix_ns = best->last_step_unix_ns;
      r.exited = best->exited;
      if (!best->stacks.empty()) r.stacks_path = best->dir + "/" + best->stacks;
    }
    out.push_back(std::move(r));
  }
  return out;
}

bool IsAlive(int pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno != EPERM) return false;
  // A zombie answers kill(0) until it is reaped: its state is 'Z'.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return true;  // no /proc: trust kill
  const size_t paren = text.rfind(')');
  return paren == std::string::npos || paren + 2 >= text.size() || text[paren + 2] != 'Z';
}

std::vector<StackRequest> RequestStacks(const std::vector<RankProgress>& ranks,
                                        const std::string& host) {
  std::vector<StackRequest> out;
  for (const RankProgress& r : ranks) {
    if (r.missing || r.pid <= 0 || r.stacks_path.empty() || r.host != host || !IsAlive(r.pid)) {
      continue;
    }
    StackRequest q{r.rank, r.pid, r.stacks_path, 0};
    struct stat st;
    if (stat(q.path.c_str(), &st) != 0) continue;  // its dumper's file is gone
    q.offset = uint64_t(st.st_size);
    if (kill(r.pid, SIGUSR2) != 0) continue;
    out.push_back(std::move(q));
  }
  return out;
}

std::map<int, std::vector<StackFrame>> ReadStacks(const std::vector<StackRequest>& requests,
                                                  size_t max_frames) {
  std::map<int, std::vector<StackFrame>> out;
  std::map<std::string, std::vector<std::string>> sources;
  for (const StackRequest& q : requests) {
    Result<std::string> text = ReadFileToString(q.path);
    if (!text.ok() || text->size() <= q.offset) continue;
    std::vector<StackFrame> frames =
        ParseStackDump(std::string_view(*text).substr(q.offset), max_frames);
    if (frames.empty()) continue;
    for (StackFrame& f : frames) f.source = SourceLine(f.file, f.line, &sources);
    out[q.rank] = std::move(frames);
  }
  return out;
}

HangWatch::HangWatch(HangWatchOptions options)
    : options_(std::move(options)), scanner_(options_.run_dir), monitor_(options_.stall_ns) {
  if (options_.host.empty()) options_.host = base::HostName();
  if (options_.hang_json.empty()) options_.hang_json = options_.run_dir + "/hang.json";
}

HangEvent HangWatch::Complete() {
  HangEvent e;
  e.kind = HangEvent::Kind::kStalled;
  e.alert = std::move(pending_->alert);
  AddStacks(ReadStacks(pending_->requests), &e.alert);
  pending_.reset();
  e.message = e.alert.message;
  last_json_ = HangJson(e.alert, UnixNowNs());
  e.saved = WriteFileAtomic(options_.hang_json, last_json_->dump(2) + "\n");
  return e;
}

std::vector<HangEvent> HangWatch::Poll(int64_t now_ns) {
  std::vector<HangEvent> out;
  if (pending_) {
    if (now_ns >= pending_->due_ns) out.push_back(Complete());
    return out;
  }
  if (now_ns < next_scan_ns_) return out;
  next_scan_ns_ = now_ns + options_.scan_every_ns;
  std::vector<RankProgress> ranks = scanner_.Scan();
  if (ranks.empty()) return out;
  for (RankProgress& r : ranks) {
    if (r.pid > 0 && r.host == options_.host) r.alive = IsAlive(r.pid);
    steps_ = std::max(steps_, r.step_marks);
  }
  MonitorEvent m = monitor_.Update(ranks, now_ns);
  if (m.kind == MonitorEvent::Kind::kStalled) stalled_ = true;
  if (m.kind == MonitorEvent::Kind::kRecovered) stalled_ = false;
  if (m.kind == MonitorEvent::Kind::kStalled) {
    std::vector<StackRequest> requests = RequestStacks(m.alert.ranks, options_.host);
    pending_ = Pending{std::move(m.alert), std::move(requests), now_ns + options_.stack_wait_ns};
    if (pending_->requests.empty()) out.push_back(Complete());
  } else if (m.kind == MonitorEvent::Kind::kRecovered) {
    HangEvent e;
    e.kind = HangEvent::Kind::kRecovered;
    e.message = m.message;
    if (last_json_) {
      (*last_json_)["recovered_unix_ns"] = UnixNowNs();
      (*last_json_)["recovered"] = m.message;
      e.saved = WriteFileAtomic(options_.hang_json, last_json_->dump(2) + "\n");
    }
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<HangEvent> HangWatch::Finish() {
  std::vector<HangEvent> out;
  if (pending_) out.push_back(Complete());
  return out;
}

}  // namespace saturate::ranks
