#include "saturate/trace/trace.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "base/file.h"
#include "base/testing.h"

#if defined(__SANITIZE_THREAD__)
#define SATURATE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SATURATE_TSAN 1
#endif
#endif

namespace saturate::trace {
namespace {

using json = nlohmann::json;

std::string SpansPath(const std::string& dir, int pid = getpid()) {
  return dir + "/spans-" + std::to_string(pid) + ".jsonl";
}

// Every line of a spans file, parsed (the test fails on a bad line).
std::vector<json> ReadLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<json> lines;
  for (std::string line; std::getline(in, line);) {
    json j = json::parse(line, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << path << ": " << line;
    lines.push_back(j);
  }
  return lines;
}

std::vector<json> Spans(const std::vector<json>& lines, const std::string& name = "") {
  std::vector<json> out;
  for (const json& j : lines) {
    if (j["ph"] == "X" && (name.empty() || j["name"] == name)) out.push_back(j);
  }
  return out;
}

// Each test starts and stops the process-wide recorder itself.
class TraceTest : public ::testing::Test {
 protected:
  void TearDown() override { SATURATE_EXPECT_OK(Stop()); }
  testing::TempDir dir_;
};

TEST_F(TraceTest, WritesTheDocumentedFormat) {
  const std::string run = dir_.path() + "/run";  // created by Start
  SATURATE_ASSERT_OK(Start(run));
  EXPECT_TRUE(Enabled());
  EXPECT_EQ(RunDir(), run);
  RecordSpan("forward", 1000, 1500, Category::kUser, {{"samples", 64}, {"rank", 0}});
  RecordSpan("load_batch", 2000, 2100, Category::kLoader);
  RecordSpan("save", 3000, 3300, Category::kCheckpoint);
  const uint64_t step = Step();
  RecordCounters("loader", {{"samples", 128}, {"wait_ns", 5}});
  SATURATE_ASSERT_OK(Stop());
  EXPECT_FALSE(Enabled());
  EXPECT_EQ(RunDir(), "");

  const std::vector<json> lines = ReadLines(SpansPath(run));
  ASSERT_EQ(lines.size(), 6u);
  const json& meta = lines[0];
  EXPECT_EQ(meta["ph"], "M");
  EXPECT_EQ(meta["pid"], getpid());
  EXPECT_EQ(meta["clock"], "CLOCK_MONOTONIC");
  EXPECT_FALSE(meta["comm"].get<std::string>().empty());

  const json& fwd = lines[1];
  EXPECT_EQ(fwd["ph"], "X");
  EXPECT_EQ(fwd["name"], "forward");
  EXPECT_EQ(fwd["cat"], "user");
  EXPECT_EQ(fwd["ts_ns"], 1000);
  EXPECT_EQ(fwd["dur_ns"], 500);
  EXPECT_EQ(fwd["pid"], getpid());
  EXPECT_GT(fwd["tid"].get<int>(), 0);
  EXPECT_EQ(fwd["args"], json({{"samples", 64}, {"rank", 0}}));
  EXPECT_EQ(lines[2]["cat"], "loader");
  EXPECT_FALSE(lines[2].contains("args"));  // omitted when empty
  EXPECT_EQ(lines[3]["cat"], "checkpoint");

  const json& mark = lines[4];
  EXPECT_EQ(mark["ph"], "step");
  EXPECT_EQ(mark["step"], step);
  EXPECT_GT(mark["ts_ns"].get<int64_t>(), 0);
  EXPECT_EQ(mark["tid"], fwd["tid"]);

  const json& counters = lines[5];
  EXPECT_EQ(counters["ph"], "C");
  EXPECT_EQ(counters["name"], "loader");
  EXPECT_EQ(counters["args"], json({{"samples", 128}, {"wait_ns", 5}}));
}

TEST_F(TraceTest, StepsCountUpEvenWhenNotRecording) {
  const uint64_t a = Step(), b = Step();
  EXPECT_EQ(b, a + 1);
}

TEST_F(TraceTest, PhasesNest) {
  SATURATE_ASSERT_OK(Start(dir_.path()));
  {
    Phase step("train_step");
    {
      Phase forward("forward");
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    Phase backward("backward");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  SATURATE_ASSERT_OK(Flush());
  const std::vector<json> lines = ReadLines(SpansPath(dir_.path()));
  ASSERT_EQ(Spans(lines).size(), 3u);
  const json outer = Spans(lines, "train_step")[0], fwd = Spans(lines, "forward")[0],
             bwd = Spans(lines, "backward")[0];
  EXPECT_GE(fwd["dur_ns"].get<int64_t>(), 2'000'000);
  for (const json& inner : {fwd, bwd}) {
    EXPECT_GE(inner["ts_ns"].get<int64_t>(), outer["ts_ns"].get<int64_t>());
    EXPECT_LE(inner["ts_ns"].get<int64_t>() + inner["dur_ns"].get<int64_t>(),
              outer["ts_ns"].get<int64_t>() + outer["dur_ns"].get<int64_t>());
  }
  EXPECT_GE(bwd["ts_ns"].get<int64_t>(),
            fwd["ts_ns"].get<int64_t>() + fwd["dur_ns"].get<int64_t>());
}

TEST_F(TraceTest, KeepsAtMostTheDocumentedArgs) {
  SATURATE_ASSERT_OK(Start(dir_.path()));
  RecordSpan("many", 0, 1, Category::kUser,
             {{"a", 1}, {"b", 2}, {"c", 3}, {"d", 4}, {"e", 5}, {"f", 6}, {"g", 7}});
  SATURATE_ASSERT_OK(Flush());
  const json span = Spans(ReadLines(SpansPath(dir_.path())))[0];
  EXPECT_EQ(span["args"].size(), static_cast<size_t>(kMaxSpanArgs));
  EXPECT_FALSE(span["args"].contains("g"));
}

TEST_F(TraceTest, EscapesUserNames) {
  SATURATE_ASSERT_OK(Start(dir_.path()));
  const std::string name = std::string("a \"quoted\" \\ name\nwith\ttabs, \xc3\xa9 and bad \xff") +
                           std::string(1, '\0') + "!";
  RecordSpan(name, 0, 1);
  SATURATE_ASSERT_OK(Flush());
  const json span = Spans(ReadLines(SpansPath(dir_.path())))[0];
  EXPECT_EQ(span["name"],
            std::string("a \"quoted\" \\ name\nwith\ttabs, \xc3\xa9 and bad \xef\xbf\xbd") +
                std::string(1, '\0') + "!");
}

TEST_F(TraceTest, TheBackgroundWriterFlushes) {
  SATURATE_ASSERT_OK(Start(dir_.path()));
  RecordSpan("soon", 0, 1);
  const std::string path = SpansPath(dir_.path());
  for (int i = 0; i < 100 && Spans(ReadLines(path)).empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(Spans(ReadLines(path), "soon").size(), 1u);
}

TEST_F(TraceTest, KeepsEventsOfThreadsThatExited) {
  SATURATE_ASSERT_OK(Start(dir_.path()));
  int main_tid = 0;
  RecordSpan("main", 0, 1);
  std::thread([] { RecordSpan("short_lived", 0, 1); }).join();
  SATURATE_ASSERT_OK(Flush());
  const std::vector<json> lines = ReadLines(SpansPath(dir_.path()));
  ASSERT_EQ(Spans(lines, "short_lived").size(), 1u);
  main_tid = Spans(lines, "main")[0]["tid"];
  EXPECT_NE(Spans(lines, "short_lived")[0]["tid"], main_tid);
}

TEST_F(TraceTest, ManyThreadsLoseNothing) {
  SATURATE_ASSERT_OK(Start(dir_.path()));
  constexpr int kThreads = 4, kSpans = 5000;
  std::atomic<bool> done{false};
  std::thread flusher([&] {
    while (!done) SATURATE_EXPECT_OK(Flush());
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < kSpans; ++i) {
        Phase p(t % 2 == 0 ? "even" : "odd");
        if (i % 100 == 0) Step();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  done = true;
  flusher.join();
  SATURATE_ASSERT_OK(Stop());
  const std::vector<json> lines = ReadLines(SpansPath(dir_.path()));
  EXPECT_EQ(Spans(lines).size(), static_cast<size_t>(kThreads * kSpans));
  EXPECT_EQ(Spans(lines, "even").size(), static_cast<size_t>(kThreads / 2 * kSpans));
}

// A thread that is exiting while Stop() runs: Python's Thread.join() returns
// before the OS thread has run its thread_local destructors (where the buffer
// is handed over), so a Stop() right after the join of the last thread that
// recorded raced with that hand-over, and the thread's events were dropped
// (a checkpoint coordinator thread's spans went missing, 1 run in 20). Here
// the thread says it is done, then hands its buffer over once Stop() has
// begun (recording off), before Stop() has written everything out: a
// thread_local made after the buffer is destroyed before it, and waits.
// Every span must be in the file.
TEST_F(TraceTest, KeepsEventsOfAThreadExitingDuringStop) {
  constexpr int kRounds = 200;
  for (int i = 0; i < kRounds; ++i) {
    SATURATE_ASSERT_OK(Start(dir_.path()));
    std::atomic<bool> exiting{false};
    std::thread t([&exiting] {
      RecordSpan("exiting", 0, 1);  // makes this thread's buffer
      struct SaysDone {
        std::atomic<bool>* flag;
        ~SaysDone() {
          flag->store(true);
          while (Enabled()) std::this_thread::yield();
        }
      };
      thread_local SaysDone says_done{nullptr};
      says_done.flag = &exiting;
    });
    while (!exiting.load()) std::this_thread::yield();
    SATURATE_ASSERT_OK(Stop());
    t.join();
  }
  const std::vector<json> lines = ReadLines(SpansPath(dir_.path()));
  EXPECT_EQ(Spans(lines, "exiting").size(), static_cast<size_t>(kRounds));
}

TEST_F(TraceTest, DropsSpansAfterStop) {
  SATURATE_ASSERT_OK(Start(dir_.path()));
  RecordSpan("kept", 0, 1);
  SATURATE_ASSERT_OK(Stop());
  SATURATE_ASSERT_OK(Stop());  // idempotent
  RecordSpan("dropped", 0, 1);
  { Phase p("dropped_too"); }
  SATURATE_ASSERT_OK(Flush());
  const std::vector<json> lines = ReadLines(SpansPath(dir_.path()));
  EXPECT_EQ(Spans(lines).size(), 1u);
  EXPECT_EQ(Spans(lines, "kept").size(), 1u);
}

TEST_F(TraceTest, StartMovesToAnotherDirectory) {
  const std::string a = dir_.Join("a"), b = dir_.Join("b");
  SATURATE_ASSERT_OK(Start(a));
  RecordSpan("first", 0, 1);
  SATURATE_ASSERT_OK(Start(a));  // the same directory: nothing changes
  SATURATE_ASSERT_OK(Start(b));
  RecordSpan("second", 0, 1);
  SATURATE_ASSERT_OK(Stop());
  EXPECT_EQ(Spans(ReadLines(SpansPath(a))).size(), 1u);
  EXPECT_EQ(Spans(ReadLines(SpansPath(a)), "first").size(), 1u);
  EXPECT_EQ(Spans(ReadLines(SpansPath(b)), "second").size(), 1u);
  EXPECT_EQ(Spans(ReadLines(SpansPath(b))).size(), 1u);
}

TEST_F(TraceTest, OneRankOfAJobRecordsIntoItsRankFolder) {
  setenv("RANK", "1", 1);
  setenv("LOCAL_RANK", "1", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("SATURATE_HOSTNAME", "node-b", 1);
  const Status started = Start(dir_.path());
  for (const char* name : {"RANK", "LOCAL_RANK", "WORLD_SIZE", "SATURATE_HOSTNAME"}) unsetenv(name);
  SATURATE_ASSERT_OK(started);
  EXPECT_EQ(RunDir(), dir_.Join("rank-1"));
  RecordSpan("forward", 0, 1);
  SATURATE_ASSERT_OK(Stop());
  const std::vector<json> lines = ReadLines(SpansPath(dir_.Join("rank-1")));
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0]["rank"], json({{"rank", 1},
                                    {"local_rank", 1},
                                    {"world_size", 2},
                                    {"host", "node-b"},
                                    {"launcher", "env"}}));
  EXPECT_EQ(Spans(lines, "forward").size(), 1u);
}

TEST_F(TraceTest, AppendsWhenStartedAgain) {
  SATURATE_ASSERT_OK(Start(dir_.path()));
  RecordSpan("one", 0, 1);
  SATURATE_ASSERT_OK(Stop());
  SATURATE_ASSERT_OK(Start(dir_.path()));
  RecordSpan("two", 0, 1);
  SATURATE_ASSERT_OK(Stop());
  const std::vector<json> lines = ReadLines(SpansPath(dir_.path()));
  EXPECT_EQ(Spans(lines).size(), 2u);
  EXPECT_EQ(lines[0]["ph"], "M");
  EXPECT_EQ(lines[2]["ph"], "M");  // a metadata line per open
}

TEST_F(TraceTest, StartFailsClearlyOnABadDirectory) {
  const std::string file = dir_.Join("not-a-dir");
  SATURATE_ASSERT_OK(WriteFileAtomic(file, "x"));
  Status s = Start(file + "/run");
  EXPECT_TRUE(testing::HasError(s, StatusCode::kIOError, {"not-a-dir"})) << s.ToString();
  EXPECT_FALSE(Enabled());
  EXPECT_TRUE(testing::HasError(Start(""), StatusCode::kInvalidArgument, {"empty"}));
}

// Death tests in the "threadsafe" style run the statement in a fresh process
// (the recorder decides once per process): the test binary again, which runs
// the test body up to the statement with its own fixture. The parent's run
// directory reaches it through the environment: set here, kept there.
std::string SharedRunDir(const std::string& var, const std::string& parent_choice) {
  setenv(var.c_str(), parent_choice.c_str(), /*overwrite=*/0);
  return std::getenv(var.c_str());
}

// Ends a death-test child. The child made a fixture of its own, whose
// directory it never uses and whose destructor exit() skips: removed here.
[[noreturn]] void ExitChild(const testing::TempDir& dir, bool ok) {
  std::error_code ec;
  std::filesystem::remove_all(dir.path(), ec);
  std::exit(ok ? 0 : 1);
}

TEST_F(TraceTest, StartsFromTheEnvironmentOnFirstUse) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string run = SharedRunDir("SATURATE_TRACE_TEST_ENV_RUN", dir_.Join("env-run"));
  EXPECT_EXIT(
      {
        setenv("SATURATE_RUN_DIR", run.c_str(), 1);
        { Phase p("from_env"); }
        ExitChild(dir_, RunDir() == run && Stop().ok());
      },
      ::testing::ExitedWithCode(0), "");
  std::vector<json> spans;
  for (const auto& entry : std::filesystem::directory_iterator(run)) {
    for (const json& j : Spans(ReadLines(entry.path().string()), "from_env")) spans.push_back(j);
  }
  EXPECT_EQ(spans.size(), 1u);
  unsetenv("SATURATE_TRACE_TEST_ENV_RUN");
}

TEST_F(TraceTest, StaysOffWithoutTheEnvironment) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        unsetenv("SATURATE_RUN_DIR");
        RecordSpan("nowhere", 0, 1);
        ExitChild(dir_, !Enabled() && RunDir().empty());
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(TraceTest, ExitFlushes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string run = SharedRunDir("SATURATE_TRACE_TEST_EXIT_RUN", dir_.Join("exit-run"));
  EXPECT_EXIT(
      {
        if (!Start(run).ok()) ExitChild(dir_, false);
        RecordSpan("at_exit", 0, 1);
        ExitChild(dir_, true);  // no Stop(): the atexit hook writes it
      },
      ::testing::ExitedWithCode(0), "");
  size_t found = 0;
  for (const auto& entry : std::filesystem::directory_iterator(run)) {
    found += Spans(ReadLines(entry.path().string()), "at_exit").size();
  }
  EXPECT_EQ(found, 1u);
  unsetenv("SATURATE_TRACE_TEST_EXIT_RUN");
}

#ifndef SATURATE_TSAN  // TSan does not support threads started after a multi-threaded fork
TEST_F(TraceTest, AForkedChildWritesItsOwnFile) {
  SATURATE_ASSERT_OK(Start(dir_.path()));
  RecordSpan("parent_before", 0, 1);  // still buffered at fork: the parent writes it
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    RecordSpan("child", 0, 1);
    _exit(Enabled() && Stop().ok() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  RecordSpan("parent_after", 0, 1);
  SATURATE_ASSERT_OK(Stop());

  const std::vector<json> parent = ReadLines(SpansPath(dir_.path()));
  EXPECT_EQ(Spans(parent).size(), 2u);
  EXPECT_EQ(Spans(parent, "child").size(), 0u);
  const std::vector<json> kid = ReadLines(SpansPath(dir_.path(), child));
  ASSERT_EQ(kid.size(), 2u);
  EXPECT_EQ(kid[0]["ph"], "M");
  EXPECT_EQ(kid[0]["pid"], child);
  EXPECT_EQ(kid[1]["name"], "child");
  EXPECT_EQ(kid[1]["pid"], child);
  EXPECT_EQ(kid[1]["tid"], child);  // the forking thread is the child's main thread
}
#endif

}  // namespace
}  // namespace saturate::trace
