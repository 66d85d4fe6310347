#include "base/rank_env.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace saturate::base {
namespace {

std::optional<RankEnv> From(const std::map<std::string, std::string>& vars) {
  return RankFromEnv([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

TEST(RankEnvTest, TorchrunNamesRankLocalRankAndWorld) {
  auto r =
      From({{"RANK", "3"}, {"LOCAL_RANK", "1"}, {"WORLD_SIZE", "4"}, {"TORCHELASTIC_RUN_ID", "x"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->rank, 3);
  EXPECT_EQ(r->local_rank, 1);
  EXPECT_EQ(r->world_size, 4);
  EXPECT_EQ(r->launcher, "torchrun");
  EXPECT_FALSE(r->host.empty());
  EXPECT_EQ(From({{"RANK", "1"}, {"WORLD_SIZE", "2"}})->launcher, "env");
}

TEST(RankEnvTest, TorchrunUnderSrunKeepsTorchrunsRanks) {
  auto r = From(
      {{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"SLURM_PROCID", "1"}, {"SLURM_STEP_NUM_TASKS", "2"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->rank, 5);
  EXPECT_EQ(r->world_size, 8);
}

TEST(RankEnvTest, SlurmStepTasksAreRanksButTheBatchScriptIsNot) {
  auto r = From({{"SLURM_PROCID", "1"},
                 {"SLURM_LOCALID", "1"},
                 {"SLURM_NTASKS", "2"},
                 {"SLURM_STEP_NUM_TASKS", "2"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->launcher, "slurm");
  EXPECT_EQ(r->rank, 1);
  EXPECT_FALSE(From({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}));
}

TEST(RankEnvTest, MpiAndPmi) {
  EXPECT_EQ(From({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"}})->launcher, "mpi");
  EXPECT_EQ(From({{"PMI_RANK", "1"}, {"PMI_SIZE", "3"}})->rank, 1);
}

TEST(RankEnvTest, OneRankOrBadValuesAreNoRank) {
  EXPECT_FALSE(From({}));
  EXPECT_FALSE(From({{"RANK", "0"}, {"WORLD_SIZE", "1"}}));
  EXPECT_FALSE(From({{"RANK", "x"}, {"WORLD_SIZE", "2"}}));
  EXPECT_FALSE(From({{"RANK", "2"}, {"WORLD_SIZE", "2"}}));
  EXPECT_FALSE(From({{"RANK", "-1"}, {"WORLD_SIZE", "2"}}));
}

TEST(RankEnvTest, RankRunDirNestsOnce) {
  RankEnv r;
  r.rank = 2;
  EXPECT_EQ(RankRunDir("/runs/a", r), "/runs/a/rank-2");
  EXPECT_EQ(RankRunDir("/runs/a/", r), "/runs/a/rank-2");
  EXPECT_EQ(RankRunDir("/runs/a/rank-2", r), "/runs/a/rank-2");
  EXPECT_EQ(RankRunDir("/runs/a", std::nullopt), "/runs/a");
}

}  // namespace
}  // namespace saturate::base
