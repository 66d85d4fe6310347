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
    if (auto it = j.find("auto"); it != j.end() && it->is_object()) e->auto_info = *it;
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
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) return Status::NotFound(run_dir + ": no such run directory");
  std::vector<std::string> names;
  for (const fs::directory_entry& entry : fs::directory_iterator(run_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("spans-") && name.ends_with(".jsonl")) names.push_back(name);
  }
  if (ec) return Status::IOError(run_dir + ": cannot list: " + ec.message());
  std::sort(names.begin(), names.end());

  RunTrace run;
  for (const std::string& name : names) {
    const std::string path = run_dir + "/" + name;
    SATURATE_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
    SATURATE_ASSIGN_OR_RETURN(SpansFile file, ParseSpansFile(text, path));
    if (file.torn_last_line) run.notes.push_back(path + ": skipped a torn last line");
    run.spans_files.push_back(std::move(file));
  }

  const std::string samples_path = run_dir + "/samples.jsonl";
  if (fs::exists(samples_path, ec)) {
    SATURATE_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(samples_path));
    SATURATE_ASSIGN_OR_RETURN(run.util, ParseUtilSamples(text, samples_path));
    if (run.util.torn_last_line) run.notes.push_back(samples_path + ": skipped a torn last line");
    const std::string meta_path = run_dir + "/meta.json";
    auto meta_text = ReadFileToString(meta_path);
    json meta = meta_text.ok() ? json::parse(*meta_text, nullptr, false) : json();
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
      switch (e.type) {
        case SpanFileEvent::Type::kMeta:
          process_names[e.pid] = e.comm.empty() ? "pid " + std::to_string(e.pid) : e.comm;
          break;
        case SpanFileEvent::Type::kSpan: {
          json x = {{"ph", "X"},
                    {"name", e.name},
                    {"cat", e.category},
                    {"pid", e.pid},
                    {"tid", e.tid},
                    {"ts", Micros(e.ts_ns, t0)},
                    {"dur", static_cast<double>(e.dur_ns) / 1000.0}};
          if (!e.args.empty()) x["args"] = e.args;
          for (const auto& [key, value] : e.labels) x["args"][key] = value;
          events.push_back(std::move(x));
          if (e.category == "loader" && e.name == "load_batch")
            loader_threads.emplace(e.pid, e.tid);
          ++sum.spans;
          break;
        }
        case SpanFileEvent::Type::kStep:
          events.push_back({{"ph", "i"},
                            {"s", "t"},
                            {"name", "step " + std::to_string(e.step)},
                            {"cat", "step"},
                            {"pid", e.pid},
                            {"tid", e.tid},
                            {"ts", Micros(e.ts_ns, t0)},
                            {"args", {{"step", e.step}}}});
          ++sum.steps;
          break;
        case SpanFileEvent::Type::kCounters:
          // Labelled counters (one per call site) get a track each.
          events.push_back({{"ph", "C"},
                            {"name", CounterTrackName(e)},
                            {"pid", e.pid},
                            {"tid", e.tid},
                            {"ts", Micros(e.ts_ns, t0)},
                            {"args", e.args}});
          ++sum.counters;
          break;
      }
    }
  }

  if (with_samples) {
    process_names[kWatchPid] = "saturate watch: host and GPUs";
    for (const UtilSample& s : run.util.samples) {
      const double ts = Micros(*run.start_monotonic_ns + s.t_ns, t0);
      if (s.host_cpu_pct) {
        events.push_back({{"ph", "C"},
                          {"name", "host cpu %"},
                          {"pid", kWatchPid},
                          {"ts", ts},
                          {"args", {{"busy", *s.host_cpu_pct}}}});
      }
      for (const auto& [index, util] : s.gpu_util) {
        events.push_back({{"ph", "C"},
                          {"name", GpuTrackName(index)},
                          {"pid", kWatchPid},
                          {"ts", ts},
                          {"args", {{"util", util}}}});
      }
      ++sum.samples;
    }
  }

  json meta = json::array();
  for (const auto& [pid, name] : process_names) {
    meta.push_back(
        {{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", name}}}});
  }
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

Result<ExportSummary> ExportChromeTrace(const std::string& run_dir, const std::string& out_path) {
  SATURATE_ASSIGN_OR_RETURN(const RunTrace run, ReadRunTrace(run_dir));
  ExportSummary summary;
  const json trace = ChromeTrace(run, &summary);
  SATURATE_RETURN_IF_ERROR(WriteFileAtomic(out_path, trace.dump() + "\n"));
  return summary;
}

}  // namespace saturate::trace
