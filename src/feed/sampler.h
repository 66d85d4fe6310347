// Which dataset indices this rank reads in each epoch: the semantics of
// torch.utils.data.DistributedSampler, with a resumable counter-based shuffle.
//
// For epoch e over a dataset of N samples split across W ranks:
//   1. order = a permutation of [0, N) if shuffle, else 0, 1, ..., N-1.
//      The permutation is Fisher-Yates (i = N-1 down to 1: swap(a[i], a[j]),
//      j uniform in [0, i]) driven by a PhiloxStream keyed on
//      DeriveKey(seed, kEpochShuffle, e). It is deterministic in (seed, e, N)
//      but it is NOT the stream of torch.randperm with a torch.Generator
//      seeded seed + e: the same seed gives a different (equally valid) order
//      than torch.
//   2. Pad (drop_uneven = false, torch's drop_last=False, the default): append
//      order[0], order[1], ... again (repeating the whole order as often as
//      needed when N < W) until the length is ceil(N / W) * W. A few samples
//      are seen twice per epoch; every sample is seen at least once.
//      Drop (drop_uneven = true, torch's drop_last=True): truncate to
//      floor(N / W) * W. The last N mod W samples of the order are skipped this
//      epoch (different ones each epoch when shuffling); no sample repeats.
//   3. Rank r takes positions r, r + W, r + 2W, ... of that list.
// Every rank therefore gets the same count, samples_per_rank(), so collective
// ops in the training step stay in lockstep.
//
// Empty epochs are refused: Create() fails when a rank would get zero samples
// (dataset_size == 0, or drop_uneven with dataset_size < world_size), since a
// training loop over an empty epoch is always a configuration mistake.
//
// Ownership: Sampler is a small value. Thread-safety: Sampler is immutable
// after Create(); its const methods may be called from any number of threads
// at once (each with its own output vector).
#ifndef SATURATE_FEED_SAMPLER_H_
#define SATURATE_FEED_SAMPLER_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "saturate/base/status.h"

namespace saturate::feed {

// This process's place among the data-parallel ranks.
struct ShardSpec {
  uint32_t rank = 0;
  uint32_t world_size = 1;
};

// Reads the shard from the environment: RANK and WORLD_SIZE (torchrun) if
// either is set, else SLURM_PROCID and SLURM_STEP_NUM_TASKS inside an srun step
// (a batch script, which has no step, is one process),
// else {0, 1}. Within the chosen pair both variables must be set, be decimal
// integers that fit 32 bits (no sign, no spaces), world size >= 1 and
// rank < world size; otherwise InvalidArgument naming the variable and its
// value. A variable set to the empty string counts as unset.
// Thread-safety: as safe as getenv (do not race with setenv).
Result<ShardSpec> ShardSpecFromEnv();
// Same, with `getenv` injected (tests): returns the value or nullptr.
Result<ShardSpec> ShardSpecFromEnv(const std::function<const char*(const char*)>& getenv);

struct SamplerOptions {
  uint64_t dataset_size = 0;
  bool shuffle = true;
  // Block shuffle (for remote datasets: neighbours are fetched together).
  // With shuffle and block_records > 0, step 1 becomes: cut [0, N) into
  // blocks of block_records consecutive indices (the last may be shorter),
  // permute the blocks (Fisher-Yates, PhiloxStream stream 0), then shuffle
  // the indices within each run of window_blocks consecutive blocks of that
  // permutation (Fisher-Yates, one PhiloxStream stream 1 across the epoch).
  // Still deterministic in (seed, e, N, block_records, window_blocks).
  uint64_t block_records = 0;
  uint64_t window_blocks = 1;
  uint64_t seed = 0;
  bool drop_uneven = false;  // false: pad by repeating; true: drop the tail.
  ShardSpec shard;
};

class Sampler {
 public:
  // InvalidArgument when world_size == 0, rank >= world_size,
  // dataset_size == 0, or drop_uneven with dataset_size < world_size.
  static Result<Sampler> Create(const SamplerOptions& options);

  const SamplerOptions& options() const { return options_; }

  // Indices this rank reads per epoch (equal on every rank).
  uint64_t samples_per_rank() const { return samples_per_rank_; }
  // samples_per_rank() * world_size: ceil(N/W)*W when padding, floor(N/W)*W
  // when dropping.
  uint64_t total_samples() const { return samples_per_rank_ * options_.shard.world_size; }

  // This rank's dataset indices for `epoch`, in the order to read them.
  // `out` is resized to samples_per_rank() and its capacity reused: with
  // shuffle the full permutation is built in place, so `out` needs capacity
  // dataset_size (without shuffle, samples_per_rank()); a vector reused across
  // epochs allocates only on the first call. O(dataset_size) time with
  // shuffle, O(samples_per_rank()) without.
  void EpochIndices(uint64_t epoch, std::vector<uint64_t>* out) const;

  // Elastic resume: the epoch's order from global position `skip` on (the
  // positions before it were read by a run with another world size or batch
  // size: rank r' of W' read positions r', r' + W', ...). The rest,
  // dataset_size - skip positions, is padded or dropped to a multiple of
  // world_size as a whole epoch is (padding wraps to the order's start) and
  // this rank takes positions skip + r, skip + r + w, ... With the saved
  // world size these are the positions the rank had left. skip = 0 is
  // EpochIndices(); skip >= dataset_size gives an empty list.
  void EpochIndicesFrom(uint64_t epoch, uint64_t skip, std::vector<uint64_t>* out) const;
  // The size of that list.
  uint64_t SamplesPerRankFrom(uint64_t skip) const;

  // Convenience: a fresh vector.
  std::vector<uint64_t> EpochIndices(uint64_t epoch) const {
    std::vector<uint64_t> out;
    EpochIndices(epoch, &out);
    return out;
  }

 private:
  Sampler(const SamplerOptions& options, uint64_t samples_per_rank)
      : options_(options), samples_per_rank_(samples_per_rank) {}

  // The epoch's whole order over [0, dataset_size): a permutation, or the
  // identity without shuffle. `a` is resized to dataset_size.
  void Order(uint64_t epoch, std::vector<uint64_t>* a) const;

  SamplerOptions options_;
  uint64_t samples_per_rank_;
};

}  // namespace saturate::feed

#endif  // SATURATE_FEED_SAMPLER_H_
