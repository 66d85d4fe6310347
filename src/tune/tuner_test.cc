#include "tune/tuner.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "base/testing.h"

namespace saturate::tune {
namespace {

TEST(FeedSweepTest, KneeThenTheShallowestGoodPrefetch) {
  FeedSweepOptions o;
  o.dataset = "data.sat";
  o.root = "runs/x";
  o.threads = {1, 2, 4, 8};
  o.prefetch = {2, 4, 8};
  std::vector<std::pair<int, int>> measured;
  // Rises to 4 threads, then flat; prefetch 4 is as good as 8.
  auto measure = [&](int t, int p) -> Result<FeedPoint> {
    measured.emplace_back(t, p);
    const double rate = 100.0 * std::min(t, 4) * (p >= 4 ? 1.1 : 1.0);
    return FeedPoint{rate, double(t), 5, 10};
  };
  std::vector<size_t> done;
  SATURATE_ASSERT_OK_AND_ASSIGN(nlohmann::json j,
                                RunFeedSweep(o, measure, [&](const TrialProgress& p) {
                                  done.push_back(p.done);
                                  EXPECT_EQ(p.estimated, 6u);
                                  EXPECT_EQ(p.row["id"], p.done);
                                }));
  EXPECT_EQ(measured,
            (std::vector<std::pair<int, int>>{{1, 2}, {2, 2}, {4, 2}, {8, 2}, {4, 4}, {4, 8}}));
  EXPECT_EQ(done, (std::vector<size_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(j["mode"], "feed");
  EXPECT_EQ(j["knee"]["threads"], 4);
  EXPECT_EQ(j["recommendation"]["config"]["prefetch"], "4");
  EXPECT_EQ(j["recommendation"]["env"]["SATURATE_TUNE_THREADS"], "4");
  EXPECT_EQ(j["trials"][4]["best"], true);
}

TEST(FeedSweepTest, AMeasurementErrorStops) {
  FeedSweepOptions o;
  o.threads = {1, 2};
  o.prefetch = {2};
  auto measure = [](int, int) -> Result<FeedPoint> { return Status::NotFound("no dataset"); };
  EXPECT_FALSE(RunFeedSweep(o, measure, nullptr).ok());
}

// Two configurations of a shell command whose printed rate doubles with x.
TEST(CommandTunerTest, GridByMetricThenVerify) {
  testing::TempDir dir;
  CommandTuneOptions o;
  SATURATE_ASSERT_OK_AND_ASSIGN(o.space, ParseSpace({"x=1,2"}));
  o.start = FirstConfig(o.space);
  o.command = {"sh", "-c",
               "test \"$SATURATE_TUNE_X\" = {x} || exit 9; "
               "while :; do echo \"rate=$(( {x} * 100 ))\"; sleep 0.02; done"};
  o.metric = "rate=([0-9.]+)";
  o.verify_rounds = 1;
  o.trial_ns = 400'000'000;
  o.grace_ns = 1'000'000'000;
  o.interval_ns = 50'000'000;
  o.gpus = false;
  o.root = dir.Join("tune");
  SATURATE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<CommandTuner> tuner, CommandTuner::Create(o));
  EXPECT_EQ(tuner->strategy_name(), "grid");
  EXPECT_EQ(tuner->configurations(), 2u);
  std::vector<std::string> stages;
  SATURATE_ASSERT_OK_AND_ASSIGN(CommandTuneResult r, tuner->Run([&](const TrialProgress& p) {
    stages.push_back(p.row["stage"].get<std::string>());
    EXPECT_EQ(p.row["ended_by"], "time");
    EXPECT_GE(p.estimated, p.done);
  }));
  EXPECT_TRUE(r.found);
  EXPECT_FALSE(r.cancelled);
  EXPECT_EQ(stages, (std::vector<std::string>{"grid", "grid", "verify start", "verify best"}));
  const nlohmann::json& j = r.report;
  EXPECT_EQ(j["unit"], "metric");
  EXPECT_EQ(j["recommendation"]["config"]["x"], "2");
  EXPECT_EQ(j["recommendation"]["argv"][2].get<std::string>().find("{x}"), std::string::npos);
  EXPECT_DOUBLE_EQ(j["trials"][1]["throughput"].get<double>(), 200);
  EXPECT_EQ(j["verify"]["rounds"], 1);
  EXPECT_TRUE(std::filesystem::exists(o.root + "/trial-001/output.log"));
  EXPECT_TRUE(std::filesystem::exists(o.root + "/trial-001/meta.json"));
  EXPECT_TRUE(std::filesystem::exists(o.root + "/.auto/sitecustomize.py"));
  SATURATE_ASSERT_OK(WriteTuneFiles(o.root, j, /*html=*/true));
  EXPECT_TRUE(std::filesystem::exists(o.root + "/tune.json"));
  EXPECT_TRUE(std::filesystem::exists(o.root + "/report.html"));
}

TEST(CommandTunerTest, BadOptions) {
  CommandTuneOptions o;
  o.root = "unused";
  EXPECT_TRUE(testing::HasError(CommandTuner::Create(o).status(), StatusCode::kInvalidArgument,
                                {"no command"}));
  o.command = {"true"};
  o.metric = "rate=(";
  EXPECT_FALSE(CommandTuner::Create(o).ok());
}

}  // namespace
}  // namespace saturate::tune
