#include "feed/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "base/testing.h"

namespace saturate::feed {
namespace {

using ::saturate::testing::HasError;

Sampler MakeSampler(uint64_t n, uint32_t rank, uint32_t world, bool drop, bool shuffle,
                    uint64_t seed = 0) {
  SamplerOptions o;
  o.dataset_size = n;
  o.shuffle = shuffle;
  o.seed = seed;
  o.drop_uneven = drop;
  o.shard = {rank, world};
  Result<Sampler> s = Sampler::Create(o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

// torch.utils.data.DistributedSampler.__iter__, given the epoch's order.
std::vector<uint64_t> TorchReference(const std::vector<uint64_t>& order, uint32_t rank,
                                     uint32_t world, bool drop) {
  const uint64_t n = order.size();
  std::vector<uint64_t> list = order;
  if (!drop) {
    const uint64_t total = (n + world - 1) / world * world;
    while (list.size() < total) list.push_back(list[list.size() - n]);  // order[p mod n]
  } else {
    list.resize(n / world * world);
  }
  std::vector<uint64_t> mine;
  for (uint64_t p = rank; p < list.size(); p += world) mine.push_back(list[p]);
  return mine;
}

TEST(SamplerTest, CreateRejectsBadOptions) {
  SamplerOptions o;
  o.dataset_size = 10;
  o.shard = {0, 0};
  EXPECT_TRUE(HasError(Sampler::Create(o).status(), StatusCode::kInvalidArgument, {"world_size"}));
  o.shard = {3, 3};
  EXPECT_TRUE(HasError(Sampler::Create(o).status(), StatusCode::kInvalidArgument, {"rank 3"}));
  o.shard = {0, 1};
  o.dataset_size = 0;
  EXPECT_TRUE(
      HasError(Sampler::Create(o).status(), StatusCode::kInvalidArgument, {"dataset_size is 0"}));
  o.dataset_size = 3;
  o.shard = {0, 4};
  o.drop_uneven = true;
  EXPECT_TRUE(HasError(Sampler::Create(o).status(), StatusCode::kInvalidArgument,
                       {"dataset_size 3", "world_size 4", "drop_uneven"}));
  o.drop_uneven = false;  // Padding makes N < W fine: one (repeated) sample per rank.
  EXPECT_TRUE(Sampler::Create(o).ok());
}

TEST(SamplerTest, UnshuffledMatchesTorchExactly) {
  // torch: DistributedSampler(range(10), num_replicas=3, shuffle=False).
  const std::vector<std::vector<uint64_t>> pad = {{0, 3, 6, 9}, {1, 4, 7, 0}, {2, 5, 8, 1}};
  const std::vector<std::vector<uint64_t>> drop = {{0, 3, 6}, {1, 4, 7}, {2, 5, 8}};
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_EQ(MakeSampler(10, r, 3, false, false).EpochIndices(0), pad[r]) << "rank " << r;
    EXPECT_EQ(MakeSampler(10, r, 3, true, false).EpochIndices(5), drop[r]) << "rank " << r;
  }
  // Padding longer than the dataset repeats it: N=2, W=7 -> 0,1,0,1,0,1,0.
  for (uint32_t r = 0; r < 7; ++r) {
    EXPECT_EQ(MakeSampler(2, r, 7, false, false).EpochIndices(0), std::vector<uint64_t>{r % 2u});
  }
}

TEST(SamplerTest, PartitionPropertiesAcrossSizes) {
  for (bool shuffle : {false, true}) {
    for (bool drop : {false, true}) {
      for (uint32_t w : {1u, 2u, 3u, 4u, 7u, 8u}) {
        for (uint64_t n : {1u, 5u, 10u, 11u, 100u, 1001u}) {
          SCOPED_TRACE(::testing::Message()
                       << "shuffle=" << shuffle << " drop=" << drop << " W=" << w << " N=" << n);
          if (drop && n < w) {
            SamplerOptions o{.dataset_size = n, .drop_uneven = true, .shard = {0, w}};
            EXPECT_FALSE(Sampler::Create(o).ok());
            continue;
          }
          const uint64_t expected_total = drop ? n / w * w : (n + w - 1) / w * w;
          // The whole epoch order, as rank 0 of a single-rank padded sampler.
          const std::vector<uint64_t> order =
              MakeSampler(n, 0, 1, false, shuffle, 9).EpochIndices(3);
          ASSERT_EQ(order.size(), n);
          std::map<uint64_t, int> seen;
          uint64_t total = 0;
          for (uint32_t r = 0; r < w; ++r) {
            const Sampler s = MakeSampler(n, r, w, drop, shuffle, 9);
            const std::vector<uint64_t> mine = s.EpochIndices(3);
            EXPECT_EQ(mine.size(), s.samples_per_rank());
            EXPECT_EQ(s.samples_per_rank(), expected_total / w);
            EXPECT_EQ(s.total_samples(), expected_total);
            EXPECT_EQ(mine, TorchReference(order, r, w, drop));
            for (uint64_t i : mine) {
              ASSERT_LT(i, n);
              ++seen[i];
            }
            total += mine.size();
          }
          EXPECT_EQ(total, expected_total);
          if (drop) {
            for (const auto& [index, count] : seen) EXPECT_EQ(count, 1) << "index " << index;
          } else {
            EXPECT_EQ(seen.size(), n);  // Every index is read at least once.
          }
        }
      }
    }
  }
}

TEST(SamplerTest, ShuffledIsAPermutation) {
  std::vector<uint64_t> order = MakeSampler(1001, 0, 1, false, true, 5).EpochIndices(0);
  std::vector<uint64_t> identity(1001);
  for (uint64_t i = 0; i < identity.size(); ++i) identity[i] = i;
  EXPECT_NE(order, identity);
  std::sort(order.begin(), order.end());
  EXPECT_EQ(order, identity);
}

TEST(SamplerTest, BlockShuffleKeepsRecordsInTheirWindow) {
  SamplerOptions o;
  o.dataset_size = 1003;  // the last block is short
  o.seed = 7;
  o.block_records = 10;
  o.window_blocks = 4;
  auto s = Sampler::Create(o);
  ASSERT_TRUE(s.ok());
  const std::vector<uint64_t> order = s->EpochIndices(2);
  // Each window of 4 blocks holds whole blocks: its 40 records (fewer with the
  // short block) come from exactly the blocks it holds, in shuffled order.
  std::vector<uint64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (uint64_t i = 0; i < sorted.size(); ++i) ASSERT_EQ(sorted[i], i);
  uint64_t pos = 0, windows = 0;
  std::vector<uint64_t> blocks_seen;
  while (pos < order.size()) {
    std::set<uint64_t> blocks;
    uint64_t records = 0;
    while (pos < order.size() && (blocks.size() < 4 || blocks.count(order[pos] / 10))) {
      blocks.insert(order[pos] / 10);
      ++pos;
      ++records;
    }
    uint64_t expected = 0;
    for (uint64_t b : blocks) expected += b == 100 ? 3 : 10;
    EXPECT_EQ(records, expected);
    ++windows;
  }
  EXPECT_EQ(windows, 26u);  // ceil(101 / 4)
  EXPECT_NE(order, s->EpochIndices(3));
  EXPECT_EQ(order, s->EpochIndices(2));  // resume: a pure function of (seed, epoch)
}

// Elastic resume: after W ranks read the first `skip` positions of the
// global order, M ranks read the rest, each position once (padding aside),
// in the order's sequence, whatever W and M.
TEST(SamplerTest, EpochIndicesFromSplitsTheRestOfTheGlobalOrder) {
  const uint64_t n = 103;
  for (bool shuffle : {false, true}) {
    const std::vector<uint64_t> order = MakeSampler(n, 0, 1, false, shuffle, 9).EpochIndices(4);
    for (uint64_t skip : {0, 1, 40, 102, 103, 200}) {
      for (uint32_t world : {1u, 2u, 3u, 5u}) {
        for (bool drop : {false, true}) {
          std::vector<uint64_t> got;  // interleaved back into global positions
          const uint64_t per_rank =
              MakeSampler(n, 0, world, drop, shuffle, 9).SamplesPerRankFrom(skip);
          std::vector<std::vector<uint64_t>> ranks;
          for (uint32_t r = 0; r < world; ++r) {
            Sampler s = MakeSampler(n, r, world, drop, shuffle, 9);
            std::vector<uint64_t> out;
            s.EpochIndicesFrom(4, skip, &out);
            ASSERT_EQ(out.size(), per_rank);
            ASSERT_EQ(s.SamplesPerRankFrom(skip), per_rank);
            ranks.push_back(out);
          }
          for (uint64_t k = 0; k < per_rank; ++k) {
            for (uint32_t r = 0; r < world; ++r) got.push_back(ranks[r][k]);
          }
          const uint64_t rest = skip >= n ? 0 : n - skip;
          EXPECT_EQ(got.size(), drop ? rest / world * world : (rest + world - 1) / world * world);
          for (uint64_t p = 0; p < got.size(); ++p) {
            ASSERT_EQ(got[p], order[(skip + p) % n])
                << "skip " << skip << " world " << world << " position " << p;
          }
        }
      }
    }
    // skip 0 is the whole epoch; with the same world size, a skip of whole
    // rounds gives the rest of each rank's epoch, padding included.
    for (uint64_t rounds : {0, 7, 34}) {
      for (uint32_t r = 0; r < 3; ++r) {
        const Sampler s = MakeSampler(n, r, 3, false, shuffle, 9);
        std::vector<uint64_t> rest;
        s.EpochIndicesFrom(4, rounds * 3, &rest);
        const std::vector<uint64_t> whole = s.EpochIndices(4);
        EXPECT_EQ(rest, std::vector<uint64_t>(whole.begin() + rounds, whole.end()));
      }
    }
  }
}

TEST(SamplerTest, EpochAndSeedDetermineTheOrder) {
  const Sampler a = MakeSampler(1000, 1, 4, false, true, 123);
  const Sampler b = MakeSampler(1000, 1, 4, false, true, 123);
  const Sampler other_seed = MakeSampler(1000, 1, 4, false, true, 124);
  EXPECT_EQ(a.EpochIndices(0), b.EpochIndices(0));
  EXPECT_EQ(a.EpochIndices(7), b.EpochIndices(7));
  EXPECT_NE(a.EpochIndices(0), a.EpochIndices(1));
  EXPECT_NE(a.EpochIndices(0), other_seed.EpochIndices(0));
  // Unshuffled order does not depend on epoch or seed.
  const Sampler plain = MakeSampler(1000, 1, 4, false, false, 1);
  EXPECT_EQ(plain.EpochIndices(0), plain.EpochIndices(1));
  EXPECT_EQ(plain.EpochIndices(0), MakeSampler(1000, 1, 4, false, false, 2).EpochIndices(0));
}

TEST(SamplerTest, ShuffleIsRoughlyUniform) {
  // Over many epochs each value lands in position 0 about equally often.
  constexpr int kN = 5;
  constexpr int kEpochs = 20000;
  const Sampler s = MakeSampler(kN, 0, 1, false, true, 77);
  std::vector<int> first(kN, 0);
  std::vector<uint64_t> out;
  for (int e = 0; e < kEpochs; ++e) {
    s.EpochIndices(e, &out);
    ++first[out[0]];
  }
  double chi2 = 0;
  const double expected = static_cast<double>(kEpochs) / kN;
  for (int c : first) chi2 += (c - expected) * (c - expected) / expected;
  EXPECT_LT(chi2, 30.0);  // 4 dof: P(chi2 > 30) < 1e-5.
}

TEST(SamplerTest, ReusesOutputCapacity) {
  const Sampler s = MakeSampler(1001, 2, 4, false, true, 1);
  std::vector<uint64_t> out;
  s.EpochIndices(0, &out);
  const uint64_t* data = out.data();
  const size_t capacity = out.capacity();
  EXPECT_GE(capacity, 1001u);
  for (uint64_t e = 1; e < 5; ++e) {
    s.EpochIndices(e, &out);
    EXPECT_EQ(out.size(), s.samples_per_rank());
    EXPECT_EQ(out.data(), data);
    EXPECT_EQ(out.capacity(), capacity);
  }
  // Garbage already in `out` does not leak into the result.
  std::vector<uint64_t> dirty(2000, 12345);
  s.EpochIndices(3, &dirty);
  EXPECT_EQ(dirty, s.EpochIndices(3));
}

// ---- ShardSpecFromEnv ---------------------------------------------------------

Result<ShardSpec> FromMap(const std::map<std::string, std::string>& env) {
  return ShardSpecFromEnv([&env](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(ShardSpecFromEnvTest, DefaultsToSingleRank) {
  SATURATE_ASSERT_OK_AND_ASSIGN(ShardSpec s, FromMap({}));
  EXPECT_EQ(s.rank, 0u);
  EXPECT_EQ(s.world_size, 1u);
  SATURATE_ASSERT_OK_AND_ASSIGN(ShardSpec e, FromMap({{"RANK", ""}, {"WORLD_SIZE", ""}}));
  EXPECT_EQ(e.world_size, 1u);
}

TEST(ShardSpecFromEnvTest, Torchrun) {
  SATURATE_ASSERT_OK_AND_ASSIGN(ShardSpec s, FromMap({{"RANK", "3"}, {"WORLD_SIZE", "8"}}));
  EXPECT_EQ(s.rank, 3u);
  EXPECT_EQ(s.world_size, 8u);
}

TEST(ShardSpecFromEnvTest, Slurm) {
  SATURATE_ASSERT_OK_AND_ASSIGN(ShardSpec s,
                                FromMap({{"SLURM_PROCID", "5"}, {"SLURM_STEP_NUM_TASKS", "16"}}));
  EXPECT_EQ(s.rank, 5u);
  EXPECT_EQ(s.world_size, 16u);
  // A batch script (no step) is one process, whatever the job's task count.
  SATURATE_ASSERT_OK_AND_ASSIGN(ShardSpec batch,
                                FromMap({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "16"}}));
  EXPECT_EQ(batch.world_size, 1u);
}

TEST(ShardSpecFromEnvTest, TorchrunWinsOverSlurm) {
  SATURATE_ASSERT_OK_AND_ASSIGN(ShardSpec s, FromMap({{"RANK", "1"},
                                                      {"WORLD_SIZE", "2"},
                                                      {"SLURM_PROCID", "7"},
                                                      {"SLURM_STEP_NUM_TASKS", "9"}}));
  EXPECT_EQ(s.rank, 1u);
  EXPECT_EQ(s.world_size, 2u);
  // Even a broken SLURM pair is ignored when torchrun's is present.
  EXPECT_TRUE(FromMap({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"SLURM_PROCID", "x"}}).ok());
}

TEST(ShardSpecFromEnvTest, ErrorsNameTheVariable) {
  const auto err = [](const std::map<std::string, std::string>& env) {
    return FromMap(env).status();
  };
  EXPECT_TRUE(HasError(err({{"RANK", "abc"}, {"WORLD_SIZE", "4"}}), StatusCode::kInvalidArgument,
                       {"RANK='abc'"}));
  EXPECT_TRUE(HasError(err({{"RANK", "1"}, {"WORLD_SIZE", "4x"}}), StatusCode::kInvalidArgument,
                       {"WORLD_SIZE='4x'"}));
  EXPECT_TRUE(HasError(err({{"RANK", "-1"}, {"WORLD_SIZE", "4"}}), StatusCode::kInvalidArgument,
                       {"RANK='-1'"}));
  EXPECT_TRUE(HasError(err({{"RANK", " 1"}, {"WORLD_SIZE", "4"}}), StatusCode::kInvalidArgument,
                       {"RANK=' 1'"}));
  EXPECT_TRUE(HasError(err({{"RANK", "+1"}, {"WORLD_SIZE", "4"}}), StatusCode::kInvalidArgument,
                       {"RANK='+1'"}));
  EXPECT_TRUE(HasError(err({{"RANK", "0"}, {"WORLD_SIZE", "99999999999"}}),
                       StatusCode::kInvalidArgument, {"WORLD_SIZE='99999999999'"}));
  EXPECT_TRUE(HasError(err({{"RANK", "0"}, {"WORLD_SIZE", "0"}}), StatusCode::kInvalidArgument,
                       {"WORLD_SIZE=0"}));
  EXPECT_TRUE(HasError(err({{"RANK", "4"}, {"WORLD_SIZE", "4"}}), StatusCode::kInvalidArgument,
                       {"RANK=4", "WORLD_SIZE=4"}));
  EXPECT_TRUE(HasError(err({{"RANK", "1"}}), StatusCode::kInvalidArgument,
                       {"RANK is set but WORLD_SIZE is not"}));
  EXPECT_TRUE(HasError(err({{"WORLD_SIZE", "2"}}), StatusCode::kInvalidArgument,
                       {"WORLD_SIZE is set but RANK is not"}));
  EXPECT_TRUE(HasError(err({{"SLURM_PROCID", "2"}, {"SLURM_STEP_NUM_TASKS", "2"}}),
                       StatusCode::kInvalidArgument, {"SLURM_PROCID=2", "SLURM_STEP_NUM_TASKS=2"}));
  EXPECT_TRUE(HasError(err({{"SLURM_PROCID", "q"}, {"SLURM_STEP_NUM_TASKS", "2"}}),
                       StatusCode::kInvalidArgument, {"SLURM_PROCID='q'"}));
  EXPECT_TRUE(HasError(err({{"SLURM_STEP_NUM_TASKS", "2"}}), StatusCode::kInvalidArgument,
                       {"SLURM_PROCID"}));
}

TEST(ShardSpecFromEnvTest, RealEnvironmentOverload) {
  // Whatever the test runner's environment holds, the call must not crash;
  // without torchrun/SLURM variables it is {0, 1}.
  const Result<ShardSpec> s = ShardSpecFromEnv();
  if (s.ok()) {
    EXPECT_LT(s->rank, s->world_size);
  }
}

}  // namespace
}  // namespace saturate::feed
