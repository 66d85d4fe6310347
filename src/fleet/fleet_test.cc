#include "fleet/fleet.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

namespace saturate::fleet {
namespace {

constexpr double kT0 = 1'800'000'000;  // unix seconds
constexpr double kStep = 60;

// A series of `n` samples every minute from kT0, value f(i).
Series Make(LabelSet labels, int n, const std::function<double(int)>& f, int from = 0) {
  Series s{std::move(labels), {}};
  for (int i = from; i < from + n; ++i) s.points.push_back({kT0 + i * kStep, f(i)});
  return s;
}

LabelSet Gpu(const std::string& host, const std::string& gpu, const std::string& job = "",
             const std::string& user = "") {
  LabelSet l = {{"Hostname", host}, {"gpu", gpu}, {"UUID", "GPU-" + host + "-" + gpu}};
  if (!job.empty()) l["job_id"] = job;
  if (!user.empty()) l["user"] = user;
  return l;
}

FleetInput Window(int minutes) {
  FleetInput in;
  in.start_s = kT0;
  in.end_s = kT0 + (minutes - 1) * kStep;
  in.step_s = kStep;
  return in;
}

std::vector<std::string> Kinds(const FleetReport& r, const std::string& job) {
  std::vector<std::string> out;
  for (const Finding& f : r.findings) {
    if (f.job == job) out.push_back(f.kind);
  }
  return out;
}

TEST(FleetTest, IdleSawtoothAndHealthyJobsAreToldApart) {
  FleetInput in = Window(120);
  for (const char* gpu : {"0", "1"}) {
    in.util.push_back(Make(Gpu("a", gpu, "101", "alice"), 120, [](int) { return 0.0; }));
    in.util.push_back(
        Make(Gpu("b", gpu, "102", "bob"), 120, [](int i) { return i % 2 ? 100.0 : 2.0; }));
    in.util.push_back(Make(Gpu("c", gpu, "103", "carol"), 120, [](int i) { return 88.0 + i % 5; }));
  }
  in.util.push_back(Make(Gpu("c", "2"), 120, [](int) { return 0.0; }));  // free
  FleetReport r = Analyze(in, FleetOptions{});

  ASSERT_EQ(r.jobs.size(), 3u);
  EXPECT_EQ(r.jobs[0].name, "101");              // most wasted first
  EXPECT_NEAR(r.jobs[0].idle_hours, 4.0, 1e-9);  // 2 GPUs x 120 min
  EXPECT_EQ(r.jobs[1].name, "102");
  EXPECT_NEAR(r.jobs[1].wait_hours, 2.0, 1e-9);  // half of 2 x 2 h
  EXPECT_EQ(r.jobs[2].name, "103");
  EXPECT_NEAR(r.jobs[2].wasted_hours(), 0, 1e-9);
  EXPECT_NEAR(r.jobs[2].busy_hours / r.jobs[2].hours, 0.90, 0.01);
  EXPECT_EQ(Kinds(r, "101"), std::vector<std::string>{"idle_allocation"});
  EXPECT_EQ(Kinds(r, "102"), std::vector<std::string>{"sawtooth"});
  EXPECT_TRUE(Kinds(r, "103").empty());
  EXPECT_EQ(r.findings[0].kind, "idle_allocation");
  EXPECT_NE(r.findings[0].message.find("job 101 (alice) held 2 GPUs idle"), std::string::npos)
      << r.findings[0].message;
  EXPECT_NE(r.findings[1].fix.find("saturate doctor"), std::string::npos);
  // The free GPU is the node's, not a job's.
  ASSERT_EQ(r.nodes.size(), 3u);
  EXPECT_EQ(r.nodes[2].name, "c");
  EXPECT_EQ(r.nodes[2].gpus, 3);
  EXPECT_NEAR(r.nodes[2].free_hours, 2.0, 1e-9);
  EXPECT_TRUE(r.gaps.empty());
}

TEST(FleetTest, ShortIdleStretchesAreNotIdleAllocation) {
  FleetInput in = Window(120);
  // Busy, with a 20-minute pause every hour (an evaluation): under 30 min.
  in.util.push_back(Make(Gpu("a", "0", "7"), 120, [](int i) { return i % 60 < 20 ? 0.0 : 95.0; }));
  FleetReport r = Analyze(in, FleetOptions{});
  ASSERT_EQ(r.jobs.size(), 1u);
  EXPECT_EQ(r.jobs[0].idle_hours, 0);
  EXPECT_TRUE(r.findings.empty()) << r.findings[0].message;  // and no saw-tooth: 4 flips
  FleetOptions strict;
  strict.idle_for_s = 15 * 60;
  EXPECT_NEAR(Analyze(in, strict).jobs[0].idle_hours, 40.0 / 60, 1e-9);
}

TEST(FleetTest, OverAllocationCountsTheUnusedGpus) {
  FleetInput in = Window(60);
  in.util.push_back(Make(Gpu("a", "0", "9", "dan"), 60, [](int) { return 97.0; }));
  for (const char* gpu : {"1", "2", "3"}) {
    // Not idle (a few % of stray kernels), but never used either.
    in.util.push_back(Make(Gpu("a", gpu, "9", "dan"), 60, [](int) { return 6.0; }));
  }
  FleetReport r = Analyze(in, FleetOptions{});
  ASSERT_EQ(r.jobs.size(), 1u);
  EXPECT_EQ(r.jobs[0].gpus, 4);
  EXPECT_EQ(r.jobs[0].used_gpus, 1);
  EXPECT_NEAR(r.jobs[0].unused_hours, 3.0, 1e-9);
  ASSERT_EQ(Kinds(r, "9"), std::vector<std::string>{"over_allocation"});
  EXPECT_NE(r.findings[0].message.find("holds 4 GPUs and uses 1"), std::string::npos);
  EXPECT_NE(r.findings[0].fix.find("--nproc_per_node=4"), std::string::npos);
}

TEST(FleetTest, MemoryHeadroomFromUsedAndFree) {
  FleetInput in = Window(30);
  in.util.push_back(Make(Gpu("a", "0", "5"), 30, [](int) { return 90.0; }));
  in.mem_used.push_back(Make(Gpu("a", "0", "5"), 30, [](int i) { return 10000.0 + i; }));
  in.mem_free.push_back(Make(Gpu("a", "0", "5"), 30, [](int i) { return 71920.0 - i; }));
  FleetReport r = Analyze(in, FleetOptions{});
  ASSERT_EQ(r.jobs.size(), 1u);
  EXPECT_NEAR(r.jobs[0].peak_mem_pct, 100.0 * 10029 / 81920, 1e-6);
  EXPECT_EQ(Kinds(r, "5"), std::vector<std::string>{"memory_headroom"});
  EXPECT_EQ(r.findings[0].wasted_gpu_hours, 0);
}

TEST(FleetTest, GapsAreSaidNotAveraged) {
  FleetInput in = Window(100);
  in.util.push_back(Make(Gpu("a", "0", "1"), 100, [](int) { return 90.0; }));
  // Node b's exporter was down for the first 60 minutes.
  in.util.push_back(Make(
      Gpu("b", "0", "2"), 40, [](int) { return 90.0; }, 60));
  in.up.push_back(Make({{"instance", "b:9400"}, {"job", "saturate"}}, 100,
                       [](int i) { return i < 60 ? 0.0 : 1.0; }));
  in.notes.push_back("Prometheus warned about `x`: partial response");
  FleetReport r = Analyze(in, FleetOptions{});
  ASSERT_EQ(r.gaps.size(), 3u);
  EXPECT_EQ(r.gaps[0], "Prometheus warned about `x`: partial response");
  EXPECT_NE(r.gaps[1].find("b: GPU samples for 40% of the window (longest gap 60 min"),
            std::string::npos)
      << r.gaps[1];
  EXPECT_NE(r.gaps[2].find("exporter b:9400 (scrape job saturate) was down for 60 min"),
            std::string::npos)
      << r.gaps[2];
  const std::string text = RenderText(r, "http://prom");
  EXPECT_NE(text.find("Missing or partial data"), std::string::npos);
}

TEST(FleetTest, OneGpuFromTwoExportersCountsOnce) {
  FleetInput in = Window(60);
  LabelSet dcgm = Gpu("a", "0", "3");
  dcgm["instance"] = "a:9400";
  LabelSet ours = Gpu("a", "0", "3");
  ours["instance"] = "a:9401";
  in.util.push_back(Make(dcgm, 60, [](int) { return 50.0; }));
  in.util.push_back(Make(ours, 59, [](int) { return 50.0; }));
  FleetReport r = Analyze(in, FleetOptions{});
  ASSERT_EQ(r.jobs.size(), 1u);
  EXPECT_NEAR(r.jobs[0].hours, 1.0, 1e-9);
  ASSERT_EQ(r.gaps.size(), 1u);
  EXPECT_NE(r.gaps[0].find("from 2 series (a:9400, a:9401): counted once"), std::string::npos)
      << r.gaps[0];
}

TEST(FleetTest, JobAndUserLabels) {
  EXPECT_EQ(JobOf({{"job_id", "4"}, {"hpc_job", "5"}}), "4");
  EXPECT_EQ(JobOf({{"hpc_job", "5"}}), "5");
  EXPECT_EQ(JobOf({{"pod", "train-0"}, {"namespace", "vision"}}), "vision/train-0");
  EXPECT_EQ(JobOf({{"run_id", "r1"}}), "r1");
  EXPECT_EQ(JobOf({{"job", "saturate"}}), "");  // the scrape job is not a training job
  EXPECT_EQ(UserOf({{"user", "eve"}}), "eve");
}

TEST(FleetTest, PresentationsEscapeAndPrice) {
  FleetInput in = Window(60);
  in.util.push_back(Make(Gpu("<b>node</b>", "0", "1&2", "o'neil"), 60, [](int) { return 0.0; }));
  FleetOptions o;
  o.gpu_hour_price = 2.5;
  FleetReport r = Analyze(in, o);
  const std::string html = RenderHtml(r, in, "http://prom?<x>");
  EXPECT_EQ(html.find("<b>node</b>"), std::string::npos);
  EXPECT_NE(html.find("&lt;b&gt;node&lt;/b&gt;"), std::string::npos);
  EXPECT_NE(html.find("1&amp;2"), std::string::npos);
  EXPECT_NE(html.find("<svg"), std::string::npos);
  nlohmann::json j = ReportJson(r);
  EXPECT_DOUBLE_EQ(j["jobs"][0]["cost"].get<double>(), 2.5);
  EXPECT_DOUBLE_EQ(j["jobs"][0]["wasted_cost"].get<double>(), 2.5);
  EXPECT_EQ(j["findings"][0]["kind"], "idle_allocation");
  EXPECT_NE(RenderText(r, "p").find("cost"), std::string::npos);
}

}  // namespace
}  // namespace saturate::fleet
