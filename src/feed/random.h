// Counter-based random numbers for the loader: Philox4x32-10 and the
// per-sample streams built on it.
//
// Philox4x32-10 is the Random123 generator (Salmon et al., SC'11): a keyed
// bijection of a 128-bit counter, so the n-th random block is computed
// directly from (key, n) with no state to save. That is what makes the
// pipeline resumable: every random decision is a pure function of
// (seed, epoch, sample_index, draw number), independent of thread count,
// worker scheduling or where a run was restarted.
//
// Word order (matches Random123's kat_vectors): the 64-bit key is
// {k0 = low 32 bits, k1 = high 32 bits}; the 128-bit counter is
// {c0 = low32(counter_lo), c1 = high32(counter_lo), c2 = low32(counter_hi),
// c3 = high32(counter_hi)}; Block() returns the output words {x0, x1, x2, x3}.
//
// Streams: DeriveKey(seed, domain, value) = the first two words of
// Philox(seed).Block(domain, value), used as the key of a PhiloxStream. Each
// consumer has its own domain, so e.g. the epoch shuffle and a sample's
// augmentation never share blocks even for equal (seed, epoch).
//
// Ownership: all types are small values with no heap state.
// Thread-safety: Philox and DeriveKey are pure and safe from any thread.
// PhiloxStream and SampleRng are mutable cursors: one object per thread (they
// are cheap to construct; construct one per sample rather than sharing).
#ifndef SATURATE_FEED_RANDOM_H_
#define SATURATE_FEED_RANDOM_H_

#include <array>
#include <cstdint>

namespace saturate::feed {

// The keyed Philox4x32-10 bijection. Pure; Block() does not advance anything.
class Philox {
 public:
  static constexpr uint32_t kMultiplier0 = 0xD2511F53u;
  static constexpr uint32_t kMultiplier1 = 0xCD9E8D57u;
  static constexpr uint32_t kWeyl0 = 0x9E3779B9u;
  static constexpr uint32_t kWeyl1 = 0xBB67AE85u;
  static constexpr int kRounds = 10;

  explicit Philox(uint64_t key) : key_(key) {}

  uint64_t key() const { return key_; }

  // The four output words for the 128-bit counter (counter_hi:counter_lo).
  std::array<uint32_t, 4> Block(uint64_t counter_hi, uint64_t counter_lo) const;

 private:
  uint64_t key_;
};

// Domains for DeriveKey: one per consumer of randomness, never reused.
enum class RngDomain : uint64_t {
  kEpochShuffle = 1,  // Sampler's per-epoch Fisher-Yates permutation.
  kSample = 2,        // SampleRng: per-sample augmentation decisions.
};

// A 64-bit key that is a pseudo-random function of (seed, domain, value).
uint64_t DeriveKey(uint64_t seed, RngDomain domain, uint64_t value);

// An endless stream of random words: the output of Philox(key) over the
// counters (stream, 0), (stream, 1), ... consumed word by word (x0..x3).
// 2^64 blocks per stream; it never wraps in practice.
class PhiloxStream {
 public:
  PhiloxStream(uint64_t key, uint64_t stream) : philox_(key), stream_(stream) {}

  uint32_t NextU32() {
    if (pos_ == 4) Refill();
    return buffer_[pos_++];
  }

  // Two consecutive words; the first one drawn is the high half.
  uint64_t NextU64() {
    const uint64_t hi = NextU32();
    return (hi << 32) | NextU32();
  }

  // Uniform double in [0, 1) on the 2^-53 grid (53 random bits; one NextU64).
  double Uniform() { return static_cast<double>(NextU64() >> 11) * 0x1.0p-53; }

  // Unbiased uniform integer in [0, bound); bound must be >= 1 (0 returns 0).
  // Bounds <= 2^32 use Lemire's multiply-shift with rejection (usually one
  // NextU32); larger bounds use masked rejection on NextU64.
  uint64_t UniformBelow(uint64_t bound);

 private:
  void Refill();

  Philox philox_;
  uint64_t stream_;
  uint64_t next_block_ = 0;
  std::array<uint32_t, 4> buffer_{};
  int pos_ = 4;  // 4 = buffer empty.
};

// The random stream of one sample in one epoch: a PhiloxStream with key
// DeriveKey(seed, kSample, epoch) and stream id sample_index. The same
// (seed, epoch, sample_index) gives the same sequence on every run, thread
// and machine; different triples give independent sequences.
//
// Uniform() matches saturate::image::UniformSource's contract ([0, 1), 53-bit
// resolution), so the lead can adapt it without src/feed depending on image.
class SampleRng {
 public:
  SampleRng(uint64_t seed, uint64_t epoch, uint64_t sample_index)
      : stream_(DeriveKey(seed, RngDomain::kSample, epoch), sample_index) {}

  uint32_t NextU32() { return stream_.NextU32(); }
  uint64_t NextU64() { return stream_.NextU64(); }
  double Uniform() { return stream_.Uniform(); }
  uint64_t UniformBelow(uint64_t bound) { return stream_.UniformBelow(bound); }

 private:
  PhiloxStream stream_;
};

}  // namespace saturate::feed

#endif  // SATURATE_FEED_RANDOM_H_
