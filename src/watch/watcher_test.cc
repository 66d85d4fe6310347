#include "saturate/watch/watcher.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/file.h"
#include "base/testing.h"
#include "watch/metrics_server.h"

namespace saturate::watch {
namespace {

using json = nlohmann::json;

WatchOptions FakeGpuOptions(const std::string& run_dir) {
  WatchOptions o;
  o.interval_ns = 20'000'000;
  o.run_dir = run_dir;
  o.pid = getpid();
  o.command = {"train.py", "--lr", "0.1"};
  o.nvml_library = FAKE_NVML_PATH;
  return o;
}

std::vector<json> ReadLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
  return lines;
}

TEST(WatcherTest, RecordsARunDirectory) {
  testing::TempDir dir;
  const std::string run = dir.path() + "/run";
  SATURATE_ASSERT_OK_AND_ASSIGN(auto w, Watcher::Start(FakeGpuOptions(run)));
  EXPECT_EQ(w->gpu_count(), 2);
  EXPECT_NE(w->gpu_status().find("2 GPUs"), std::string::npos) << w->gpu_status();
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  SATURATE_ASSERT_OK(w->Stop(3));
  SATURATE_ASSERT_OK(w->Stop(4));  // idempotent: the first exit code stays

  SATURATE_ASSERT_OK_AND_ASSIGN(std::string meta_text, ReadFileToString(run + "/meta.json"));
  json meta = json::parse(meta_text);
  EXPECT_EQ(meta["exit_code"], 3);
  EXPECT_EQ(meta["gpus"].size(), 2u);
  EXPECT_EQ(meta["gpus"][1]["uuid"], "GPU-fake-1");
  EXPECT_EQ(meta["command"][0], "train.py");
  EXPECT_EQ(meta["interval_ns"], 20'000'000);
  EXPECT_GE(meta["cpus"].get<int>(), 1);

  std::vector<json> samples = ReadLines(run + "/samples.jsonl");
  EXPECT_EQ(samples.size(), meta["samples"].get<size_t>());
  ASSERT_GE(samples.size(), 3u);
  const json& s = samples.back();
  EXPECT_GT(s["t_ns"].get<int64_t>(), samples.front()["t_ns"].get<int64_t>());
  EXPECT_GT(s["host"]["mem_total_bytes"].get<uint64_t>(), 0u);
  EXPECT_FALSE(s["host"]["cores"].empty());
  EXPECT_GE(s["tree"]["processes"].get<int>(), 1);
  EXPECT_EQ(s["tree"]["members"][0]["pid"], getpid());
  EXPECT_GT(s["tree"]["rss_bytes"].get<uint64_t>(), 0u);
  ASSERT_EQ(s["gpus"].size(), 2u);
  EXPECT_TRUE(s["gpus"][0].contains("util_pct"));
  EXPECT_TRUE(s["gpus"][0].contains("power_w"));
}

// A child that lives less than the 1 s full rescan (a DataLoader worker
// started again at every epoch) is found through its parent's children list.
TEST(WatcherTest, AShortLivedChildJoinsTheTreeBeforeTheNextRescan) {
  testing::TempDir dir;
  const std::string run = dir.path() + "/run";
  SATURATE_ASSERT_OK_AND_ASSIGN(auto w, Watcher::Start(FakeGpuOptions(run)));
  std::this_thread::sleep_for(std::chrono::milliseconds(60));  // past the first full scan
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    sleep(10);
    _exit(0);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  SATURATE_ASSERT_OK(w->Stop(0));
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  if (!std::filesystem::exists("/proc/self/task/" + std::to_string(getpid()) + "/children")) {
    GTEST_SKIP() << "this kernel has no /proc/<pid>/task/<tid>/children (CONFIG_PROC_CHILDREN)";
  }
  bool seen = false;
  for (const json& s : ReadLines(run + "/samples.jsonl")) {
    for (const json& m : s["tree"]["members"]) seen = seen || m["pid"] == child;
  }
  EXPECT_TRUE(seen) << "the child was not in the tree within 200 ms";
}

TEST(WatcherTest, PrometheusPageFollowsDcgmExporterNames) {
  WatchOptions o = FakeGpuOptions("");
  SATURATE_ASSERT_OK_AND_ASSIGN(auto w, Watcher::Start(o));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const std::string page = w->PrometheusText();
  EXPECT_NE(page.find("# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"), std::string::npos) << page;
  EXPECT_NE(page.find("DCGM_FI_DEV_GPU_UTIL{gpu=\"1\",UUID=\"GPU-fake-1\""), std::string::npos);
  EXPECT_NE(page.find("modelName=\"Fake GPU 1\""), std::string::npos);
  EXPECT_NE(page.find("saturate_host_cpu_pct{Hostname="), std::string::npos);
  EXPECT_NE(page.find("saturate_process_tree_rss_bytes"), std::string::npos);
  EXPECT_NE(w->Render(true).find("process tree"), std::string::npos);
  EXPECT_NE(w->Render(false).find("gpu1"), std::string::npos);
}

TEST(WatcherTest, WithoutADriverItWatchesTheHostAndSaysWhy) {
  WatchOptions o = FakeGpuOptions("");
  o.nvml_library = "/nonexistent/libnvidia-ml.so.1";
  SATURATE_ASSERT_OK_AND_ASSIGN(auto w, Watcher::Start(o));
  EXPECT_EQ(w->gpu_count(), 0);
  EXPECT_EQ(w->gpu_status().rfind("no GPUs: ", 0), 0u) << w->gpu_status();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  json latest = json::parse(w->LatestJson());
  EXPECT_TRUE(latest["gpus"].empty());
  EXPECT_GT(w->stats().samples, 0u);
}

TEST(WatcherTest, BadOptionsAndUnwritableRunDir) {
  WatchOptions o;
  o.interval_ns = 1000;
  EXPECT_TRUE(
      testing::HasError(Watcher::Start(o).status(), StatusCode::kInvalidArgument, {"interval"}));
  o = WatchOptions{};
  o.gpus = false;
  o.run_dir = "/proc/saturate-cannot-write-here";
  EXPECT_FALSE(Watcher::Start(o).ok());
}

TEST(MetricsServerTest, ServesThePageOverHttp) {
  SATURATE_ASSERT_OK_AND_ASSIGN(
      auto server, MetricsServer::Start({}, [] { return std::string("m{a=\"b\"} 1\n"); }));
  EXPECT_GT(server->port(), 0);
  EXPECT_EQ(server->url(), "http://127.0.0.1:" + std::to_string(server->port()) + "/metrics");
  httplib::Client client("127.0.0.1", server->port());
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "m{a=\"b\"} 1\n");
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(client.Get("/nothing")->status, 404);
}

TEST(MetricsServerTest, ListenAddresses) {
  EXPECT_EQ(ParseListenAddress("9400")->host, "127.0.0.1");
  EXPECT_EQ(ParseListenAddress("9400")->port, 9400);
  EXPECT_EQ(ParseListenAddress(":9400")->host, "127.0.0.1");
  EXPECT_EQ(ParseListenAddress("0.0.0.0:80")->host, "0.0.0.0");
  EXPECT_EQ(ParseListenAddress("[::1]:9400")->host, "::1");
  for (const char* bad : {"", "x", "70000", "host:", "1.2.3.4:-1"}) {
    EXPECT_FALSE(ParseListenAddress(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace saturate::watch
