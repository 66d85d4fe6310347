#include "ranks/analysis.h"

#include <gtest/gtest.h>

#include "doctor/testing/run_builder.h"

namespace saturate::ranks {
namespace {

using doctor::SpanKind;
using doctor::testing::Phase;
using doctor::testing::RunBuilder;

// A DDP rank: its steps' phases (backward holds the all-reduce and the wait).
doctor::Run Rank(const std::vector<Phase>& phases, int steps = 20) {
  return RunBuilder().Counter("ddp", {{"grad_bytes", 1 << 20}}).Steps(steps, phases).Build();
}

Job JobOf(std::vector<doctor::Run> runs) {
  Job job;
  job.world_size = static_cast<int>(runs.size());
  job.hosts = {"a", "b"};
  job.clock.method = "collectives";
  for (size_t r = 0; r < runs.size(); ++r) {
    RankRun rr;
    rr.rank = static_cast<int>(r);
    rr.host = r < runs.size() / 2 ? "a" : "b";
    rr.run = std::move(runs[r]);
    job.ranks.push_back(std::move(rr));
  }
  return job;
}

// Two ranks that each ran `steps` steps of 100 ms from 1 s, then recorded nothing more.
std::vector<RankSteps> TwoRanksOfSteps(int steps) {
  std::vector<RankSteps> table(2);
  for (int r = 0; r < 2; ++r) {
    table[r].rank = r;
    for (int k = 0; k < steps; ++k)
      table[r].steps.push_back({.start_s = 1 + 0.1 * k, .dur_s = 0.1});
    table[r].last_event_s = 1 + 0.1 * steps;
  }
  return table;
}

const Phase kData{"data_wait", 0.005, SpanKind::kLoader};
const Phase kForward{"forward", 0.010};

TEST(StragglerTest, ASlowDataPathOnOneRankMakesTheOthersWait) {
  // Ranks 0-2 wait 40 ms a step in backward for rank 3, whose data takes 45 ms.
  const std::vector<Phase> fast = {kData, kForward, {"backward", 0.050}};
  const std::vector<Phase> slow = {
      {"data_wait", 0.045, SpanKind::kLoader}, kForward, {"backward", 0.010}};
  const Job job = JobOf({Rank(fast), Rank(fast), Rank(fast), Rank(slow)});
  const std::vector<RankSteps> table = StepTable(job);
  ASSERT_EQ(table.size(), 4u);
  ASSERT_EQ(table[0].steps.size(), 19u);  // the first mark opens the window
  EXPECT_NEAR(table[0].steps[3].wait_s, 0.040, 1e-6);
  EXPECT_NEAR(table[3].steps[3].wait_s, 0.0, 1e-9);

  const std::optional<Straggler> s = FindStraggler(table);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->rank, 3);
  EXPECT_EQ(s->reason, "data_wait");
  EXPECT_NEAR(s->others_wait_per_step_s, 0.040, 1e-6);
  EXPECT_NEAR(s->excess_per_step_s, 0.040, 1e-6);
  EXPECT_DOUBLE_EQ(s->wait_share, 1.0);
  EXPECT_NEAR(s->lost_s, 19 * 3 * 0.040 / 4, 1e-6);

  const std::vector<doctor::Finding> f = DiagnoseRanks(table, s, 10.0, 10.0, 0);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, "input_pipeline");
  EXPECT_NE(f[0].title.find("Straggler: rank 3 (b)"), std::string::npos) << f[0].title;
  EXPECT_NE(f[0].title.find("the other 3 ranks wait 40 ms a step"), std::string::npos);
  EXPECT_EQ(f[0].evidence[0].key, "straggler_rank");
  EXPECT_EQ(f[0].evidence[0].value, 3);

  const doctor::RanksView v = ViewOf(job, table, s);
  EXPECT_EQ(v.world_size, 4);
  EXPECT_EQ(v.straggler, 3);
  ASSERT_EQ(v.rows.size(), 4u);
  EXPECT_EQ(v.rows[1].step_s.size(), 19u);
  EXPECT_NEAR(v.rows[1].wait_s[5], 0.040, 1e-6);
}

TEST(StragglerTest, RankZeroCheckpointingIsRankZeroOnlyWork) {
  const std::vector<Phase> saver = {
      kData, kForward, {"backward", 0.010}, {"save", 0.060, SpanKind::kCheckpoint}};
  const std::vector<Phase> waiter = {kData, kForward, {"backward", 0.070}};
  const std::optional<Straggler> s =
      FindStraggler(StepTable(JobOf({Rank(saver), Rank(waiter), Rank(waiter)})));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->rank, 0);
  EXPECT_EQ(s->reason, "checkpoint");
  const std::vector<doctor::Finding> f =
      DiagnoseRanks(StepTable(JobOf({Rank(saver), Rank(waiter), Rank(waiter)})), s, 10, 10, 0);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, "checkpoint_stall");
  EXPECT_NE(f[0].title.find("Rank-0-only work"), std::string::npos) << f[0].title;
}

TEST(StragglerTest, UnevenBatchesAreNamedWhenTheStragglerGetsMoreElements) {
  const std::vector<Phase> even = {kData, kForward, {"backward", 0.060}};
  const std::vector<Phase> heavy = {kData, {"forward", 0.060}, {"backward", 0.010}};
  std::vector<doctor::Run> runs = {Rank(even), Rank(even), Rank(heavy)};
  for (size_t r = 0; r < runs.size(); ++r) {
    for (doctor::Span& span : runs[r].spans) {
      if (span.name == "data_wait") span.args["elems"] = r == 2 ? 3 * 512 : 512;
    }
  }
  const std::optional<Straggler> s = FindStraggler(StepTable(JobOf(std::move(runs))));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->rank, 2);
  EXPECT_EQ(s->reason, "uneven_batches");
  EXPECT_NEAR(s->elems_ratio, 3.0, 1e-9);
}

TEST(StragglerTest, BalancedRanksHaveNone) {
  const std::vector<Phase> same = {kData, kForward, {"backward", 0.020}};
  const std::vector<RankSteps> table = StepTable(JobOf({Rank(same), Rank(same), Rank(same)}));
  EXPECT_FALSE(FindStraggler(table));
  EXPECT_TRUE(DiagnoseRanks(table, std::nullopt, 10, 10, 0).empty());
}

TEST(StragglerTest, SmallJitterIsNotAStraggler) {
  // Each rank in turn comes last by 0.5 ms: no rank to name.
  std::vector<RankSteps> table(3);
  for (int r = 0; r < 3; ++r) {
    table[r].rank = r;
    for (int k = 0; k < 30; ++k) {
      table[r].steps.push_back({.dur_s = 0.1, .sync_s = (k % 3 == r) ? 0.02 : 0.0205});
    }
  }
  ComputeWaits(&table);
  EXPECT_FALSE(FindStraggler(table));
}

TEST(DeadRankTest, ARankThatLeftWhileTheOthersBlockedIsNamed) {
  std::vector<RankSteps> table = TwoRanksOfSteps(10);
  table[1].exit_s = 2.0;  // it left; rank 0 blocked until the job was stopped
  std::vector<doctor::Finding> f = DiagnoseRanks(table, std::nullopt, 30, 30, 1);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, "idle_allocation");
  EXPECT_FALSE(f[0].info);
  EXPECT_NE(f[0].title.find("rank 1 exited (through sys.exit"), std::string::npos) << f[0].title;
  EXPECT_NE(f[0].title.find("no progress for the last 28.0 s"), std::string::npos) << f[0].title;
  EXPECT_NEAR(f[0].time_lost_s, (30 - 2.0) / 2, 1e-9);
  // A job that ended well only ended slowly.
  EXPECT_TRUE(DiagnoseRanks(table, std::nullopt, 30, 30, 0).empty());
}

TEST(DeadRankTest, ARankThatLeftAndBrokeTheOthersConnectionsIsNamedWithoutAStall) {
  // Gloo: rank 0's all-reduce fails at once when rank 1 exits.
  std::vector<RankSteps> table = TwoRanksOfSteps(10);
  table[0].exit_s = 2.05;
  table[0].exception = "RuntimeError: Connection closed by peer [127.0.0.1]:1234";
  table[1].exit_s = 2.0;
  std::vector<doctor::Finding> f = DiagnoseRanks(table, std::nullopt, 3, 3, 1);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_TRUE(f[0].info);  // no stall to count, but the failure is named
  EXPECT_NE(f[0].title.find("rank 1 exited"), std::string::npos) << f[0].title;
  EXPECT_NE(f[0].title.find("the others then failed: RuntimeError: Connection closed by peer"),
            std::string::npos)
      << f[0].title;
  // A rank whose own exception ended the job is named over one killed by the launcher.
  table[1].exit_s.reset();
  table[0].exception = "ValueError: bad batch";
  f = DiagnoseRanks(table, std::nullopt, 3, 3, 1);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].title.find("rank 0 failed: ValueError: bad batch"), std::string::npos)
      << f[0].title;
}

TEST(DeadRankTest, AllRanksStoppedTogetherIsAHang) {
  std::vector<RankSteps> table = TwoRanksOfSteps(10);
  table[1].last_event_s -= 0.05;
  std::vector<doctor::Finding> f = DiagnoseRanks(table, std::nullopt, 60, 60, 137);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].title.find("rank 1 stopped first; the ranks hung"), std::string::npos)
      << f[0].title;
}

TEST(StepTableTest, AMissingRankGetsARowWithANote) {
  Job job = JobOf({Rank({kData, kForward, {"backward", 0.02}})});
  job.world_size = 2;
  const std::vector<RankSteps> table = StepTable(job);
  ASSERT_EQ(table.size(), 2u);
  EXPECT_EQ(table[1].note, "rank directory missing");
  EXPECT_TRUE(table[1].steps.empty());
}

}  // namespace
}  // namespace saturate::ranks

namespace saturate::ranks {
namespace {

TEST(CollectiveCostTest, TheLeastCollectiveTimePerStepIsTheTransfer) {
  std::vector<RankSteps> table(2);
  for (int r = 0; r < 2; ++r) {
    table[r].rank = r;
    for (int k = 0; k < 10; ++k) {
      // Rank 1 arrives 5 ms later each step: rank 0's extra 5 ms is waiting.
      const double coll = r == 0 ? 0.025 : 0.020;
      table[r].steps.push_back(
          {.dur_s = 0.1, .sync_s = coll, .collective_s = coll, .collective_bytes = 4 << 20});
    }
  }
  ComputeWaits(&table);
  const std::optional<CollectiveCost> c = CollectiveCostOf(table);
  ASSERT_TRUE(c);
  EXPECT_NEAR(c->per_step_s, 0.020, 1e-12);
  EXPECT_NEAR(c->pct_of_step, 20, 1e-9);
  EXPECT_NEAR(c->total_s, 0.2, 1e-12);
  EXPECT_EQ(c->bytes_per_step, 4 << 20);
  const std::vector<doctor::Finding> f = DiagnoseRanks(table, std::nullopt, 10, 10, 0);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].cause, "communication");
  EXPECT_NE(f[0].title.find("Collectives take 20 ms a step (20% of it)"), std::string::npos)
      << f[0].title;
  EXPECT_NE(f[0].fix.find("no_sync()"), std::string::npos);
}

TEST(StragglerTest, RankZerosOwnExtraWorkIsRankZeroOnlyWork) {
  const std::vector<Phase> logger = {kData, {"forward", 0.050}, {"backward", 0.010}};
  const std::vector<Phase> waiter = {kData, kForward, {"backward", 0.050}};
  const std::vector<RankSteps> table = StepTable(JobOf({Rank(logger), Rank(waiter)}));
  const std::optional<Straggler> s = FindStraggler(table);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->rank, 0);
  EXPECT_EQ(s->reason, "compute");
  const std::vector<doctor::Finding> f = DiagnoseRanks(table, s, 10, 10, 0);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].title.find("Rank-0-only work: rank 0 (a) spends longer"), std::string::npos)
      << f[0].title;
}

}  // namespace
}  // namespace saturate::ranks

namespace saturate::ranks {
namespace {

TEST(DeadRankTest, WhatWatchSawLiveNamesTheHungRank) {
  // Rank 1 hung; rank 0 timed out waiting for it; the launcher killed rank 1.
  std::vector<RankSteps> table = TwoRanksOfSteps(8);
  table[0].exit_s = 27;
  table[0].exception = "RuntimeError: Timed out waiting 25000ms for recv operation to complete";
  LiveHang hang{.suspect_rank = 1,
                .kind = "hung",
                .stalled_s = 3,
                .suspect_stack = {"hang_job.py:27 in hang: time.sleep(3600)"}};
  const std::vector<doctor::Finding> f = DiagnoseRanks(table, std::nullopt, 28, 28, 1, hang);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].title.find("rank 1 hung (seen while the job ran, at hang_job.py:27 in hang"),
            std::string::npos)
      << f[0].title;
  // Without it, the timed-out rank is a victim, and the one killed without a record is named.
  const std::vector<doctor::Finding> g = DiagnoseRanks(table, std::nullopt, 28, 28, 1);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_NE(g[0].title.find("rank 1 died without exiting"), std::string::npos) << g[0].title;
}

}  // namespace
}  // namespace saturate::ranks

namespace saturate::ranks {
namespace {

TEST(DeadRankTest, ARankThatFinishedWithTheOthersDidNotStopTheJob) {
  // Every rank took its 10 steps; rank 2 crashed in native teardown after its
  // exit handlers, and the launcher killed the others: no rank left early.
  std::vector<RankSteps> table = TwoRanksOfSteps(10);
  table.push_back(table[1]);
  table[2].rank = 2;
  table[2].exit_s = 2.0;
  EXPECT_TRUE(DiagnoseRanks(table, std::nullopt, 3, 3, 1).empty());
}

}  // namespace
}  // namespace saturate::ranks

namespace saturate::ranks {
namespace {

TEST(StepTableTest, TheGpuIsWhereTheRanksCopiesWent) {
  doctor::Run run =
      RunBuilder()
          .Steps(5, {kData, kForward})
          .AddSpan("copy", SpanKind::kUser, RunBuilder::kPid, RunBuilder::kTid, 1.0, 0.001)
          .Build();
  for (doctor::Span& s : run.spans) {
    if (s.name == "copy") s.args["gpu"] = 1;
  }
  Job job = JobOf({std::move(run)});
  job.ranks[0].cuda_visible_devices = "2,3";
  EXPECT_EQ(StepTable(job)[0].gpu, "cuda:1 (CUDA_VISIBLE_DEVICES=2,3)");
  EXPECT_EQ(StepTable(JobOf({Rank({kData, kForward})}))[0].gpu, "");  // no copies: CPU
}

}  // namespace
}  // namespace saturate::ranks

namespace saturate::ranks {
namespace {

TEST(StragglerTest, OtherWorkOnTheStragglersNodeIsTheHost) {
  // Rank 2 computes 40 ms longer; its node is busy with 5 cores of other work.
  auto rank = [](const std::vector<Phase>& phases, double busy_pct) {
    return RunBuilder()
        .Counter("ddp", {{"grad_bytes", 1 << 20}})
        .Samples([busy_pct](double, doctor::SamplePoint& s) { s.cpu_busy_pct = busy_pct; })
        .Steps(20, phases)
        .Build();
  };
  const std::vector<Phase> fast = {kData, kForward, {"backward", 0.050}};
  const std::vector<Phase> slow = {kData, {"forward", 0.050}, {"backward", 0.010}};
  // 16 cores, the job's tree at 4: 30% busy leaves 0.8 cores to others, 56% leaves 5.
  const std::vector<RankSteps> table =
      StepTable(JobOf({rank(fast, 30), rank(fast, 30), rank(slow, 56.25)}));
  ASSERT_TRUE(table[2].host_other_cores);
  EXPECT_NEAR(*table[2].host_other_cores, 5.0, 1e-9);
  const std::optional<Straggler> s = FindStraggler(table);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->rank, 2);
  EXPECT_EQ(s->reason, "host");
  EXPECT_NEAR(s->host_other_cores, 4.2, 1e-9);
  const std::vector<doctor::Finding> f = DiagnoseRanks(table, s, 10, 10, 0);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].title.find("other work on its node takes 4.2 cores more"), std::string::npos)
      << f[0].title;
}

}  // namespace
}  // namespace saturate::ranks
