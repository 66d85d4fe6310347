#include "ranks/monitor.h"

#include <gtest/gtest.h>

namespace saturate::ranks {
namespace {

constexpr int64_t kS = 1'000'000'000;

RankProgress Rank(int rank, int64_t steps, int world = 2) {
  RankProgress r;
  r.rank = rank;
  r.world_size = world;
  r.host = "vm";
  r.pid = 4240 + rank;
  r.step_marks = steps;
  r.last_step = steps;
  r.last_step_unix_ns = steps * kS;
  r.file_bytes = uint64_t(100 + 80 * steps);
  r.stacks_path = "RUN/rank-" + std::to_string(rank) + "/stacks-" + std::to_string(r.pid) + ".txt";
  return r;
}

// Feeds the same observation every second from `from_s` to `to_s` (inclusive)
// and returns the events that were not kNone.
std::vector<MonitorEvent> Hold(ProgressMonitor* m, const std::vector<RankProgress>& ranks,
                               int from_s, int to_s) {
  std::vector<MonitorEvent> out;
  for (int t = from_s; t <= to_s; ++t) {
    MonitorEvent e = m->Update(ranks, t * kS);
    if (e.kind != MonitorEvent::Kind::kNone) out.push_back(std::move(e));
  }
  return out;
}

TEST(ProgressMonitorTest, HealthyProgressRaisesNothing) {
  ProgressMonitor m(60 * kS);
  for (int t = 0; t < 600; ++t) {
    // A slow job: one step every 40 s on each rank, slower than a scan.
    const int64_t steps = t / 40;
    EXPECT_EQ(m.Update({Rank(0, steps), Rank(1, steps)}, t * kS).kind, MonitorEvent::Kind::kNone)
        << t;
  }
  EXPECT_FALSE(m.stalled());
}

TEST(ProgressMonitorTest, NoAlertBeforeTheJobHasStepped) {
  // Loading data, compiling, or waiting for the rendezvous: no step yet, or
  // just one, is no progress to lose.
  ProgressMonitor m(60 * kS);
  EXPECT_TRUE(Hold(&m, {Rank(0, 0), Rank(1, 0)}, 0, 300).empty());
  EXPECT_TRUE(Hold(&m, {Rank(0, 1), Rank(1, 1)}, 301, 600).empty());
}

TEST(ProgressMonitorTest, NamesTheRankBehindTheOthersHung) {
  ProgressMonitor m(60 * kS);
  std::vector<RankProgress> ranks;
  for (int r = 0; r < 4; ++r) ranks.push_back(Rank(r, r == 3 ? 120 : 121, 4));
  EXPECT_TRUE(Hold(&m, ranks, 0, 59).empty());
  MonitorEvent e = m.Update(ranks, 60 * kS);
  ASSERT_EQ(e.kind, MonitorEvent::Kind::kStalled);
  EXPECT_TRUE(m.stalled());
  EXPECT_EQ(e.alert.kind, HangKind::kHung);
  EXPECT_EQ(e.alert.suspect_rank, 3);
  EXPECT_EQ(e.alert.basis, "steps");
  EXPECT_EQ(e.alert.stalled_ns, 60 * kS);
  EXPECT_EQ(e.message,
            "no rank has stepped for 60 s; rank 3 (host vm, pid 4243) stopped at step 120, the "
            "others at 121: it is hung; for its stack: kill -USR2 4243 on vm, then read "
            "RUN/rank-3/stacks-4243.txt");
}

TEST(ProgressMonitorTest, NamesARankThatExitedWhileTheOthersWaitDead) {
  ProgressMonitor m(60 * kS);
  std::vector<RankProgress> ranks = {Rank(0, 10), Rank(1, 10)};
  ranks[1].exited = true;
  ranks[1].alive = false;
  std::vector<MonitorEvent> events = Hold(&m, ranks, 0, 100);
  ASSERT_EQ(events.size(), 1u);
  const HangAlert& a = events[0].alert;
  EXPECT_EQ(a.kind, HangKind::kDead);
  EXPECT_EQ(a.suspect_rank, 1);
  EXPECT_EQ(a.basis, "exit");
  EXPECT_EQ(a.message,
            "no rank has stepped for 60 s; rank 1 (host vm, pid 4241) exited after step 10 while "
            "rank 0 waits (at step 10)");
}

TEST(ProgressMonitorTest, APidThatVanishedWithoutAnExitRecordIsDeadToo) {
  ProgressMonitor m(60 * kS);
  std::vector<RankProgress> ranks = {Rank(0, 12, 4), Rank(1, 11, 4), Rank(2, 12, 4),
                                     Rank(3, 12, 4)};
  ranks[1].alive = false;  // killed -9, or the OOM killer
  std::vector<MonitorEvent> events = Hold(&m, ranks, 0, 100);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].alert.kind, HangKind::kDead);
  EXPECT_EQ(events[0].alert.basis, "gone");
  EXPECT_EQ(events[0].alert.suspect_rank, 1);
  EXPECT_NE(events[0].message.find("rank 1 (host vm, pid 4241) is gone (no exit record: killed?) "
                                   "after step 11 while ranks 0, 2, 3 wait (at step 12)"),
            std::string::npos)
      << events[0].message;
}

TEST(ProgressMonitorTest, OneAlertPerStallThenRecoveryThenANewStall) {
  ProgressMonitor m(60 * kS);
  std::vector<RankProgress> ranks = {Rank(0, 50), Rank(1, 49)};
  std::vector<MonitorEvent> events = Hold(&m, ranks, 0, 900);  // 15 minutes stuck
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, MonitorEvent::Kind::kStalled);

  // Steps resume (a very long checkpoint, say).
  ranks = {Rank(0, 51), Rank(1, 51)};
  MonitorEvent e = m.Update(ranks, 901 * kS);
  ASSERT_EQ(e.kind, MonitorEvent::Kind::kRecovered);
  EXPECT_EQ(e.message, "steps resumed after 901 s (rank 0 at step 51)");
  EXPECT_FALSE(m.stalled());

  // Stuck again: a new alert, once.
  events = Hold(&m, ranks, 902, 1100);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, MonitorEvent::Kind::kStalled);
  EXPECT_EQ(events[0].alert.stalled_ns, 60 * kS);
  EXPECT_EQ(events[0].alert.kind, HangKind::kUnknown);
}

TEST(ProgressMonitorTest, WritingWithoutSteppingPostponesTheAlert) {
  // An evaluation pass: no optimizer steps, but spans keep arriving.
  ProgressMonitor m(60 * kS);
  std::vector<RankProgress> ranks = {Rank(0, 30), Rank(1, 30)};
  for (int t = 0; t <= 200; ++t) {
    for (RankProgress& r : ranks) r.file_bytes += 500;
    EXPECT_EQ(m.Update(ranks, t * kS).kind, MonitorEvent::Kind::kNone) << t;
  }
  // Then nothing at all: the alert counts from the last step.
  std::vector<MonitorEvent> events = Hold(&m, ranks, 201, 300);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].alert.stalled_ns, 260 * kS);
}

TEST(ProgressMonitorTest, RanksThatAllExitedAreEndingNotStalled) {
  ProgressMonitor m(60 * kS);
  std::vector<RankProgress> ranks = {Rank(0, 20), Rank(1, 20)};
  for (RankProgress& r : ranks) r.exited = true;
  EXPECT_TRUE(Hold(&m, ranks, 0, 300).empty());
}

TEST(ProgressMonitorTest, AllRanksAtTheSameStepSingleOutNobody) {
  ProgressMonitor m(60 * kS);
  std::vector<MonitorEvent> events = Hold(&m, {Rank(0, 7), Rank(1, 7)}, 0, 100);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].alert.kind, HangKind::kUnknown);
  EXPECT_EQ(events[0].alert.suspect_rank, -1);
  EXPECT_NE(events[0].message.find("all ranks stopped at step 7 and none exited"),
            std::string::npos)
      << events[0].message;
}

TEST(ProgressMonitorTest, ARankThatRecordedNothingIsTheSuspect) {
  ProgressMonitor m(60 * kS);
  // World of 3; rank 2 never wrote a spans file.
  std::vector<MonitorEvent> events = Hold(&m, {Rank(0, 9, 3), Rank(1, 9, 3)}, 0, 100);
  ASSERT_EQ(events.size(), 1u);
  const HangAlert& a = events[0].alert;
  ASSERT_EQ(a.ranks.size(), 3u);
  EXPECT_TRUE(a.ranks[2].missing);
  EXPECT_EQ(a.suspect_rank, 2);
  EXPECT_EQ(a.kind, HangKind::kHung);
  EXPECT_NE(a.message.find("rank 2 has recorded nothing while the others reached step 9"),
            std::string::npos)
      << a.message;
}

TEST(ProgressMonitorTest, ADisabledMonitorNeverFires) {
  ProgressMonitor m(0);
  EXPECT_TRUE(Hold(&m, {Rank(0, 5), Rank(1, 4)}, 0, 1000).empty());
}

// ---- stacks ---------------------------------------------------------------------------------

constexpr char kHungDump[] =
    "Thread 0x00007f5bb50066c0 (most recent call first):\n"
    "  File \"/usr/lib/python3.11/threading.py\", line 324 in wait\n"
    "  File \"/usr/lib/python3.11/threading.py\", line 1045 in _bootstrap_inner\n"
    "  File \"/usr/lib/python3.11/threading.py\", line 1002 in _bootstrap\n"
    "\n"
    "Current thread 0x00007f5bb5e4eb80 (most recent call first):\n"
    "  File \"/work/tests/ranks/hang_job.py\", line 41 in hang\n"
    "  File \"/work/tests/ranks/hang_job.py\", line 88 in main\n"
    "  File \"/work/tests/ranks/hang_job.py\", line 99 in <module>\n";

constexpr char kWaitingDump[] =
    "Current thread 0x00007f0000000001 (most recent call first):\n"
    "  File \"/venv/lib/python3.11/site-packages/torch/autograd/graph.py\", line 825 in "
    "_engine_run_backward\n"
    "  File \"/venv/lib/python3.11/site-packages/torch/autograd/__init__.py\", line 347 in "
    "backward\n"
    "  File \"/run/.auto/saturate_autotrace.py\", line 390 in backward\n"
    "  File \"/venv/lib/python3.11/site-packages/torch/_tensor.py\", line 581 in backward\n"
    "  File \"/work/tests/ranks/hang_job.py\", line 80 in main\n"
    "  File \"/work/tests/ranks/hang_job.py\", line 99 in <module>\n";

TEST(StackDumpTest, TakesTheMainThreadInnermostFirst) {
  std::vector<StackFrame> frames = ParseStackDump(kHungDump);
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(frames[0].file, "/work/tests/ranks/hang_job.py");
  EXPECT_EQ(frames[0].line, 41);
  EXPECT_EQ(frames[0].function, "hang");
  EXPECT_EQ(frames[2].function, "<module>");
  EXPECT_FALSE(WaitsInCollective(frames));
}

TEST(StackDumpTest, TheMainThreadNeedNotBeTheCurrentOne) {
  // The signal reached another thread: the main one is still the one whose
  // outermost frame is the module.
  const std::string dump =
      "Current thread 0x00007f5bb50066c0 (most recent call first):\n"
      "  File \"/usr/lib/python3.11/threading.py\", line 324 in wait\n"
      "  File \"/usr/lib/python3.11/threading.py\", line 1002 in _bootstrap\n"
      "\n"
      "Thread 0x00007f5bb5e4eb80 (most recent call first):\n"
      "  File \"/work/train.py\", line 5 in step\n"
      "  File \"/work/train.py\", line 9 in <module>\n";
  std::vector<StackFrame> frames = ParseStackDump(dump);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0].function, "step");
}

TEST(StackDumpTest, SkipsTheBootstrapKeepsAtMostMaxFramesAndTheLastDump) {
  const std::string two = std::string(kHungDump) + "\n" + kWaitingDump;
  std::vector<StackFrame> frames = ParseStackDump(two, 4);
  ASSERT_EQ(frames.size(), 4u);
  EXPECT_EQ(frames[0].function, "_engine_run_backward");
  EXPECT_EQ(frames[2].file, "/venv/lib/python3.11/site-packages/torch/_tensor.py");  // no autotrace
  EXPECT_TRUE(WaitsInCollective(frames));
  EXPECT_TRUE(ParseStackDump("").empty());
  EXPECT_TRUE(
      ParseStackDump("Thread 0x1 (most recent call first):\n  <no Python frame>\n").empty());
}

TEST(StackDumpTest, WaitsInCollectiveLooksAtTheInnermostFrame) {
  auto frames = [](std::string file, std::string function) {
    return std::vector<StackFrame>{{file, 1, function, ""}, {"/w/train.py", 2, "main", ""}};
  };
  EXPECT_TRUE(WaitsInCollective(
      frames("/v/site-packages/torch/distributed/distributed_c10d.py", "all_reduce")));
  EXPECT_TRUE(WaitsInCollective(frames("/v/site-packages/torch/distributed/c10d_logger.py", "w")));
  EXPECT_TRUE(WaitsInCollective(frames("/v/site-packages/torch/nn/parallel/distributed.py", "f")));
  EXPECT_TRUE(WaitsInCollective(frames("/v/site-packages/torch/_tensor.py", "backward")));
  EXPECT_FALSE(WaitsInCollective(frames("/v/site-packages/torch/_tensor.py", "item")));
  EXPECT_FALSE(WaitsInCollective(frames("/w/train.py", "hang")));
  EXPECT_FALSE(WaitsInCollective({}));
}

TEST(StackDumpTest, FormatFrameShortensThePath) {
  EXPECT_EQ(FormatFrame({"/v/lib/python3.11/site-packages/torch/autograd/graph.py", 825,
                         "_engine_run_backward", ""}),
            "torch/autograd/graph.py:825 in _engine_run_backward");
  EXPECT_EQ(FormatFrame({"/usr/lib/python3.11/threading.py", 324, "wait", ""}),
            "threading.py:324 in wait");
  EXPECT_EQ(FormatFrame({"/work/tests/ranks/hang_job.py", 41, "hang", "time.sleep(3600)"}),
            "hang_job.py:41 in hang: time.sleep(3600)");
}

TEST(AddStacksTest, StacksSingleOutTheRankNotInACollective) {
  // Both stopped at step 7: the steps cannot tell; the stacks can.
  HangAlert a = ClassifyStall({Rank(0, 7), Rank(1, 7)}, 62 * kS);
  ASSERT_EQ(a.kind, HangKind::kUnknown);
  std::vector<StackFrame> hung = ParseStackDump(kHungDump);
  hung[0].source = "time.sleep(3600)";
  AddStacks({{0, ParseStackDump(kWaitingDump)}, {1, hung}}, &a);
  EXPECT_EQ(a.kind, HangKind::kHung);
  EXPECT_EQ(a.suspect_rank, 1);
  EXPECT_EQ(a.basis, "stacks");
  EXPECT_EQ(a.message,
            "no rank has stepped for 62 s; rank 1 (host vm, pid 4241) is not in a collective "
            "while the others wait in one (at step 7): it is hung; its stack: "
            "RUN/rank-1/stacks-4241.txt\n"
            "  rank 1 (innermost first):\n"
            "    hang_job.py:41 in hang: time.sleep(3600)\n"
            "    hang_job.py:88 in main\n"
            "    hang_job.py:99 in <module>\n"
            "  rank 0: waits in _engine_run_backward (torch/autograd/graph.py:825), from "
            "hang_job.py:80 in main");
}

TEST(AddStacksTest, ADeadRankStaysTheSuspect) {
  std::vector<RankProgress> ranks = {Rank(0, 10), Rank(1, 10), Rank(2, 10)};
  ranks[2].exited = true;
  HangAlert a = ClassifyStall(ranks, 61 * kS);
  AddStacks({{0, ParseStackDump(kWaitingDump)}, {1, ParseStackDump(kHungDump)}}, &a);
  EXPECT_EQ(a.kind, HangKind::kDead);
  EXPECT_EQ(a.suspect_rank, 2);
  EXPECT_NE(a.message.find("\n  rank 1: in hang (hang_job.py:41), from hang_job.py:88 in main"),
            std::string::npos)
      << a.message;
}

TEST(AddStacksTest, SeveralRanksOutsideCollectivesKeepTheStepVerdict) {
  // NCCL: the waiting ranks block in .item(), not in a collective: no single
  // rank stands out, so the steps' verdict stays.
  HangAlert a = ClassifyStall({Rank(0, 8), Rank(1, 7), Rank(2, 8)}, 70 * kS);
  ASSERT_EQ(a.suspect_rank, 1);
  AddStacks({{0, ParseStackDump(kHungDump)}, {2, ParseStackDump(kHungDump)}}, &a);
  EXPECT_EQ(a.suspect_rank, 1);
  EXPECT_EQ(a.basis, "steps");
  EXPECT_NE(a.message.find("for its stack: kill -USR2 4241 on vm"), std::string::npos);
}

TEST(HangJsonTest, HoldsTheVerdictTheStacksAndTheRanks) {
  HangAlert a = ClassifyStall({Rank(0, 7), Rank(1, 7)}, 62 * kS);
  AddStacks({{0, ParseStackDump(kWaitingDump)}, {1, ParseStackDump(kHungDump)}}, &a);
  nlohmann::json j = HangJson(a, 1'700'000'000 * kS);
  EXPECT_EQ(j["t_unix_ns"], 1'700'000'000 * kS);
  EXPECT_DOUBLE_EQ(j["stalled_s"].get<double>(), 62.0);
  EXPECT_EQ(j["suspect_rank"], 1);
  EXPECT_EQ(j["kind"], "hung");
  EXPECT_EQ(j["basis"], "stacks");
  EXPECT_EQ(j["message"], a.message);
  EXPECT_EQ(j["stacks"]["1"][0], "hang_job.py:41 in hang");
  EXPECT_EQ(j["stacks"]["0"].size(), 5u);
  ASSERT_EQ(j["ranks"].size(), 2u);
  EXPECT_EQ(j["ranks"][1]["pid"], 4241);
  EXPECT_EQ(j["ranks"][1]["last_step"], 7);

  HangAlert none = ClassifyStall({Rank(0, 7), Rank(1, 7)}, 62 * kS);
  EXPECT_TRUE(HangJson(none, 0)["suspect_rank"].is_null());
  EXPECT_EQ(HangJson(none, 0)["kind"], "unknown");
}

}  // namespace
}  // namespace saturate::ranks
