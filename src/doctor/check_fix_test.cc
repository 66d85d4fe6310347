#include "doctor/check_fix.h"

#include <gtest/gtest.h>

namespace saturate::doctor {
namespace {

using Argv = std::vector<std::string>;

Finding WithFix(std::string cause, std::string key, double value, double lost_s = 10) {
  Finding x = NewFinding(std::move(cause), "title", lost_s, 100, 0.8);
  x.fix_value = {{std::move(key), value}};
  return x;
}

TEST(CheckFixTest, FindsTheFlagInEachSpelling) {
  const auto& w = WorkerFlags();
  EXPECT_EQ(FindFlagValue({"python", "t.py", "-j", "0"}, w, "0")->index, 3u);
  std::optional<FlagValue> eq = FindFlagValue({"t.py", "--workers=2"}, w, "2");
  ASSERT_TRUE(eq);
  EXPECT_EQ(eq->flag, "--workers=");
  EXPECT_EQ(eq->index, 1u);
  std::optional<FlagValue> attached = FindFlagValue({"t.py", "-j4"}, w, "4");
  ASSERT_TRUE(attached);
  EXPECT_TRUE(attached->attached);
  // The value must match: "-j 2" is not the flag that set num_workers=0.
  EXPECT_FALSE(FindFlagValue({"t.py", "-j", "2"}, w, "0"));
  // Any integer, for a factor of an unknown batch size; not a word.
  EXPECT_EQ(FindFlagValue({"t.py", "--batch-size", "32"}, BatchFlags(), std::nullopt)->value, "32");
  EXPECT_FALSE(FindFlagValue({"t.py", "--batch-size", "auto"}, BatchFlags(), std::nullopt));
}

TEST(CheckFixTest, WorkersFixBecomesAPlaceholder) {
  Features f;
  f.loader_threads = 0;
  Result<KnobChange> c =
      KnobForFix(WithFix("input_pipeline", "num_workers", 2), f, {"python", "t.py", "-j", "0"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->knob, "num_workers");
  EXPECT_EQ(c->from, "0");
  EXPECT_EQ(c->to, "2");
  EXPECT_EQ(c->command, (Argv{"python", "t.py", "-j", "{num_workers}"}));

  f.loader_threads = 1;
  c = KnobForFix(WithFix("input_pipeline", "num_workers", 2), f, {"t.py", "--workers=1"});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->command, (Argv{"t.py", "--workers={num_workers}"}));
}

TEST(CheckFixTest, BatchFactorScalesTheFlagsValue) {
  Features f;  // no loader counters: the batch size is unknown
  Result<KnobChange> c =
      KnobForFix(WithFix("parallelism", "batch_size_factor", 4), f, {"t.py", "-b", "16"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->knob, "batch_size");
  EXPECT_EQ(c->from, "16");
  EXPECT_EQ(c->to, "64");
  EXPECT_EQ(c->command, (Argv{"t.py", "-b", "{batch_size}"}));
}

TEST(CheckFixTest, SaysWhyAFixIsNotAFlag) {
  Features f;
  f.loader_threads = 0;
  Result<KnobChange> c = KnobForFix(WithFix("input_pipeline", "num_workers", 2), f, {"t.py"});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("no flag that passes num_workers 0"), std::string::npos)
      << c.status().ToString();
  c = KnobForFix(WithFix("checkpoint_stall", "checkpoint_interval_s", 600), f, {"t.py"});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("not a command-line setting"), std::string::npos);
  Finding no_value = NewFinding("io_bound", "t", 1, 10, 1);
  EXPECT_FALSE(KnobForFix(no_value, f, {"t.py"}).ok());
}

Prediction Predicted(double speedup, bool upper_bound = false) {
  Prediction p;
  p.speedup = speedup;
  p.upper_bound = upper_bound;
  return p;
}

TEST(CheckFixTest, JudgesTheGainAgainstThePrediction) {
  FixCheck c;
  JudgeCheck(Predicted(1.28), 1.21, true, &c);  // gains 21% vs 28%: within 30% of it
  EXPECT_TRUE(c.within_tolerance) << c.verdict;
  EXPECT_NE(c.verdict.find("as predicted"), std::string::npos);
  JudgeCheck(Predicted(2.0), 1.3, true, &c);  // 30% vs 100%
  EXPECT_FALSE(c.within_tolerance) << c.verdict;
  JudgeCheck(Predicted(1.02), 1.0, false, &c);  // small: the 3-point noise floor
  EXPECT_TRUE(c.within_tolerance) << c.verdict;
  EXPECT_NE(c.verdict.find("no reliable gain"), std::string::npos);
  // An upper bound is met from 70% of it up to it.
  JudgeCheck(Predicted(2.0, true), 1.8, true, &c);
  EXPECT_TRUE(c.within_tolerance) << c.verdict;
  JudgeCheck(Predicted(2.0, true), 1.4, true, &c);
  EXPECT_FALSE(c.within_tolerance) << c.verdict;
  JudgeCheck(Predicted(1.5), 0, false, &c);
  EXPECT_FALSE(c.within_tolerance);
  EXPECT_NE(c.verdict.find("not measured"), std::string::npos);
}

TEST(CheckFixTest, ABatchChecksGainGivesTheFixedShare) {
  // 5 / (1/3 + 5 x 2/3) = 1.364: a third of the step was fixed.
  EXPECT_NEAR(*FixedShareFromSpeedup(5, 5 / (1.0 / 3 + 10.0 / 3)), 1.0 / 3, 1e-9);
  EXPECT_NEAR(*FixedShareFromSpeedup(4, 1.0), 0, 1e-9);  // no gain: nothing fixed
  EXPECT_NEAR(*FixedShareFromSpeedup(4, 4.0), 1, 1e-9);  // x4: all fixed
  EXPECT_FALSE(FixedShareFromSpeedup(1, 1.2));
}

TEST(CheckFixTest, AFixWithoutAReliableGainIsDemoted) {
  std::vector<Finding> ranked = {WithFix("input_pipeline", "num_workers", 2, 30),
                                 WithFix("checkpoint_stall", "checkpoint_interval_s", 60, 10)};
  FixCheck miss;
  miss.reliable_gain = false;
  std::vector<Finding> out = ApplyCheck(ranked, 0, miss, 2.0);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].cause, "checkpoint_stall");
  EXPECT_EQ(out[1].cause, "input_pipeline");
  EXPECT_TRUE(out[1].demoted);
  ASSERT_TRUE(out[1].check);

  FixCheck hit;
  hit.reliable_gain = true;
  out = ApplyCheck(ranked, 0, hit, 2.0);
  EXPECT_EQ(out[0].cause, "input_pipeline");
  EXPECT_FALSE(out[0].demoted);
}

}  // namespace
}  // namespace saturate::doctor
