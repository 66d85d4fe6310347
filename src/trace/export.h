// Reading a run directory's spans files, and turning them (with the metric
// samples beside them) into Chrome trace JSON for Perfetto or
// chrome://tracing: `saturate trace export RUN --chrome out.json`.
//
// Three layers, as in watch/procfs.h:
//  * Parsers: pure functions over the text of one file. A line that does not
//    parse is Corruption naming the file and line, except the last line of a
//    file, which a process killed mid-write may have left torn: it is skipped
//    and counted.
//  * Readers: find and read RUN/spans-*.jsonl, RUN/samples.jsonl and
//    RUN/meta.json; for a job (RUN/rank-<r>/ folders, docs/ranks.md), every
//    rank's spans files and every node's samples.
//  * ChromeTrace() and ChromeJobTrace(): pure functions from parsed events to
//    the trace JSON.
//
// Formats: docs/trace.md (spans) and docs/watch.md (samples, meta.json).
// Ownership: every type is a plain value. Thread-safety: all functions are
// reentrant.
#ifndef SATURATE_TRACE_EXPORT_H_
#define SATURATE_TRACE_EXPORT_H_

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "saturate/base/status.h"

namespace saturate::trace {

// One line of a spans file.
struct SpanFileEvent {
  enum class Type : uint8_t { kMeta, kSpan, kStep, kCounters };
  Type type = Type::kSpan;
  std::string name;      // spans and counters
  std::string category;  // spans: "user", "loader", "checkpoint"
  std::string comm;      // meta: the process's command name
  int64_t ts_ns = 0;     // CLOCK_MONOTONIC; 0 for a meta line without one
  int64_t dur_ns = 0;    // spans
  uint64_t step = 0;     // step marks
  int64_t pid = 0;
  int64_t tid = 0;
  nlohmann::json args = nlohmann::json::object();  // span args, counter values
  // Spans and counters: string annotations, e.g. {"site": "train.py:42",
  // "op": ".item()"} from the auto-instrumentation.
  std::map<std::string, std::string> labels;
  // Meta lines: who wrote the file ("auto": saturate_autotrace, else the
  // trace library) and the writer's own description of what it captured.
  std::string source;
  nlohmann::json auto_info;  // meta "auto" object, null when absent
  // Meta lines: CLOCK_REALTIME read with ts_ns (0 when absent), which places
  // the file's monotonic times on the wall clock; and, for one rank of a job,
  // {"rank", "local_rank", "world_size", "host", "launcher"} (docs/ranks.md).
  int64_t unix_ns = 0;
  nlohmann::json rank_info;
};

struct SpansFile {
  std::string source;  // the path, for messages
  std::vector<SpanFileEvent> events;
  bool torn_last_line = false;  // a last line that did not parse was skipped
};

// Parses the text of one spans-<pid>.jsonl file. Unknown "ph" values and
// unknown keys are ignored (newer writers); a line missing a key its "ph"
// needs is Corruption "SOURCE:LINE: ...".
Result<SpansFile> ParseSpansFile(std::string_view text, std::string_view source);

// One samples.jsonl line, reduced to what the trace shows.
struct UtilSample {
  int64_t t_ns = 0;                              // since the watch started
  std::optional<double> host_cpu_pct;            // host.cpu_busy_pct
  std::vector<std::pair<int, double>> gpu_util;  // (index, util_pct) of GPUs that have it
};

struct UtilSamples {
  std::vector<UtilSample> samples;
  bool torn_last_line = false;
};

// Parses samples.jsonl text (schema: docs/watch.md); same line rules as
// ParseSpansFile().
Result<UtilSamples> ParseUtilSamples(std::string_view text, std::string_view source);

// Everything the export reads from a run directory.
struct RunTrace {
  std::vector<SpansFile> spans_files;  // by file name
  UtilSamples util;                    // empty without samples.jsonl
  // meta.json's start_monotonic_ns: where samples' t_ns count from. Without
  // it samples cannot be placed on the spans' clock and are left out.
  std::optional<int64_t> start_monotonic_ns;
  std::vector<std::string> notes;  // what was skipped, for the user
};

// Reads RUN/spans-*.jsonl, and RUN/samples.jsonl with RUN/meta.json when
// present. NotFound when the directory has neither spans nor samples.
Result<RunTrace> ReadRunTrace(const std::string& run_dir);

// Counts of what went into a trace.
struct ExportSummary {
  size_t files = 0;
  size_t spans = 0;
  size_t steps = 0;
  size_t counters = 0;
  size_t samples = 0;
  size_t ranks = 0;  // a job's ranks with spans files (0 for a single run)
  size_t nodes = 0;  // a job's nodes with samples
  std::vector<std::string> notes;
};

// The Chrome trace ({"traceEvents": [...], "displayTimeUnit": "ms"}):
// spans as complete events (ph "X", ts/dur in microseconds), step marks as
// instant events "step N", counters records as counter events (ph "C"),
// process names as metadata, and, from the samples, counter tracks
// "host cpu %" and "gpu N util %" in a process of their own (kWatchPid).
// Times count from the earliest of the spans and the watch's start.
inline constexpr int64_t kWatchPid = 2147483646;
nlohmann::json ChromeTrace(const RunTrace& run, ExportSummary* summary = nullptr);

// ---- Jobs: many ranks, many nodes (docs/ranks.md) --------------------------

// The spans files of one rank, RUN/rank-<r>/spans-*.jsonl (its training
// process and the processes it forked); or, with rank -1, those beside the
// rank folders, of processes that are no rank (the launcher).
struct RankTrace {
  int rank = -1;
  std::string host;  // from the meta lines' "rank", task.json, or meta.json; may be empty
  std::vector<SpansFile> spans_files;  // by file name
};

// One node's samples: RUN/samples.jsonl (saturate wrapped the launcher),
// RUN/node-<host>/samples.jsonl (saturate ran inside each task), or those of
// a per-node run directory gathered under RUN.
struct NodeSamples {
  std::string host;
  std::string dir;  // for messages
  // meta.json's start_unix_ns: the wall-clock time the samples' t_ns count from.
  int64_t start_unix_ns = 0;
  UtilSamples util;
};

struct JobTrace {
  std::vector<RankTrace> ranks;    // by rank; only ranks with spans files
  std::vector<RankTrace> others;   // rank -1, one per directory that holds rank folders
  std::vector<NodeSamples> nodes;  // by host
  std::vector<std::string> notes;  // what was skipped, for the user
};

// Whether `run_dir` holds a job: a RUN/rank-<r>/ or RUN/*/rank-<r>/ folder.
bool IsJobDir(const std::string& run_dir);

// Reads a job: RUN/rank-<r>/ folders and the node samples at RUN/ or in
// RUN/node-<host>/, and the same in every RUN/*/ that holds rank folders
// (per-node run directories gathered under one parent). A rank folder
// without spans files, and samples without meta.json's start_unix_ns, are
// skipped with a note. NotFound when no rank has spans and no node samples.
Result<JobTrace> ReadJobTrace(const std::string& run_dir);

// Synthetic Chrome process ids of a job trace: ranks, then the processes of
// no rank, then the nodes. Stable: a rank's pid depends on its number alone.
inline constexpr int64_t kRankPidBase = 1000000;
inline constexpr int64_t kOtherPidBase = 1500000;
inline constexpr int64_t kNodePidBase = 2000000;

// A job as one Chrome trace on one time axis:
//  * one process per rank, "rank R · HOST" (pid kRankPidBase + R,
//    process_sort_index R), holding the spans, step marks and counters of
//    all its processes; threads keep their kernel tids and are named
//    "pid P tid T", so DataLoader workers stay apart; a counter written by
//    several processes of a rank gets a track per process (" · pid P");
//  * one process per directory of processes that are no rank, "not a rank
//    · HOST", sorted after the ranks;
//  * one process per node, "HOST · GPUs and host", sorted last, with the
//    "host cpu %" and "gpu N util %" tracks of its samples.
// A spans event sits at its wall-clock time ts_ns - meta.ts_ns + meta.unix_ns
// (the file's last meta line before it with both), a sample at
// meta.json's start_unix_ns + t_ns, each plus `host_offset_ns` of its host
// (nanoseconds added to that host's clock; hosts not named: 0). Events of a
// file before any meta line with unix_ns cannot be placed: left out, with a
// note. Times count from the earliest event.
nlohmann::json ChromeJobTrace(const JobTrace& job,
                              const std::map<std::string, int64_t>& host_offset_ns = {},
                              ExportSummary* summary = nullptr);

// ReadRunTrace + ChromeTrace, or for a job dir (IsJobDir) ReadJobTrace +
// ChromeJobTrace with `host_offset_ns`, written to `out_path` atomically.
Result<ExportSummary> ExportChromeTrace(const std::string& run_dir, const std::string& out_path,
                                        const std::map<std::string, int64_t>& host_offset_ns = {});

}  // namespace saturate::trace

#endif  // SATURATE_TRACE_EXPORT_H_
