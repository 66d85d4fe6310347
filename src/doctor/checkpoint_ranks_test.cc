#include "doctor/checkpoint_ranks.h"

#include <gtest/gtest.h>

#include <string>

namespace saturate::doctor {
namespace {

constexpr int64_t kMsNs = 1'000'000;

Span Ckpt(std::string name, int64_t start_ms, int64_t dur_ms, int64_t step, int64_t seq) {
  Span s;
  s.name = std::move(name);
  s.kind = SpanKind::kCheckpoint;
  s.start_ns = start_ms * kMsNs;
  s.dur_ns = dur_ms * kMsNs;
  s.args["step"] = step;
  if (seq >= 0) s.args["seq"] = seq;
  return s;
}

// One rank's save: reaches it at `at_ms`, snapshots for `snap_ms`, writes for `write_ms`.
std::vector<Span> RankSave(int64_t at_ms, int64_t snap_ms, int64_t write_ms, int64_t step = 7,
                           int64_t seq = 1) {
  return {Ckpt("checkpoint_save", at_ms, snap_ms, step, seq),
          Ckpt("checkpoint_write", at_ms + snap_ms, write_ms, step, -1)};
}

std::map<int, std::vector<Span>> Job(std::vector<std::vector<Span>> ranks, int64_t commit_at_ms) {
  std::map<int, std::vector<Span>> out;
  for (size_t r = 0; r < ranks.size(); ++r) out[int(r)] = ranks[r];
  out[0].push_back(Ckpt("checkpoint_commit", commit_at_ms, 5, 7, 1));
  return out;
}

// A run recorded by the end-to-end test's job: 2 ranks under torchrun, rank 1's
// snapshots 400 ms slower (checkpoint_dist_worker.py --slow-rank 1 --slow-ms 400).
std::map<int, std::vector<Span>> Recorded() {
  std::map<int, std::vector<Span>> out;
  for (int r : {0, 1}) {
    RunSources src;
    src.spans_dir =
        std::string(SATURATE_DOCTOR_TESTDATA) + "/checkpoint_ranks/rank-" + std::to_string(r);
    src.origin_unix_ns = int64_t{1795741090} * 1'000'000'000;
    auto run = LoadRunFrom(src);
    EXPECT_TRUE(run.ok()) << run.status().ToString();
    if (run.ok()) out[r] = run->spans;
  }
  return out;
}

TEST(CheckpointRanks, RecordedRunNamesTheSlowSnapshotAndTheWait) {
  const std::vector<SaveRanks> saves = CheckpointSavesByRank(Recorded());
  ASSERT_EQ(saves.size(), 3u);
  for (size_t i = 0; i < saves.size(); ++i) {
    const SaveRanks& s = saves[i];
    EXPECT_EQ(s.step, int64_t(i + 1));
    EXPECT_EQ(s.slowest_rank, 1);
    EXPECT_EQ(s.slowest_phase, "snapshot");
    EXPECT_GT(s.slowest_phase_ms, 400);
    EXPECT_LT(s.others_phase_ms, 10);
    EXPECT_GT(s.others_waited_ms, 350);  // rank 0's files were in ~400 ms earlier
    EXPECT_LT(s.others_waited_ms, 450);
    EXPECT_GT(s.commit_ms, 0);
  }
  const std::string text = DescribeSave(saves[0]);
  EXPECT_EQ(text.rfind("save 1: rank 1 snapshotted 40", 0), 0u) << text;
  EXPECT_NE(text.find("; rank 0 waited 39"), std::string::npos) << text;
  EXPECT_NE(text.find(" ms for it at the commit barrier"), std::string::npos) << text;
}

TEST(CheckpointRanks, LateArrivalAndSlowWriteAreTold) {
  // Rank 2 reaches the save 300 ms late; its snapshot and write are as fast as the others'.
  auto late = CheckpointSavesByRank(
      Job({RankSave(0, 10, 50), RankSave(5, 10, 50), RankSave(300, 12, 50)}, 400));
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0].slowest_rank, 2);
  EXPECT_EQ(late[0].slowest_phase, "arrival");
  EXPECT_DOUBLE_EQ(late[0].max_waited_ms, 302);
  EXPECT_DOUBLE_EQ(late[0].others_waited_ms, (302 + 297) / 2.0);
  EXPECT_EQ(DescribeSave(late[0]),
            "save 7: rank 2 reached it 298 ms after the others; ranks 0, 1 waited 300 ms on "
            "average (up to 302 ms) for it at the commit barrier");
  // Rank 0 writes slowly (a slower disk or bucket).
  auto slow_write = CheckpointSavesByRank(Job({RankSave(0, 10, 900), RankSave(0, 10, 100)}, 950));
  ASSERT_EQ(slow_write.size(), 1u);
  EXPECT_EQ(DescribeSave(slow_write[0]),
            "save 7: rank 0 wrote its files in 900 ms (the others 100 ms); rank 1 waited 800 ms "
            "for it at the commit barrier");
}

TEST(CheckpointRanks, SavesWithoutAGlobalCommitOrOnOneRankAreSkipped) {
  auto job = Job({RankSave(0, 10, 50), RankSave(0, 10, 50)}, 100);
  job[0].pop_back();  // no checkpoint_commit: not a DistCheckpointer save
  EXPECT_TRUE(CheckpointSavesByRank(job).empty());
  EXPECT_TRUE(CheckpointSavesByRank(Job({RankSave(0, 10, 50)}, 100)).empty());
}

TEST(CheckpointRanks, EvidenceGoesToTheCheckpointFindingOrANewInfoOne) {
  const std::vector<SaveRanks> saves = CheckpointSavesByRank(Recorded());
  std::vector<Finding> findings = {NewFinding("checkpoint_stall", "Training stops", 1.3, 12, 0.9)};
  AddCheckpointRanks(saves, 12, &findings);
  ASSERT_EQ(findings.size(), 1u);
  const Finding& f = findings[0];
  EXPECT_NE(f.title.find("rank 1 was the slowest in 3 of 3 saves"), std::string::npos) << f.title;
  ASSERT_EQ(f.evidence.size(), 6u);
  EXPECT_EQ(f.evidence[0].key, "checkpoint_slowest_rank");
  EXPECT_EQ(f.evidence[0].value, 1);
  EXPECT_EQ(f.evidence[2].key, "checkpoint_others_waited_ms_per_save");
  EXPECT_EQ(f.evidence[2].unit, "ms");
  EXPECT_EQ(f.evidence[3].key, "save_1_others_waited_ms");
  EXPECT_EQ(f.evidence[3].text, DescribeSave(saves[0]));

  // Only the straggler's checkpoint finding: a separate info finding is added.
  Finding straggler = NewFinding("checkpoint_stall", "Rank-0-only work", 2, 12, 0.8);
  straggler.evidence.push_back({"straggler_rank", 0, "", ""});
  std::vector<Finding> other = {straggler};
  AddCheckpointRanks(saves, 12, &other, 1.0, 2);
  ASSERT_EQ(other.size(), 2u);
  EXPECT_TRUE(other[1].info);
  EXPECT_EQ(other[1].evidence.size(), 3u + 2u);  // two save lines at most
  EXPECT_EQ(other[0].evidence.size(), 1u);

  // Nobody waited: nothing is added.
  std::vector<Finding> none;
  AddCheckpointRanks(CheckpointSavesByRank(Job({RankSave(0, 10, 50), RankSave(0, 10, 50)}, 100)),
                     12, &none);
  EXPECT_TRUE(none.empty());
}

}  // namespace
}  // namespace saturate::doctor
