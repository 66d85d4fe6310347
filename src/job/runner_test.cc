#include "job/runner.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/testing.h"
#include "saturate/watch/watcher.h"

namespace saturate::job {
namespace {

nlohmann::json Meta(const std::string& run_dir) {
  return nlohmann::json::parse(testing::ReadFileOrFail(run_dir + "/meta.json"));
}

JobOptions Options(const std::string& run_dir, std::vector<std::string> argv) {
  JobOptions o;
  o.argv = std::move(argv);
  o.run_dir = run_dir;
  o.interval_ns = 50'000'000;
  o.gpus = false;
  return o;
}

TEST(RunnerTest, TheCommandSeesRunDirBootstrapAndExtraEnv) {
  testing::TempDir dir;
  const std::string run = dir.Join("run");
  JobOptions o = Options(run, {"sh", "-c",
                               "echo \"$SATURATE_RUN_DIR|$SATURATE_AUTO|$PYTHONPATH|"
                               "$SATURATE_TUNE_X\" > \"$SATURATE_RUN_DIR/env\""});
  o.env = {{"SATURATE_TUNE_X", "4"}};
  SATURATE_ASSERT_OK_AND_ASSIGN(JobResult r, RunJob(o));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.ended_by, "exit");
  EXPECT_FALSE(r.cancelled);
  const std::string env = testing::ReadFileOrFail(run + "/env");
  // SATURATE_RUN_DIR, SATURATE_AUTO, then PYTHONPATH starting with the bootstrap.
  EXPECT_EQ(env.rfind(run + "|1|" + run + "/.auto", 0), 0u) << env;
  EXPECT_NE(env.find("|4\n"), std::string::npos) << env;
  EXPECT_TRUE(std::filesystem::exists(run + "/.auto/sitecustomize.py"));
  EXPECT_TRUE(std::filesystem::exists(run + "/.auto/saturate_autotrace.py"));
  const nlohmann::json meta = Meta(run);
  EXPECT_EQ(meta["auto_instrument"], true);
  EXPECT_EQ(meta["exit_code"], 0);
  EXPECT_EQ(meta["command"][0], "sh");
}

TEST(RunnerTest, AutoInstrumentationOff) {
  testing::TempDir dir;
  const std::string run = dir.Join("run");
  JobOptions o = Options(run, {"sh", "-c", "echo \"$SATURATE_AUTO\" > \"$SATURATE_RUN_DIR/env\""});
  o.auto_instrument = false;
  SATURATE_ASSERT_OK_AND_ASSIGN(JobResult r, RunJob(o));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(testing::ReadFileOrFail(run + "/env"), "0\n");
  EXPECT_FALSE(std::filesystem::exists(run + "/.auto"));
  EXPECT_EQ(Meta(run)["auto_instrument"], false);
}

TEST(RunnerTest, ASharedBootstrapFolder) {
  testing::TempDir dir;
  JobOptions o = Options(dir.Join("trial-001"),
                         {"sh", "-c", "echo \"$PYTHONPATH\" > \"$SATURATE_RUN_DIR/env\""});
  o.bootstrap_dir = dir.Join(".auto");
  SATURATE_ASSERT_OK_AND_ASSIGN(JobResult r, RunJob(o));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(testing::ReadFileOrFail(dir.Join("trial-001/env")).rfind(dir.Join(".auto"), 0), 0u);
  EXPECT_TRUE(std::filesystem::exists(dir.Join(".auto/sitecustomize.py")));
  EXPECT_FALSE(std::filesystem::exists(dir.Join("trial-001/.auto")));
}

TEST(RunnerTest, ExitCodesPassThrough) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK_AND_ASSIGN(JobResult seven,
                                RunJob(Options(dir.Join("a"), {"sh", "-c", "exit 7"})));
  EXPECT_EQ(seven.exit_code, 7);
  EXPECT_EQ(seven.ended_by, "exit");
  EXPECT_EQ(Meta(dir.Join("a"))["exit_code"], 7);
  SATURATE_ASSERT_OK_AND_ASSIGN(JobResult killed,
                                RunJob(Options(dir.Join("b"), {"sh", "-c", "kill -KILL $$"})));
  EXPECT_EQ(killed.exit_code, 128 + SIGKILL);
  EXPECT_FALSE(killed.cancelled);
  SATURATE_ASSERT_OK_AND_ASSIGN(JobResult interrupted,
                                RunJob(Options(dir.Join("c"), {"sh", "-c", "kill -INT $$"})));
  EXPECT_EQ(interrupted.exit_code, 128 + SIGINT);
  EXPECT_TRUE(interrupted.cancelled);  // Ctrl-C reached the command
}

TEST(RunnerTest, NoRunDirectoryNoBootstrap) {
  JobOptions o = Options("", {"sh", "-c", "test -z \"$SATURATE_RUN_DIR$SATURATE_AUTO\""});
  SATURATE_ASSERT_OK_AND_ASSIGN(JobResult r, RunJob(o));
  EXPECT_EQ(r.exit_code, 0);
}

TEST(RunnerTest, TheTimeBudgetEndsASleepingCommand) {
  testing::TempDir dir;
  JobOptions o = Options(dir.Join("run"), {"sleep", "30"});
  o.time_budget_ns = 300'000'000;
  o.grace_ns = 2'000'000'000;
  SATURATE_ASSERT_OK_AND_ASSIGN(JobResult r, RunJob(o));
  EXPECT_EQ(r.ended_by, "time");
  EXPECT_EQ(r.exit_code, 128 + SIGTERM);
  EXPECT_GE(r.wall_s, 0.25);
  EXPECT_LT(r.wall_s, 10);
  EXPECT_EQ(Meta(dir.Join("run"))["exit_code"], 128 + SIGTERM);
}

TEST(RunnerTest, SigkillAfterTheGrace) {
  testing::TempDir dir;
  JobOptions o =
      Options(dir.Join("run"), {"sh", "-c", "trap '' TERM; while :; do sleep 0.05; done"});
  o.time_budget_ns = 200'000'000;
  o.grace_ns = 300'000'000;
  SATURATE_ASSERT_OK_AND_ASSIGN(JobResult r, RunJob(o));
  EXPECT_EQ(r.ended_by, "time");
  EXPECT_EQ(r.exit_code, 128 + SIGKILL);
}

TEST(RunnerTest, TheStepBudgetCountsAutoMarks) {
  testing::TempDir dir;
  JobOptions o =
      Options(dir.Join("run"),
              {"sh", "-c",
               "i=0; while :; do i=$((i+1)); echo \"{\\\"ph\\\":\\\"step\\\",\\\"step\\\":$i}\" >> "
               "\"$SATURATE_RUN_DIR/spans-$$-auto.jsonl\"; sleep 0.02; done"});
  o.step_budget = 10;
  o.time_budget_ns = 20'000'000'000;
  o.grace_ns = 2'000'000'000;
  SATURATE_ASSERT_OK_AND_ASSIGN(JobResult r, RunJob(o));
  EXPECT_EQ(r.ended_by, "steps");
  EXPECT_LT(r.wall_s, 15);
}

TEST(RunnerTest, CapturedOutput) {
  testing::TempDir dir;
  JobOptions o = Options(dir.Join("run"), {"sh", "-c",
                                           "for i in 1 2 3 4 5; do echo line $i; done;"
                                           " echo oops >&2; exit 3"});
  o.capture_output = true;
  o.tail_lines = 3;
  std::string seen;
  o.on_output = [&seen](std::string_view chunk) { seen.append(chunk); };
  SATURATE_ASSERT_OK_AND_ASSIGN(JobResult r, RunJob(o));
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.output_tail, (std::vector<std::string>{"line 4", "line 5", "oops"}));
  EXPECT_EQ(seen, "line 1\nline 2\nline 3\nline 4\nline 5\noops\n");
  EXPECT_EQ(testing::ReadFileOrFail(dir.Join("run/output.log")), seen);
}

TEST(RunnerTest, WithoutACommandTheTimeBudgetEndsTheWatch) {
  testing::TempDir dir;
  JobOptions o = Options(dir.Join("run"), {});
  o.time_budget_ns = 200'000'000;
  int ticks = 0;
  SATURATE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Job> job, Job::Start(o));
  EXPECT_FALSE(job->auto_instrumented());
  SATURATE_ASSERT_OK_AND_ASSIGN(JobResult r, job->Run([&ticks] { ++ticks; }));
  EXPECT_EQ(r.ended_by, "time");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_GT(ticks, 0);
  EXPECT_GT(job->watcher().stats().samples, 0u);
  const nlohmann::json meta = Meta(dir.Join("run"));
  EXPECT_FALSE(meta.contains("exit_code"));
  EXPECT_EQ(meta["auto_instrument"], false);
}

TEST(RunnerTest, BadOptions) {
  EXPECT_TRUE(testing::HasError(Job::Start(Options("", {"saturate-no-such-command-xyz"})).status(),
                                StatusCode::kNotFound, {"command not found"}));
  JobOptions both = Options("", {"true"});
  both.pid = 1;
  EXPECT_TRUE(testing::HasError(Job::Start(both).status(), StatusCode::kInvalidArgument, {}));
  JobOptions capture = Options("", {"true"});
  capture.capture_output = true;
  EXPECT_TRUE(testing::HasError(Job::Start(capture).status(), StatusCode::kInvalidArgument, {}));
}

}  // namespace
}  // namespace saturate::job
