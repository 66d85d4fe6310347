#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>

#include "doctor/analysis.h"
#include "doctor/testing/run_builder.h"

namespace saturate::doctor {
namespace {

using testing::Phase;
using testing::RunBuilder;

const PhaseShare* FindPhase(const Features& f, const std::string& name) {
  for (const PhaseShare& p : f.phases) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

// The GPU busy 1 s, then idle 0.5 s: nvidia-smi's 0 -> 99 -> 0.
TEST(FeaturesTest, FindsTheSawToothPeriodDespiteNoise) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> jitter(-4, 4);
  RunBuilder b;
  b.Gpus(1).Pause(30).Samples([&](double t, SamplePoint& s) {
    const bool idle = std::fmod(t, 1.5) >= 1.0;
    s.gpus[0].util_pct = idle ? std::max(0.0, 2 + jitter(rng)) : 95 + jitter(rng);
  });
  Features f = ComputeFeatures(b.Build());
  ASSERT_TRUE(f.idle_period_s.has_value());
  EXPECT_NEAR(*f.idle_period_s, 1.5, 0.11);
  ASSERT_TRUE(f.device_busy_pct.has_value());
  EXPECT_NEAR(*f.device_busy_pct, 64, 5);
  // 0.5 s gaps land in the (0.1, 0.5] bucket.
  EXPECT_GE(f.idle_gaps_s.counts[3], 18);
  EXPECT_EQ(f.interior_idle_gaps, 21);
  EXPECT_EQ(std::accumulate(f.idle_gaps_s.counts.begin(), f.idle_gaps_s.counts.end(), int64_t(0)),
            21);
  EXPECT_NEAR(f.interior_idle_s, 21 * 0.5, 1e-6);
  EXPECT_FALSE(f.device_busy_timeline.empty());
}

TEST(FeaturesTest, IrregularGapsHaveNoPeriod) {
  RunBuilder b;
  b.Gpus(1).Pause(30).Samples([](double t, SamplePoint& s) {
    // Gaps at 2, 3, 9, 10.5, 20 s.
    for (double start : {2.0, 3.0, 9.0, 10.5, 20.0}) {
      if (t >= start && t < start + 0.3) s.gpus[0].util_pct = 0;
    }
  });
  Features f = ComputeFeatures(b.Build());
  EXPECT_EQ(f.interior_idle_gaps, 5);
  EXPECT_FALSE(f.idle_period_s.has_value());
}

// The user's "data" phase wraps the loader's data_wait: the wait counts once,
// the rest of "data" is its own phase, and the shares add up to 100%.
TEST(FeaturesTest, StepPhasesSplitNestedSpansWithoutDoubleCounting) {
  RunBuilder b;
  b.Steps(21,
          {{"data", 0.10, SpanKind::kUser, "data_wait", 0.08},
           {"forward", 0.2},
           {"backward", 0.3},
           {"optimizer", 0.05}},
          /*gap_seconds=*/0.05);
  Features f = ComputeFeatures(b.Build());
  EXPECT_EQ(f.steps, 20);  // the first mark opens the window
  EXPECT_EQ(f.training_pid, RunBuilder::kPid);
  EXPECT_EQ(f.training_tid, RunBuilder::kTid);
  ASSERT_TRUE(f.step_time_median_s.has_value());
  EXPECT_NEAR(*f.step_time_median_s, 0.7, 1e-6);
  ASSERT_TRUE(f.data_wait_pct.has_value());
  EXPECT_NEAR(*f.data_wait_pct, 100 * 0.08 / 0.7, 0.01);
  EXPECT_NEAR(*f.data_wait_s, 20 * 0.08, 1e-6);
  EXPECT_NEAR(*f.compute_per_step_s, 0.62, 1e-6);
  ASSERT_NE(FindPhase(f, "data"), nullptr);
  EXPECT_NEAR(FindPhase(f, "data")->total_s, 20 * 0.02, 1e-6);
  ASSERT_NE(FindPhase(f, "other"), nullptr);
  EXPECT_NEAR(FindPhase(f, "other")->pct_of_steps, 100 * 0.05 / 0.7, 0.01);
  EXPECT_EQ(f.phases.front().name, "backward");  // largest first
  double sum = 0;
  for (const PhaseShare& p : f.phases) sum += p.pct_of_steps;
  EXPECT_NEAR(sum, 100, 1e-6);
  // No GPU: device busy is the step time outside data wait.
  EXPECT_NEAR(*f.device_busy_pct, 100 - 100 * 0.08 / 0.7, 0.01);
  EXPECT_FALSE(f.device_busy_timeline.empty());
  // Each data_wait is an idle gap (80 ms: the (0.05, 0.1] bucket).
  EXPECT_EQ(f.idle_gaps_s.counts[2], 21);
  EXPECT_NEAR(*f.idle_period_s, 0.7, 1e-6);
}

TEST(FeaturesTest, AUserDataPhaseIsTheWaitWithoutLoaderSpans) {
  RunBuilder b;
  b.Steps(11, {{"data", 0.3}, {"forward", 0.7}});
  Features f = ComputeFeatures(b.Build());
  EXPECT_NEAR(*f.data_wait_pct, 30, 1e-6);
}

TEST(FeaturesTest, WithoutADataPhaseTheWaitIsUnknown) {
  RunBuilder b;
  b.Steps(11, {{"forward", 0.3}, {"backward", 0.7}});
  Features f = ComputeFeatures(b.Build());
  EXPECT_TRUE(f.has_spans);
  EXPECT_FALSE(f.data_wait_pct.has_value());
  EXPECT_FALSE(f.device_busy_pct.has_value());
}

TEST(FeaturesTest, CopyAndCommPhases) {
  RunBuilder b;
  b.Steps(11, {{"h2d", 0.1}, {"forward", 0.5}, {"allreduce", 0.4}});
  Features f = ComputeFeatures(b.Build());
  EXPECT_NEAR(*f.copy_pct, 10, 1e-6);
  EXPECT_NEAR(*f.comm_pct, 40, 1e-6);
  EXPECT_NEAR(*f.comm_s, 10 * 0.4, 1e-6);
}

TEST(FeaturesTest, HostCoresSplitBetweenTreeAndOthers) {
  RunBuilder b;
  b.Cpus(8).Steps(11, {{"forward", 1}}).Samples([](double, SamplePoint& s) {
    s.cpu_busy_pct = 75;  // 6 of 8 cores
    s.tree_cpu_pct = 250;
    s.mem_available_bytes = s.mem_total_bytes / 10;
  });
  Features f = ComputeFeatures(b.Build());
  EXPECT_NEAR(*f.host_cpu_busy_pct, 75, 1e-9);
  EXPECT_NEAR(*f.tree_cpu_cores, 2.5, 1e-9);
  EXPECT_NEAR(*f.other_cpu_cores, 3.5, 1e-9);
  EXPECT_NEAR(*f.mem_headroom_pct, 10, 1e-9);
}

TEST(FeaturesTest, TheTrainingProcesssWaitForACpu) {
  RunBuilder b;
  b.Cpus(2).Steps(11, {{"forward", 1}}).Samples([](double t, SamplePoint& s) {
    s.tree_runq_wait_cores = 1.5;
    if (t < 3) return;                             // not yet measured
    s.members = {{RunBuilder::kPid + 1, 90, 0.9},  // a worker
                 {RunBuilder::kPid, t < 6 ? 100.0 : 140.0, t < 6 ? 0.4 : 0.6}};
  });
  Features f = ComputeFeatures(b.Build());
  EXPECT_NEAR(*f.tree_runq_wait_cores, 1.5, 1e-9);
  // Samples 3-12 s of the window 1-12 s: 30 at (1.0, 0.4), 60 at (1.4, 0.6) of 90.
  EXPECT_NEAR(*f.training_runq_wait_cores, (30 * 0.4 + 61 * 0.6) / 91, 0.01);
  EXPECT_NEAR(*f.training_cpu_cores, (30 * 1.0 + 61 * 1.4) / 91, 0.02);
}

TEST(FeaturesTest, SaturatesOwnThreadsAreNotTheTrainingsCompute) {
  RunBuilder b;
  b.Cpus(2).Steps(11, {{"forward", 1}}).Samples([](double, SamplePoint& s) {
    // A Loader's workers in the training process: 0.5 of its 0.7 waiting
    // threads and 0.8 of its 1.5 cores.
    s.members = {{RunBuilder::kPid, 150.0, 0.7, 0.5, 0.8}};
  });
  Features f = ComputeFeatures(b.Build());
  EXPECT_NEAR(*f.training_runq_wait_cores, 0.2, 1e-9);
  EXPECT_NEAR(*f.training_cpu_cores, 0.7, 1e-9);
}

TEST(FeaturesTest, LoaderCounters) {
  RunBuilder b;
  b.Steps(11, {{"data_wait", 0.5, SpanKind::kLoader}, {"forward", 0.5}})
      .Loader({{"batch_size", 64},
               {"threads", 4},
               {"prefetch", 2},
               {"samples", 1000},
               {"read_ns", 1'000'000'000},
               {"decode_ns", 3'000'000'000},
               {"transform_ns", 1'000'000'000}});
  Features f = ComputeFeatures(b.Build());
  EXPECT_EQ(f.loader_batch_size, 64);
  EXPECT_EQ(f.loader_threads, 4);
  EXPECT_NEAR(*f.loader_cpu_ns_per_sample, 5e6, 1e-3);
  EXPECT_NEAR(*f.loader_read_ns_per_sample, 1e6, 1e-3);
  // 5 s of loader CPU over the 12 s from its first span to the record.
  EXPECT_NEAR(*f.loader_busy_cores, 5.0 / 12.0, 1e-6);
}

TEST(FeaturesTest, OnlyCheckpointsOnTheTrainingThreadStall) {
  RunBuilder b;
  b.Steps(11, {{"forward", 1}});
  b.AddSpan("checkpoint", SpanKind::kCheckpoint, RunBuilder::kPid, RunBuilder::kTid, b.now_s(), 3);
  b.AddSpan("serialize", SpanKind::kCheckpoint, RunBuilder::kPid, RunBuilder::kTid, b.now_s(), 1);
  b.Pause(3).Steps(5, {{"forward", 1}});
  b.AddSpan("checkpoint", SpanKind::kCheckpoint, RunBuilder::kPid, 99, 2, 5);  // async writer
  Features f = ComputeFeatures(b.Build());
  EXPECT_EQ(f.checkpoints, 1);
  EXPECT_NEAR(*f.checkpoint_s, 3, 1e-9);
}

// Saves that begin within one step are one checkpoint (the files of one save);
// without step marks each separate save counts.
TEST(FeaturesTest, SavesWithinOneStepAreOneCheckpoint) {
  RunBuilder b;
  b.Steps(5, {{"forward", 1}});
  for (int i = 0; i < 2; ++i) {
    b.AddSpan("checkpoint", SpanKind::kCheckpoint, RunBuilder::kPid, RunBuilder::kTid, b.now_s(),
              0.5);
    b.AddSpan("checkpoint", SpanKind::kCheckpoint, RunBuilder::kPid, RunBuilder::kTid,
              b.now_s() + 0.6, 0.2);
    b.Pause(1).Steps(5, {{"forward", 1}});
  }
  Features f = ComputeFeatures(b.Build());
  EXPECT_EQ(f.checkpoints, 2);
  EXPECT_NEAR(*f.checkpoint_s, 2 * 0.7, 1e-9);

  RunBuilder unmarked;
  for (int i = 0; i < 3; ++i) {
    unmarked.AddSpan("forward", SpanKind::kUser, RunBuilder::kPid, RunBuilder::kTid, i * 2.0, 1);
    unmarked.AddSpan("checkpoint", SpanKind::kCheckpoint, RunBuilder::kPid, RunBuilder::kTid,
                     i * 2.0 + 1, 0.5);
  }
  f = ComputeFeatures(unmarked.Build());
  EXPECT_EQ(f.checkpoints, 3);
}

// A data-bound run with a save every 4 steps: the steps after the saves wait
// longer for data (the loader's spread, not the save's), with the same
// compute. The slowdown after the saves counts compute only: none here.
TEST(FeaturesTest, StepsAfterASaveLeaveTheirDataWaitOut) {
  RunBuilder b;
  b.Steps(4, {{"data_wait", 0.05, SpanKind::kLoader}, {"forward", 0.02}});
  for (int i = 0; i < 6; ++i) {
    b.AddSpan("checkpoint", SpanKind::kCheckpoint, RunBuilder::kPid, RunBuilder::kTid, b.now_s(),
              0.1);
    b.Pause(0.1)
        .Steps(3, {{"data_wait", 0.3, SpanKind::kLoader}, {"forward", 0.02}})
        .Steps(1, {{"data_wait", 0.05, SpanKind::kLoader}, {"forward", 0.02}});
  }
  Features f = ComputeFeatures(b.Build());
  EXPECT_EQ(f.checkpoints, 6);
  ASSERT_TRUE(f.checkpoint_after_s.has_value());
  EXPECT_NEAR(*f.checkpoint_after_s, 0, 1e-6);
}

TEST(FeaturesTest, GpuMemoryIdleAndThrottleShares) {
  RunBuilder b;
  b.Gpus(2).Pause(10).Samples([](double t, SamplePoint& s) {
    s.gpus[1].util_pct = 0;  // held idle
    s.gpus[0].memory_used_bytes = *s.gpus[0].memory_total_bytes / 100 * 97;
    if (t < 5) {
      s.gpus[0].clocks_event_reasons = {"sw_power_cap", "gpu_idle"};
      s.gpus[0].sm_clock_mhz = 1485;  // 25% below the 1980 seen otherwise
    }
  });
  Features f = ComputeFeatures(b.Build());
  ASSERT_EQ(f.gpu_busy_pct.size(), 2u);
  EXPECT_NEAR(f.gpu_busy_pct[0], 95, 1e-9);
  EXPECT_NEAR(f.gpu_idle_pct[1], 100, 1e-9);
  EXPECT_NEAR(*f.device_busy_pct, 47.5, 1e-9);
  EXPECT_NEAR(*f.gpu_memory_used_max_pct, 97, 0.01);
  EXPECT_NEAR(*f.throttled_pct, 100.0 * 50 / 121, 1e-9);  // t < 5 s of 0..12 s
  EXPECT_NEAR(*f.throttle_clock_loss_pct, 25, 0.01);
  EXPECT_EQ(f.throttle_reasons, std::vector<std::string>{"sw_power_cap"});
  // The idle GPU does not hide the used one: no gaps.
  EXPECT_EQ(f.interior_idle_gaps, 0);
}

TEST(FeaturesTest, ToJsonHasTheKeyFeatures) {
  RunBuilder b;
  b.Steps(3, {{"data", 0.2}, {"forward", 0.8}});
  nlohmann::json j = ComputeFeatures(b.Build()).ToJson();
  EXPECT_EQ(j["steps"], 2);
  EXPECT_NEAR(j["data_wait_pct"].get<double>(), 20, 1e-6);
  EXPECT_TRUE(j["host_cpu_busy_pct"].is_number());
  EXPECT_TRUE(j["idle_period_s"].is_null());
  EXPECT_GE(j["phases"].size(), 2u);
}

}  // namespace
}  // namespace saturate::doctor
