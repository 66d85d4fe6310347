#include "feed/random.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <set>
#include <vector>

namespace saturate::feed {
namespace {

// Philox4x32-10 known answers from Random123's kat_vectors, words in
// Random123 order: counter {c0, c1, c2, c3}, key {k0, k1}.
struct Kat {
  std::array<uint32_t, 4> counter;
  std::array<uint32_t, 2> key;
  std::array<uint32_t, 4> expected;
};

std::array<uint32_t, 4> RunKat(const Kat& kat) {
  const uint64_t key = (uint64_t{kat.key[1]} << 32) | kat.key[0];
  const uint64_t lo = (uint64_t{kat.counter[1]} << 32) | kat.counter[0];
  const uint64_t hi = (uint64_t{kat.counter[3]} << 32) | kat.counter[2];
  return Philox(key).Block(hi, lo);
}

TEST(PhiloxTest, KnownAnswerVectors) {
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& kat : kats) EXPECT_EQ(RunKat(kat), kat.expected);
}

TEST(PhiloxTest, BlockIsPureAndKeyed) {
  const Philox p(42);
  EXPECT_EQ(p.Block(1, 2), p.Block(1, 2));
  EXPECT_NE(p.Block(1, 2), p.Block(2, 1));
  EXPECT_NE(p.Block(1, 2), Philox(43).Block(1, 2));
}

TEST(DeriveKeyTest, DomainsSeedsAndValuesDiffer) {
  const uint64_t base = DeriveKey(7, RngDomain::kSample, 3);
  EXPECT_EQ(base, DeriveKey(7, RngDomain::kSample, 3));
  EXPECT_NE(base, DeriveKey(7, RngDomain::kEpochShuffle, 3));
  EXPECT_NE(base, DeriveKey(8, RngDomain::kSample, 3));
  EXPECT_NE(base, DeriveKey(7, RngDomain::kSample, 4));
}

TEST(PhiloxStreamTest, WalksBlocksWordByWord) {
  PhiloxStream s(99, 5);
  const Philox p(99);
  for (uint64_t block = 0; block < 3; ++block) {
    const std::array<uint32_t, 4> w = p.Block(5, block);
    for (uint32_t word : w) EXPECT_EQ(s.NextU32(), word);
  }
}

std::vector<uint32_t> Draw(SampleRng rng, int n) {
  std::vector<uint32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(rng.NextU32());
  return v;
}

TEST(SampleRngTest, SameTripleSameStream) {
  EXPECT_EQ(Draw(SampleRng(1, 2, 3), 64), Draw(SampleRng(1, 2, 3), 64));
  SampleRng a(5, 0, 1000), b(5, 0, 1000);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.Uniform(), b.Uniform());
}

TEST(SampleRngTest, DifferentTriplesDiffer) {
  const std::vector<uint32_t> base = Draw(SampleRng(1, 2, 3), 16);
  EXPECT_NE(base, Draw(SampleRng(0, 2, 3), 16));
  EXPECT_NE(base, Draw(SampleRng(1, 0, 3), 16));
  EXPECT_NE(base, Draw(SampleRng(1, 2, 4), 16));
  // Swapping the roles of epoch and index must not alias.
  EXPECT_NE(Draw(SampleRng(1, 2, 3), 16), Draw(SampleRng(1, 3, 2), 16));
  // First words of many neighbouring samples are all distinct (a collision
  // among 10^4 32-bit values has probability ~1%; these are fixed, so the
  // test is deterministic).
  std::set<uint64_t> firsts;
  for (uint64_t i = 0; i < 10000; ++i) firsts.insert(SampleRng(1, 2, i).NextU64());
  EXPECT_EQ(firsts.size(), 10000u);
}

TEST(SampleRngTest, UniformInUnitIntervalAndRoughlyFlat) {
  constexpr int kDraws = 100000;
  constexpr int kBins = 10;
  std::array<int, kBins> bins{};
  SampleRng rng(2024, 1, 17);
  double sum = 0;
  for (int i = 0; i < kDraws; ++i) {
    const double u = rng.Uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    ++bins[static_cast<int>(u * kBins)];
  }
  const double expected = static_cast<double>(kDraws) / kBins;
  double chi2 = 0;
  for (int count : bins) chi2 += (count - expected) * (count - expected) / expected;
  // 9 degrees of freedom: P(chi2 > 40) < 1e-5.
  EXPECT_LT(chi2, 40.0);
  EXPECT_NEAR(sum / kDraws, 0.5, 0.01);
}

TEST(SampleRngTest, UniformAcrossSamplesIsFlat) {
  // The first draw of consecutive samples (what an augmentation uses) must be
  // uniform too, not just draws within one stream.
  constexpr int kSamples = 100000;
  std::array<int, 10> bins{};
  for (int i = 0; i < kSamples; ++i) ++bins[static_cast<int>(SampleRng(3, 4, i).Uniform() * 10)];
  double chi2 = 0;
  for (int count : bins) chi2 += (count - 10000.0) * (count - 10000.0) / 10000.0;
  EXPECT_LT(chi2, 40.0);
}

TEST(SampleRngTest, UniformHas53BitResolution) {
  // The low bits of the mantissa grid are used: some draw is not a multiple
  // of 2^-32.
  SampleRng rng(1, 1, 1);
  bool fine = false;
  for (int i = 0; i < 16 && !fine; ++i) {
    const double scaled = rng.Uniform() * 0x1.0p32;
    fine = scaled != static_cast<double>(static_cast<uint64_t>(scaled));
  }
  EXPECT_TRUE(fine);
}

TEST(PhiloxStreamTest, UniformBelowInRangeAndUnbiased) {
  PhiloxStream s(11, 0);
  EXPECT_EQ(s.UniformBelow(0), 0u);
  EXPECT_EQ(s.UniformBelow(1), 0u);
  std::array<int, 7> bins{};
  for (int i = 0; i < 70000; ++i) {
    const uint64_t v = s.UniformBelow(7);
    ASSERT_LT(v, 7u);
    ++bins[v];
  }
  double chi2 = 0;
  for (int count : bins) chi2 += (count - 10000.0) * (count - 10000.0) / 10000.0;
  EXPECT_LT(chi2, 35.0);  // 6 dof: P(chi2 > 35) < 1e-5.

  const uint64_t big = (uint64_t{1} << 40) + 3;
  const uint64_t full = uint64_t{1} << 32;
  bool above_32_bits = false;
  for (int i = 0; i < 1000; ++i) {
    const uint64_t v = s.UniformBelow(big);
    ASSERT_LT(v, big);
    above_32_bits |= v >= full;
    ASSERT_LT(s.UniformBelow(full), full);
  }
  EXPECT_TRUE(above_32_bits);
  const uint64_t max = ~uint64_t{0};
  for (int i = 0; i < 100; ++i) ASSERT_LT(s.UniformBelow(max), max);
}

}  // namespace
}  // namespace saturate::feed
