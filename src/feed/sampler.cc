#include "feed/sampler.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "feed/random.h"

namespace saturate::feed {
namespace {

const char* NonEmpty(const char* value) {
  return (value != nullptr && value[0] != '\0') ? value : nullptr;
}

Result<uint32_t> ParseU32(const char* name, const char* value) {
  const char* end = value + std::strlen(value);
  uint32_t parsed = 0;
  const auto [ptr, ec] = std::from_chars(value, end, parsed);
  // from_chars accepts no leading '+', '-' or whitespace for unsigned types.
  if (ec != std::errc() || ptr != end) {
    return Status::InvalidArgument(std::string(name) + "='" + value +
                                   "' is not a non-negative 32-bit integer");
  }
  return parsed;
}

Result<ShardSpec> ParsePair(const char* rank_name, const char* rank_value, const char* world_name,
                            const char* world_value) {
  if (rank_value == nullptr) {
    return Status::InvalidArgument(std::string(world_name) + " is set but " + rank_name +
                                   " is not");
  }
  if (world_value == nullptr) {
    return Status::InvalidArgument(std::string(rank_name) + " is set but " + world_name +
                                   " is not");
  }
  ShardSpec shard;
  SATURATE_ASSIGN_OR_RETURN(shard.rank, ParseU32(rank_name, rank_value));
  SATURATE_ASSIGN_OR_RETURN(shard.world_size, ParseU32(world_name, world_value));
  if (shard.world_size == 0) {
    return Status::InvalidArgument(std::string(world_name) + "=0 must be at least 1");
  }
  if (shard.rank >= shard.world_size) {
    return Status::InvalidArgument(std::string(rank_name) + "=" + std::to_string(shard.rank) +
                                   " must be less than " + world_name + "=" +
                                   std::to_string(shard.world_size));
  }
  return shard;
}

}  // namespace

Result<ShardSpec> ShardSpecFromEnv(const std::function<const char*(const char*)>& getenv) {
  const char* rank = NonEmpty(getenv("RANK"));
  const char* world = NonEmpty(getenv("WORLD_SIZE"));
  if (rank != nullptr || world != nullptr) return ParsePair("RANK", rank, "WORLD_SIZE", world);
  // Only inside a job step (srun): a batch script has SLURM_PROCID=0 and the
  // job's SLURM_NTASKS too, but is one process, not rank 0 of many.
  const char* tasks = NonEmpty(getenv("SLURM_STEP_NUM_TASKS"));
  if (tasks != nullptr) {
    return ParsePair("SLURM_PROCID", NonEmpty(getenv("SLURM_PROCID")), "SLURM_STEP_NUM_TASKS",
                     tasks);
  }
  return ShardSpec{};
}

Result<ShardSpec> ShardSpecFromEnv() {
  return ShardSpecFromEnv([](const char* name) -> const char* { return std::getenv(name); });
}

Result<Sampler> Sampler::Create(const SamplerOptions& options) {
  const uint64_t n = options.dataset_size;
  const uint64_t w = options.shard.world_size;
  if (w == 0) return Status::InvalidArgument("sampler: world_size is 0");
  if (options.shard.rank >= w) {
    return Status::InvalidArgument("sampler: rank " + std::to_string(options.shard.rank) +
                                   " is not less than world_size " + std::to_string(w));
  }
  if (n == 0) return Status::InvalidArgument("sampler: dataset_size is 0 (empty dataset)");
  if (options.drop_uneven && n < w) {
    return Status::InvalidArgument("sampler: dataset_size " + std::to_string(n) +
                                   " is smaller than world_size " + std::to_string(w) +
                                   " with drop_uneven: every rank would get 0 samples");
  }
  const uint64_t per_rank = options.drop_uneven ? n / w : n / w + (n % w != 0 ? 1 : 0);
  return Sampler(options, per_rank);
}

void Sampler::EpochIndices(uint64_t epoch, std::vector<uint64_t>* out) const {
  const uint64_t n = options_.dataset_size;
  const uint64_t w = options_.shard.world_size;
  const uint64_t r = options_.shard.rank;
  const uint64_t count = samples_per_rank_;
  // Position p of the padded list holds order[p mod n] (p < n when dropping).
  if (!options_.shuffle) {
    out->resize(count);
    for (uint64_t k = 0; k < count; ++k) (*out)[k] = (r + k * w) % n;
    return;
  }

  std::vector<uint64_t>& a = *out;
  Order(epoch, &a);

  // Compact positions r, r+w, ... to the front in place: position r + k*w >= k,
  // so each read is at or after every slot written so far. The padded tail
  // [n, count*w) is shorter than w, so at most the last position wraps; read
  // it before compaction may overwrite its source.
  const uint64_t last_pos = r + (count - 1) * w;
  const uint64_t last_value = a[last_pos % n];
  for (uint64_t k = 0; k + 1 < count; ++k) a[k] = a[r + k * w];
  a[count - 1] = last_value;
  a.resize(count);
}

uint64_t Sampler::SamplesPerRankFrom(uint64_t skip) const {
  const uint64_t n = options_.dataset_size, w = options_.shard.world_size;
  if (skip >= n) return 0;
  const uint64_t rest = n - skip;
  return options_.drop_uneven ? rest / w : (rest + w - 1) / w;
}

void Sampler::EpochIndicesFrom(uint64_t epoch, uint64_t skip, std::vector<uint64_t>* out) const {
  if (skip == 0) return EpochIndices(epoch, out);
  const uint64_t count = SamplesPerRankFrom(skip);
  out->clear();
  if (count == 0) return;
  std::vector<uint64_t> order;
  Order(epoch, &order);
  const uint64_t n = options_.dataset_size, w = options_.shard.world_size;
  const uint64_t r = options_.shard.rank;
  out->resize(count);
  // Padding wraps to the order's start, as in a whole epoch: with the saved
  // world size this is exactly the positions the rank had left.
  for (uint64_t k = 0; k < count; ++k) (*out)[k] = order[(skip + r + k * w) % n];
}

void Sampler::Order(uint64_t epoch, std::vector<uint64_t>* out) const {
  const uint64_t n = options_.dataset_size;
  std::vector<uint64_t>& a = *out;
  a.resize(n);
  if (!options_.shuffle) {
    for (uint64_t i = 0; i < n; ++i) a[i] = i;
    return;
  }
  PhiloxStream rng(DeriveKey(options_.seed, RngDomain::kEpochShuffle, epoch), /*stream=*/0);
  if (options_.block_records == 0) {
    for (uint64_t i = 0; i < n; ++i) a[i] = i;
    for (uint64_t i = n - 1; i > 0; --i) std::swap(a[i], a[rng.UniformBelow(i + 1)]);
  } else {
    const uint64_t br = options_.block_records, blocks = (n + br - 1) / br;
    const uint64_t wb = std::max<uint64_t>(1, options_.window_blocks);
    std::vector<uint64_t> perm(blocks);
    for (uint64_t b = 0; b < blocks; ++b) perm[b] = b;
    for (uint64_t b = blocks - 1; b > 0; --b) std::swap(perm[b], perm[rng.UniformBelow(b + 1)]);
    PhiloxStream within(DeriveKey(options_.seed, RngDomain::kEpochShuffle, epoch), /*stream=*/1);
    uint64_t pos = 0;
    for (uint64_t b0 = 0; b0 < blocks; b0 += wb) {
      const uint64_t start = pos;
      for (uint64_t b = b0; b < std::min(blocks, b0 + wb); ++b) {
        for (uint64_t i = perm[b] * br; i < std::min(n, perm[b] * br + br); ++i) a[pos++] = i;
      }
      for (uint64_t i = pos - 1; i > start; --i) {
        std::swap(a[i], a[start + within.UniformBelow(i - start + 1)]);
      }
    }
  }
}

}  // namespace saturate::feed
