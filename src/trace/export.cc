#include "trace/export.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>
#include <set>

#include "base/file.h"
#include "base/json_lines.h"

namespace saturate::trace {
namespace {

using json = nlohmann::json;

// The integer at `key`, or an error message.
Result<int64_t> GetInt(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) return Status::Corruption(std::string("missing \"") + key + "\"");
  if (!it->is_number_integer()) {
    return Status::Corruption(std::string("\"") + key + "\" is not an integer");
  }
  return it->get<int64_t>();
}

Result<std::string> GetString(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) return Status::Corruption(std::string("missing \"") + key + "\"");
  if (!it->is_string()) return Status::Corruption(std::string("\"") + key + "\" is not a string");
  return it->get<std::string>();
}

Result<json> GetArgs(const json& j) {
  auto it = j.find("args");
  if (it == j.end()) return json::object();
  if (!it->is_object()) return Status::Corruption("\"args\" is not an object");
  for (const auto& [key, value] : it->items()) {
    if (!value.is_number()) return Status::Corruption("args \"" + key + "\" is not a number");
  }
  return *it;
}

// String annotations: an object whose values are strings.
Status GetLabels(const json& j, std::map<std::string, std::string>* labels) {
  auto it = j.find("labels");
  if (it == j.end()) return Status::OK();
  if (!it->is_object()) return Status::Corruption("\"labels\" is not an object");
  for (const auto& [key, value] : it->items()) {
    if (!value.is_string()) return Status::Corruption("labels \"" + key + "\" is not a string");
    (*labels)[key] = value.get<std::string>();
  }
  return Status::OK();
}

// Fills `e` from one parsed line; false for a "ph" this reader does not know.
Result<bool> ParseSpanEvent(const json& j, SpanFileEvent* e) {
  SATURATE_ASSIGN_OR_RETURN(const std::string ph, GetString(j, "ph"));
  if (ph == "M") {
    e->type = SpanFileEvent::Type::kMeta;
    SATURATE_ASSIGN_OR_RETURN(e->pid, GetInt(j, "pid"));
    if (j.contains("comm")) {
      SATURATE_ASSIGN_OR_RETURN(e->comm, GetString(j, "comm"));
    }
    if (j.contains("ts_ns")) {
      SATURATE_ASSIGN_OR_RETURN(e->ts_ns, GetInt(j, "ts_ns"));
    }
    if (j.contains("source")) {
      SATURATE_ASSIGN_OR_RETURN(e->source, GetString(j, "source"));
    }
    if (j.contains("unix_ns")) {
      SATURATE_ASSIGN_OR_RETURN(e->unix_ns, GetInt(j, "unix_ns"));
    }
    if (auto it = j.find("auto"); it != j.end() && it->is_object()) e->auto_info = *it;
    if (auto it = j.find("rank"); it != j.end() && it->is_object()) e->rank_info = *it;
    return true;
  }
  if (ph == "X") {
    e->type = SpanFileEvent::Type::kSpan;
    SATURATE_ASSIGN_OR_RETURN(e->name, GetString(j, "name"));
    e->category = "user";
    if (j.contains("cat")) {
      SATURATE_ASSIGN_OR_RETURN(e->category, GetString(j, "cat"));
    }
    SATURATE_ASSIGN_OR_RETURN(e->dur_ns, GetInt(j, "dur_ns"));
  } else if (ph == "step") {
    e->type = SpanFileEvent::Type::kStep;
    SATURATE_ASSIGN_OR_RETURN(const int64_t step, GetInt(j, "step"));
    e->step = static_cast<uint64_t>(step);
  } else if (ph == "C") {
    e->type = SpanFileEvent::Type::kCounters;
    SATURATE_ASSIGN_OR_RETURN(e->name, GetString(j, "name"));
  } else {
    return false;
  }
  SATURATE_ASSIGN_OR_RETURN(e->ts_ns, GetInt(j, "ts_ns"));
  SATURATE_ASSIGN_OR_RETURN(e->pid, GetInt(j, "pid"));
  SATURATE_ASSIGN_OR_RETURN(e->tid, GetInt(j, "tid"));
  SATURATE_ASSIGN_OR_RETURN(e->args, GetArgs(j));
  SATURATE_RETURN_IF_ERROR(GetLabels(j, &e->labels));
  return true;
}

double Micros(int64_t ns, int64_t t0_ns) { return static_cast<double>(ns - t0_ns) / 1000.0; }

std::string CounterTrackName(const SpanFileEvent& e) {
  std::string name = e.name;
  for (const auto& [key, value] : e.labels) name += " " + value;
  return name;
}

std::string GpuTrackName(int index) { return "gpu " + std::to_string(index) + " util %"; }

// A span, step mark or counters record as a Chrome trace event of process
// `pid` at `ts_us`; counters go on the track `counter_track`.
json EventJson(const SpanFileEvent& e, int64_t pid, double ts_us,
               const std::string& counter_track) {
  switch (e.type) {
    case SpanFileEvent::Type::kSpan: {
      json x = {{"ph", "X"},
                {"name", e.name},
                {"cat", e.category},
                {"pid", pid},
                {"tid", e.tid},
                {"ts", ts_us},
                {"dur", static_cast<double>(e.dur_ns) / 1000.0}};
      if (!e.args.empty()) x["args"] = e.args;
      for (const auto& [key, value] : e.labels) x["args"][key] = value;
      return x;
    }
    case SpanFileEvent::Type::kStep:
      return {{"ph", "i"},
              {"s", "t"},
              {"name", "step " + std::to_string(e.step)},
              {"cat", "step"},
              {"pid", pid},
              {"tid", e.tid},
              {"ts", ts_us},
              {"args", {{"step", e.step}}}};
    case SpanFileEvent::Type::kCounters:
      return {{"ph", "C"},    {"name", counter_track}, {"pid", pid},
              {"tid", e.tid}, {"ts", ts_us},           {"args", e.args}};
    case SpanFileEvent::Type::kMeta:
      break;
  }
  return json();
}

// Counts `e` in the summary.
void CountEvent(const SpanFileEvent& e, ExportSummary* sum) {
  if (e.type == SpanFileEvent::Type::kSpan) ++sum->spans;
  if (e.type == SpanFileEvent::Type::kStep) ++sum->steps;
  if (e.type == SpanFileEvent::Type::kCounters) ++sum->counters;
}

bool IsLoaderWorkerSpan(const SpanFileEvent& e) {
  return e.type == SpanFileEvent::Type::kSpan && e.category == "loader" && e.name == "load_batch";
}

// The "host cpu %" and "gpu N util %" counter events of one sample of process `pid`.
void AppendSampleEvents(const UtilSample& s, int64_t pid, double ts_us, json* events) {
  if (s.host_cpu_pct) {
    events->push_back({{"ph", "C"},
                       {"name", "host cpu %"},
                       {"pid", pid},
                       {"ts", ts_us},
                       {"args", {{"busy", *s.host_cpu_pct}}}});
  }
  for (const auto& [index, util] : s.gpu_util) {
    events->push_back({{"ph", "C"},
                       {"name", GpuTrackName(index)},
                       {"pid", pid},
                       {"ts", ts_us},
                       {"args", {{"util", util}}}});
  }
}

json ProcessName(int64_t pid, const std::string& name) {
  return {{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", name}}}};
}

// ---- reading run and job directories -----------------------------------------

namespace fs = std::filesystem;

// The spans-*.jsonl file names in `dir`, sorted.
Result<std::vector<std::string>> SpansFileNames(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> names;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("spans-") && name.ends_with(".jsonl")) names.push_back(name);
  }
  if (ec) return Status::IOError(dir + ": cannot list: " + ec.message());
  std::sort(names.begin(), names.end());
  return names;
}

// Reads and parses `dir`/`names`; a torn last line becomes a note.
Result<std::vector<SpansFile>> ReadSpansFiles(const std::string& dir,
                                              const std::vector<std::string>& names,
                                              std::vector<std::string>* notes) {
  std::vector<SpansFile> files;
  for (const std::string& name : names) {
    const std::string path = dir + "/" + name;
    SATURATE_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
    SATURATE_ASSIGN_OR_RETURN(SpansFile file, ParseSpansFile(text, path));
    if (file.torn_last_line) notes->push_back(path + ": skipped a torn last line");
    files.push_back(std::move(file));
  }
  return files;
}

// A JSON file's object, or null when it is missing or does not parse.
json ReadJsonObject(const std::string& path) {
  auto text = ReadFileToString(path);
  json j = text.ok() ? json::parse(*text, nullptr, false) : json();
  return j.is_object() ? j : json();
}

std::string StringAt(const json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

// "rank-12" -> 12; empty for any other name.
std::optional<int> RankOfDirName(const std::string& name) {
  if (!name.starts_with("rank-") || name.size() == 5 || name.size() > 14) return std::nullopt;
  int64_t rank = 0;
  for (char c : name.substr(5)) {
    if (c < '0' || c > '9') return std::nullopt;
    rank = rank * 10 + (c - '0');
  }
  if (rank > std::numeric_limits<int>::max()) return std::nullopt;
  return static_cast<int>(rank);
}

// The names of `dir`'s subdirectories, sorted (none when it cannot be listed).
std::vector<std::string> SubdirNames(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> names;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    std::error_code type_ec;
    if (entry.is_directory(type_ec)) names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

bool HasRankDir(const std::string& dir) {
  for (const std::string& name : SubdirNames(dir)) {
    if (RankOfDirName(name)) return true;
  }
  return false;
}

// The node samples of `dir` (samples.jsonl placed by meta.json's
// start_unix_ns) into `job`, as those of `host` (empty: meta.json's host);
// nothing when it has no samples.jsonl.
Status ReadNodeSamples(const std::string& dir, const std::string& host, JobTrace* job) {
  const std::string samples_path = dir + "/samples.jsonl";
  std::error_code ec;
  if (!fs::exists(samples_path, ec)) return Status::OK();
  SATURATE_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(samples_path));
  NodeSamples node;
  node.dir = dir;
  SATURATE_ASSIGN_OR_RETURN(node.util, ParseUtilSamples(text, samples_path));
  if (node.util.torn_last_line) job->notes.push_back(samples_path + ": skipped a torn last line");
  const json meta = ReadJsonObject(dir + "/meta.json");
  node.host = host.empty() ? StringAt(meta, "host") : host;
  auto start = meta.is_object() ? meta.find("start_unix_ns") : meta.end();
  if (!meta.is_object() || start == meta.end() || !start->is_number_integer()) {
    job->notes.push_back(dir +
                         "/meta.json has no start_unix_ns: its samples are left out (they cannot "
                         "be placed on the job's clock)");
    return Status::OK();
  }
  node.start_unix_ns = start->get<int64_t>();
  job->nodes.push_back(std::move(node));
  return Status::OK();
}

// A rank's host: what its spans files' meta lines say, else its task.json.
std::string RankHost(const std::vector<SpansFile>& files, const std::string& rank_dir) {
  for (const SpansFile& f : files) {
    for (const SpanFileEvent& e : f.events) {
      if (e.type != SpanFileEvent::Type::kMeta) continue;
      if (std::string host = StringAt(e.rank_info, "host"); !host.empty()) return host;
    }
  }
  return StringAt(ReadJsonObject(rank_dir + "/task.json"), "host");
}

// Reads one directory that holds rank folders (RUN, or a per-node run
// directory under it): its ranks into `ranks`, its node samples and the
// spans files of processes that are no rank into `job`.
Status ReadJobDir(const std::string& dir, std::map<int, RankTrace>* ranks, JobTrace* job) {
  const std::string dir_host = StringAt(ReadJsonObject(dir + "/meta.json"), "host");
  for (const std::string& name : SubdirNames(dir)) {
    const std::string sub = dir + "/" + name;
    if (std::optional<int> rank = RankOfDirName(name)) {
      SATURATE_ASSIGN_OR_RETURN(const std::vector<std::string> names, SpansFileNames(sub));
      if (names.empty()) {
        job->notes.push_back(sub + ": no spans-*.jsonl: rank " + std::to_string(*rank) +
                             " left out");
        continue;
      }
      SATURATE_ASSIGN_OR_RETURN(std::vector<SpansFile> files,
                                ReadSpansFiles(sub, names, &job->notes));
      RankTrace& trace = (*ranks)[*rank];
      trace.rank = *rank;
      if (trace.host.empty()) trace.host = RankHost(files, sub);
      if (trace.host.empty()) trace.host = dir_host;
      for (SpansFile& f : files) trace.spans_files.push_back(std::move(f));
    } else if (name.starts_with("node-")) {
      // Named as the ranks name their host (SATURATE_HOSTNAME included), which
      // meta.json's gethostname() may not be.
      SATURATE_RETURN_IF_ERROR(ReadNodeSamples(sub, name.substr(5), job));
    }
  }
  SATURATE_RETURN_IF_ERROR(ReadNodeSamples(dir, dir_host, job));
  SATURATE_ASSIGN_OR_RETURN(const std::vector<std::string> names, SpansFileNames(dir));
  if (!names.empty()) {
    RankTrace others;
    others.host = dir_host;
    SATURATE_ASSIGN_OR_RETURN(others.spans_files, ReadSpansFiles(dir, names, &job->notes));
    job->others.push_back(std::move(others));
  }
  return Status::OK();
}

// ---- placing a job's events on one axis --------------------------------------

// A spans event on the job's axis (wall-clock ns, host offset applied).
struct Placed {
  int64_t t_ns = 0;
  const SpanFileEvent* event = nullptr;
};

// The events of `files` at ts_ns - meta.ts_ns + meta.unix_ns + offset_ns,
// each by its file's last meta line before it that has both times; events
// before any such line are left out with a note.
std::vector<Placed> PlaceEvents(const std::vector<SpansFile>& files, int64_t offset_ns,
                                std::vector<std::string>* notes) {
  std::vector<Placed> placed;
  for (const SpansFile& f : files) {
    std::optional<int64_t> mono_to_unix;
    size_t unplaced = 0;
    for (const SpanFileEvent& e : f.events) {
      if (e.type == SpanFileEvent::Type::kMeta) {
        if (e.ts_ns != 0 && e.unix_ns != 0) mono_to_unix = e.unix_ns - e.ts_ns;
        continue;
      }
      if (!mono_to_unix) {
        ++unplaced;
        continue;
      }
      placed.push_back({e.ts_ns + *mono_to_unix + offset_ns, &e});
    }
    if (unplaced > 0) {
      notes->push_back(f.source + ": " + std::to_string(unplaced) +
                       " events before a meta line with ts_ns and unix_ns left out (they cannot "
                       "be placed on the job's clock)");
    }
  }
  return placed;
}

int64_t OffsetOf(const std::map<std::string, int64_t>& host_offset_ns, const std::string& host) {
  auto it = host_offset_ns.find(host);
  return it == host_offset_ns.end() ? 0 : it->second;
}

// One Chrome process of a job trace: a rank, or the processes of no rank.
struct Group {
  int64_t pid = 0;
  int64_t sort_index = 0;
  std::string name;
  std::vector<Placed> events;
};

// `group`'s events into `events`, and its process and thread names into `meta`.
void AppendGroup(const Group& group, int64_t t0, json* meta, json* events, ExportSummary* sum) {
  // Counters written by several processes of the group get a track per process.
  std::map<std::string, std::set<int64_t>> counter_pids;
  for (const Placed& p : group.events) {
    if (p.event->type == SpanFileEvent::Type::kCounters) {
      counter_pids[CounterTrackName(*p.event)].insert(p.event->pid);
    }
  }
  std::map<std::pair<int64_t, int64_t>, bool> threads;  // (pid, tid) -> a loader worker
  for (const Placed& p : group.events) {
    const SpanFileEvent& e = *p.event;
    std::string track;
    if (e.type == SpanFileEvent::Type::kCounters) {
      track = CounterTrackName(e);
      if (counter_pids[track].size() > 1) track += " · pid " + std::to_string(e.pid);
    }
    events->push_back(EventJson(e, group.pid, Micros(p.t_ns, t0), track));
    CountEvent(e, sum);
    threads[{e.pid, e.tid}] |= IsLoaderWorkerSpan(e);
  }
  meta->push_back(ProcessName(group.pid, group.name));
  meta->push_back({{"ph", "M"},
                   {"name", "process_sort_index"},
                   {"pid", group.pid},
                   {"args", {{"sort_index", group.sort_index}}}});
  for (const auto& [key, loader] : threads) {
    std::string name = "pid " + std::to_string(key.first) + " tid " + std::to_string(key.second);
    if (loader) name += " · saturate loader worker";
    meta->push_back({{"ph", "M"},
                     {"name", "thread_name"},
                     {"pid", group.pid},
                     {"tid", key.second},
                     {"args", {{"name", name}}}});
  }
}

std::string WithHost(const std::string& what, const std::string& host) {
  return host.empty() ? what : what + " · " + host;
}

}  // namespace

Result<SpansFile> ParseSpansFile(std::string_view text, std::string_view source) {
  SpansFile file;
  file.source = std::string(source);
  Status st = ForEachJsonLine(
      text, source,
      [&](const json& j, size_t) -> Status {
        SpanFileEvent e;
        SATURATE_ASSIGN_OR_RETURN(const bool known, ParseSpanEvent(j, &e));
        if (known) file.events.push_back(std::move(e));
        return Status::OK();
      },
      &file.torn_last_line);
  if (!st.ok()) return st;
  return file;
}

Result<UtilSamples> ParseUtilSamples(std::string_view text, std::string_view source) {
  UtilSamples out;
  Status st = ForEachJsonLine(
      text, source,
      [&](const json& j, size_t) -> Status {
        UtilSample s;
        SATURATE_ASSIGN_OR_RETURN(s.t_ns, GetInt(j, "t_ns"));
        if (auto host = j.find("host"); host != j.end() && host->is_object()) {
          if (auto cpu = host->find("cpu_busy_pct"); cpu != host->end() && cpu->is_number()) {
            s.host_cpu_pct = cpu->get<double>();
          }
        }
        if (auto gpus = j.find("gpus"); gpus != j.end() && gpus->is_array()) {
          for (const json& g : *gpus) {
            if (!g.is_object()) continue;
            auto index = g.find("index"), util = g.find("util_pct");
            if (index == g.end() || !index->is_number_integer()) continue;
            if (util == g.end() || !util->is_number()) continue;  // lost, or no such metric
            s.gpu_util.emplace_back(index->get<int>(), util->get<double>());
          }
        }
        out.samples.push_back(std::move(s));
        return Status::OK();
      },
      &out.torn_last_line);
  if (!st.ok()) return st;
  return out;
}

Result<RunTrace> ReadRunTrace(const std::string& run_dir) {
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) return Status::NotFound(run_dir + ": no such run directory");
  SATURATE_ASSIGN_OR_RETURN(const std::vector<std::string> names, SpansFileNames(run_dir));

  RunTrace run;
  SATURATE_ASSIGN_OR_RETURN(run.spans_files, ReadSpansFiles(run_dir, names, &run.notes));

  const std::string samples_path = run_dir + "/samples.jsonl";
  if (fs::exists(samples_path, ec)) {
    SATURATE_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(samples_path));
    SATURATE_ASSIGN_OR_RETURN(run.util, ParseUtilSamples(text, samples_path));
    if (run.util.torn_last_line) run.notes.push_back(samples_path + ": skipped a torn last line");
    const std::string meta_path = run_dir + "/meta.json";
    const json meta = ReadJsonObject(meta_path);
    if (meta.is_object() && meta.contains("start_monotonic_ns") &&
        meta["start_monotonic_ns"].is_number_integer()) {
      run.start_monotonic_ns = meta["start_monotonic_ns"].get<int64_t>();
    } else {
      run.notes.push_back(meta_path +
                          " has no start_monotonic_ns: utilization tracks from samples.jsonl left "
                          "out (they cannot be placed on the spans' clock)");
    }
  } else if (names.empty()) {
    return Status::NotFound(run_dir +
                            ": no spans-*.jsonl or samples.jsonl (record with "
                            "SATURATE_RUN_DIR=" +
                            run_dir + ", saturate.trace.start() or saturate watch)");
  }
  return run;
}

json ChromeTrace(const RunTrace& run, ExportSummary* summary) {
  ExportSummary local;
  ExportSummary& sum = summary != nullptr ? *summary : local;
  sum.files = run.spans_files.size();
  sum.notes = run.notes;
  const bool with_samples = run.start_monotonic_ns.has_value() && !run.util.samples.empty();

  int64_t t0 = std::numeric_limits<int64_t>::max();
  for (const SpansFile& f : run.spans_files) {
    for (const SpanFileEvent& e : f.events) {
      if (e.type != SpanFileEvent::Type::kMeta) t0 = std::min(t0, e.ts_ns);
    }
  }
  if (with_samples) t0 = std::min(t0, *run.start_monotonic_ns);
  if (t0 == std::numeric_limits<int64_t>::max()) t0 = 0;

  json events = json::array();
  std::map<int64_t, std::string> process_names;
  std::set<std::pair<int64_t, int64_t>> loader_threads;
  for (const SpansFile& f : run.spans_files) {
    for (const SpanFileEvent& e : f.events) {
      if (e.type == SpanFileEvent::Type::kMeta) {
        process_names[e.pid] = e.comm.empty() ? "pid " + std::to_string(e.pid) : e.comm;
        continue;
      }
      // Labelled counters (one per call site) get a track each.
      events.push_back(EventJson(e, e.pid, Micros(e.ts_ns, t0), CounterTrackName(e)));
      if (IsLoaderWorkerSpan(e)) loader_threads.emplace(e.pid, e.tid);
      CountEvent(e, &sum);
    }
  }

  if (with_samples) {
    process_names[kWatchPid] = "saturate watch: host and GPUs";
    for (const UtilSample& s : run.util.samples) {
      AppendSampleEvents(s, kWatchPid, Micros(*run.start_monotonic_ns + s.t_ns, t0), &events);
      ++sum.samples;
    }
  }

  json meta = json::array();
  for (const auto& [pid, name] : process_names) meta.push_back(ProcessName(pid, name));
  for (const auto& [pid, tid] : loader_threads) {
    meta.push_back({{"ph", "M"},
                    {"name", "thread_name"},
                    {"pid", pid},
                    {"tid", tid},
                    {"args", {{"name", "saturate loader worker"}}}});
  }
  for (json& e : events) meta.push_back(std::move(e));
  return json{{"traceEvents", std::move(meta)}, {"displayTimeUnit", "ms"}};
}

bool IsJobDir(const std::string& run_dir) {
  for (const std::string& name : SubdirNames(run_dir)) {
    if (RankOfDirName(name)) return true;
  }
  for (const std::string& name : SubdirNames(run_dir)) {
    if (!name.starts_with("node-") && HasRankDir(run_dir + "/" + name)) return true;
  }
  return false;
}

Result<JobTrace> ReadJobTrace(const std::string& run_dir) {
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) return Status::NotFound(run_dir + ": no such run directory");
  JobTrace job;
  std::map<int, RankTrace> ranks;
  SATURATE_RETURN_IF_ERROR(ReadJobDir(run_dir, &ranks, &job));
  // Per-node run directories gathered under one parent.
  for (const std::string& name : SubdirNames(run_dir)) {
    const std::string sub = run_dir + "/" + name;
    if (RankOfDirName(name) || name.starts_with("node-") || !HasRankDir(sub)) continue;
    SATURATE_RETURN_IF_ERROR(ReadJobDir(sub, &ranks, &job));
  }
  for (auto& [rank, trace] : ranks) job.ranks.push_back(std::move(trace));
  std::stable_sort(job.nodes.begin(), job.nodes.end(),
                   [](const NodeSamples& a, const NodeSamples& b) { return a.host < b.host; });
  if (job.ranks.empty() && job.nodes.empty() && job.others.empty()) {
    return Status::NotFound(run_dir +
                            ": no rank-<r>/spans-*.jsonl and no node samples.jsonl with "
                            "meta.json to export");
  }
  return job;
}

json ChromeJobTrace(const JobTrace& job, const std::map<std::string, int64_t>& host_offset_ns,
                    ExportSummary* summary) {
  ExportSummary local;
  ExportSummary& sum = summary != nullptr ? *summary : local;
  sum.notes = job.notes;
  sum.ranks = job.ranks.size();

  std::vector<Group> groups;
  int64_t next_sort = 0;
  for (const RankTrace& r : job.ranks) {
    groups.push_back({kRankPidBase + r.rank, r.rank,
                      WithHost("rank " + std::to_string(r.rank), r.host),
                      PlaceEvents(r.spans_files, OffsetOf(host_offset_ns, r.host), &sum.notes)});
    next_sort = std::max(next_sort, int64_t{r.rank} + 1);
    sum.files += r.spans_files.size();
  }
  for (size_t i = 0; i < job.others.size(); ++i) {
    const RankTrace& o = job.others[i];
    groups.push_back({kOtherPidBase + int64_t(i), next_sort++, WithHost("not a rank", o.host),
                      PlaceEvents(o.spans_files, OffsetOf(host_offset_ns, o.host), &sum.notes)});
    sum.files += o.spans_files.size();
  }

  int64_t t0 = std::numeric_limits<int64_t>::max();
  for (const Group& g : groups) {
    for (const Placed& p : g.events) t0 = std::min(t0, p.t_ns);
  }
  for (const NodeSamples& n : job.nodes) {
    const int64_t start = n.start_unix_ns + OffsetOf(host_offset_ns, n.host);
    for (const UtilSample& s : n.util.samples) t0 = std::min(t0, start + s.t_ns);
  }
  if (t0 == std::numeric_limits<int64_t>::max()) t0 = 0;

  json meta = json::array();
  json events = json::array();
  for (const Group& g : groups) AppendGroup(g, t0, &meta, &events, &sum);
  for (size_t i = 0; i < job.nodes.size(); ++i) {
    const NodeSamples& n = job.nodes[i];
    const int64_t pid = kNodePidBase + int64_t(i);
    meta.push_back(ProcessName(pid, (n.host.empty() ? n.dir : n.host) + " · GPUs and host"));
    meta.push_back({{"ph", "M"},
                    {"name", "process_sort_index"},
                    {"pid", pid},
                    {"args", {{"sort_index", next_sort++}}}});
    const int64_t start = n.start_unix_ns + OffsetOf(host_offset_ns, n.host);
    for (const UtilSample& s : n.util.samples) {
      AppendSampleEvents(s, pid, Micros(start + s.t_ns, t0), &events);
      ++sum.samples;
    }
    if (!n.util.samples.empty()) ++sum.nodes;
  }
  for (json& e : events) meta.push_back(std::move(e));
  return json{{"traceEvents", std::move(meta)}, {"displayTimeUnit", "ms"}};
}

Result<ExportSummary> ExportChromeTrace(const std::string& run_dir, const std::string& out_path,
                                        const std::map<std::string, int64_t>& host_offset_ns) {
  ExportSummary summary;
  json trace;
  if (IsJobDir(run_dir)) {
    SATURATE_ASSIGN_OR_RETURN(const JobTrace job, ReadJobTrace(run_dir));
    trace = ChromeJobTrace(job, host_offset_ns, &summary);
  } else {
    SATURATE_ASSIGN_OR_RETURN(const RunTrace run, ReadRunTrace(run_dir));
    trace = ChromeTrace(run, &summary);
  }
  SATURATE_RETURN_IF_ERROR(WriteFileAtomic(out_path, trace.dump() + "\n"));
  return summary;
}

}  // namespace saturate::trace
