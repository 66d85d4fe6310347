#include "watch/child.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "base/testing.h"

namespace saturate::watch {
namespace {

TEST(ChildTest, ExitCodesAsAShellReportsThem) {
  SATURATE_ASSERT_OK_AND_ASSIGN(Child ok, Child::Spawn({"true"}));
  SATURATE_ASSERT_OK_AND_ASSIGN(int code, ok.Wait());
  EXPECT_EQ(code, 0);
  SATURATE_ASSERT_OK_AND_ASSIGN(Child three, Child::Spawn({"sh", "-c", "exit 3"}));
  EXPECT_EQ(*three.Wait(), 3);
  EXPECT_EQ(*three.Wait(), 3);  // again, after reaping
  SATURATE_ASSERT_OK_AND_ASSIGN(Child killed, Child::Spawn({"sh", "-c", "kill -TERM $$"}));
  EXPECT_EQ(*killed.Wait(), 128 + SIGTERM);
}

TEST(ChildTest, ArgumentsAreArgvNotAShellString) {
  testing::TempDir dir;
  const std::string marker = dir.path() + "/marker";
  // With a shell, "; touch MARKER" would run; as argv it is just text echo prints.
  SATURATE_ASSERT_OK_AND_ASSIGN(Child c, Child::Spawn({"echo", "x; touch " + marker}));
  EXPECT_EQ(*c.Wait(), 0);
  EXPECT_FALSE(std::ifstream(marker).good());
}

TEST(ChildTest, ExtraEnvironmentReachesTheChild) {
  testing::TempDir dir;
  const std::string out = dir.path() + "/env";
  setenv("SATURATE_CHILD_TEST_KEEP", "kept", 1);
  setenv("SATURATE_CHILD_TEST_REPLACE", "old", 1);
  ChildOptions options;
  options.env = {{"SATURATE_CHILD_TEST_REPLACE", "new"}, {"SATURATE_CHILD_TEST_ADD", "a b"}};
  SATURATE_ASSERT_OK_AND_ASSIGN(
      Child c, Child::Spawn({"sh", "-c",
                             "echo \"$SATURATE_CHILD_TEST_KEEP|$SATURATE_CHILD_TEST_REPLACE|"
                             "$SATURATE_CHILD_TEST_ADD\" > " +
                                 out},
                            options));
  EXPECT_EQ(*c.Wait(), 0);
  std::ifstream in(out);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "kept|new|a b");
}

TEST(ChildTest, MissingCommandIsNotFound) {
  auto c = Child::Spawn({"saturate-no-such-command-xyz"});
  EXPECT_TRUE(testing::HasError(c.status(), StatusCode::kNotFound, {"command not found"}));
  EXPECT_TRUE(testing::HasError(Child::Spawn({}).status(), StatusCode::kInvalidArgument, {}));
}

TEST(ChildTest, SignalsSentToUsReachTheChild) {
  testing::TempDir dir;
  const std::string got = dir.path() + "/got";
  // The child records that it received SIGTERM, then exits 7.
  SATURATE_ASSERT_OK_AND_ASSIGN(Child c,
                                Child::Spawn({"sh", "-c",
                                              "trap 'echo term > " + got + "; exit 7' TERM; " +
                                                  "while :; do sleep 0.05; done"}));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let it set the trap
  ASSERT_EQ(kill(getpid(), SIGTERM), 0);                        // to us, as a scheduler would
  SATURATE_ASSERT_OK_AND_ASSIGN(int code, c.Wait());
  EXPECT_EQ(code, 7);
  std::ifstream in(got);
  std::string word;
  in >> word;
  EXPECT_EQ(word, "term");
}

TEST(ChildTest, TerminateSendsTermThenKill) {
  // Exits on SIGTERM: its code says so.
  SATURATE_ASSERT_OK_AND_ASSIGN(Child polite, Child::Spawn({"sleep", "30"}));
  SATURATE_ASSERT_OK_AND_ASSIGN(int code, polite.Terminate(2'000'000'000));
  EXPECT_EQ(code, 128 + SIGTERM);
  // Ignores SIGTERM: killed once the grace period passes.
  SATURATE_ASSERT_OK_AND_ASSIGN(
      Child stubborn, Child::Spawn({"sh", "-c", "trap '' TERM; while :; do sleep 0.05; done"}));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let it set the trap
  const auto start = std::chrono::steady_clock::now();
  SATURATE_ASSERT_OK_AND_ASSIGN(code, stubborn.Terminate(200'000'000));
  EXPECT_EQ(code, 128 + SIGKILL);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(200));
  // Already ended: reaped, not signalled.
  SATURATE_ASSERT_OK_AND_ASSIGN(Child done, Child::Spawn({"sh", "-c", "exit 4"}));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(*done.Terminate(1'000'000'000), 4);
}

TEST(ChildTest, OutputCanGoToAFile) {
  testing::TempDir dir;
  const std::string log = dir.path() + "/log";
  FILE* f = std::fopen(log.c_str(), "w");
  ASSERT_NE(f, nullptr);
  SATURATE_ASSERT_OK_AND_ASSIGN(
      Child c, Child::Spawn({"sh", "-c", "echo out; echo err >&2"}, {.output_fd = fileno(f)}));
  EXPECT_EQ(*c.Wait(), 0);
  std::fclose(f);
  std::ifstream in(log);
  std::string a, b;
  in >> a >> b;
  EXPECT_EQ(a + b, "outerr");
}

TEST(ChildTest, DestroyingAnUnwaitedChildKillsIt) {
  pid_t pid;
  {
    SATURATE_ASSERT_OK_AND_ASSIGN(Child c, Child::Spawn({"sleep", "30"}));
    pid = c.pid();
    SATURATE_ASSERT_OK_AND_ASSIGN(auto code, c.Poll());
    EXPECT_FALSE(code.has_value());
  }
  EXPECT_NE(kill(pid, 0), 0);  // gone and reaped
}

}  // namespace
}  // namespace saturate::watch
