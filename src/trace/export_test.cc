#include "trace/export.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "base/file.h"
#include "base/testing.h"
#include "saturate/trace/trace.h"

namespace saturate::trace {
namespace {

using json = nlohmann::json;

constexpr char kSpans[] =
    R"({"ph":"M","pid":42,"comm":"python3","clock":"CLOCK_MONOTONIC"}
{"ph":"X","name":"forward","cat":"user","ts_ns":1000000,"dur_ns":2500,"pid":42,"tid":43}
{"ph":"X","name":"load_batch","cat":"loader","ts_ns":1001000,"dur_ns":500,"pid":42,"tid":44,"args":{"batch":3,"samples":32}}
{"ph":"step","step":7,"ts_ns":1004000,"pid":42,"tid":43}
{"ph":"C","name":"loader","ts_ns":1005000,"pid":42,"tid":43,"args":{"samples":96,"wait_ns":12}}
{"ph":"future","whatever":1}
)";

TEST(ParseSpansFileTest, ParsesEveryKind) {
  SATURATE_ASSERT_OK_AND_ASSIGN(SpansFile f, ParseSpansFile(kSpans, "spans-42.jsonl"));
  EXPECT_FALSE(f.torn_last_line);
  ASSERT_EQ(f.events.size(), 5u);  // the unknown "ph" is ignored
  EXPECT_EQ(f.events[0].type, SpanFileEvent::Type::kMeta);
  EXPECT_EQ(f.events[0].comm, "python3");
  EXPECT_EQ(f.events[1].type, SpanFileEvent::Type::kSpan);
  EXPECT_EQ(f.events[1].name, "forward");
  EXPECT_EQ(f.events[1].dur_ns, 2500);
  EXPECT_EQ(f.events[2].category, "loader");
  EXPECT_EQ(f.events[2].args["samples"], 32);
  EXPECT_EQ(f.events[3].type, SpanFileEvent::Type::kStep);
  EXPECT_EQ(f.events[3].step, 7u);
  EXPECT_EQ(f.events[4].type, SpanFileEvent::Type::kCounters);
  EXPECT_EQ(f.events[4].args["wait_ns"], 12);
}

// What the auto-instrumentation (saturate_autotrace.py) writes: a meta line
// saying so, and string labels beside the integer args.
TEST(ParseSpansFileTest, ReadsTheAutoSourceAndLabels) {
  constexpr char kAuto[] =
      R"json({"ph":"M","pid":7,"comm":"python","clock":"CLOCK_MONOTONIC","ts_ns":5,"unix_ns":9,"source":"auto","auto":{"torch":"2.1.0","missing":{"copy":"AttributeError"}}}
{"ph":"C","name":"host_sync","ts_ns":10,"pid":7,"tid":7,"args":{"count":3,"total_ns":90},"labels":{"site":"train.py:42","op":".item()"}}
{"ph":"X","name":"checkpoint","cat":"checkpoint","ts_ns":20,"dur_ns":5,"pid":7,"tid":7,"labels":{"site":"train.py:50"}}
)json";
  SATURATE_ASSERT_OK_AND_ASSIGN(SpansFile f, ParseSpansFile(kAuto, "spans-7-auto.jsonl"));
  ASSERT_EQ(f.events.size(), 3u);
  EXPECT_EQ(f.events[0].source, "auto");
  EXPECT_EQ(f.events[0].auto_info["torch"], "2.1.0");
  EXPECT_EQ(f.events[1].labels.at("site"), "train.py:42");
  EXPECT_EQ(f.events[1].labels.at("op"), ".item()");
  EXPECT_EQ(f.events[2].labels.at("site"), "train.py:50");

  auto bad = ParseSpansFile(
      R"({"ph":"X","name":"a","ts_ns":1,"dur_ns":1,"pid":1,"tid":1,"labels":{"site":3}})",
      "f.jsonl");
  EXPECT_TRUE(testing::HasError(bad.status(), StatusCode::kCorruption, {"f.jsonl:1", "site"}));
}

TEST(ParseSpansFileTest, SkipsATornLastLine) {
  const std::string text = std::string(kSpans) + R"({"ph":"X","name":"cut)";
  SATURATE_ASSERT_OK_AND_ASSIGN(SpansFile f, ParseSpansFile(text, "spans-42.jsonl"));
  EXPECT_TRUE(f.torn_last_line);
  EXPECT_EQ(f.events.size(), 5u);
}

TEST(ParseSpansFileTest, NamesTheFileAndLineOfABadLine) {
  const std::string text = "{\"ph\":\"M\",\"pid\":1}\nnot json\n{\"ph\":\"M\",\"pid\":1}\n";
  auto r = ParseSpansFile(text, "run/spans-1.jsonl");
  EXPECT_TRUE(testing::HasError(r.status(), StatusCode::kCorruption, {"run/spans-1.jsonl:2"}))
      << r.status().ToString();
  auto missing = ParseSpansFile(R"({"ph":"X","name":"a","ts_ns":1,"pid":1,"tid":1})", "f.jsonl");
  EXPECT_TRUE(
      testing::HasError(missing.status(), StatusCode::kCorruption, {"f.jsonl:1", "dur_ns"}));
  auto bad_arg =
      ParseSpansFile(R"({"ph":"C","name":"a","ts_ns":1,"pid":1,"tid":1,"args":{"x":"y"}})"
                     "\n",
                     "f.jsonl");
  EXPECT_TRUE(testing::HasError(bad_arg.status(), StatusCode::kCorruption, {"f.jsonl:1", "x"}));
}

TEST(ParseUtilSamplesTest, KeepsHostCpuAndGpuUtilization) {
  const std::string text =
      R"({"t_ns":0,"host":{"cpu_busy_pct":50.5},"gpus":[{"index":0,"util_pct":97},{"index":1,"lost":true}]}
{"t_ns":100000000,"host":{}}
{"t_ns":2)";
  SATURATE_ASSERT_OK_AND_ASSIGN(UtilSamples u, ParseUtilSamples(text, "samples.jsonl"));
  EXPECT_TRUE(u.torn_last_line);
  ASSERT_EQ(u.samples.size(), 2u);
  EXPECT_EQ(u.samples[0].host_cpu_pct, 50.5);
  ASSERT_EQ(u.samples[0].gpu_util.size(), 1u);
  EXPECT_EQ(u.samples[0].gpu_util[0], std::make_pair(0, 97.0));
  EXPECT_FALSE(u.samples[1].host_cpu_pct.has_value());
}

// The events named `name` of a Chrome trace.
std::vector<json> Named(const json& trace, const std::string& name) {
  std::vector<json> out;
  for (const json& e : trace["traceEvents"]) {
    if (e.value("name", "") == name) out.push_back(e);
  }
  return out;
}

TEST(ChromeTraceTest, ConvertsEventsAndAlignsSamples) {
  RunTrace run;
  SATURATE_ASSERT_OK_AND_ASSIGN(SpansFile f, ParseSpansFile(kSpans, "spans-42.jsonl"));
  run.spans_files.push_back(f);
  run.start_monotonic_ns = 500000;  // the watch started before the first span
  UtilSample s;
  s.t_ns = 1000000;  // 1 ms after the watch started
  s.host_cpu_pct = 25.0;
  s.gpu_util = {{1, 80.0}};
  run.util.samples.push_back(s);

  ExportSummary summary;
  const json trace = ChromeTrace(run, &summary);
  EXPECT_EQ(trace["displayTimeUnit"], "ms");
  EXPECT_EQ(summary.spans, 2u);
  EXPECT_EQ(summary.steps, 1u);
  EXPECT_EQ(summary.counters, 1u);
  EXPECT_EQ(summary.samples, 1u);

  // Times in microseconds from the earliest event: the watch's start.
  const json fwd = Named(trace, "forward").at(0);
  EXPECT_EQ(fwd["ph"], "X");
  EXPECT_DOUBLE_EQ(fwd["ts"].get<double>(), 500.0);
  EXPECT_DOUBLE_EQ(fwd["dur"].get<double>(), 2.5);
  EXPECT_EQ(fwd["pid"], 42);
  EXPECT_EQ(fwd["tid"], 43);
  EXPECT_EQ(fwd["cat"], "user");
  EXPECT_FALSE(fwd.contains("args"));
  EXPECT_EQ(Named(trace, "load_batch").at(0)["args"]["batch"], 3);

  const json step = Named(trace, "step 7").at(0);
  EXPECT_EQ(step["ph"], "i");
  EXPECT_DOUBLE_EQ(step["ts"].get<double>(), 504.0);

  const json loader = Named(trace, "loader").at(0);
  EXPECT_EQ(loader["ph"], "C");
  EXPECT_EQ(loader["args"]["samples"], 96);

  const json cpu = Named(trace, "host cpu %").at(0);
  EXPECT_EQ(cpu["ph"], "C");
  EXPECT_DOUBLE_EQ(cpu["ts"].get<double>(), 1000.0);
  EXPECT_EQ(cpu["args"]["busy"], 25.0);
  EXPECT_EQ(cpu["pid"], kWatchPid);
  EXPECT_EQ(Named(trace, "gpu 1 util %").at(0)["args"]["util"], 80.0);

  bool named_process = false, named_worker = false;
  for (const json& e : Named(trace, "process_name")) {
    named_process |= e["pid"] == 42 && e["args"]["name"] == "python3";
  }
  for (const json& e : Named(trace, "thread_name")) {
    named_worker |= e["tid"] == 44;
  }
  EXPECT_TRUE(named_process);
  EXPECT_TRUE(named_worker);
}

TEST(ChromeTraceTest, LeavesOutSamplesItCannotPlace) {
  RunTrace run;
  run.util.samples.push_back(UtilSample{0, 10.0, {}});
  ExportSummary summary;
  const json trace = ChromeTrace(run, &summary);
  EXPECT_EQ(summary.samples, 0u);
  EXPECT_TRUE(Named(trace, "host cpu %").empty());
}

TEST(ExportChromeTraceTest, ExportsARecordedRun) {
  testing::TempDir dir;
  const std::string run = dir.Join("run");
  SATURATE_ASSERT_OK(Start(run));
  { Phase p("forward"); }
  Step();
  SATURATE_ASSERT_OK(Stop());
  SATURATE_ASSERT_OK(WriteFileAtomic(run + "/meta.json", R"({"start_monotonic_ns": 1})"));
  SATURATE_ASSERT_OK(WriteFileAtomic(run + "/samples.jsonl",
                                     "{\"t_ns\":5,\"host\":{\"cpu_busy_pct\":1.5}}\n{\"t_"));

  const std::string out = dir.Join("trace.json");
  SATURATE_ASSERT_OK_AND_ASSIGN(ExportSummary summary, ExportChromeTrace(run, out));
  EXPECT_EQ(summary.files, 1u);
  EXPECT_EQ(summary.spans, 1u);
  EXPECT_EQ(summary.steps, 1u);
  EXPECT_EQ(summary.samples, 1u);
  ASSERT_EQ(summary.notes.size(), 1u);
  EXPECT_NE(summary.notes[0].find("samples.jsonl: skipped a torn last line"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(out + ".tmp"));
  SATURATE_ASSERT_OK_AND_ASSIGN(std::string text, ReadFileToString(out));
  const json trace = json::parse(text);
  EXPECT_EQ(Named(trace, "forward").size(), 1u);
}

TEST(ExportChromeTraceTest, SaysWhatIsMissing) {
  testing::TempDir dir;
  EXPECT_TRUE(testing::HasError(ExportChromeTrace(dir.Join("nope"), dir.Join("t.json")).status(),
                                StatusCode::kNotFound, {"nope", "no such run directory"}));
  EXPECT_TRUE(testing::HasError(ExportChromeTrace(dir.path(), dir.Join("t.json")).status(),
                                StatusCode::kNotFound, {"no spans-*.jsonl"}));
  SATURATE_ASSERT_OK(WriteFileAtomic(dir.Join("spans-1.jsonl"), "{}\n{\"ph\":\"M\",\"pid\":1}\n"));
  EXPECT_TRUE(testing::HasError(ExportChromeTrace(dir.path(), dir.Join("t.json")).status(),
                                StatusCode::kCorruption, {"spans-1.jsonl:1", "ph"}));
}

// ---- jobs: many ranks, many nodes ---------------------------------------------

// Writes `text` to `path`, creating its directory.
void Put(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  SATURATE_ASSERT_OK(WriteFileAtomic(path, text));
}

// The wall clock the job's files are written around: 1800000000 s.
constexpr int64_t kU = 1800000000000000000;

// Two ranks on two hosts whose monotonic clocks differ, rank 0 with a forked
// DataLoader worker, and node beta's samples in node-beta/ (whose meta.json
// names another host, as gethostname() may). Rank 0 meta: ts 1 s = kU; rank 1
// meta: ts 5 s = kU + 2 ms; node beta started at kU - 1 ms.
void WriteJob(const std::string& run) {
  const std::string rank0 =
      R"({"ph":"M","pid":100,"comm":"python","clock":"CLOCK_MONOTONIC","ts_ns":1000000000,"unix_ns":)" +
      std::to_string(kU) +
      R"(,"rank":{"rank":0,"local_rank":0,"world_size":2,"host":"alpha","launcher":"torchrun"}}
{"ph":"X","name":"forward","cat":"user","ts_ns":1001000000,"dur_ns":5000,"pid":100,"tid":100}
{"ph":"step","step":1,"ts_ns":1002000000,"pid":100,"tid":100}
{"ph":"C","name":"loader","ts_ns":1002000000,"pid":100,"tid":100,"args":{"samples":64}}
)";
  Put(run + "/rank-0/spans-100.jsonl", rank0);
  Put(run + "/rank-0/spans-101-auto.jsonl",
      R"({"ph":"M","pid":101,"comm":"pt_data_worker","ts_ns":1000500000,"unix_ns":)" +
          std::to_string(kU + 500000) + R"(,"rank":{"rank":0,"host":"alpha"}}
{"ph":"X","name":"load_batch","cat":"loader","ts_ns":1001500000,"dur_ns":900,"pid":101,"tid":101}
{"ph":"C","name":"loader","ts_ns":1001600000,"pid":101,"tid":101,"args":{"samples":32}}
{"ph":"X","name":"cu)");
  Put(run + "/rank-1/spans-200.jsonl",
      R"({"ph":"M","pid":200,"comm":"python","ts_ns":5000000000,"unix_ns":)" +
          std::to_string(kU + 2000000) + R"(,"rank":{"rank":1,"host":"beta"}}
{"ph":"X","name":"forward","cat":"user","ts_ns":5000500000,"dur_ns":7000,"pid":200,"tid":200}
)");
  std::filesystem::create_directories(run + "/rank-2");  // a rank that recorded nothing
  Put(run + "/node-beta/meta.json", R"({"host":"real-name","start_unix_ns":)" +
                                        std::to_string(kU - 1000000) +
                                        R"(,"start_monotonic_ns":7})");
  Put(run + "/node-beta/samples.jsonl",
      R"({"t_ns":0,"host":{"cpu_busy_pct":10},"gpus":[{"index":0,"util_pct":90}]}
{"t_ns":100000,"host":{"cpu_busy_pct":20}}
)");
}

// The event of process `pid` named `name`.
json EventOf(const json& trace, int64_t pid, const std::string& name) {
  for (const json& e : trace["traceEvents"]) {
    if (e.value("name", "") == name && e.value("pid", int64_t{-1}) == pid) return e;
  }
  return json();
}

// The value of the metadata event `what` ("process_name", ...) of `pid`.
json MetaArg(const json& trace, int64_t pid, const std::string& what, const std::string& key) {
  for (const json& e : Named(trace, what)) {
    if (e["pid"] == pid) return e["args"][key];
  }
  return json();
}

TEST(JobTraceTest, RecognizesJobDirectories) {
  testing::TempDir dir;
  std::filesystem::create_directories(dir.Join("single"));
  Put(dir.Join("single/spans-1.jsonl"), "{\"ph\":\"M\",\"pid\":1}\n");
  std::filesystem::create_directories(dir.Join("single/rank-x"));
  std::filesystem::create_directories(dir.Join("single/node-a/rank-0"));  // not a place for ranks
  EXPECT_FALSE(IsJobDir(dir.Join("single")));
  EXPECT_FALSE(IsJobDir(dir.Join("missing")));
  std::filesystem::create_directories(dir.Join("job/rank-3"));
  EXPECT_TRUE(IsJobDir(dir.Join("job")));
  std::filesystem::create_directories(dir.Join("gathered/n1/rank-0"));
  EXPECT_TRUE(IsJobDir(dir.Join("gathered")));
}

TEST(JobTraceTest, ReadsRanksAndNodes) {
  testing::TempDir dir;
  WriteJob(dir.path());
  SATURATE_ASSERT_OK_AND_ASSIGN(JobTrace job, ReadJobTrace(dir.path()));
  ASSERT_EQ(job.ranks.size(), 2u);
  EXPECT_EQ(job.ranks[0].rank, 0);
  EXPECT_EQ(job.ranks[0].host, "alpha");
  EXPECT_EQ(job.ranks[0].spans_files.size(), 2u);
  EXPECT_EQ(job.ranks[1].host, "beta");
  ASSERT_EQ(job.nodes.size(), 1u);
  EXPECT_EQ(job.nodes[0].host, "beta");  // the folder's name, as the ranks say it
  EXPECT_EQ(job.nodes[0].start_unix_ns, kU - 1000000);
  EXPECT_EQ(job.nodes[0].util.samples.size(), 2u);
  EXPECT_TRUE(job.others.empty());
  std::string notes;
  for (const std::string& n : job.notes) notes += n + "\n";
  EXPECT_NE(notes.find("spans-101-auto.jsonl: skipped a torn last line"), std::string::npos)
      << notes;
  EXPECT_NE(notes.find("rank-2: no spans-*.jsonl: rank 2 left out"), std::string::npos) << notes;
}

TEST(JobTraceTest, OneProcessPerRankAndPerNodeOnOneAxis) {
  testing::TempDir dir;
  WriteJob(dir.path());
  SATURATE_ASSERT_OK_AND_ASSIGN(JobTrace job, ReadJobTrace(dir.path()));
  ExportSummary summary;
  const json trace = ChromeJobTrace(job, {}, &summary);
  EXPECT_EQ(summary.ranks, 2u);
  EXPECT_EQ(summary.nodes, 1u);
  EXPECT_EQ(summary.files, 3u);
  EXPECT_EQ(summary.spans, 3u);
  EXPECT_EQ(summary.steps, 1u);
  EXPECT_EQ(summary.counters, 2u);
  EXPECT_EQ(summary.samples, 2u);

  const int64_t r0 = kRankPidBase, r1 = kRankPidBase + 1, node = kNodePidBase;
  EXPECT_EQ(MetaArg(trace, r0, "process_name", "name"), "rank 0 · alpha");
  EXPECT_EQ(MetaArg(trace, r1, "process_name", "name"), "rank 1 · beta");
  EXPECT_EQ(MetaArg(trace, node, "process_name", "name"), "beta · GPUs and host");
  EXPECT_EQ(MetaArg(trace, r0, "process_sort_index", "sort_index"), 0);
  EXPECT_EQ(MetaArg(trace, r1, "process_sort_index", "sort_index"), 1);
  EXPECT_EQ(MetaArg(trace, node, "process_sort_index", "sort_index"), 2);

  // Times from the earliest event, node beta's first sample at kU - 1 ms.
  EXPECT_DOUBLE_EQ(EventOf(trace, node, "host cpu %")["ts"].get<double>(), 0.0);
  EXPECT_EQ(EventOf(trace, node, "gpu 0 util %")["args"]["util"], 90.0);
  // Rank 0: 1 ms after its meta line (kU): 2000 µs.
  EXPECT_DOUBLE_EQ(EventOf(trace, r0, "forward")["ts"].get<double>(), 2000.0);
  EXPECT_DOUBLE_EQ(EventOf(trace, r0, "step 1")["ts"].get<double>(), 3000.0);
  // The worker's file has its own pair (ts 1.0005 s = kU + 0.5 ms): 1.0015 s is kU + 1.5 ms.
  EXPECT_DOUBLE_EQ(EventOf(trace, r0, "load_batch")["ts"].get<double>(), 2500.0);
  EXPECT_EQ(EventOf(trace, r0, "load_batch")["tid"], 101);
  // Rank 1: 0.5 ms after kU + 2 ms, on a monotonic clock 4 s ahead of rank 0's.
  const json fwd1 = EventOf(trace, r1, "forward");
  EXPECT_DOUBLE_EQ(fwd1["ts"].get<double>(), 3500.0);
  EXPECT_DOUBLE_EQ(fwd1["dur"].get<double>(), 7.0);
  EXPECT_EQ(fwd1["tid"], 200);

  // Threads named by process and thread; the loader counters of two processes apart.
  std::set<std::string> threads;
  for (const json& e : Named(trace, "thread_name")) {
    if (e["pid"] == r0) threads.insert(e["args"]["name"].get<std::string>());
  }
  EXPECT_EQ(threads,
            (std::set<std::string>{"pid 100 tid 100", "pid 101 tid 101 · saturate loader worker"}));
  EXPECT_EQ(EventOf(trace, r0, "loader · pid 100")["args"]["samples"], 64);
  EXPECT_EQ(EventOf(trace, r0, "loader · pid 101")["args"]["samples"], 32);
  // No real pid is a Chrome process of a job trace.
  for (const json& e : trace["traceEvents"]) EXPECT_GE(e["pid"].get<int64_t>(), kRankPidBase);
}

TEST(JobTraceTest, HostOffsetShiftsThatHostAlone) {
  testing::TempDir dir;
  WriteJob(dir.path());
  SATURATE_ASSERT_OK_AND_ASSIGN(JobTrace job, ReadJobTrace(dir.path()));
  auto ts = [](const json& trace, int64_t pid, const char* name) {
    return EventOf(trace, pid, name)["ts"].get<double>();
  };
  const int64_t r0 = kRankPidBase, r1 = kRankPidBase + 1, node = kNodePidBase;
  const json plain = ChromeJobTrace(job);
  const json other = ChromeJobTrace(job, {{"gamma", 5000000}});
  EXPECT_EQ(plain, other);
  // Beta's clock 3 ms ahead: its rank and its samples move 3 ms later; the
  // earliest event is now rank 0's forward.
  const json shifted = ChromeJobTrace(job, {{"beta", 3000000}});
  EXPECT_DOUBLE_EQ(ts(shifted, r0, "forward"), 0.0);
  EXPECT_DOUBLE_EQ(ts(shifted, r0, "load_batch"), 500.0);
  EXPECT_DOUBLE_EQ(ts(shifted, r1, "forward"), 4500.0);
  EXPECT_DOUBLE_EQ(ts(shifted, node, "host cpu %"), 1000.0);
  EXPECT_DOUBLE_EQ(ts(shifted, r1, "forward") - ts(shifted, r0, "forward"),
                   ts(plain, r1, "forward") - ts(plain, r0, "forward") + 3000.0);
}

TEST(JobTraceTest, EventsWithoutAWallClockAreLeftOutWithANote) {
  JobTrace job;
  RankTrace r;
  r.rank = 0;
  SATURATE_ASSERT_OK_AND_ASSIGN(SpansFile f, ParseSpansFile(kSpans, "rank-0/spans-42.jsonl"));
  r.spans_files.push_back(f);
  job.ranks.push_back(r);
  ExportSummary summary;
  const json trace = ChromeJobTrace(job, {}, &summary);
  EXPECT_EQ(summary.spans, 0u);
  ASSERT_EQ(summary.notes.size(), 1u);
  EXPECT_NE(summary.notes[0].find("rank-0/spans-42.jsonl: 4 events before a meta line"),
            std::string::npos)
      << summary.notes[0];
  EXPECT_EQ(MetaArg(trace, kRankPidBase, "process_name", "name"), "rank 0");
}

TEST(JobTraceTest, ReadsPerNodeRunDirectoriesGatheredUnderOneParent) {
  testing::TempDir dir;
  for (const char* host : {"alpha", "beta"}) {
    const std::string node = dir.Join(std::string("run-") + host);
    const int rank = host[0] == 'a' ? 0 : 1;
    Put(node + "/meta.json",
        R"({"host":")" + std::string(host) + R"(","start_unix_ns":)" + std::to_string(kU) + "}");
    Put(node + "/samples.jsonl", R"({"t_ns":1000,"host":{"cpu_busy_pct":5}})"
                                 "\n");
    Put(node + "/rank-" + std::to_string(rank) + "/spans-1.jsonl",
        R"({"ph":"M","pid":1,"ts_ns":10,"unix_ns":)" + std::to_string(kU) +
            R"(}
{"ph":"step","step":1,"ts_ns":2010,"pid":1,"tid":1}
)");
    Put(node + "/spans-9.jsonl",
        R"({"ph":"M","pid":9,"ts_ns":10,"unix_ns":)" + std::to_string(kU) + R"(}
{"ph":"X","name":"launch","ts_ns":10,"dur_ns":5,"pid":9,"tid":9}
)");
  }
  ASSERT_TRUE(IsJobDir(dir.path()));
  const std::string out = dir.Join("trace.json");
  SATURATE_ASSERT_OK_AND_ASSIGN(ExportSummary summary,
                                ExportChromeTrace(dir.path(), out, {{"beta", 1000}}));
  EXPECT_EQ(summary.ranks, 2u);
  EXPECT_EQ(summary.nodes, 2u);
  EXPECT_EQ(summary.files, 4u);
  SATURATE_ASSERT_OK_AND_ASSIGN(std::string text, ReadFileToString(out));
  const json trace = json::parse(text);
  // Rank hosts from meta.json of their run directory; the launchers are "not a rank".
  EXPECT_EQ(MetaArg(trace, kRankPidBase, "process_name", "name"), "rank 0 · alpha");
  EXPECT_EQ(MetaArg(trace, kRankPidBase + 1, "process_name", "name"), "rank 1 · beta");
  EXPECT_EQ(MetaArg(trace, kOtherPidBase, "process_name", "name"), "not a rank · alpha");
  EXPECT_EQ(MetaArg(trace, kOtherPidBase + 1, "process_sort_index", "sort_index"), 3);
  EXPECT_EQ(MetaArg(trace, kNodePidBase + 1, "process_name", "name"), "beta · GPUs and host");
  EXPECT_EQ(MetaArg(trace, kNodePidBase + 1, "process_sort_index", "sort_index"), 5);
  EXPECT_DOUBLE_EQ(EventOf(trace, kRankPidBase, "step 1")["ts"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(EventOf(trace, kRankPidBase + 1, "step 1")["ts"].get<double>(), 3.0);
  EXPECT_DOUBLE_EQ(EventOf(trace, kNodePidBase + 1, "host cpu %")["ts"].get<double>(), 2.0);
}

TEST(JobTraceTest, SaysWhenThereIsNothingToExport) {
  testing::TempDir dir;
  std::filesystem::create_directories(dir.Join("rank-0"));
  const auto r = ExportChromeTrace(dir.path(), dir.Join("t.json"));
  EXPECT_TRUE(testing::HasError(r.status(), StatusCode::kNotFound, {"no rank-<r>/spans-*.jsonl"}))
      << r.status().ToString();
}

}  // namespace
}  // namespace saturate::trace
