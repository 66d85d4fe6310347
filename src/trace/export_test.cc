#include "trace/export.h"

#include <gtest/gtest.h>

#include <filesystem>

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

}  // namespace
}  // namespace saturate::trace
