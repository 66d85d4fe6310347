#include "doctor/gate.h"

#include <gtest/gtest.h>

#include "base/testing.h"

namespace saturate::doctor {
namespace {

Finding Lost(std::string cause, double s, double pct) {
  Finding f;
  f.cause = std::move(cause);
  f.time_lost_s = s;
  f.time_lost_pct = pct;
  return f;
}

TEST(GateTest, ParsesPercentAndSeconds) {
  SATURATE_ASSERT_OK_AND_ASSIGN(Gate pct, ParseGate("input_pipeline>5%"));
  EXPECT_EQ(pct.cause, "input_pipeline");
  EXPECT_DOUBLE_EQ(pct.threshold, 5);
  EXPECT_TRUE(pct.percent);
  SATURATE_ASSERT_OK_AND_ASSIGN(Gate s, ParseGate("any>2.5s"));
  EXPECT_EQ(s.cause, "any");
  EXPECT_DOUBLE_EQ(s.threshold, 2.5);
  EXPECT_FALSE(s.percent);
}

TEST(GateTest, BadGatesNameTheFlagAndWhatIsWrong) {
  EXPECT_TRUE(testing::HasError(ParseGate("input_pipeline").status(), StatusCode::kInvalidArgument,
                                {"--fail-on", "CAUSE>N%"}));
  EXPECT_TRUE(testing::HasError(ParseGate("dataloader>5%").status(), StatusCode::kInvalidArgument,
                                {"unknown cause 'dataloader'"}));
  EXPECT_TRUE(
      testing::HasError(ParseGate("io_bound>5").status(), StatusCode::kInvalidArgument, {"unit"}));
  EXPECT_TRUE(testing::HasError(ParseGate("io_bound>x%").status(), StatusCode::kInvalidArgument,
                                {"not a non-negative number"}));
  EXPECT_TRUE(
      testing::HasError(ParseGate("io_bound>-1s").status(), StatusCode::kInvalidArgument, {}));
}

TEST(GateTest, FailsOnlyWhenTheCauseExceedsTheThreshold) {
  const std::vector<Finding> findings = {Lost("input_pipeline", 12, 20), Lost("io_bound", 1, 1.5)};
  EXPECT_TRUE(FailedGates({*ParseGate("input_pipeline>25%")}, findings).empty());
  EXPECT_TRUE(FailedGates({*ParseGate("cpu_contention>0%")}, findings).empty());
  const auto failed = FailedGates({*ParseGate("input_pipeline>5%")}, findings);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_NE(failed[0].find("input_pipeline lost 20.0%"), std::string::npos) << failed[0];
  // "any" checks every finding, in seconds here.
  EXPECT_EQ(FailedGates({*ParseGate("any>0.5s")}, findings).size(), 2u);
  EXPECT_EQ(FailedGates({*ParseGate("any>5s")}, findings).size(), 1u);
}

}  // namespace
}  // namespace saturate::doctor
