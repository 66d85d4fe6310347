#include "tune/knee.h"

#include <gtest/gtest.h>

#include <random>

namespace saturate::tune {
namespace {

TEST(KneeTest, Plateau) {
  const Knee k = FindKnee({{1, 100}, {2, 195}, {4, 390}, {8, 400}, {16, 405}});
  EXPECT_EQ(k.shape, Knee::Shape::kPlateau);
  EXPECT_EQ(k.knee, 2u);  // 390 is within 5% of 405
  EXPECT_EQ(k.best, 4u);
  EXPECT_NE(k.words.find("levels off at 4 threads"), std::string::npos) << k.words;
}

TEST(KneeTest, MoreThreadsHurt) {
  const Knee k = FindKnee({{1, 100}, {2, 190}, {4, 350}, {8, 340}, {16, 250}});
  EXPECT_EQ(k.shape, Knee::Shape::kDeclining);
  EXPECT_EQ(k.knee, 2u);
  EXPECT_EQ(k.best, 2u);
  EXPECT_NE(k.words.find("falls"), std::string::npos) << k.words;
}

TEST(KneeTest, StillRising) {
  const Knee k = FindKnee({{1, 100}, {2, 200}, {4, 400}});
  EXPECT_EQ(k.shape, Knee::Shape::kRising);
  EXPECT_EQ(k.knee, 2u);
  EXPECT_NE(k.words.find("try more"), std::string::npos);
}

TEST(KneeTest, EdgeCases) {
  EXPECT_EQ(FindKnee({}).shape, Knee::Shape::kNone);
  const Knee one = FindKnee({{4, 10}});
  EXPECT_EQ(one.shape, Knee::Shape::kRising);
  EXPECT_EQ(one.knee, 0u);
  const Knee flat = FindKnee({{1, 100}, {2, 101}, {4, 99}});
  EXPECT_EQ(flat.shape, Knee::Shape::kPlateau);
  EXPECT_EQ(flat.knee, 0u);  // one thread does as well as any
}

// A loader that scales linearly to 6 cores and then loses 10% per extra
// doubling, measured with 2% noise: the knee lands at 4 or 8 threads.
TEST(KneeTest, NoisyLoaderCurve) {
  std::mt19937 rng(7);
  std::normal_distribution<double> noise(1.0, 0.02);
  int ok = 0;
  for (int trial = 0; trial < 100; ++trial) {
    std::vector<std::pair<double, double>> points;
    for (double t : {1.0, 2.0, 4.0, 8.0, 16.0, 32.0}) {
      const double truth = t <= 6 ? 100 * t : 600 * std::pow(0.9, std::log2(t / 6) * 2);
      points.push_back({t, truth * noise(rng)});
    }
    const Knee k = FindKnee(points);
    ok += (k.knee == 2 || k.knee == 3) && k.shape == Knee::Shape::kDeclining;
  }
  EXPECT_GE(ok, 95);
}

}  // namespace
}  // namespace saturate::tune
