#include "ranks/rank_scanner.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "base/testing.h"

namespace saturate::ranks {
namespace {

constexpr int64_t kS = 1'000'000'000;
constexpr int64_t kMs = 1'000'000;

void Append(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::app) << text;
}

// The meta line the bootstrap writes for one rank: monotonic 1000 s is unix 1.7e9 s.
std::string Meta(int pid, int rank, const std::string& host, bool stacks) {
  std::string s = "{\"ph\":\"M\",\"pid\":" + std::to_string(pid) +
                  ",\"comm\":\"python\",\"clock\":\"CLOCK_MONOTONIC\",\"ts_ns\":1000000000000,"
                  "\"unix_ns\":1700000000000000000,\"source\":\"auto\",\"auto\":{},"
                  "\"rank\":{\"rank\":" +
                  std::to_string(rank) + ",\"local_rank\":0,\"world_size\":2,\"host\":\"" + host +
                  "\",\"launcher\":\"torchrun\"}";
  if (stacks) s += ",\"stacks\":\"stacks-" + std::to_string(pid) + ".txt\"";
  return s + "}\n";
}

std::string Step(int pid, int step, int64_t ts_ns) {
  return "{\"ph\":\"step\",\"step\":" + std::to_string(step) +
         ",\"ts_ns\":" + std::to_string(ts_ns) + ",\"pid\":" + std::to_string(pid) +
         ",\"tid\":1}\n";
}

std::string Span(int pid, int64_t ts_ns) {
  return "{\"ph\":\"X\",\"name\":\"forward\",\"cat\":\"user\",\"ts_ns\":" + std::to_string(ts_ns) +
         ",\"dur_ns\":5000,\"pid\":" + std::to_string(pid) + ",\"tid\":1}\n";
}

TEST(RankScannerTest, SumsUpEachRankFromItsTrainingProcess) {
  testing::TempDir dir;
  const std::string r0 = dir.Join("rank-0/spans-100-auto.jsonl");
  Append(r0, Meta(100, 0, "a", true));
  for (int s = 1; s <= 5; ++s) Append(r0, Span(100, 1000 * kS + s * kMs) + Step(100, s, 1001 * kS));
  // A DataLoader worker of rank 0: spans, no steps, no stacks.
  Append(dir.Join("rank-0/spans-101-auto.jsonl"),
         Meta(101, 0, "a", false) + Span(101, 1000 * kS) + Span(101, 1000 * kS));
  const std::string r1 = dir.Join("rank-1/spans-200-auto.jsonl");
  Append(r1, Meta(200, 1, "a", true) + Step(200, 1, 1000 * kS) + Step(200, 2, 1002 * kS) +
                 "{\"ph\":\"C\",\"name\":\"exit\",\"ts_ns\":1003000000000,\"pid\":200,\"tid\":1,"
                 "\"args\":{\"steps\":2,\"error\":0}}\n");
  Append(dir.Join("meta.json"), "{}");
  Append(dir.Join("rank-1/stacks-200.txt"), "");

  RankScanner scanner(dir.path());
  std::vector<RankProgress> ranks = scanner.Scan();
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_EQ(ranks[0].rank, 0);
  EXPECT_EQ(ranks[0].pid, 100);
  EXPECT_EQ(ranks[0].host, "a");
  EXPECT_EQ(ranks[0].world_size, 2);
  EXPECT_EQ(ranks[0].step_marks, 5);
  EXPECT_EQ(ranks[0].last_step, 5);
  EXPECT_EQ(ranks[0].last_step_unix_ns, 1'700'000'001 * kS);
  EXPECT_FALSE(ranks[0].exited);
  EXPECT_TRUE(ranks[0].alive);
  EXPECT_EQ(ranks[0].stacks_path, dir.Join("rank-0/stacks-100.txt"));
  EXPECT_EQ(ranks[0].file_bytes,
            std::filesystem::file_size(r0) +
                std::filesystem::file_size(dir.Join("rank-0/spans-101-auto.jsonl")));
  EXPECT_EQ(ranks[1].pid, 200);
  EXPECT_EQ(ranks[1].last_step, 2);
  EXPECT_TRUE(ranks[1].exited);
}

TEST(RankScannerTest, ReadsOnlyNewBytesAndKeepsATornLineForLater) {
  testing::TempDir dir;
  const std::string path = dir.Join("rank-0/spans-100-auto.jsonl");
  Append(path, Meta(100, 0, "a", false) + Step(100, 1, 1000 * kS) + Step(100, 2, 1001 * kS));
  Append(dir.Join("rank-1/spans-200.jsonl"), Meta(200, 1, "a", false));
  RankScanner scanner(dir.path());
  ASSERT_EQ(scanner.Scan()[0].last_step, 2);
  const uint64_t first = scanner.bytes_read();
  EXPECT_EQ(first, std::filesystem::file_size(path) +
                       std::filesystem::file_size(dir.Join("rank-1/spans-200.jsonl")));

  // Nothing new: nothing read.
  EXPECT_EQ(scanner.Scan()[0].step_marks, 2);
  EXPECT_EQ(scanner.bytes_read(), first);

  // Half a line: read, but not a step yet.
  const std::string step3 = Step(100, 3, 1002 * kS);
  Append(path, step3.substr(0, 20));
  EXPECT_EQ(scanner.Scan()[0].step_marks, 2);
  EXPECT_EQ(scanner.bytes_read(), first + 20);
  Append(path, step3.substr(20) + Span(100, 1003 * kS));
  std::vector<RankProgress> ranks = scanner.Scan();
  EXPECT_EQ(ranks[0].step_marks, 3);
  EXPECT_EQ(ranks[0].last_step, 3);
  EXPECT_EQ(scanner.bytes_read(), first + step3.size() + Span(100, 1003 * kS).size());
}

TEST(RankScannerTest, ABacklogIsReadOverSeveralScans) {
  testing::TempDir dir;
  const std::string path = dir.Join("rank-0/spans-100-auto.jsonl");
  Append(path, Meta(100, 0, "a", false));
  for (int s = 1; s <= 100; ++s) Append(path, Step(100, s, 1000 * kS + s));
  RankScanner scanner(dir.path(), /*max_read_bytes=*/1024);
  int64_t steps = 0;
  for (int scan = 0; scan < 100 && steps < 100; ++scan) steps = scanner.Scan()[0].step_marks;
  EXPECT_EQ(steps, 100);
  EXPECT_EQ(scanner.bytes_read(), std::filesystem::file_size(path));
}

TEST(RankScannerTest, FindsRankFoldersInsideNodeFoldersAndIgnoresOthers) {
  testing::TempDir dir;
  Append(dir.Join("node-b/rank-3/spans-300-auto.jsonl"),
         Meta(300, 3, "b", false) + Step(300, 1, 1000 * kS));
  Append(dir.Join("spans-1.jsonl"), Meta(1, 0, "a", false) + Step(1, 1, 1000 * kS));
  Append(dir.Join(".auto/rank-9/spans-9.jsonl"), Meta(9, 9, "a", false));
  Append(dir.Join("rank-x/spans-7.jsonl"), Meta(7, 0, "a", false));
  std::vector<RankProgress> ranks = RankScanner(dir.path()).Scan();
  ASSERT_EQ(ranks.size(), 1u);
  EXPECT_EQ(ranks[0].rank, 3);
  EXPECT_EQ(ranks[0].host, "b");
  EXPECT_TRUE(RankScanner(dir.Join("nowhere")).Scan().empty());
}

std::string Counters(int pid, const std::string& name, int loader_id, const std::string& args) {
  return "{\"ph\":\"C\",\"name\":\"" + name +
         "\",\"ts_ns\":1000000000000,\"pid\":" + std::to_string(pid) +
         ",\"tid\":1,\"args\":{\"loader_id\":" + std::to_string(loader_id) + "," + args + "}}\n";
}

TEST(RankScannerTest, KeepsTheLatestLoaderCountersSummedOverLoaders) {
  testing::TempDir dir;
  const std::string r0 = dir.Join("rank-0/spans-100.jsonl");
  Append(r0, Meta(100, 0, "a", false) +
                 Counters(100, "loader", 0, "\"samples\":64,\"wait_ns\":5000") +
                 Counters(100, "loader_remote", 0, "\"remote_bytes_fetched\":1000"));
  RankScanner scanner(dir.path());
  std::vector<RankProgress> ranks = scanner.Scan();
  ASSERT_EQ(ranks.size(), 1u);
  EXPECT_EQ(ranks[0].loader_counters.at("samples"), 64);
  EXPECT_EQ(ranks[0].loader_counters.at("remote_bytes_fetched"), 1000);
  EXPECT_EQ(ranks[0].loader_counters.count("loader_id"), 0u);
  // A later record of loader 0 replaces its values; a second loader adds to them.
  Append(r0, Counters(100, "loader", 0, "\"samples\":128,\"wait_ns\":6000,\"threads\":2") +
                 Counters(100, "loader", 1, "\"samples\":10,\"wait_ns\":1,\"threads\":3") +
                 Counters(100, "loader_remote", 0, "\"remote_bytes_fetched\":3000"));
  ranks = scanner.Scan();
  EXPECT_EQ(ranks[0].loader_counters.at("samples"), 138);
  EXPECT_EQ(ranks[0].loader_counters.at("wait_ns"), 6001);
  EXPECT_EQ(ranks[0].loader_counters.at("remote_bytes_fetched"), 3000);
  // A level is not summed: the loader that reported last (same time: the later id).
  EXPECT_EQ(ranks[0].loader_counters.at("threads"), 3);
}

std::string Precision(int pid, const std::string& name, int bits) {
  return "{\"ph\":\"C\",\"name\":\"" + name + "\",\"ts_ns\":1000,\"pid\":" + std::to_string(pid) +
         ",\"tid\":1,\"args\":{\"precision_bits\":" + std::to_string(bits) + "}}\n";
}

// What a rank's math runs in: the auto-instrumentation's latest "precision"
// record, unless the job's own "model" counter says, in any of its files.
TEST(RankScannerTest, PrecisionFromTheAutoRecordUnlessAModelCounterSays) {
  testing::TempDir dir;
  Append(dir.Join("rank-0/spans-100-auto.jsonl"),
         Meta(100, 0, "a", false) + Precision(100, "precision", 32));
  Append(dir.Join("rank-1/spans-200-auto.jsonl"),
         Meta(200, 1, "a", false) + Precision(200, "precision", 32));
  Append(dir.Join("rank-2/spans-300.jsonl"), Meta(300, 2, "a", false));
  RankScanner scanner(dir.path());
  std::vector<RankProgress> ranks = scanner.Scan();
  ASSERT_EQ(ranks.size(), 3u);
  EXPECT_EQ(ranks[0].precision_bits, 32);
  EXPECT_EQ(ranks[2].precision_bits, 0);  // nothing recorded
  // Rank 0 turns autocast on; rank 1's job says bf16 in its own file.
  Append(dir.Join("rank-0/spans-100-auto.jsonl"), Precision(100, "precision", 16));
  Append(dir.Join("rank-1/spans-200.jsonl"),
         Meta(200, 1, "a", false) + Precision(200, "model", 16));
  Append(dir.Join("rank-1/spans-200-auto.jsonl"), Precision(200, "precision", 32));
  ranks = scanner.Scan();
  EXPECT_EQ(ranks[0].precision_bits, 16);
  EXPECT_EQ(ranks[1].precision_bits, 16);
}

std::string DecodeRecord(int pid, int64_t ts_ns, int decoder_id, const std::string& args) {
  return "{\"ph\":\"C\",\"name\":\"loader_decode\",\"ts_ns\":" + std::to_string(ts_ns) +
         ",\"pid\":" + std::to_string(pid) +
         ",\"tid\":1,\"args\":{\"decoder_id\":" + std::to_string(decoder_id) + "," + args + "}}\n";
}

// A device loader's decode split: its images summed over device loaders, its
// mode and the GPU's share from the one that reported last, whatever the
// host loaders' records (which carry other keys) say.
TEST(RankScannerTest, AddsTheDeviceLoadersDecodeSplit) {
  testing::TempDir dir;
  const std::string r0 = dir.Join("rank-0/spans-100.jsonl");
  Append(r0, Meta(100, 0, "a", false) + Counters(100, "loader", 0, "\"samples\":64,\"threads\":4") +
                 DecodeRecord(100, 900 * kS, 0,
                              "\"decode_mode\":2,\"gpu_decoder\":1,\"cpu_decoded\":24,"
                              "\"gpu_decoded\":40,\"gpu_permille\":620,\"gpu_per_s\":3000") +
                 DecodeRecord(100, 800 * kS, 1,
                              "\"decode_mode\":0,\"gpu_decoder\":0,\"cpu_decoded\":10,"
                              "\"gpu_decoded\":0,\"gpu_permille\":0,\"gpu_per_s\":0"));
  std::vector<RankProgress> ranks = RankScanner(dir.path()).Scan();
  ASSERT_EQ(ranks.size(), 1u);
  const std::map<std::string, int64_t>& c = ranks[0].loader_counters;
  EXPECT_EQ(c.at("samples"), 64);
  EXPECT_EQ(c.at("threads"), 4);
  EXPECT_EQ(c.at("cpu_decoded"), 34);
  EXPECT_EQ(c.at("gpu_decoded"), 40);
  // Levels of decoder 0, the later record, though the host loader's is later still.
  EXPECT_EQ(c.at("decode_mode"), 2);
  EXPECT_EQ(c.at("gpu_permille"), 620);
  EXPECT_EQ(c.at("gpu_per_s"), 3000);
  EXPECT_EQ(c.count("decoder_id"), 0u);
}

// Threads buffer their records apart: a record written later in the file
// may be older than one before it, and then changes nothing.
TEST(RankScannerTest, AnOlderRecordLaterInTheFileChangesNothing) {
  testing::TempDir dir;
  const std::string r0 = dir.Join("rank-0/spans-100.jsonl");
  Append(r0, Meta(100, 0, "a", false) +
                 DecodeRecord(100, 900 * kS, 0, "\"gpu_decoded\":40,\"gpu_permille\":620") +
                 DecodeRecord(100, 800 * kS, 0, "\"gpu_decoded\":8,\"gpu_permille\":500"));
  RankScanner scanner(dir.path());
  std::vector<RankProgress> ranks = scanner.Scan();
  ASSERT_EQ(ranks.size(), 1u);
  EXPECT_EQ(ranks[0].loader_counters.at("gpu_decoded"), 40);
  EXPECT_EQ(ranks[0].loader_counters.at("gpu_permille"), 620);
  Append(r0, DecodeRecord(100, 1000 * kS, 0, "\"gpu_decoded\":64,\"gpu_permille\":700"));
  ranks = scanner.Scan();
  EXPECT_EQ(ranks[0].loader_counters.at("gpu_decoded"), 64);
  EXPECT_EQ(ranks[0].loader_counters.at("gpu_permille"), 700);
}

TEST(RankScannerTest, FollowsAOneProcessRunAsRankZeroOnlyWhenAsked) {
  testing::TempDir dir;
  Append(dir.Join("spans-1.jsonl"), Meta(1, 0, "a", false) + Step(1, 1, 1000 * kS) +
                                        Counters(1, "loader", 0, "\"samples\":32"));
  EXPECT_TRUE(RankScanner(dir.path()).Scan().empty());
  std::vector<RankProgress> ranks = RankScanner(dir.path(), 16 << 20, true).Scan();
  ASSERT_EQ(ranks.size(), 1u);
  EXPECT_EQ(ranks[0].rank, 0);
  EXPECT_EQ(ranks[0].step_marks, 1);
  EXPECT_EQ(ranks[0].loader_counters.at("samples"), 32);
  // With rank folders, files in RUN itself are not a rank.
  Append(dir.Join("rank-1/spans-2.jsonl"), Meta(2, 1, "a", false));
  ranks = RankScanner(dir.path(), 16 << 20, true).Scan();
  ASSERT_EQ(ranks.size(), 1u);
  EXPECT_EQ(ranks[0].rank, 1);
}

TEST(StacksTest, ReadsOnlyTheNewDumpWithSourceLines) {
  testing::TempDir dir;
  const std::string script = dir.Join("job.py");
  Append(script, "import time\n\ndef hang():\n    time.sleep(3600)   \n\nhang()\n");
  const std::string stacks = dir.Join("rank-1/stacks-42.txt");
  Append(stacks,
         "Current thread 0x0000000000000001 (most recent call first):\n"
         "  File \"" +
             script + "\", line 6 in <module>\n\n");
  StackRequest q{1, 42, stacks, std::filesystem::file_size(stacks)};
  EXPECT_TRUE(ReadStacks({q}).empty());  // the dump has not come yet
  Append(stacks,
         "Current thread 0x0000000000000001 (most recent call first):\n"
         "  File \"" +
             script +
             "\", line 4 in hang\n"
             "  File \"" +
             script + "\", line 6 in <module>\n");
  std::map<int, std::vector<StackFrame>> got = ReadStacks({q});
  ASSERT_EQ(got.count(1), 1u);
  ASSERT_EQ(got[1].size(), 2u);
  EXPECT_EQ(FormatFrame(got[1][0]), "job.py:4 in hang: time.sleep(3600)");
  EXPECT_EQ(FormatFrame(got[1][1]), "job.py:6 in <module>: hang()");
}

TEST(StacksTest, SignalsOnlyLiveLocalRanksThatNamedAStacksFile) {
  testing::TempDir dir;
  struct sigaction ignore = {}, old = {};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(sigaction(SIGUSR2, &ignore, &old), 0);
  Append(dir.Join("stacks.txt"), "old dump\n");
  RankProgress me;
  me.rank = 0;
  me.host = "here";
  me.pid = getpid();
  me.stacks_path = dir.Join("stacks.txt");
  RankProgress no_dumper = me, elsewhere = me, gone = me;
  no_dumper.rank = 1;
  no_dumper.stacks_path = "";
  elsewhere.rank = 2;
  elsewhere.host = "there";
  gone.rank = 3;
  gone.pid = 0x3ffffff0;  // above pid_max
  std::vector<StackRequest> q = RequestStacks({me, no_dumper, elsewhere, gone}, "here");
  sigaction(SIGUSR2, &old, nullptr);
  ASSERT_EQ(q.size(), 1u);
  EXPECT_EQ(q[0].rank, 0);
  EXPECT_EQ(q[0].offset, 9u);
  EXPECT_TRUE(IsAlive(getpid()));
  EXPECT_FALSE(IsAlive(0x3ffffff0));
}

TEST(HangWatchTest, WritesHangJsonOnAStallAndMarksItsRecovery) {
  testing::TempDir dir;
  const std::string r0 = dir.Join("rank-0/spans-100-auto.jsonl");
  const std::string r1 = dir.Join("rank-1/spans-200-auto.jsonl");
  Append(r0, Meta(100, 0, "far", true));
  Append(r1, Meta(200, 1, "far", true));
  for (int s = 1; s <= 5; ++s) Append(r0, Step(100, s, 1000 * kS + s * kS));
  for (int s = 1; s <= 4; ++s) Append(r1, Step(200, s, 1000 * kS + s * kS));

  HangWatchOptions o;
  o.run_dir = dir.path();
  o.stall_ns = 3 * kS;
  o.host = "here";  // the ranks run elsewhere: no signals, no liveness checks
  HangWatch watch(o);
  std::vector<HangEvent> events;
  for (int64_t t = 0; t <= 10 * kS && events.empty(); t += 100 * kMs) events = watch.Poll(t);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, HangEvent::Kind::kStalled);
  EXPECT_EQ(events[0].alert.suspect_rank, 1);
  EXPECT_EQ(watch.steps(), 5);  // for saturate_job_steps_total
  EXPECT_TRUE(watch.stalled());
  SATURATE_EXPECT_OK(events[0].saved);
  EXPECT_EQ(watch.hang_json_path(), dir.Join("hang.json"));
  nlohmann::json j = nlohmann::json::parse(testing::ReadFileOrFail(dir.Join("hang.json")));
  EXPECT_EQ(j["suspect_rank"], 1);
  EXPECT_EQ(j["kind"], "hung");
  EXPECT_EQ(j["stalled_s"], 3.0);
  EXPECT_NE(j["message"].get<std::string>().find("rank 1 (host far, pid 200) stopped at step 4"),
            std::string::npos);

  // Nothing more while it stays stuck.
  for (int64_t t = 11 * kS; t <= 30 * kS; t += 100 * kMs) EXPECT_TRUE(watch.Poll(t).empty());
  Append(r1, Step(200, 5, 1030 * kS));
  events = watch.Poll(31 * kS);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, HangEvent::Kind::kRecovered);
  EXPECT_EQ(events[0].message, "steps resumed after 31 s (rank 0 at step 5)");
  EXPECT_FALSE(watch.stalled());
  j = nlohmann::json::parse(testing::ReadFileOrFail(dir.Join("hang.json")));
  EXPECT_EQ(j["suspect_rank"], 1);
  EXPECT_TRUE(j.contains("recovered_unix_ns"));
}

TEST(HangWatchTest, ASingleProcessRunIsLeftAlone) {
  testing::TempDir dir;
  Append(dir.Join("spans-1-auto.jsonl"), Meta(1, 0, "a", false) + Step(1, 1, 1) + Step(1, 2, 2));
  HangWatchOptions o;
  o.run_dir = dir.path();
  o.stall_ns = kS;
  HangWatch watch(o);
  for (int64_t t = 0; t <= 10 * kS; t += 100 * kMs) EXPECT_TRUE(watch.Poll(t).empty());
  EXPECT_FALSE(std::filesystem::exists(dir.Join("hang.json")));
  EXPECT_EQ(watch.steps(), 0);
}

}  // namespace
}  // namespace saturate::ranks
