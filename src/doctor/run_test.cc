#include "doctor/run.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "base/testing.h"

namespace saturate::doctor {
namespace {

using ::saturate::testing::HasError;
using ::saturate::testing::TempDir;

void Write(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

constexpr char kMeta[] = R"({"saturate_version": "0.1", "host": "box", "cpus": 8,
  "mem_total_bytes": 1000, "gpu_status": "1 GPU", "command": ["python", "train.py"],
  "gpus": [{"index": 0, "name": "H100", "memory_total_bytes": 500}],
  "start_unix_ns": 5000000000, "start_monotonic_ns": 1000000000, "interval_ns": 100000000,
  "end_unix_ns": 7000000000, "exit_code": 3})";

// One samples.jsonl line (the raw string's line breaks are removed).
std::string SampleLine(int64_t t_ns, double util_sampled) {
  std::string line =
      R"({"t_ns": )" + std::to_string(t_ns) +
      R"(, "host": {"cpu_busy_pct": 45.0, "cpu_iowait_pct": 2.5, "mem_available_bytes": 400,
          "mem_total_bytes": 1000, "disk_read_bytes_per_s": 1e6},
          "tree": {"cpu_pct": 180.0, "rss_bytes": 300, "runq_wait_cores": 0.75,
                   "members": [{"pid": 7, "cpu_pct": 150.0, "runq_wait_cores": 0.5,
                                "saturate_runq_wait_cores": 0.2, "saturate_cpu_cores": 0.7},
                               {"pid": 9, "cpu_pct": 30.0}, {"comm": "no pid"}]},
          "gpus": [{"index": 0, "util_pct": 97, "util_sampled_pct": )" +
      std::to_string(util_sampled) +
      R"(, "memory_used_bytes": 100, "memory_total_bytes": 500, "sm_clock_mhz": 1500,
          "clocks_event_reasons": ["sw_power_cap"]}, {"index": 1, "lost": true}]})";
  std::erase(line, '\n');
  return line;
}

// Spans on CLOCK_MONOTONIC, 1 s after the watch's start = 0 on the run axis.
constexpr char kSpans[] =
    R"({"ph":"M","pid":7,"comm":"python3","clock":"CLOCK_MONOTONIC"}
{"ph":"X","name":"forward","cat":"user","ts_ns":1300000000,"dur_ns":100,"pid":7,"tid":8,"args":{"k":1}}
{"ph":"X","name":"data_wait","cat":"loader","ts_ns":1200000000,"dur_ns":50,"pid":7,"tid":8}
{"ph":"step","step":1,"ts_ns":1400000000,"pid":7,"tid":8}
{"ph":"C","name":"loader","ts_ns":1500000000,"pid":7,"tid":9,"args":{"batch_size":32,"samples":64}}
{"ph":"C","name":"loader","ts_ns":1600000000,"pid":7,"tid":9,"args":{"batch_size":32,"samples":96}}
{"ph":"C","name":"loader_remote","ts_ns":1600000000,"pid":7,"tid":9,"args":{"remote_requests":5}}
{"ph":"C","name":"model","ts_ns":1600000000,"pid":7,"tid":8,"args":{"precision_bits":16}}
{"ph":"C","name":"loader_decode","ts_ns":1650000000,"pid":7,"tid":8,"args":{"gpu_decoded":40}}
{"ph":"C","name":"loader_decode","ts_ns":1550000000,"pid":7,"tid":10,"args":{"gpu_decoded":8}}
{"ph":"X","name":"save","cat":"checkpoint","ts_ns":1700000000,"dur_ns":10,"pid":7,"tid":8}
{"ph":"future","ts_ns":1}
)";

TEST(LoadRunTest, ReadsMetaSamplesAndSpans) {
  TempDir dir;
  Write(dir.Join("meta.json"), kMeta);
  Write(dir.Join("samples.jsonl"),
        SampleLine(200'000'000, 90.5) + "\n" + SampleLine(100'000'000, 80.0) + "\n");
  Write(dir.Join("spans-7.jsonl"), kSpans);
  SATURATE_ASSERT_OK_AND_ASSIGN(doctor::Run run, LoadRun(dir.path()));

  EXPECT_EQ(run.meta.dir, dir.path());
  EXPECT_EQ(run.meta.cpus, 8);
  EXPECT_EQ(run.meta.gpu_count, 1);
  ASSERT_EQ(run.meta.gpu_memory_total_bytes.size(), 1u);
  EXPECT_EQ(run.meta.gpu_memory_total_bytes[0], 500u);
  EXPECT_EQ(run.meta.command, (std::vector<std::string>{"python", "train.py"}));
  EXPECT_EQ(run.meta.duration_ns, 2'000'000'000);
  EXPECT_EQ(run.meta.exit_code, 3);

  ASSERT_EQ(run.samples.size(), 2u);
  EXPECT_EQ(run.samples[0].t_ns, 100'000'000);  // sorted
  const SamplePoint& s = run.samples[1];
  EXPECT_DOUBLE_EQ(s.cpu_busy_pct, 45.0);
  EXPECT_DOUBLE_EQ(s.cpu_iowait_pct, 2.5);
  EXPECT_EQ(s.mem_available_bytes, 400u);
  EXPECT_DOUBLE_EQ(s.disk_read_bytes_per_s, 1e6);
  EXPECT_EQ(s.tree_cpu_pct, 180.0);
  EXPECT_EQ(s.tree_rss_bytes, 300u);
  EXPECT_EQ(s.tree_runq_wait_cores, 0.75);
  ASSERT_EQ(s.members.size(), 2u);  // the member without a pid is left out
  EXPECT_EQ(s.members[0].pid, 7);
  EXPECT_EQ(s.members[0].cpu_pct, 150.0);
  EXPECT_EQ(s.members[0].runq_wait_cores, 0.5);
  EXPECT_EQ(s.members[0].saturate_runq_wait_cores, 0.2);
  EXPECT_EQ(s.members[0].saturate_cpu_cores, 0.7);
  EXPECT_FALSE(s.members[1].runq_wait_cores.has_value());
  EXPECT_EQ(s.members[1].saturate_cpu_cores, 0);  // no saturate threads
  ASSERT_EQ(s.gpus.size(), 2u);
  EXPECT_EQ(s.gpus[0].util_pct, 90.5);  // the sub-second samples win
  EXPECT_EQ(s.gpus[0].memory_used_bytes, 100u);
  EXPECT_EQ(s.gpus[0].sm_clock_mhz, 1500.0);
  EXPECT_EQ(s.gpus[0].clocks_event_reasons, std::vector<std::string>{"sw_power_cap"});
  EXPECT_TRUE(s.gpus[1].lost);

  ASSERT_EQ(run.spans.size(), 3u);
  EXPECT_EQ(run.spans[0].name, "data_wait");  // sorted by start
  EXPECT_EQ(run.spans[0].kind, SpanKind::kLoader);
  EXPECT_EQ(run.spans[0].start_ns, 200'000'000);  // on the run axis
  EXPECT_EQ(run.spans[1].name, "forward");
  EXPECT_EQ(run.spans[1].tid, 8);
  EXPECT_EQ(run.spans[1].dur_ns, 100);
  EXPECT_EQ(run.spans[1].args.at("k"), 1);
  EXPECT_EQ(run.spans[2].kind, SpanKind::kCheckpoint);
  EXPECT_EQ(run.step_marks_ns.at(7), std::vector<int64_t>{400'000'000});
  ASSERT_EQ(run.loaders.size(), 1u);
  EXPECT_EQ(run.loaders[0].pid, 7);
  EXPECT_EQ(run.loaders[0].values.at("samples"), 96);         // the last record
  EXPECT_EQ(run.loaders[0].values.at("remote_requests"), 5);  // merged into it
  EXPECT_EQ(run.counters.at("model").at("precision_bits"), 16);
  // Threads buffer their records apart: the latest record, not the file's last.
  EXPECT_EQ(run.counters.at("loader_decode").at("gpu_decoded"), 40);
  EXPECT_TRUE(run.warnings.empty());
}

TEST(LoadRunTest, FallsBackToUtilPctAndToTheLastEventForDuration) {
  TempDir dir;
  Write(dir.Join("meta.json"), R"({"cpus": 2, "start_monotonic_ns": 0})");
  Write(dir.Join("samples.jsonl"), R"({"t_ns": 100, "gpus": [{"index": 0, "util_pct": 42}]})"
                                   "\n"
                                   R"({"t_ns": 900})"
                                   "\n");
  SATURATE_ASSERT_OK_AND_ASSIGN(doctor::Run run, LoadRun(dir.path()));
  EXPECT_EQ(run.samples[0].gpus[0].util_pct, 42.0);
  EXPECT_FALSE(run.samples[1].tree_cpu_pct.has_value());
  EXPECT_EQ(run.meta.duration_ns, 900);
  EXPECT_FALSE(run.meta.exit_code.has_value());
}

TEST(LoadRunTest, SkipsATornLastLineWithAWarning) {
  TempDir dir;
  Write(dir.Join("meta.json"), kMeta);
  Write(dir.Join("samples.jsonl"), SampleLine(100, 1) + "\n" + R"({"t_ns": 2)");
  Write(dir.Join("spans-7.jsonl"), std::string(kSpans) + R"({"ph":"X","name":"forw)");
  SATURATE_ASSERT_OK_AND_ASSIGN(doctor::Run run, LoadRun(dir.path()));
  EXPECT_EQ(run.samples.size(), 1u);
  EXPECT_EQ(run.spans.size(), 3u);
  ASSERT_EQ(run.warnings.size(), 2u);
  EXPECT_NE(run.warnings[0].find("samples.jsonl: skipped a torn last line"), std::string::npos)
      << run.warnings[0];
  EXPECT_NE(run.warnings[1].find("spans-7.jsonl: skipped a torn last line"), std::string::npos)
      << run.warnings[1];
}

TEST(LoadRunTest, ABadLineInTheMiddleNamesFileAndLine) {
  TempDir dir;
  Write(dir.Join("meta.json"), kMeta);
  Write(dir.Join("samples.jsonl"), SampleLine(100, 1) + "\n{oops\n" + SampleLine(200, 1) + "\n");
  EXPECT_TRUE(HasError(LoadRun(dir.path()).status(), StatusCode::kCorruption,
                       {"samples.jsonl:2", "not a JSON object"}));
}

TEST(LoadRunTest, ASpanWithoutTimestampNamesFileAndLine) {
  TempDir dir;
  Write(dir.Join("meta.json"), kMeta);
  Write(dir.Join("spans-9.jsonl"), "{\"ph\":\"X\",\"name\":\"f\",\"dur_ns\":1}\n{\"ph\":\"M\"}\n");
  EXPECT_TRUE(HasError(LoadRun(dir.path()).status(), StatusCode::kCorruption,
                       {"spans-9.jsonl:1", "ts_ns"}));
}

TEST(LoadRunTest, MissingMetaIsNotFound) {
  TempDir dir;
  EXPECT_TRUE(
      HasError(LoadRun(dir.path()).status(), StatusCode::kNotFound, {dir.Join("meta.json")}));
}

// Spans recorded without saturate watch (SATURATE_RUN_DIR by hand,
// saturate.auto): the run starts at its first event and lasts to its last.
TEST(LoadRunTest, SpansWithoutMetaAreARunOfTheirOwn) {
  TempDir dir;
  Write(dir.Join("spans-7-auto.jsonl"),
        R"({"ph":"M","pid":7,"comm":"python3","source":"auto","auto":{}}
{"ph":"X","name":"data_wait","cat":"loader","ts_ns":5000000000,"dur_ns":100,"pid":7,"tid":7}
{"ph":"step","step":1,"ts_ns":5100000000,"pid":7,"tid":7}
{"ph":"step","step":2,"ts_ns":5300000000,"pid":7,"tid":7}
)");
  SATURATE_ASSERT_OK_AND_ASSIGN(doctor::Run run, LoadRun(dir.path()));
  EXPECT_EQ(run.meta.start_monotonic_ns, 5'000'000'000);
  EXPECT_EQ(run.meta.duration_ns, 300'000'000);
  EXPECT_EQ(run.spans.at(0).start_ns, 0);
  EXPECT_EQ(run.step_marks_ns.at(7), (std::vector<int64_t>{100'000'000, 300'000'000}));
  ASSERT_FALSE(run.warnings.empty());
  EXPECT_NE(run.warnings[0].find("recorded without saturate watch"), std::string::npos);
}

TEST(LoadRunTest, UnreadableMetaIsCorruption) {
  TempDir dir;
  Write(dir.Join("meta.json"), "{");
  EXPECT_TRUE(HasError(LoadRun(dir.path()).status(), StatusCode::kCorruption,
                       {"meta.json", "not valid JSON"}));
}

// The auto-instrumentation's file beside the trace library's: in a process
// that marks its own steps, its marks and inferred phases are dropped; in one
// that does not, they are the steps. Its counters become DataLoader configs
// and per-site host sync totals (the last cumulative record wins).
TEST(LoadRunTest, MergesAutoInstrumentationWithoutDoubleCounting) {
  TempDir dir;
  Write(dir.Join("meta.json"),
        R"({"cpus": 2, "start_monotonic_ns": 1000000000, "start_unix_ns": 1,
            "end_unix_ns": 3000000001, "auto_instrument": true})");
  Write(dir.Join("spans-7.jsonl"),
        R"({"ph":"M","pid":7,"comm":"python3"}
{"ph":"X","name":"forward","cat":"user","ts_ns":1100000000,"dur_ns":100,"pid":7,"tid":7}
{"ph":"step","step":1,"ts_ns":1200000000,"pid":7,"tid":7}
)");
  Write(
      dir.Join("spans-7-auto.jsonl"),
      R"json({"ph":"M","pid":7,"comm":"python3","source":"auto","auto":{"torch":"1.13.0","missing":{"copy":"AttributeError: x"}}}
{"ph":"X","name":"forward","cat":"user","ts_ns":1100000000,"dur_ns":90,"pid":7,"tid":7}
{"ph":"X","name":"host_sync","cat":"user","ts_ns":1150000000,"dur_ns":30000,"pid":7,"tid":7,"labels":{"site":"t.py:9","op":".item()","device":"cpu"}}
{"ph":"step","step":1,"ts_ns":1200000000,"pid":7,"tid":7}
{"ph":"C","name":"host_sync","ts_ns":1300000000,"pid":7,"tid":7,"args":{"count":1,"total_ns":30000,"max_ns":30000},"labels":{"site":"t.py:9","op":".item()","device":"cpu"}}
{"ph":"C","name":"host_sync","ts_ns":1400000000,"pid":7,"tid":7,"args":{"count":4,"total_ns":90000,"max_ns":30000,"steps":3,"intervals":5},"labels":{"site":"t.py:9","op":".item()","device":"cpu"}}
)json");
  Write(dir.Join("spans-8-auto.jsonl"),
        R"({"ph":"M","pid":8,"comm":"python3","source":"auto","auto":{"torch":"2.1.0","missing":{}}}
{"ph":"C","name":"dataloader","ts_ns":1000000000,"pid":8,"tid":8,"args":{"loader_id":0,"num_workers":0,"batch_size":32},"labels":{"site":"train.py:120","dataset":"ImageFolder"}}
{"ph":"X","name":"backward","cat":"user","ts_ns":1100000000,"dur_ns":100,"pid":8,"tid":8}
{"ph":"step","step":1,"ts_ns":1200000000,"pid":8,"tid":8}
{"ph":"step","step":2,"ts_ns":1300000000,"pid":8,"tid":8}
{"ph":"C","name":"autotrace","ts_ns":1400000000,"pid":8,"tid":8,"args":{"errors":2}}
)");
  SATURATE_ASSERT_OK_AND_ASSIGN(doctor::Run run, LoadRun(dir.path()));
  EXPECT_EQ(run.meta.auto_instrument, true);
  EXPECT_EQ(run.step_marks_ns.at(7).size(), 1u);  // not 2: its own marks win
  EXPECT_EQ(run.step_marks_ns.at(8).size(), 2u);  // only the auto marks
  int forwards = 0, syncs = 0;
  for (const Span& s : run.spans) {
    forwards += s.name == "forward";
    if (s.name == "host_sync") {
      ++syncs;
      EXPECT_TRUE(s.auto_source);
      EXPECT_EQ(s.labels.at("site"), "t.py:9");
    }
  }
  EXPECT_EQ(forwards, 1);
  EXPECT_EQ(syncs, 1);  // auto spans other than the phases stay
  ASSERT_EQ(run.host_syncs.size(), 1u);
  EXPECT_EQ(run.host_syncs[0].count, 4);
  EXPECT_EQ(run.host_syncs[0].total_ns, 90000);
  EXPECT_EQ(run.host_syncs[0].steps, 3);
  EXPECT_EQ(run.host_syncs[0].intervals, 5);
  EXPECT_EQ(run.host_syncs[0].op, ".item()");
  ASSERT_EQ(run.dataloaders.size(), 1u);
  EXPECT_EQ(run.dataloaders[0].site, "train.py:120");
  EXPECT_EQ(run.dataloaders[0].values.at("num_workers"), 0);
  ASSERT_EQ(run.auto_processes.size(), 2u);
  EXPECT_EQ(run.auto_processes[0].missing.at("copy"), "AttributeError: x");
  EXPECT_EQ(run.auto_processes[1].torch_version, "2.1.0");
  EXPECT_EQ(run.auto_processes[1].errors, 2);
}

}  // namespace
}  // namespace saturate::doctor
