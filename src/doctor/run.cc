#include "doctor/run.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <system_error>
#include <tuple>
#include <utility>

#include "base/file.h"
#include "base/json_lines.h"
#include "trace/export.h"

namespace saturate::doctor {
namespace {

using json = nlohmann::json;

// Typed reads that never throw: a missing key or a value of another type is
// "absent", which is what an optional metric means in docs/watch.md.
std::optional<double> Num(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

std::optional<int64_t> Int(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  if (it->is_number_float()) {
    const double d = it->get<double>();
    // Out of range (or NaN) would be undefined behaviour to convert: absent.
    if (!(d >= -9.2e18 && d <= 9.2e18)) return std::nullopt;
    return static_cast<int64_t>(d);
  }
  if (it->is_number_unsigned()) return static_cast<int64_t>(it->get<uint64_t>());
  return it->get<int64_t>();
}

std::optional<uint64_t> Bytes(const json& j, const char* key) {
  std::optional<double> v = Num(j, key);
  if (!v || !(*v >= 0 && *v <= 1.8e19)) return std::nullopt;
  if (auto it = j.find(key); it->is_number_unsigned()) return it->get<uint64_t>();
  return static_cast<uint64_t>(*v);
}

std::string Str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

const json* Obj(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_object() ? &*it : nullptr;
}

// Integer annotations of a span or counter record; other types are ignored.
std::map<std::string, int64_t> IntArgs(const json& args) {
  std::map<std::string, int64_t> out;
  for (auto it = args.begin(); it != args.end(); ++it) {
    if (std::optional<int64_t> v = Int(args, it.key().c_str())) out[it.key()] = *v;
  }
  return out;
}

Status ParseMeta(const json& j, const std::string& dir, RunMeta* meta) {
  if (!j.is_object()) return Status::Corruption(dir + "/meta.json: not a JSON object");
  meta->dir = dir;
  if (auto it = j.find("command"); it != j.end() && it->is_array()) {
    for (const json& arg : *it) {
      if (arg.is_string()) meta->command.push_back(arg.get<std::string>());
    }
  }
  meta->host = Str(j, "host");
  meta->cpus = static_cast<int>(Int(j, "cpus").value_or(0));
  meta->mem_total_bytes = Bytes(j, "mem_total_bytes").value_or(0);
  meta->gpu_status = Str(j, "gpu_status");
  if (auto it = j.find("gpus"); it != j.end() && it->is_array()) {
    meta->gpu_count = static_cast<int>(it->size());
    for (const json& g : *it) {
      meta->gpu_memory_total_bytes.push_back(
          g.is_object() ? Bytes(g, "memory_total_bytes").value_or(0) : 0);
    }
  }
  meta->start_unix_ns = Int(j, "start_unix_ns").value_or(0);
  meta->start_monotonic_ns = Int(j, "start_monotonic_ns").value_or(0);
  meta->interval_ns = Int(j, "interval_ns").value_or(0);
  if (std::optional<int64_t> end = Int(j, "end_unix_ns"); end && meta->start_unix_ns > 0) {
    meta->duration_ns = std::max<int64_t>(0, *end - meta->start_unix_ns);
  }
  if (std::optional<int64_t> code = Int(j, "exit_code")) meta->exit_code = static_cast<int>(*code);
  if (auto it = j.find("auto_instrument"); it != j.end() && it->is_boolean()) {
    meta->auto_instrument = it->get<bool>();
  }
  return Status::OK();
}

GpuPoint ParseGpu(const json& g) {
  GpuPoint p;
  p.index = static_cast<int>(Int(g, "index").value_or(0));
  auto lost = g.find("lost");
  p.lost = lost != g.end() && lost->is_boolean() && lost->get<bool>();
  // The driver's own sub-second samples see the saw-tooth that NVML's
  // one-window rate smooths away, so prefer them.
  p.util_pct = Num(g, "util_sampled_pct");
  if (!p.util_pct) p.util_pct = Num(g, "util_pct");
  p.memory_used_bytes = Bytes(g, "memory_used_bytes");
  p.memory_total_bytes = Bytes(g, "memory_total_bytes");
  p.power_w = Num(g, "power_w");
  p.pcie_rx_bytes_per_s = Bytes(g, "pcie_rx_bytes_per_s");
  p.sm_clock_mhz = Num(g, "sm_clock_mhz");
  if (auto it = g.find("clocks_event_reasons"); it != g.end() && it->is_array()) {
    for (const json& r : *it) {
      if (r.is_string()) p.clocks_event_reasons.push_back(r.get<std::string>());
    }
  }
  if (const json* gpm = Obj(g, "gpm")) {
    p.sm_active_pct = Num(*gpm, "sm_active_pct");
    p.sm_occupancy_pct = Num(*gpm, "sm_occupancy_pct");
    p.tensor_active_pct = Num(*gpm, "tensor_active_pct");
    p.dram_active_pct = Num(*gpm, "dram_active_pct");
  }
  return p;
}

Status ParseSample(const json& j, SamplePoint* s) {
  std::optional<int64_t> t = Int(j, "t_ns");
  if (!t) return Status::Corruption("no t_ns");
  s->t_ns = *t;
  if (const json* host = Obj(j, "host")) {
    s->cpu_busy_pct = Num(*host, "cpu_busy_pct").value_or(0);
    s->cpu_iowait_pct = Num(*host, "cpu_iowait_pct").value_or(0);
    s->cpu_pressure_pct = Num(*host, "cpu_pressure_pct");
    s->mem_available_bytes = Bytes(*host, "mem_available_bytes").value_or(0);
    s->mem_total_bytes = Bytes(*host, "mem_total_bytes").value_or(0);
    s->disk_read_bytes_per_s = Num(*host, "disk_read_bytes_per_s").value_or(0);
  }
  if (const json* tree = Obj(j, "tree")) {
    s->tree_cpu_pct = Num(*tree, "cpu_pct");
    s->tree_rss_bytes = Bytes(*tree, "rss_bytes");
    s->tree_runq_wait_cores = Num(*tree, "runq_wait_cores");
    if (auto it = tree->find("members"); it != tree->end() && it->is_array()) {
      for (const json& m : *it) {
        std::optional<int64_t> pid = m.is_object() ? Int(m, "pid") : std::nullopt;
        if (!pid) continue;
        s->members.push_back({int(*pid), Num(m, "cpu_pct").value_or(0), Num(m, "runq_wait_cores"),
                              Num(m, "saturate_runq_wait_cores").value_or(0),
                              Num(m, "saturate_cpu_cores").value_or(0)});
      }
    }
  }
  if (auto it = j.find("gpus"); it != j.end() && it->is_array()) {
    for (const json& g : *it) {
      if (g.is_object()) s->gpus.push_back(ParseGpu(g));
    }
  }
  return Status::OK();
}

SpanKind KindOf(const std::string& cat) {
  if (cat == "loader") return SpanKind::kLoader;
  if (cat == "checkpoint") return SpanKind::kCheckpoint;
  return SpanKind::kUser;
}

// A run being read: what the spans files add before explicit and automatic
// records are merged (FinishLoading).
struct Loading {
  Run* run = nullptr;
  std::map<int, LoaderCounters> loaders;
  std::map<int, std::vector<int64_t>> auto_marks;  // per pid, from the auto-instrumentation
  std::map<std::tuple<int, std::string, std::string, std::string>, SyncSite> syncs;
  // The time of the record run->counters holds, per name: a process's threads
  // buffer their records apart, so a file's records are not in time order (a
  // DeviceLoader writes loader_decode from its stage and when it closes).
  std::map<std::string, int64_t> counter_ns;
};

std::string Label(const trace::SpanFileEvent& e, const char* key) {
  auto it = e.labels.find(key);
  return it == e.labels.end() ? std::string() : it->second;
}

void AddAutoMeta(const trace::SpanFileEvent& e, Run* run) {
  AutoProcess p;
  p.pid = static_cast<int>(e.pid);
  if (e.auto_info.is_object()) {
    p.torch_version = Str(e.auto_info, "torch");
    if (const json* missing = Obj(e.auto_info, "missing")) {
      for (auto it = missing->begin(); it != missing->end(); ++it) {
        if (it->is_string()) p.missing[it.key()] = it->get<std::string>();
      }
    }
  }
  run->auto_processes.push_back(std::move(p));
}

// The auto-instrumentation's counters: DataLoader configurations, per-site
// host sync totals (cumulative: the last record wins) and its error count.
void AddAutoCounters(const trace::SpanFileEvent& e, int64_t t_ns, Loading* l) {
  const int pid = static_cast<int>(e.pid);
  const std::map<std::string, int64_t> values = IntArgs(e.args);
  auto value = [&](const char* key) {
    auto it = values.find(key);
    return it == values.end() ? int64_t{0} : it->second;
  };
  if (e.name == "dataloader") {
    l->run->dataloaders.push_back(
        {pid, value("loader_id"), values, Label(e, "site"), Label(e, "dataset")});
  } else if (e.name == "host_sync") {
    SyncSite s{pid,
               Label(e, "site"),
               Label(e, "op"),
               Label(e, "device"),
               value("count"),
               value("total_ns"),
               value("max_ns"),
               value("steps"),
               value("intervals")};
    l->syncs[{pid, s.site, s.op, s.device}] = std::move(s);
  } else if (e.name == "autotrace") {
    for (AutoProcess& p : l->run->auto_processes) {
      if (p.pid == pid) p.errors = value("errors");
    }
  } else if (e.name == "exit") {
    l->run->exits.push_back({pid, t_ns, value("steps"), Label(e, "exception")});
  } else if (!e.name.empty()) {
    l->run->counters[e.name] = values;  // "ddp", ...
  }
}

// Adds one event of a spans file (parsed by the trace library, the format's
// one reader) to the run, on the run's time axis.
void AddSpanEvent(const trace::SpanFileEvent& e, bool auto_source, int64_t start_monotonic_ns,
                  Loading* l) {
  using Type = trace::SpanFileEvent::Type;
  Run* run = l->run;
  const int64_t t_ns = e.ts_ns - start_monotonic_ns;
  const int pid = static_cast<int>(e.pid);
  switch (e.type) {
    case Type::kMeta:
      if (auto_source) AddAutoMeta(e, run);
      break;
    case Type::kSpan:
      run->spans.push_back(Span{e.name, KindOf(e.category), pid, e.tid, t_ns, e.dur_ns,
                                IntArgs(e.args), e.labels, auto_source});
      break;
    case Type::kStep:
      (auto_source ? l->auto_marks[pid] : run->step_marks_ns[pid]).push_back(t_ns);
      break;
    case Type::kCounters:
      if (auto_source) {
        AddAutoCounters(e, t_ns, l);
      } else if (e.name == "loader") {
        LoaderCounters& c = l->loaders[pid];
        if (t_ns >= c.t_ns) {
          c.pid = pid;
          c.t_ns = t_ns;
          for (auto& [key, value] : IntArgs(e.args)) c.values[key] = value;
        }
      } else if (e.name == "loader_remote") {  // written right after its "loader" record
        for (auto& [key, value] : IntArgs(e.args)) l->loaders[pid].values[key] = value;
      } else if (!e.name.empty()) {
        auto [latest, first] = l->counter_ns.try_emplace(e.name, t_ns);
        if (first || t_ns >= latest->second) {
          latest->second = t_ns;
          run->counters[e.name] = IntArgs(e.args);
        }
      }
      break;
  }
}

// A process that marks its own steps (saturate.step()) keeps its marks and
// phases; the auto-instrumentation's step marks and the phases it infers
// count only where there are none, so nothing counts twice.
void FinishLoading(Loading* l) {
  Run* run = l->run;
  std::set<int> explicit_pids;
  for (auto& [pid, marks] : l->auto_marks) {
    auto it = run->step_marks_ns.find(pid);
    if (it != run->step_marks_ns.end() && !it->second.empty()) {
      explicit_pids.insert(pid);
    } else {
      run->step_marks_ns[pid] = std::move(marks);
    }
  }
  std::erase_if(run->spans, [&](const Span& s) {
    return s.auto_source && explicit_pids.contains(s.pid) &&
           (s.name == "forward" || s.name == "backward" || s.name == "optimizer");
  });
  for (auto& [key, sync] : l->syncs) run->host_syncs.push_back(std::move(sync));
  for (auto& [pid, counters] : l->loaders) run->loaders.push_back(std::move(counters));
}

// Calls `fn` on each object of a JSON Lines file; a torn last line becomes a
// warning.
Status ForEachJsonLineOf(const std::string& path, std::vector<std::string>* warnings,
                         const std::function<Status(const json&)>& fn) {
  SATURATE_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  bool torn = false;
  SATURATE_RETURN_IF_ERROR(ForEachJsonLine(
      text, path, [&](const json& j, size_t) { return fn(j); }, &torn));
  if (torn) warnings->push_back(path + ": skipped a torn last line");
  return Status::OK();
}

std::vector<std::string> SpanFiles(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("spans-") && name.ends_with(".jsonl")) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Without meta.json the spans' clock has no origin: the run starts at its
// first event (times were read with start_monotonic_ns = 0).
void StartAtFirstEvent(Run* run) {
  int64_t first = INT64_MAX;
  for (const Span& s : run->spans) first = std::min(first, s.start_ns);
  for (const auto& [pid, marks] : run->step_marks_ns) {
    if (!marks.empty()) first = std::min(first, *std::min_element(marks.begin(), marks.end()));
  }
  if (first == INT64_MAX) return;
  run->meta.start_monotonic_ns = first;
  for (Span& s : run->spans) s.start_ns -= first;
  for (auto& [pid, marks] : run->step_marks_ns) {
    for (int64_t& t : marks) t -= first;
  }
  for (LoaderCounters& l : run->loaders) l.t_ns -= first;
}

// The run's length when meta.json has no end (a crashed watcher): the last
// thing recorded.
int64_t LastEventNs(const Run& run) {
  int64_t last = 0;
  if (!run.samples.empty()) last = run.samples.back().t_ns;
  for (const Span& s : run.spans) last = std::max(last, s.start_ns + s.dur_ns);
  for (const auto& [pid, marks] : run.step_marks_ns) {
    if (!marks.empty()) last = std::max(last, marks.back());
  }
  return last;
}

// Where a spans file's CLOCK_MONOTONIC time 0 of the run's axis is: from
// meta.json's start, or (sources.origin_unix_ns) from the file's own wall
// clock reading, for spans written on another node.
int64_t FileOrigin(const trace::SpansFile& file, const RunSources& sources, const Run& run) {
  if (sources.origin_unix_ns) {
    for (const trace::SpanFileEvent& e : file.events) {
      if (e.type == trace::SpanFileEvent::Type::kMeta && e.unix_ns > 0 && e.ts_ns > 0) {
        return e.ts_ns - (e.unix_ns - *sources.origin_unix_ns) - sources.shift_ns;
      }
    }
  }
  return run.meta.start_monotonic_ns;
}

}  // namespace

Result<Run> LoadRun(const std::string& dir) {
  return LoadRunFrom({.meta_dir = dir, .spans_dir = dir});
}

Result<Run> LoadRunFrom(const RunSources& sources) {
  Run run;
  const std::string& dir = sources.meta_dir.empty() ? sources.spans_dir : sources.meta_dir;
  const std::string meta_path = dir + "/meta.json";
  std::error_code ec;
  const bool has_meta = !sources.meta_dir.empty() && std::filesystem::exists(meta_path, ec);
  if (!has_meta && SpanFiles(sources.spans_dir).empty()) {
    return Status::NotFound(meta_path +
                            ": no such file, and no spans-*.jsonl (not a run directory?)");
  }
  if (has_meta) {
    SATURATE_ASSIGN_OR_RETURN(std::string meta_text, ReadFileToString(meta_path));
    json meta = json::parse(meta_text, nullptr, /*allow_exceptions=*/false);
    if (meta.is_discarded()) return Status::Corruption(meta_path + ": not valid JSON");
    SATURATE_RETURN_IF_ERROR(ParseMeta(meta, dir, &run.meta));
  } else {
    // Spans recorded without saturate watch (SATURATE_RUN_DIR set by hand,
    // saturate.auto): no samples, and the run spans its events.
    run.meta.dir = dir;
    if (!sources.origin_unix_ns) {
      run.warnings.push_back(meta_path +
                             ": missing (recorded without saturate watch): no metric samples; "
                             "the run spans its events");
    }
  }

  const std::string samples_path = dir + "/samples.jsonl";
  if (!has_meta) {
    // Nothing to read: said above.
  } else if (std::filesystem::exists(samples_path, ec)) {
    auto add_sample = [&](const json& j) {
      SamplePoint s;
      Status parsed = ParseSample(j, &s);
      if (parsed.ok()) run.samples.push_back(std::move(s));
      return parsed;
    };
    SATURATE_RETURN_IF_ERROR(ForEachJsonLineOf(samples_path, &run.warnings, add_sample));
  } else {
    run.warnings.push_back(samples_path + ": missing (no metric samples)");
  }

  // Another node's samples: onto the job's axis, with the node's clock correction.
  // Wrapping, not undefined, for clocks no real run has (corrupt meta.json).
  auto wrap_add = [](int64_t a, int64_t b) { return int64_t(uint64_t(a) + uint64_t(b)); };
  const int64_t sample_shift_ns =
      sources.origin_unix_ns && has_meta
          ? wrap_add(int64_t(uint64_t(run.meta.start_unix_ns) - uint64_t(*sources.origin_unix_ns)),
                     sources.shift_ns)
          : 0;
  for (SamplePoint& p : run.samples) p.t_ns = wrap_add(p.t_ns, sample_shift_ns);
  if (sources.origin_unix_ns && has_meta) {
    run.meta.duration_ns = wrap_add(run.meta.duration_ns, sample_shift_ns);
    run.meta.start_unix_ns = *sources.origin_unix_ns;
  }

  Loading loading{.run = &run};
  for (const std::string& path : SpanFiles(sources.spans_dir)) {
    SATURATE_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
    SATURATE_ASSIGN_OR_RETURN(trace::SpansFile file, trace::ParseSpansFile(text, path));
    if (file.torn_last_line) run.warnings.push_back(path + ": skipped a torn last line");
    const bool auto_source =
        std::any_of(file.events.begin(), file.events.end(), [](const trace::SpanFileEvent& e) {
          return e.type == trace::SpanFileEvent::Type::kMeta && e.source == "auto";
        });
    const int64_t origin_ns = FileOrigin(file, sources, run);
    for (const trace::SpanFileEvent& e : file.events) {
      AddSpanEvent(e, auto_source, origin_ns, &loading);
    }
  }
  FinishLoading(&loading);
  if (!has_meta && !sources.origin_unix_ns) StartAtFirstEvent(&run);

  std::stable_sort(run.samples.begin(), run.samples.end(),
                   [](const SamplePoint& a, const SamplePoint& b) { return a.t_ns < b.t_ns; });
  std::stable_sort(run.spans.begin(), run.spans.end(),
                   [](const Span& a, const Span& b) { return a.start_ns < b.start_ns; });
  for (auto& [pid, marks] : run.step_marks_ns) std::sort(marks.begin(), marks.end());
  if (run.meta.duration_ns <= 0) run.meta.duration_ns = LastEventNs(run);
  if (auto it = run.counters.find("trace"); it != run.counters.end()) {
    if (auto d = it->second.find("dropped_events"); d != it->second.end() && d->second > 0) {
      run.warnings.push_back("the tracer dropped " + std::to_string(d->second) +
                             " events (buffers full): phase shares may be low");
    }
  }
  return run;
}

}  // namespace saturate::doctor
