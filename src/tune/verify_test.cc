#include "tune/verify.h"

#include <gtest/gtest.h>

#include <random>

namespace saturate::tune {
namespace {

TEST(VerifyTest, ClearGainIsReliable) {
  const VerifyResult r = CompareAB({100, 102}, {140, 143});
  EXPECT_EQ(r.rounds, 2);
  EXPECT_NEAR(r.ratio, 283.0 / 202.0, 1e-9);
  EXPECT_NEAR(r.ratio_min, 1.4, 1e-9);
  EXPECT_NEAR(r.ratio_max, 143.0 / 102.0, 1e-9);
  EXPECT_TRUE(r.reliable_gain);
  EXPECT_NE(r.verdict.find("1.40x"), std::string::npos) << r.verdict;
}

TEST(VerifyTest, GainInsideTheNoiseIsNotReliable) {
  // +4% on average, but the repeats scatter by ~10%.
  const VerifyResult r = CompareAB({100, 120, 95}, {118, 112, 105});
  EXPECT_FALSE(r.reliable_gain);
  EXPECT_EQ(r.verdict.rfind("no reliable gain", 0), 0u) << r.verdict;
}

TEST(VerifyTest, OneRoundAgainstTheGainIsNotReliable) {
  const VerifyResult r = CompareAB({100, 100, 100}, {150, 150, 99});
  EXPECT_LT(r.ratio_min, 1.0);
  EXPECT_FALSE(r.reliable_gain);
}

TEST(VerifyTest, SmallGainBelowTheFloorIsNotReliable) {
  const VerifyResult r = CompareAB({100, 100}, {102, 102}, /*min_gain_rel=*/0.03);
  EXPECT_FALSE(r.reliable_gain);
  EXPECT_TRUE(CompareAB({100, 100}, {102, 102}, 0.01).reliable_gain);
}

TEST(VerifyTest, SlowerIsNoGainAndMissingRoundsAreSaid) {
  EXPECT_FALSE(CompareAB({100, 100}, {80, 81}).reliable_gain);
  const VerifyResult none = CompareAB({}, {});
  EXPECT_EQ(none.rounds, 0);
  EXPECT_FALSE(none.reliable_gain);
  EXPECT_NE(none.verdict.find("no round"), std::string::npos);
  EXPECT_EQ(CompareAB({100, 0}, {150, 150}).rounds, 1);  // a failed repeat drops its round
}

// Over many noisy repeats the decision follows the truth: a 30% gain with 3%
// noise is found, an equal pair is (almost) never called a gain.
TEST(VerifyTest, DecisionOnNoisyRepeats) {
  std::mt19937 rng(42);
  std::normal_distribution<double> noise(1.0, 0.03);
  int found = 0, false_gain = 0;
  for (int i = 0; i < 200; ++i) {
    std::vector<double> a, b, c;
    for (int r = 0; r < 3; ++r) {
      a.push_back(100 * noise(rng));
      b.push_back(130 * noise(rng));
      c.push_back(100 * noise(rng));
    }
    found += CompareAB(a, b).reliable_gain;
    false_gain += CompareAB(a, c).reliable_gain;
  }
  EXPECT_GE(found, 195);
  EXPECT_LE(false_gain, 4);
}

}  // namespace
}  // namespace saturate::tune
