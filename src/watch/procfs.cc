#include "watch/procfs.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <system_error>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "base/file.h"
#include "base/thread_name.h"

namespace saturate::watch {
namespace {

// Parses all of `token` as a base-10 integer.
template <typename T>
bool ParseNumber(std::string_view token, T* out) {
  if (token.empty()) return false;
  const char* end = token.data() + token.size();
  auto [ptr, ec] = std::from_chars(token.data(), end, *out);
  return ec == std::errc() && ptr == end;
}

std::vector<std::string_view> Lines(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    const size_t eol = std::min(text.find('\n'), text.size());
    lines.push_back(text.substr(0, eol));
    text.remove_prefix(std::min(eol + 1, text.size()));
  }
  return lines;
}

// Fields separated by spaces, tabs or newlines.
std::vector<std::string_view> Fields(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t pos = 0;
  while ((pos = line.find_first_not_of(" \t\n", pos)) != std::string_view::npos) {
    const size_t end = std::min(line.find_first_of(" \t\n", pos), line.size());
    fields.push_back(line.substr(pos, end - pos));
    pos = end;
  }
  return fields;
}

// "/proc/stat: line 3: <what>".
Status LineError(std::string_view source, int line_no, const std::string& what) {
  return Status::Corruption(std::string(source) + ": line " + std::to_string(line_no) + ": " +
                            what);
}

std::string NotANumber(std::string_view token) {
  return "expected a number, got '" + std::string(token) + "'";
}

uint64_t Delta(uint64_t before, uint64_t after) { return after > before ? after - before : 0; }

double PerSecond(uint64_t delta, double elapsed_s) { return elapsed_s > 0 ? delta / elapsed_s : 0; }

// Reads `path` and hands its text to `parse` with the path as the source.
template <typename Parser>
auto ReadParsed(const std::string& path, Parser parse)
    -> decltype(parse(std::string_view(), std::string_view())) {
  Result<std::string> text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  return parse(*text, path);
}

}  // namespace

Result<CpuStat> ParseCpuStat(std::string_view text, std::string_view source) {
  CpuStat stat;
  bool have_total = false;
  int line_no = 0;
  for (std::string_view line : Lines(text)) {
    ++line_no;
    const std::vector<std::string_view> f = Fields(line);
    if (f.empty()) continue;
    const std::string key(f[0]);
    if (key.starts_with("cpu")) {
      CpuTimes t;
      const bool is_total = key == "cpu";
      if (!is_total && (!ParseNumber(f[0].substr(3), &t.cpu) || t.cpu < 0)) {
        return LineError(source, line_no, "bad cpu name '" + key + "'");
      }
      if (f.size() < 9) {
        return LineError(
            source, line_no,
            "expected 8 numbers after '" + key + "', got " + std::to_string(f.size() - 1));
      }
      uint64_t* const slots[] = {&t.user_ticks,   &t.nice_ticks, &t.system_ticks,  &t.idle_ticks,
                                 &t.iowait_ticks, &t.irq_ticks,  &t.softirq_ticks, &t.steal_ticks};
      for (size_t i = 0; i < std::size(slots); ++i) {
        if (!ParseNumber(f[i + 1], slots[i])) {
          return LineError(
              source, line_no,
              "'" + key + "' number " + std::to_string(i + 1) + ": " + NotANumber(f[i + 1]));
        }
      }
      if (is_total) {
        stat.total = t;
        have_total = true;
      } else {
        stat.cores.push_back(t);
      }
    } else if (key == "ctxt" || key == "procs_running") {
      uint64_t* out = key == "ctxt" ? &stat.context_switches : &stat.procs_running;
      if (f.size() != 2 || !ParseNumber(f[1], out)) {
        return LineError(source, line_no, "expected one number after '" + key + "'");
      }
    }
  }
  if (!have_total) return Status::Corruption(std::string(source) + ": no 'cpu' line");
  if (stat.cores.empty()) return Status::Corruption(std::string(source) + ": no 'cpuN' lines");
  return stat;
}

Result<uint64_t> ParseCpuPressureSomeUs(std::string_view text, std::string_view source) {
  int line_no = 0;
  for (std::string_view line : Lines(text)) {
    ++line_no;
    const std::vector<std::string_view> f = Fields(line);
    if (f.empty() || f[0] != "some") continue;
    for (std::string_view field : f) {
      if (!field.starts_with("total=")) continue;
      uint64_t us = 0;
      if (!ParseNumber(field.substr(6), &us)) {
        return LineError(source, line_no, "bad total '" + std::string(field) + "'");
      }
      return us;
    }
    return LineError(source, line_no, "no total= on the 'some' line");
  }
  return Status::Corruption(std::string(source) + ": no 'some' line");
}

Result<MemInfo> ParseMemInfo(std::string_view text, std::string_view source) {
  MemInfo mem;
  const std::pair<std::string_view, uint64_t*> wanted[] = {
      {"MemTotal", &mem.total_bytes},     {"MemAvailable", &mem.available_bytes},
      {"MemFree", &mem.free_bytes},       {"Buffers", &mem.buffers_bytes},
      {"Cached", &mem.cached_bytes},      {"SwapTotal", &mem.swap_total_bytes},
      {"SwapFree", &mem.swap_free_bytes},
  };
  bool found[std::size(wanted)] = {};
  int line_no = 0;
  for (std::string_view line : Lines(text)) {
    ++line_no;
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view key = line.substr(0, colon);
    for (size_t i = 0; i < std::size(wanted); ++i) {
      if (key != wanted[i].first) continue;
      const std::vector<std::string_view> f = Fields(line.substr(colon + 1));
      uint64_t kb = 0;
      if (f.size() != 2 || f[1] != "kB" || !ParseNumber(f[0], &kb)) {
        return LineError(source, line_no,
                         std::string(key) + ": expected '<number> kB', got '" +
                             std::string(line.substr(colon + 1)) + "'");
      }
      *wanted[i].second = kb * 1024;
      found[i] = true;
    }
  }
  for (size_t i = 0; i < std::size(wanted); ++i) {
    if (!found[i]) {
      return Status::Corruption(std::string(source) + ": missing " + std::string(wanted[i].first));
    }
  }
  return mem;
}

Result<std::vector<DiskCounters>> ParseDiskStats(std::string_view text, std::string_view source) {
  // major minor name reads merged sectors_read ms writes merged sectors_written ...
  constexpr size_t kMinFields = 14, kSectorsRead = 5, kSectorsWritten = 9;
  constexpr uint64_t kSectorBytes = 512;
  std::vector<DiskCounters> disks;
  int line_no = 0;
  for (std::string_view line : Lines(text)) {
    ++line_no;
    const std::vector<std::string_view> f = Fields(line);
    if (f.empty()) continue;
    if (f.size() < kMinFields) {
      return LineError(source, line_no,
                       "expected at least 14 fields, got " + std::to_string(f.size()));
    }
    DiskCounters d{.name = std::string(f[2])};
    auto bytes = [&](size_t index, const char* what, uint64_t* out) -> Status {
      uint64_t sectors = 0;
      if (!ParseNumber(f[index], &sectors)) {
        return LineError(source, line_no,
                         d.name + ": field " + std::to_string(index + 1) + " (" + what +
                             "): " + NotANumber(f[index]));
      }
      *out = sectors * kSectorBytes;
      return Status::OK();
    };
    SATURATE_RETURN_IF_ERROR(bytes(kSectorsRead, "sectors read", &d.read_bytes));
    SATURATE_RETURN_IF_ERROR(bytes(kSectorsWritten, "sectors written", &d.write_bytes));
    disks.push_back(std::move(d));
  }
  return disks;
}

bool IsWholeDisk(const std::string& sys_root, std::string_view name) {
  std::string sys_name(name);
  std::replace(sys_name.begin(), sys_name.end(), '/', '!');  // "cciss/c0d0" -> "cciss!c0d0"
  const std::filesystem::path dir = std::filesystem::path(sys_root) / "class/block" / sys_name;
  std::error_code ec;
  return std::filesystem::exists(dir / "device", ec) &&
         !std::filesystem::exists(dir / "partition", ec);
}

DiskCounters SumWholeDisks(std::span<const DiskCounters> disks) {
  DiskCounters sum{.name = "total", .whole_disk = true};
  for (const DiskCounters& d : disks) {
    if (!d.whole_disk) continue;
    sum.read_bytes += d.read_bytes;
    sum.write_bytes += d.write_bytes;
  }
  return sum;
}

Result<ProcessStat> ParseProcessStat(std::string_view text, std::string_view source) {
  const std::string src(source);
  const size_t open = text.find('(');
  const size_t close = text.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) {
    return Status::Corruption(src + ": expected 'pid (comm) ...'");
  }
  ProcessStat p;
  std::string_view pid = text.substr(0, open);
  pid = pid.substr(0, pid.find_last_not_of(' ') + 1);
  if (!ParseNumber(pid, &p.pid)) {
    return Status::Corruption(src + ": field 1 (pid): " + NotANumber(pid));
  }
  p.comm = std::string(text.substr(open + 1, close - open - 1));
  // rest[0] is field 3 (state); man 5 proc numbers fields from 1.
  const std::vector<std::string_view> rest = Fields(text.substr(close + 1));
  constexpr size_t kLastField = 24;  // rss
  if (rest.size() + 2 < kLastField) {
    return Status::Corruption(src + ": expected at least 24 fields, got " +
                              std::to_string(rest.size() + 2));
  }
  if (rest[0].size() != 1) return Status::Corruption(src + ": field 3 (state): expected one char");
  p.state = rest[0][0];
  auto field = [&](size_t number, const char* what, auto* out) -> Status {
    if (ParseNumber(rest[number - 3], out)) return Status::OK();
    return Status::Corruption(src + ": field " + std::to_string(number) + " (" + what +
                              "): " + NotANumber(rest[number - 3]));
  };
  SATURATE_RETURN_IF_ERROR(field(4, "ppid", &p.ppid));
  SATURATE_RETURN_IF_ERROR(field(14, "utime", &p.utime_ticks));
  SATURATE_RETURN_IF_ERROR(field(15, "stime", &p.stime_ticks));
  SATURATE_RETURN_IF_ERROR(field(16, "cutime", &p.cutime_ticks));
  SATURATE_RETURN_IF_ERROR(field(17, "cstime", &p.cstime_ticks));
  SATURATE_RETURN_IF_ERROR(field(20, "num_threads", &p.num_threads));
  SATURATE_RETURN_IF_ERROR(field(22, "starttime", &p.start_ticks));
  SATURATE_RETURN_IF_ERROR(field(24, "rss", &p.rss_pages));
  return p;
}

std::vector<ProcessStat> Descendants(std::span<const ProcessStat> processes, int root_pid) {
  std::unordered_map<int, std::vector<const ProcessStat*>> children;
  const ProcessStat* root = nullptr;
  for (const ProcessStat& p : processes) {
    children[p.ppid].push_back(&p);
    if (p.pid == root_pid) root = &p;
  }
  std::vector<ProcessStat> tree;
  if (root == nullptr) return tree;
  std::unordered_set<int> seen = {root_pid};  // guards against cycles from pid reuse
  tree.push_back(*root);
  for (size_t i = 0; i < tree.size(); ++i) {
    for (const ProcessStat* child : children[tree[i].pid]) {
      if (seen.insert(child->pid).second) tree.push_back(*child);
    }
  }
  return tree;
}

ProcessTreeCounters SumProcesses(std::span<const ProcessStat> processes, int64_t page_size_bytes) {
  ProcessTreeCounters sum;
  for (const ProcessStat& p : processes) {
    ++sum.processes;
    sum.cpu_ticks += p.utime_ticks + p.stime_ticks + p.cutime_ticks + p.cstime_ticks;
    sum.rss_bytes += static_cast<uint64_t>(std::max<int64_t>(p.rss_pages, 0) * page_size_bytes);
    sum.threads += p.num_threads;
  }
  return sum;
}

Result<HostCounters> ReadHostCounters(const std::string& proc_root, const std::string& sys_root,
                                      std::unordered_map<std::string, bool>* whole_disks) {
  HostCounters host;
  host.time_ns = MonotonicNowNs();
  SATURATE_ASSIGN_OR_RETURN(host.cpu, ReadParsed(proc_root + "/stat", ParseCpuStat));
  SATURATE_ASSIGN_OR_RETURN(host.mem, ReadParsed(proc_root + "/meminfo", ParseMemInfo));
  Result<std::vector<DiskCounters>> disks = ReadParsed(proc_root + "/diskstats", ParseDiskStats);
  if (disks.ok()) {
    host.disks = std::move(disks).value();
  } else if (disks.status().code() != StatusCode::kNotFound) {
    return disks.status();
  }
  // PSI is optional (old kernels, or psi=0): its absence is not an error.
  Result<uint64_t> pressure = ReadParsed(proc_root + "/pressure/cpu", ParseCpuPressureSomeUs);
  if (pressure.ok()) host.cpu_pressure_some_us = *pressure;
  for (DiskCounters& d : host.disks) {
    if (whole_disks == nullptr) {
      d.whole_disk = IsWholeDisk(sys_root, d.name);
      continue;
    }
    auto [it, added] = whole_disks->try_emplace(d.name);
    if (added) it->second = IsWholeDisk(sys_root, d.name);
    d.whole_disk = it->second;
  }
  return host;
}

Result<ProcessStat> ReadProcess(const std::string& proc_root, int pid) {
  const std::string dir = proc_root + "/" + std::to_string(pid);
  Result<ProcessStat> p = ReadParsed(dir + "/stat", ParseProcessStat);
  std::error_code ec;
  if (!p.ok() && !std::filesystem::exists(dir, ec)) {
    return Status::NotFound(dir + ": no such process");  // never existed or exited meanwhile
  }
  return p;
}

Result<SchedStat> ParseSchedStat(std::string_view text, std::string_view source) {
  const std::vector<std::string_view> f = Fields(text);
  SchedStat s;
  if (f.size() < 2 || !ParseNumber(f[0], &s.run_ns) || !ParseNumber(f[1], &s.runq_wait_ns)) {
    return Status::Corruption(std::string(source) +
                              ": expected '<run ns> <runqueue wait ns> <timeslices>', got '" +
                              std::string(text.substr(0, 80)) + "'");
  }
  return s;
}

ThreadScheds ReadThreadScheds(const std::string& proc_root, int pid) {
  ThreadScheds threads;
  std::error_code ec;
  const std::string tasks = proc_root + "/" + std::to_string(pid) + "/task";
  for (const auto& entry : std::filesystem::directory_iterator(tasks, ec)) {
    int64_t tid = 0;
    if (!ParseNumber(entry.path().filename().string(), &tid)) continue;
    const std::string dir = entry.path().string();
    Result<SchedStat> s = ReadParsed(dir + "/schedstat", ParseSchedStat);
    if (!s.ok()) continue;
    Result<std::string> comm = ReadFileToString(dir + "/comm");
    threads[tid] = {s->run_ns, s->runq_wait_ns, comm.ok() && base::IsSaturateThreadName(*comm)};
  }
  return threads;
}

SchedGrowth GrowthBetween(const ThreadScheds& before, const ThreadScheds& after) {
  SchedGrowth g;
  for (const auto& [tid, now] : after) {
    auto prev = before.find(tid);
    const ThreadSched was = prev == before.end() ? ThreadSched{} : prev->second;
    const uint64_t waited_ns = Delta(was.runq_wait_ns, now.runq_wait_ns);
    g.runq_wait_ns += waited_ns;
    if (!now.saturate) continue;
    g.saturate_threads = true;
    g.saturate_runq_wait_ns += waited_ns;
    g.saturate_run_ns += Delta(was.run_ns, now.run_ns);
  }
  return g;
}

std::vector<int> ParseChildren(std::string_view text) {
  std::vector<int> pids;
  size_t i = 0;
  while (true) {
    while (i < text.size() && text[i] == ' ') ++i;
    int pid = 0;
    const auto [end, ec] = std::from_chars(text.data() + i, text.data() + text.size(), pid);
    if (ec != std::errc() || pid <= 0) break;
    pids.push_back(pid);
    i = size_t(end - text.data());
  }
  return pids;
}

std::vector<int> ReadChildren(const std::string& proc_root, int pid) {
  const std::string id = std::to_string(pid);
  Result<std::string> text = ReadFileToString(proc_root + "/" + id + "/task/" + id + "/children");
  return text.ok() ? ParseChildren(*text) : std::vector<int>();
}

Result<std::vector<ProcessStat>> ListProcesses(const std::string& proc_root) {
  std::vector<ProcessStat> processes;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(proc_root, ec), end; !ec && it != end;
       it.increment(ec)) {
    int pid = 0;
    if (!ParseNumber(it->path().filename().native(), &pid)) continue;
    Result<ProcessStat> p = ReadProcess(proc_root, pid);
    if (p.ok()) {
      processes.push_back(std::move(p).value());
    } else if (p.status().code() != StatusCode::kNotFound) {
      return p.status();
    }
  }
  if (ec) return Status::IOError("list " + proc_root + ": " + ec.message());
  std::sort(processes.begin(), processes.end(),
            [](const ProcessStat& a, const ProcessStat& b) { return a.pid < b.pid; });
  return processes;
}

Result<ProcessTreeCounters> ReadProcessTree(const std::string& proc_root, int root_pid) {
  const int64_t time_ns = MonotonicNowNs();
  SATURATE_ASSIGN_OR_RETURN(std::vector<ProcessStat> all, ListProcesses(proc_root));
  const std::vector<ProcessStat> tree = Descendants(all, root_pid);
  if (tree.empty()) {
    return Status::NotFound(proc_root + "/" + std::to_string(root_pid) + ": no such process");
  }
  ProcessTreeCounters sum = SumProcesses(tree, PageSizeBytes());
  sum.time_ns = time_ns;
  return sum;
}

int64_t MonotonicNowNs() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

int64_t ClockTicksPerSecond() { return ::sysconf(_SC_CLK_TCK); }
int64_t PageSizeBytes() { return ::sysconf(_SC_PAGESIZE); }

CpuUsage ComputeCpuUsage(const CpuTimes& before, const CpuTimes& after) {
  const uint64_t user =
      Delta(before.user_ticks, after.user_ticks) + Delta(before.nice_ticks, after.nice_ticks);
  const uint64_t system = Delta(before.system_ticks, after.system_ticks) +
                          Delta(before.irq_ticks, after.irq_ticks) +
                          Delta(before.softirq_ticks, after.softirq_ticks);
  const uint64_t iowait = Delta(before.iowait_ticks, after.iowait_ticks);
  const uint64_t steal = Delta(before.steal_ticks, after.steal_ticks);
  const uint64_t total =
      user + system + iowait + steal + Delta(before.idle_ticks, after.idle_ticks);
  CpuUsage u{.cpu = after.cpu};
  if (total == 0) return u;
  // Dividing last keeps a fully busy interval at exactly 100 (x * (100 / x)
  // can round to 100.00000000000001).
  auto pct = [total](uint64_t ticks) {
    return 100.0 * static_cast<double>(ticks) / static_cast<double>(total);
  };
  u.user_pct = pct(user);
  u.system_pct = pct(system);
  u.iowait_pct = pct(iowait);
  u.steal_pct = pct(steal);
  u.busy_pct = pct(user + system + steal);
  return u;
}

HostRates ComputeHostRates(const HostCounters& before, const HostCounters& after) {
  HostRates rates;
  rates.elapsed_s = static_cast<double>(after.time_ns - before.time_ns) / 1e9;
  rates.cpu = ComputeCpuUsage(before.cpu.total, after.cpu.total);
  for (const CpuTimes& core : after.cpu.cores) {
    auto match = std::find_if(before.cpu.cores.begin(), before.cpu.cores.end(),
                              [&](const CpuTimes& c) { return c.cpu == core.cpu; });
    if (match != before.cpu.cores.end()) rates.cores.push_back(ComputeCpuUsage(*match, core));
  }
  if (before.cpu_pressure_some_us && after.cpu_pressure_some_us && rates.elapsed_s > 0) {
    const double waited_s =
        static_cast<double>(Delta(*before.cpu_pressure_some_us, *after.cpu_pressure_some_us)) / 1e6;
    rates.cpu_pressure_pct = std::min(100.0, 100.0 * waited_s / rates.elapsed_s);
  }
  rates.disks_total.name = "total";
  auto rate = [&](const DiskCounters& b, const DiskCounters& a) {
    return DiskRate{a.name, PerSecond(Delta(b.read_bytes, a.read_bytes), rates.elapsed_s),
                    PerSecond(Delta(b.write_bytes, a.write_bytes), rates.elapsed_s)};
  };
  for (const DiskCounters& disk : after.disks) {
    if (!disk.whole_disk) continue;
    auto match = std::find_if(before.disks.begin(), before.disks.end(),
                              [&](const DiskCounters& d) { return d.name == disk.name; });
    if (match == before.disks.end()) continue;
    rates.disks.push_back(rate(*match, disk));
    rates.disks_total.read_bytes_per_s += rates.disks.back().read_bytes_per_s;
    rates.disks_total.write_bytes_per_s += rates.disks.back().write_bytes_per_s;
  }
  return rates;
}

ProcessTreeRates ComputeProcessTreeRates(const ProcessTreeCounters& before,
                                         const ProcessTreeCounters& after,
                                         int64_t clock_ticks_per_s) {
  ProcessTreeRates rates{
      .processes = after.processes, .rss_bytes = after.rss_bytes, .threads = after.threads};
  rates.elapsed_s = static_cast<double>(after.time_ns - before.time_ns) / 1e9;
  if (clock_ticks_per_s > 0) {
    rates.cpu_pct = 100 * PerSecond(Delta(before.cpu_ticks, after.cpu_ticks), rates.elapsed_s) /
                    static_cast<double>(clock_ticks_per_s);
  }
  return rates;
}

}  // namespace saturate::watch
