#include "feed/random.h"

#include <bit>

namespace saturate::feed {
namespace {

inline void MulHiLo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t product = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(product >> 32);
  *lo = static_cast<uint32_t>(product);
}

}  // namespace

std::array<uint32_t, 4> Philox::Block(uint64_t counter_hi, uint64_t counter_lo) const {
  uint32_t c0 = static_cast<uint32_t>(counter_lo);
  uint32_t c1 = static_cast<uint32_t>(counter_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(counter_hi);
  uint32_t c3 = static_cast<uint32_t>(counter_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(key_);
  uint32_t k1 = static_cast<uint32_t>(key_ >> 32);
  for (int round = 0; round < kRounds; ++round) {
    if (round > 0) {  // Random123 bumps the key between rounds.
      k0 += kWeyl0;
      k1 += kWeyl1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    MulHiLo(kMultiplier0, c0, &hi0, &lo0);
    MulHiLo(kMultiplier1, c2, &hi1, &lo1);
    const uint32_t n0 = hi1 ^ c1 ^ k0;
    const uint32_t n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  return {c0, c1, c2, c3};
}

uint64_t DeriveKey(uint64_t seed, RngDomain domain, uint64_t value) {
  const std::array<uint32_t, 4> w = Philox(seed).Block(static_cast<uint64_t>(domain), value);
  return (static_cast<uint64_t>(w[1]) << 32) | w[0];
}

void PhiloxStream::Refill() {
  buffer_ = philox_.Block(stream_, next_block_++);
  pos_ = 0;
}

uint64_t PhiloxStream::UniformBelow(uint64_t bound) {
  if (bound <= 1) return 0;
  if (bound <= (uint64_t{1} << 32)) {
    // Lemire, "Fast Random Integer Generation in an Interval" (2019).
    uint64_t m = static_cast<uint64_t>(NextU32()) * bound;
    uint32_t low = static_cast<uint32_t>(m);
    if (low < bound) {
      const uint32_t threshold = static_cast<uint32_t>((uint64_t{1} << 32) % bound);
      while (low < threshold) {
        m = static_cast<uint64_t>(NextU32()) * bound;
        low = static_cast<uint32_t>(m);
      }
    }
    return m >> 32;
  }
  // bound > 2^32: keep the bits up to bound's top bit, reject values >= bound
  // (fewer than 2 draws expected).
  const uint64_t mask = ~uint64_t{0} >> std::countl_zero(bound - 1);
  uint64_t x;
  do {
    x = NextU64() & mask;
  } while (x >= bound);
  return x;
}

}  // namespace saturate::feed
