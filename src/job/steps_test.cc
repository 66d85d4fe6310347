#include "job/steps.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "base/testing.h"

namespace saturate::job {
namespace {

void Write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::string Marks(int n) {
  std::string text = "{\"ph\":\"M\",\"pid\":7,\"clock\":\"CLOCK_MONOTONIC\"}\n";
  for (int i = 1; i <= n; ++i) {
    text += "{\"ph\":\"step\",\"step\":" + std::to_string(i) + ",\"ts_ns\":1,\"pid\":7}\n";
    text += "{\"ph\":\"X\",\"name\":\"data_wait\",\"ts_ns\":1,\"dur_ns\":2}\n";
  }
  return text;
}

TEST(StepsTest, NoDirectoryNoMarks) { EXPECT_EQ(CountStepMarks("/nonexistent/run").steps(), 0); }

TEST(StepsTest, AJobsStepsAreRankZeros) {
  testing::TempDir dir;
  std::filesystem::create_directories(dir.Join("rank-0"));
  std::filesystem::create_directories(dir.Join("rank-1"));
  Write(dir.Join("rank-0/spans-7-auto.jsonl"), Marks(5));
  Write(dir.Join("rank-1/spans-8-auto.jsonl"), Marks(5));
  Write(dir.Join("spans-6-auto.jsonl"), Marks(1));  // the launcher is not a rank
  EXPECT_EQ(CountStepMarks(dir.path()).steps(), 5);
}

TEST(StepsTest, ExplicitMarksAcrossProcesses) {
  testing::TempDir dir;
  Write(dir.Join("spans-7.jsonl"), Marks(3));
  Write(dir.Join("spans-8.jsonl"), "{\"ph\": \"step\", \"step\": 1}\n");  // spaces tolerated
  Write(dir.Join("samples.jsonl"), Marks(50));                            // not a spans file
  const StepMarks m = CountStepMarks(dir.path());
  EXPECT_EQ(m.explicit_marks, 4);
  EXPECT_EQ(m.auto_marks, 0);
  EXPECT_EQ(m.steps(), 4);
}

TEST(StepsTest, AutoMarksCountOnlyWithoutExplicitOnes) {
  testing::TempDir dir;
  Write(dir.Join("spans-7-auto.jsonl"), Marks(5));
  Write(dir.Join("spans-9-auto.jsonl"), Marks(2));
  EXPECT_EQ(CountStepMarks(dir.path()).steps(), 7);
  // The same job also marks its steps itself: those count, not both.
  Write(dir.Join("spans-7.jsonl"), Marks(4));
  const StepMarks m = CountStepMarks(dir.path());
  EXPECT_EQ(m.explicit_marks, 4);
  EXPECT_EQ(m.auto_marks, 7);
  EXPECT_EQ(m.steps(), 4);
}

TEST(StepsTest, AnExplicitFileWithoutMarksLeavesTheAutoOnes) {
  testing::TempDir dir;
  Write(dir.Join("spans-7.jsonl"), Marks(0));  // spans (e.g. the loader's), no step marks
  Write(dir.Join("spans-7-auto.jsonl"), Marks(6));
  EXPECT_EQ(CountStepMarks(dir.path()).steps(), 6);
}

TEST(StepsTest, ALineBeingWrittenIsNotAMarkYet) {
  testing::TempDir dir;
  Write(dir.Join("spans-7.jsonl"), Marks(2) + "{\"ph\":\"step\",\"st");
  EXPECT_EQ(CountStepMarks(dir.path()).steps(), 2);
}

}  // namespace
}  // namespace saturate::job
