#include "ranks/job.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/testing.h"

namespace saturate::ranks {
namespace {

using json = nlohmann::json;
constexpr int64_t kS = 1'000'000'000;

TEST(AlignClocksTest, OneHostNeedsNoAlignment) {
  ClockAlignment a = AlignClocks({{0, "a", {10, 20, 30}}, {1, "a", {11, 21, 31}}}, "collectives");
  EXPECT_EQ(a.method, "one host");
  EXPECT_EQ(a.host_offset_ns.at("a"), 0);
}

TEST(AlignClocksTest, HostsAreShiftedOntoTheFirstRanksHost) {
  // Host b's clock reads 40 s ahead; its ranks leave each collective within
  // a few microseconds of host a's.
  std::vector<SyncEnds> ranks = {{0, "a", {}}, {1, "a", {}}, {2, "b", {}}, {3, "b", {}}};
  for (int k = 0; k < 20; ++k) {
    const int64_t t = k * 50'000'000;
    ranks[0].end_ns.push_back(t);
    ranks[1].end_ns.push_back(t + 3'000);
    ranks[2].end_ns.push_back(t + 40 * kS + 5'000);
    ranks[3].end_ns.push_back(t + 40 * kS + 2'000);
  }
  ClockAlignment a = AlignClocks(ranks, "collectives");
  EXPECT_EQ(a.method, "collectives");
  EXPECT_EQ(a.events, 20);
  EXPECT_EQ(a.host_offset_ns.at("a"), 0);
  EXPECT_NEAR(double(a.host_offset_ns.at("b")), -40.0 * kS, 10'000);
  EXPECT_LT(a.residual_skew_ns, 10'000);
}

TEST(AlignClocksTest, NoSharedSyncPointsMeansNoCorrection) {
  ClockAlignment a = AlignClocks({{0, "a", {}}, {1, "b", {}}}, "none");
  EXPECT_EQ(a.method, "none");
  EXPECT_EQ(a.host_offset_ns.at("b"), 0);
}

// A spans file of one rank: a meta line with the clock pair, then `spans`.
void WriteRank(const std::string& dir, int rank, int world, const std::string& host, int64_t mono0,
               int64_t unix0, const std::vector<json>& events) {
  std::filesystem::create_directories(dir);
  std::ofstream f(dir + "/spans-" + std::to_string(100 + rank) + "-auto.jsonl");
  json meta = {{"ph", "M"},
               {"pid", 100 + rank},
               {"ts_ns", mono0},
               {"unix_ns", unix0},
               {"source", "auto"},
               {"auto", json::object()},
               {"rank",
                {{"rank", rank},
                 {"local_rank", 0},
                 {"world_size", world},
                 {"host", host},
                 {"launcher", "torchrun"}}}};
  f << meta.dump() << "\n";
  for (const json& e : events) f << e.dump() << "\n";
}

std::vector<json> Training(int pid, int64_t mono0, int steps) {
  std::vector<json> out;
  for (int k = 0; k < steps; ++k) {
    const int64_t t = mono0 + (k + 1) * 100'000'000;
    out.push_back({{"ph", "X"},
                   {"name", "all_reduce"},
                   {"cat", "user"},
                   {"ts_ns", t - 20'000'000},
                   {"dur_ns", 10'000'000},
                   {"pid", pid},
                   {"tid", pid},
                   {"args", {{"async_op", 0}}}});
    out.push_back({{"ph", "step"}, {"step", k + 1}, {"ts_ns", t}, {"pid", pid}, {"tid", pid}});
  }
  return out;
}

TEST(LoadJobTest, MergesRanksOfTwoHostsOntoOneAxis) {
  testing::TempDir dir;
  const int64_t unix0 = 1'800'000'000 * kS;
  json meta = {{"host", "a"},
               {"start_unix_ns", unix0},
               {"start_monotonic_ns", 5 * kS},
               {"interval_ns", 100'000'000},
               {"saturate_version", "0.1.0"},
               {"command", {"torchrun"}}};
  std::ofstream(dir.Join("meta.json")) << meta.dump();
  // Rank 0 on host a; rank 1 on host b, whose monotonic clock is unrelated
  // and whose wall clock reads 40 s ahead. Both start training together.
  WriteRank(dir.Join("rank-0"), 0, 3, "a", 6 * kS, unix0 + 1 * kS, Training(100, 6 * kS, 10));
  WriteRank(dir.Join("rank-1"), 1, 3, "b", 900 * kS, unix0 + 41 * kS, Training(101, 900 * kS, 10));

  SATURATE_ASSERT_OK_AND_ASSIGN(Job job, LoadJob(dir.path()));
  EXPECT_TRUE(IsJobDir(dir.path()));
  EXPECT_EQ(job.world_size, 3);
  ASSERT_EQ(job.ranks.size(), 2u);
  EXPECT_EQ(job.missing_ranks, std::vector<int>{2});
  EXPECT_EQ(job.hosts, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(job.clock.method, "collectives");
  EXPECT_NEAR(double(job.clock.host_offset_ns.at("b")), -40.0 * kS, 1e6);
  // After alignment the step marks of both ranks coincide, 1.1 s after the start.
  const std::vector<int64_t>& m0 = job.ranks[0].run.step_marks_ns.at(100);
  const std::vector<int64_t>& m1 = job.ranks[1].run.step_marks_ns.at(101);
  ASSERT_EQ(m0.size(), 10u);
  EXPECT_EQ(m0[0], 1'100'000'000);
  EXPECT_NEAR(double(m1[0]), double(m0[0]), 1e6);
  // Warnings name the missing rank and the far-apart clock.
  std::string all;
  for (const std::string& w : job.warnings) all += w + "\n";
  EXPECT_NE(all.find("rank-2/ is missing (of 3 ranks)"), std::string::npos) << all;
  EXPECT_NE(all.find("host b's clock is 40.000 s ahead"), std::string::npos) << all;
}

TEST(LoadJobTest, ATornRankFileIsAWarningAndTheRestLoads) {
  testing::TempDir dir;
  WriteRank(dir.Join("rank-0"), 0, 2, "a", kS, 2 * kS, Training(100, kS, 5));
  WriteRank(dir.Join("rank-1"), 1, 2, "a", kS, 2 * kS, Training(101, kS, 5));
  std::ofstream(dir.Join("rank-1/spans-101-auto.jsonl"), std::ios::app) << "{\"ph\":\"X\",\"na";
  SATURATE_ASSERT_OK_AND_ASSIGN(Job job, LoadJob(dir.path()));
  ASSERT_EQ(job.ranks.size(), 2u);
  EXPECT_EQ(job.clock.method, "one host");
  EXPECT_EQ(job.ranks[1].run.step_marks_ns.at(101).size(), 5u);
  std::string all;
  for (const std::string& w : job.warnings) all += w + "\n";
  EXPECT_NE(all.find("torn last line"), std::string::npos) << all;
}

TEST(LoadJobTest, NodeFoldersAndTaskExitCodes) {
  // srun saturate watch: node samples in node-<host>/, exit codes in task.json.
  testing::TempDir dir;
  for (const char* host : {"a", "b"}) {
    std::filesystem::create_directories(dir.Join(std::string("node-") + host));
    json meta = {{"host", host},
                 {"start_unix_ns", 10 * kS},
                 {"start_monotonic_ns", kS},
                 {"saturate_version", host == std::string("a") ? "0.1.0" : "0.2.0"}};
    std::ofstream(dir.Join(std::string("node-") + host + "/meta.json")) << meta.dump();
  }
  WriteRank(dir.Join("rank-0"), 0, 2, "a", kS, 10 * kS, Training(100, kS, 5));
  WriteRank(dir.Join("rank-1"), 1, 2, "b", kS, 10 * kS, Training(101, kS, 5));
  std::ofstream(dir.Join("rank-1/task.json")) << R"({"rank": 1, "exit_code": 3})";
  const json hang = {{"t_unix_ns", 5},
                     {"suspect_rank", 1},
                     {"kind", "hung"},
                     {"stalled_s", 61.5},
                     {"stacks", {{"1", {"train.py:9 in load: f.read()"}}}}};
  std::ofstream(dir.Join("node-b/hang.json")) << hang.dump();
  SATURATE_ASSERT_OK_AND_ASSIGN(Job job, LoadJob(dir.path()));
  ASSERT_EQ(job.ranks.size(), 2u);
  EXPECT_EQ(job.ranks[1].exit_code, 3);
  ASSERT_TRUE(job.hang);
  EXPECT_EQ(job.hang->suspect_rank, 1);
  EXPECT_EQ(job.hang->suspect_stack, std::vector<std::string>{"train.py:9 in load: f.read()"});
  EXPECT_EQ(job.ranks[1].run.meta.host, "b");
  std::string all;
  for (const std::string& w : job.warnings) all += w + "\n";
  EXPECT_NE(all.find("different saturate versions (0.1.0, 0.2.0)"), std::string::npos) << all;
}

TEST(LoadJobTest, NotAJob) {
  testing::TempDir dir;
  EXPECT_FALSE(IsJobDir(dir.path()));
  EXPECT_EQ(LoadJob(dir.path()).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace saturate::ranks
