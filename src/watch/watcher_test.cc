#include "saturate/watch/watcher.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/file.h"
#include "base/testing.h"
#include "base/thread_name.h"
#include "watch/metrics_server.h"
#include "watch/snapshot.h"

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

// Two threads of the watched process spinning on one CPU: about one of them
// waits for it at any time, and the samples say so once two schedstat reads
// (a second apart) are in.
TEST(WatcherTest, ThreadsWaitingForACpuAreCounted) {
  if (!std::filesystem::exists("/proc/self/task/" + std::to_string(getpid()) + "/schedstat")) {
    GTEST_SKIP() << "this kernel has no /proc/<pid>/task/<tid>/schedstat (CONFIG_SCHED_INFO)";
  }
  cpu_set_t allowed, one;
  ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &allowed)) {
      CPU_SET(c, &one);
      break;
    }
  }
  testing::TempDir dir;
  const std::string run = dir.path() + "/run";
  WatchOptions o = FakeGpuOptions(run);
  o.interval_ns = 100'000'000;
  SATURATE_ASSERT_OK_AND_ASSIGN(auto w, Watcher::Start(o));
  std::atomic<bool> stop{false};
  auto spin = [&] {
    sched_setaffinity(0, sizeof(one), &one);  // this thread only
    while (!stop.load(std::memory_order_relaxed)) {
    }
  };
  std::thread a(spin), b([&] {
    base::NameThisThread("spin");  // one of saturate's own threads
    spin();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(2300));
  const Status stopped = w->Stop(0);
  stop = true;
  a.join();
  b.join();
  SATURATE_ASSERT_OK(stopped);
  const json last = ReadLines(run + "/samples.jsonl").back();
  ASSERT_TRUE(last["tree"].contains("runq_wait_cores")) << last["tree"].dump();
  EXPECT_GT(last["tree"]["runq_wait_cores"].get<double>(), 0.5) << last["tree"].dump();
  const json& member = last["tree"]["members"][0];
  EXPECT_GT(member["runq_wait_cores"].get<double>(), 0.5);
  ASSERT_TRUE(member.contains("saturate_runq_wait_cores")) << member.dump();
  EXPECT_GT(member["saturate_runq_wait_cores"].get<double>(), 0.25) << member.dump();
  EXPECT_LT(member["saturate_runq_wait_cores"].get<double>(),
            member["runq_wait_cores"].get<double>());
  EXPECT_GT(member["saturate_cpu_cores"].get<double>(), 0.25) << member.dump();
  EXPECT_NE(w->PrometheusText().find("saturate_process_tree_runq_wait_cores"), std::string::npos);
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

// GPM counters on a hand-built snapshot: GPU 0 has them (an H100), GPU 1 not.
Snapshot GpmSnapshot() {
  Snapshot s;
  GpuSample h100, older;
  h100.index = 0;
  h100.util_pct = 100;
  h100.pcie_rx_bytes_per_s = 5;  // the 20 ms window's reading; GPM's wins
  h100.gpm.interval_s = 0.1;
  h100.gpm.sm_active_pct = 20;
  h100.gpm.sm_occupancy_pct = 12.5;
  h100.gpm.tensor_active_pct = 2;
  h100.gpm.dram_active_pct = 30;
  h100.gpm.pcie_rx_bytes_per_s = 200.0 * 1024 * 1024;
  h100.gpm.nvlink_tx_bytes_per_s = 1e9;
  older.index = 1;
  older.util_pct = 40;
  older.pcie_rx_bytes_per_s = 7;
  s.gpus = {h100, older};
  return s;
}

TEST(SnapshotTest, GpmCountersInJsonPrometheusAndView) {
  const Snapshot s = GpmSnapshot();
  const json j = SnapshotJson(s);
  const json& gpm = j["gpus"][0]["gpm"];
  EXPECT_EQ(gpm["sm_active_pct"], 20.0);
  EXPECT_EQ(gpm["sm_occupancy_pct"], 12.5);
  EXPECT_EQ(gpm["tensor_active_pct"], 2.0);
  EXPECT_EQ(gpm["interval_s"], 0.1);
  EXPECT_FALSE(gpm.contains("fp32_active_pct"));  // what the GPU did not give is left out
  EXPECT_FALSE(j["gpus"][1].contains("gpm"));

  const std::vector<GpuDeviceInfo> infos = {{0, "NVIDIA H100 80GB HBM3", "GPU-a", "", {}},
                                            {1, "Tesla V100", "GPU-b", "", {}}};
  const std::string page = SnapshotPrometheus(s, infos, "host", {}, 1, 0);
  // DCGM's profiling fields: ratios 0-1 and bytes/s, only for the GPU that has them.
  EXPECT_NE(page.find("# TYPE DCGM_FI_PROF_SM_ACTIVE gauge\n"), std::string::npos) << page;
  EXPECT_NE(page.find("DCGM_FI_PROF_SM_ACTIVE{gpu=\"0\",UUID=\"GPU-a\""), std::string::npos);
  EXPECT_EQ(page.find("DCGM_FI_PROF_SM_ACTIVE{gpu=\"1\""), std::string::npos);
  EXPECT_NE(page.find("Hostname=\"host\"} 0.20000000000000001\n"), std::string::npos);
  EXPECT_NE(page.find("DCGM_FI_PROF_SM_OCCUPANCY{gpu=\"0\""), std::string::npos);
  EXPECT_NE(page.find("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{gpu=\"0\""), std::string::npos);
  EXPECT_NE(page.find("DCGM_FI_PROF_DRAM_ACTIVE{gpu=\"0\""), std::string::npos);
  EXPECT_NE(page.find("DCGM_FI_PROF_NVLINK_TX_BYTES{gpu=\"0\""), std::string::npos);
  EXPECT_EQ(page.find("DCGM_FI_PROF_NVLINK_RX_BYTES"), std::string::npos);  // no value: no family
  EXPECT_EQ(page.find("DCGM_FI_PROF_PIPE_FP32_ACTIVE"), std::string::npos);
  // PCIe: GPM's rate where there is one, the legacy reading elsewhere.
  EXPECT_NE(page.find("Hostname=\"host\"} 209715200\n"), std::string::npos) << page;
  EXPECT_NE(page.find("DCGM_FI_PROF_PCIE_RX_BYTES{gpu=\"1\",UUID=\"GPU-b\",pci_bus_id=\"\","
                      "device=\"nvidia1\",modelName=\"Tesla V100\",Hostname=\"host\"} 7\n"),
            std::string::npos)
      << page;

  const std::string line = RenderLine(s);
  EXPECT_NE(line.find("gpu0 100% sm 20% tensor 2% dram 30%"), std::string::npos) << line;
  const std::string screen = RenderScreen(s, {});
  EXPECT_NE(screen.find("SM active"), std::string::npos) << screen;
  EXPECT_NE(screen.find("(GPM)"), std::string::npos) << screen;
}

TEST(WatcherTest, FakeGpmCountersReachTheSamples) {
  const std::string dir = ::testing::TempDir() + "/watch_gpm";
  std::filesystem::remove_all(dir);
  WatchOptions o = FakeGpuOptions(dir);
  o.interval_ns = 120'000'000;  // above GPM's minimum span
  SATURATE_ASSERT_OK_AND_ASSIGN(auto w, Watcher::Start(o));
  std::this_thread::sleep_for(std::chrono::milliseconds(450));
  EXPECT_NE(w->PrometheusText().find("DCGM_FI_PROF_SM_ACTIVE{gpu=\"0\""), std::string::npos);
  ASSERT_TRUE(w->Stop().ok());
  int with_gpm = 0;
  for (const json& line : ReadLines(dir + "/samples.jsonl")) {
    const json& g0 = line["gpus"][0];
    if (g0.contains("gpm")) {
      ++with_gpm;
      EXPECT_EQ(g0["gpm"]["sm_active_pct"], 20.0);
    }
    EXPECT_FALSE(line["gpus"][1].contains("gpm"));  // the fake's GPU 1 has no GPM
  }
  EXPECT_GE(with_gpm, 2);
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
