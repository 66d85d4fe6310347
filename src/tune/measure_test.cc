#include "tune/measure.h"

#include <gtest/gtest.h>

#include <random>

#include "base/testing.h"

namespace saturate::tune {
namespace {

// A run of `steps` steps on pid 100: a slow start-up (2 s to the first
// step), then one step every `step_s` seconds with 5% jitter.
doctor::Run StepRun(int steps, double step_s, std::optional<int64_t> batch = std::nullopt) {
  doctor::Run run;
  run.meta.cpus = 8;
  run.meta.interval_ns = 100'000'000;
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> jitter(0.95, 1.05);
  int64_t t = 2'000'000'000;
  for (int i = 0; i < steps; ++i) {
    run.step_marks_ns[100].push_back(t);
    t += static_cast<int64_t>(step_s * 1e9 * jitter(rng));
  }
  run.step_marks_ns[200] = {t / 2};  // another process with one mark
  for (int64_t s = 0; s <= t; s += run.meta.interval_ns) {
    doctor::SamplePoint p;
    p.t_ns = s;
    p.cpu_busy_pct = 50;
    p.mem_total_bytes = 64ull << 30;
    p.mem_available_bytes = 32ull << 30;
    p.tree_cpu_pct = 150;
    p.tree_rss_bytes = (1ull << 30) + static_cast<uint64_t>(s / 1000);
    doctor::GpuPoint g;
    g.util_pct = 90;
    g.memory_used_bytes = (4ull << 30) + static_cast<uint64_t>(s);
    g.memory_total_bytes = 80ull << 30;
    p.gpus.push_back(g);
    run.samples.push_back(p);
  }
  run.meta.duration_ns = t;
  run.meta.gpu_count = 1;
  if (batch) {
    doctor::LoaderCounters l;
    l.pid = 100;
    l.values = {{"batch_size", *batch}, {"threads", 4}};
    run.loaders.push_back(l);
  }
  return run;
}

TEST(MeasureTest, StepsPerSecondAfterTheWarmup) {
  const doctor::Run run = StepRun(101, 0.05);
  const Measurement m = MeasureRun(run);
  EXPECT_EQ(m.steps, 101);
  EXPECT_EQ(m.unit, "steps/s");
  ASSERT_TRUE(m.throughput);
  EXPECT_NEAR(*m.throughput, 20.0, 0.5);  // the 2 s start-up is not counted
  EXPECT_EQ(m.measured_steps, 101 - 1 - 21);
  EXPECT_GT(m.noise_rel, 0);
  EXPECT_LT(m.noise_rel, 0.02);
  ASSERT_TRUE(m.device_busy_pct);
  EXPECT_NEAR(*m.device_busy_pct, 90, 1);
  ASSERT_TRUE(m.gpu_memory_peak_bytes);
  EXPECT_GT(*m.gpu_memory_peak_bytes, 4ull << 30);
  ASSERT_TRUE(m.rss_peak_bytes);
  EXPECT_GE(*m.rss_peak_bytes, 1ull << 30);
  ASSERT_TRUE(m.cpu_cores);
  EXPECT_NEAR(*m.cpu_cores, 1.5, 0.01);
}

TEST(MeasureTest, SamplesPerSecondWhenTheLoaderGivesTheBatch) {
  const Measurement m = MeasureRun(StepRun(50, 0.1, 64));
  EXPECT_EQ(m.unit, "samples/s");
  ASSERT_TRUE(m.batch_size);
  EXPECT_EQ(*m.batch_size, 64);
  EXPECT_NEAR(*m.throughput, 640, 20);
}

TEST(MeasureTest, TooFewStepsMeasureNothing) {
  EXPECT_FALSE(MeasureRun(StepRun(2, 0.1)).throughput);
  const Measurement none = MeasureRun(doctor::Run{});
  EXPECT_FALSE(none.throughput);
  EXPECT_EQ(none.steps, 0);
  EXPECT_FALSE(none.gpu_memory_peak_bytes);
}

TEST(MeasureTest, SteadyMetricSkipsTheWarmup) {
  EXPECT_FALSE(SteadyMetric({}));
  EXPECT_EQ(SteadyMetric({5})->value, 5);
  EXPECT_EQ(SteadyMetric({1, 7})->value, 7);
  // A slow first reading, then ~100 with noise.
  const auto v = SteadyMetric({10, 60, 99, 101, 100, 102, 98});
  ASSERT_TRUE(v);
  EXPECT_EQ(v->value, 100);
  EXPECT_GT(v->noise_rel, 0);
  EXPECT_LT(v->noise_rel, 0.02);
}

TEST(MeasureTest, MetricScannerReadsTheFirstGroupAcrossChunks) {
  SATURATE_ASSERT_OK_AND_ASSIGN(MetricScanner s, MetricScanner::Create("rate=([0-9.]+)"));
  s.Add("start\nrate=1");
  s.Add("2.5 it/s\nrate=oops\r rate=3 rate=4\n");
  s.Add("rate=5");
  EXPECT_EQ(s.values(), (std::vector<double>{12.5, 3, 4}));
  s.Finish();
  EXPECT_EQ(s.values(), (std::vector<double>{12.5, 3, 4, 5}));
  SATURATE_ASSERT_OK_AND_ASSIGN(MetricScanner whole, MetricScanner::Create("[0-9]+"));
  whole.Add("a 42\n");
  EXPECT_EQ(whole.values(), (std::vector<double>{42}));
  EXPECT_TRUE(testing::HasError(MetricScanner::Create("rate=(").status(),
                                StatusCode::kInvalidArgument, {"--metric"}));
}

}  // namespace
}  // namespace saturate::tune
