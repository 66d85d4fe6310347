#include "watch/procfs.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/file.h"
#include "base/testing.h"
#include "base/thread_name.h"

namespace saturate::watch {
namespace {

using ::saturate::testing::HasError;
using ::saturate::testing::TempDir;

// Files recorded from a 2-core VM (see testdata/proc/README).
const std::string kProc = SATURATE_WATCH_TESTDATA "/proc";

std::string Recorded(const std::string& name) {
  Result<std::string> text = ReadFileToString(kProc + "/" + name);
  EXPECT_TRUE(text.ok()) << text.status().ToString();
  return text.ok() ? *text : "";
}

std::vector<int> Pids(const std::vector<ProcessStat>& processes) {
  std::vector<int> pids;
  for (const ProcessStat& p : processes) pids.push_back(p.pid);
  return pids;
}

// A sysfs with class/block/<name>/<file> for each {name, file} ("" for just the directory).
void MakeSysBlock(const std::string& sys_root,
                  std::initializer_list<std::pair<std::string, std::string>> entries) {
  for (const auto& [name, file] : entries) {
    const std::filesystem::path dir = std::filesystem::path(sys_root) / "class/block" / name;
    std::filesystem::create_directories((dir / file).parent_path());
    if (!file.empty()) SATURATE_ASSERT_OK(WriteFileAtomic((dir / file).string(), "1\n"));
  }
}

// ---- parsers on recorded files ----------------------------------------------

TEST(ParseChildren, PidsUntilSomethingElse) {
  EXPECT_EQ(ParseChildren("123 456 "), (std::vector<int>{123, 456}));
  EXPECT_EQ(ParseChildren(""), std::vector<int>());
  EXPECT_EQ(ParseChildren("12 x 3"), std::vector<int>{12});
  EXPECT_EQ(ParseChildren("0 7"), std::vector<int>());
}

TEST(ReadChildren, AForkedChildIsListed) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    sleep(10);
    _exit(0);
  }
  const std::vector<int> children = ReadChildren("/proc", getpid());
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  if (!std::filesystem::exists("/proc/self/task/" + std::to_string(getpid()) + "/children")) {
    GTEST_SKIP() << "this kernel has no /proc/<pid>/task/<tid>/children (CONFIG_PROC_CHILDREN)";
  }
  EXPECT_NE(std::find(children.begin(), children.end(), child), children.end());
  EXPECT_TRUE(ReadChildren("/proc", INT_MAX).empty());  // no such process: none
}

TEST(ParseCpuStat, RecordedFile) {
  SATURATE_ASSERT_OK_AND_ASSIGN(CpuStat stat, ParseCpuStat(Recorded("stat")));
  EXPECT_EQ(stat.total.cpu, -1);
  EXPECT_EQ(stat.total.user_ticks, 1605784u);
  EXPECT_EQ(stat.total.nice_ticks, 12666u);
  EXPECT_EQ(stat.total.system_ticks, 91185u);
  EXPECT_EQ(stat.total.idle_ticks, 581075u);
  EXPECT_EQ(stat.total.iowait_ticks, 15086u);
  EXPECT_EQ(stat.total.irq_ticks, 0u);
  EXPECT_EQ(stat.total.softirq_ticks, 1981u);
  EXPECT_EQ(stat.total.steal_ticks, 6667u);
  EXPECT_EQ(stat.total.total_ticks(), 2314444u);
  ASSERT_EQ(stat.cores.size(), 2u);
  EXPECT_EQ(stat.cores[0].cpu, 0);
  EXPECT_EQ(stat.cores[0].user_ticks, 755415u);
  EXPECT_EQ(stat.cores[0].steal_ticks, 3338u);
  EXPECT_EQ(stat.cores[1].cpu, 1);
  EXPECT_EQ(stat.cores[1].iowait_ticks, 12534u);
  EXPECT_EQ(stat.cores[1].softirq_ticks, 1212u);
  EXPECT_EQ(stat.context_switches, 7797531u);
  EXPECT_EQ(stat.procs_running, 1u);
}

TEST(ParseMemInfo, RecordedFile) {
  SATURATE_ASSERT_OK_AND_ASSIGN(MemInfo mem, ParseMemInfo(Recorded("meminfo")));
  EXPECT_EQ(mem.total_bytes, 24683656ull * 1024);
  EXPECT_EQ(mem.free_bytes, 18622872ull * 1024);
  EXPECT_EQ(mem.available_bytes, 23854700ull * 1024);
  EXPECT_EQ(mem.buffers_bytes, 45432ull * 1024);
  EXPECT_EQ(mem.cached_bytes, 5175548ull * 1024);
  EXPECT_EQ(mem.swap_total_bytes, 0u);
  EXPECT_EQ(mem.swap_free_bytes, 0u);
  EXPECT_EQ(mem.used_bytes(), (24683656ull - 23854700) * 1024);
}

TEST(ParseDiskStats, RecordedFile) {
  SATURATE_ASSERT_OK_AND_ASSIGN(std::vector<DiskCounters> disks,
                                ParseDiskStats(Recorded("diskstats")));
  ASSERT_EQ(disks.size(), 10u);
  EXPECT_EQ(disks[0].name, "loop0");
  EXPECT_EQ(disks[0].read_bytes, 0u);
  EXPECT_EQ(disks[8].name, "vda");
  EXPECT_EQ(disks[8].read_bytes, 13278586ull * 512);
  EXPECT_EQ(disks[8].write_bytes, 125119536ull * 512);
  EXPECT_FALSE(disks[8].whole_disk);  // only readers consult sysfs
  EXPECT_EQ(disks[9].name, "zram0");
}

TEST(ParseDiskStats, OldFourteenFieldFormatWithPartitions) {
  SATURATE_ASSERT_OK_AND_ASSIGN(std::vector<DiskCounters> disks,
                                ParseDiskStats("   8       0 sda 10 0 2048 5 20 0 4096 9 0 7 14\n"
                                               "   8       1 sda1 4 0 1024 2 6 0 512 3 0 2 5\n"));
  ASSERT_EQ(disks.size(), 2u);
  EXPECT_EQ(disks[0].read_bytes, 2048u * 512);
  EXPECT_EQ(disks[0].write_bytes, 4096u * 512);
  EXPECT_EQ(disks[1].name, "sda1");
  EXPECT_EQ(disks[1].write_bytes, 512u * 512);
}

TEST(ParseProcessStat, RecordedFiles) {
  SATURATE_ASSERT_OK_AND_ASSIGN(ProcessStat init, ParseProcessStat(Recorded("1/stat")));
  EXPECT_EQ(init.pid, 1);
  EXPECT_EQ(init.comm, "process_api");
  EXPECT_EQ(init.state, 'S');
  EXPECT_EQ(init.ppid, 0);
  EXPECT_EQ(init.utime_ticks, 176u);
  EXPECT_EQ(init.stime_ticks, 224u);
  EXPECT_EQ(init.cutime_ticks, 1492410u);
  EXPECT_EQ(init.cstime_ticks, 76457u);
  EXPECT_EQ(init.num_threads, 11);
  EXPECT_EQ(init.start_ticks, 13u);
  EXPECT_EQ(init.rss_pages, 2097);

  SATURATE_ASSERT_OK_AND_ASSIGN(ProcessStat kthread, ParseProcessStat(Recorded("14/stat")));
  EXPECT_EQ(kthread.comm, "ksoftirqd/0");
  EXPECT_EQ(kthread.ppid, 2);
  EXPECT_EQ(kthread.utime_ticks, 64u);
  EXPECT_EQ(kthread.rss_pages, 0);

  SATURATE_ASSERT_OK_AND_ASSIGN(ProcessStat shell, ParseProcessStat(Recorded("11641/stat")));
  EXPECT_EQ(shell.comm, "bash");
  EXPECT_EQ(shell.ppid, 11640);
  EXPECT_EQ(shell.cutime_ticks, 45925u);
  EXPECT_EQ(shell.start_ticks, 1122690u);
  EXPECT_EQ(shell.rss_pages, 777);
}

TEST(ParseProcessStat, CommWithSpacesAndParentheses) {
  // Fabricated from 11641/stat: comm "a) (b c)" must end at the LAST ')'.
  SATURATE_ASSERT_OK_AND_ASSIGN(ProcessStat p, ParseProcessStat(Recorded("4242/stat")));
  EXPECT_EQ(p.pid, 4242);
  EXPECT_EQ(p.comm, "a) (b c)");
  EXPECT_EQ(p.state, 'R');
  EXPECT_EQ(p.ppid, 11641);
  EXPECT_EQ(p.utime_ticks, 7u);
  EXPECT_EQ(p.stime_ticks, 5u);
  EXPECT_EQ(p.cutime_ticks, 2u);
  EXPECT_EQ(p.cstime_ticks, 1u);
  EXPECT_EQ(p.num_threads, 3);
  EXPECT_EQ(p.start_ticks, 1122700u);
  EXPECT_EQ(p.rss_pages, 100);
}

// ---- malformed input --------------------------------------------------------

TEST(ParseCpuStat, MalformedNamesLineAndField) {
  const std::string total = "cpu  1 2 3 4 5 6 7 8 0 0\n";
  EXPECT_TRUE(HasError(ParseCpuStat(total + "cpu0 1 2 3 4 5\n").status(), StatusCode::kCorruption,
                       {"/proc/stat: line 2: expected 8 numbers after 'cpu0', got 5"}));
  EXPECT_TRUE(HasError(ParseCpuStat(total + "cpu0 1 2 x 4 5 6 7 8\n").status(),
                       StatusCode::kCorruption,
                       {"/proc/stat: line 2: 'cpu0' number 3: expected a number, got 'x'"}));
  EXPECT_TRUE(HasError(ParseCpuStat(total + "cpuX 1 2 3 4 5 6 7 8\n").status(),
                       StatusCode::kCorruption, {"line 2: bad cpu name 'cpuX'"}));
  EXPECT_TRUE(HasError(ParseCpuStat(total + "cpu-1 1 2 3 4 5 6 7 8\n").status(),
                       StatusCode::kCorruption, {"bad cpu name 'cpu-1'"}));
  EXPECT_TRUE(HasError(ParseCpuStat(total + "cpu0 1 2 3 4 5 6 7 8\nctxt many\n").status(),
                       StatusCode::kCorruption, {"line 3: expected one number after 'ctxt'"}));
  EXPECT_TRUE(HasError(ParseCpuStat(total).status(), StatusCode::kCorruption,
                       {"/proc/stat: no 'cpuN' lines"}));
  EXPECT_TRUE(HasError(ParseCpuStat("cpu0 1 2 3 4 5 6 7 8\n", "x/stat").status(),
                       StatusCode::kCorruption, {"x/stat: no 'cpu' line"}));
  EXPECT_TRUE(HasError(ParseCpuStat("").status(), StatusCode::kCorruption, {"no 'cpu' line"}));
}

TEST(ParseMemInfo, MalformedNamesLineAndField) {
  std::string text = Recorded("meminfo");
  text.replace(text.find("MemAvailable"), 3, "Xyz");
  EXPECT_TRUE(HasError(ParseMemInfo(text).status(), StatusCode::kCorruption,
                       {"/proc/meminfo: missing MemAvailable"}));
  EXPECT_TRUE(HasError(ParseMemInfo("MemTotal: 12 MB\n").status(), StatusCode::kCorruption,
                       {"/proc/meminfo: line 1: MemTotal: expected '<number> kB', got ' 12 MB'"}));
  EXPECT_TRUE(HasError(ParseMemInfo("MemFree: 1 kB\nCached:  lots kB\n").status(),
                       StatusCode::kCorruption, {"line 2: Cached: expected '<number> kB'"}));
}

TEST(ParseDiskStats, MalformedNamesLineAndField) {
  EXPECT_TRUE(HasError(ParseDiskStats("8 0 sda 1 2 3\n").status(), StatusCode::kCorruption,
                       {"/proc/diskstats: line 1: expected at least 14 fields, got 6"}));
  EXPECT_TRUE(HasError(
      ParseDiskStats("\n8 0 sda 10 0 2048 5 20 0 4O96 9 0 7 14\n").status(),
      StatusCode::kCorruption,
      {"/proc/diskstats: line 2: sda: field 10 (sectors written): expected a number, got '4O96'"}));
}

TEST(ParseProcessStat, MalformedNamesField) {
  const std::string shell = Recorded("11641/stat");
  EXPECT_TRUE(HasError(ParseProcessStat("123 bash S 1", "/proc/123/stat").status(),
                       StatusCode::kCorruption, {"/proc/123/stat: expected 'pid (comm) ...'"}));
  EXPECT_TRUE(HasError(ParseProcessStat("x (bash) S 1").status(), StatusCode::kCorruption,
                       {"field 1 (pid): expected a number, got 'x'"}));
  EXPECT_TRUE(HasError(ParseProcessStat("123 (bash) S 1 2 3\n").status(), StatusCode::kCorruption,
                       {"expected at least 24 fields, got 6"}));
  EXPECT_TRUE(HasError(ParseProcessStat(shell.substr(0, shell.find(" 777 ")) + "\n").status(),
                       StatusCode::kCorruption, {"expected at least 24 fields, got 23"}));
  std::string bad_utime = shell;
  bad_utime.replace(bad_utime.find(" 0 0 45925"), 2, " u");
  EXPECT_TRUE(HasError(ParseProcessStat(bad_utime, "/proc/11641/stat").status(),
                       StatusCode::kCorruption,
                       {"/proc/11641/stat: field 14 (utime): expected a number, got 'u'"}));
  std::string bad_state = shell;
  bad_state.replace(bad_state.find(") S"), 3, ") SS");
  EXPECT_TRUE(HasError(ParseProcessStat(bad_state).status(), StatusCode::kCorruption,
                       {"field 3 (state): expected one char"}));
}

// ---- whole disks ------------------------------------------------------------

TEST(IsWholeDisk, FollowsSysfs) {
  TempDir sys;
  MakeSysBlock(sys.path(), {{"vda", "device/vendor"},
                            {"vda1", "partition"},
                            {"loop0", "ro"},
                            {"dm-0", "dm/name"},
                            {"cciss!c0d0", "device/vendor"}});
  EXPECT_TRUE(IsWholeDisk(sys.path(), "vda"));
  EXPECT_TRUE(IsWholeDisk(sys.path(), "cciss/c0d0"));
  EXPECT_FALSE(IsWholeDisk(sys.path(), "vda1"));
  EXPECT_FALSE(IsWholeDisk(sys.path(), "loop0"));
  EXPECT_FALSE(IsWholeDisk(sys.path(), "dm-0"));
  EXPECT_FALSE(IsWholeDisk(sys.path(), "sdz"));
}

TEST(SumWholeDisks, SkipsTheRest) {
  const std::vector<DiskCounters> disks = {{"sda", 100, 200, true},
                                           {"sda1", 90, 190, false},
                                           {"nvme0n1", 1, 2, true},
                                           {"loop0", 5, 0, false}};
  const DiskCounters sum = SumWholeDisks(disks);
  EXPECT_EQ(sum.read_bytes, 101u);
  EXPECT_EQ(sum.write_bytes, 202u);
}

// ---- readers on a recorded root -----------------------------------------------

TEST(ReadHostCounters, RecordedRoot) {
  TempDir sys;
  MakeSysBlock(sys.path(), {{"vda", "device/vendor"}, {"loop0", "ro"}, {"zram0", "ro"}});
  SATURATE_ASSERT_OK_AND_ASSIGN(HostCounters host, ReadHostCounters(kProc, sys.path()));
  EXPECT_GT(host.time_ns, 0);
  EXPECT_EQ(host.cpu.cores.size(), 2u);
  EXPECT_EQ(host.mem.total_bytes, 24683656ull * 1024);
  ASSERT_EQ(host.disks.size(), 10u);
  for (const DiskCounters& d : host.disks) EXPECT_EQ(d.whole_disk, d.name == "vda") << d.name;
  EXPECT_EQ(SumWholeDisks(host.disks).read_bytes, 13278586ull * 512);
}

TEST(ReadHostCounters, NoDiskstatsMeansNoDisks) {
  TempDir proc;
  SATURATE_ASSERT_OK(WriteFileAtomic(proc.Join("stat"), Recorded("stat")));
  SATURATE_ASSERT_OK(WriteFileAtomic(proc.Join("meminfo"), Recorded("meminfo")));
  SATURATE_ASSERT_OK_AND_ASSIGN(HostCounters host, ReadHostCounters(proc.path(), proc.path()));
  EXPECT_TRUE(host.disks.empty());
}

TEST(ReadHostCounters, ErrorNamesTheFile) {
  TempDir proc;
  SATURATE_ASSERT_OK(WriteFileAtomic(proc.Join("stat"), "cpu 1 2\n"));
  EXPECT_TRUE(HasError(ReadHostCounters(proc.path()).status(), StatusCode::kCorruption,
                       {proc.Join("stat") + ": line 1: expected 8 numbers after 'cpu', got 2"}));
  EXPECT_TRUE(HasError(ReadHostCounters(proc.Join("missing")).status(), StatusCode::kNotFound,
                       {"missing/stat"}));
}

TEST(ListProcesses, RecordedRootSkipsVanishedAndNonNumeric) {
  // 99999/ has no stat: a process that exited between readdir and open.
  SATURATE_ASSERT_OK_AND_ASSIGN(std::vector<ProcessStat> all, ListProcesses(kProc));
  EXPECT_EQ(Pids(all), (std::vector<int>{1, 2, 14, 4242, 11628, 11640, 11641}));
}

TEST(ReadProcess, MissingProcessIsNotFound) {
  EXPECT_EQ(ReadProcess(kProc, 99999).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ReadProcess(kProc, 5).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(
      HasError(ReadProcess("/proc", INT_MAX).status(), StatusCode::kNotFound, {"no such process"}));
}

TEST(ReadProcess, CorruptStatOfALiveProcessIsAnError) {
  TempDir proc;
  std::filesystem::create_directories(proc.Join("7"));
  SATURATE_ASSERT_OK(WriteFileAtomic(proc.Join("7/stat"), "7 (x) S\n"));
  EXPECT_TRUE(HasError(ListProcesses(proc.path()).status(), StatusCode::kCorruption,
                       {proc.Join("7/stat") + ": expected at least 24 fields, got 3"}));
}

// ---- process trees ----------------------------------------------------------

TEST(Descendants, RecordedTree) {
  SATURATE_ASSERT_OK_AND_ASSIGN(std::vector<ProcessStat> all, ListProcesses(kProc));
  EXPECT_EQ(Pids(Descendants(all, 11640)), (std::vector<int>{11640, 11641, 4242}));
  EXPECT_EQ(Pids(Descendants(all, 2)), (std::vector<int>{2, 14}));
  EXPECT_EQ(Pids(Descendants(all, 4242)), (std::vector<int>{4242}));
  EXPECT_TRUE(Descendants(all, 12345).empty());
}

TEST(Descendants, BreadthFirstAndCycleSafe) {
  std::vector<ProcessStat> all(6);
  const int links[][2] = {{10, 1}, {11, 10}, {12, 10}, {13, 11}, {20, 21}, {21, 20}};
  for (size_t i = 0; i < all.size(); ++i) {
    all[i].pid = links[i][0];
    all[i].ppid = links[i][1];
  }
  EXPECT_EQ(Pids(Descendants(all, 10)), (std::vector<int>{10, 11, 12, 13}));
  EXPECT_EQ(Pids(Descendants(all, 20)), (std::vector<int>{20, 21}));  // pid reuse made a cycle
}

TEST(SumProcesses, RecordedTree) {
  SATURATE_ASSERT_OK_AND_ASSIGN(std::vector<ProcessStat> all, ListProcesses(kProc));
  const ProcessTreeCounters sum = SumProcesses(Descendants(all, 11640), 4096);
  EXPECT_EQ(sum.time_ns, 0);
  EXPECT_EQ(sum.processes, 3);
  EXPECT_EQ(sum.cpu_ticks, (45925u + 2945u) + (7u + 5u + 2u + 1u));
  EXPECT_EQ(sum.rss_bytes, (461u + 777u + 100u) * 4096u);
  EXPECT_EQ(sum.threads, 1 + 1 + 3);
}

// ---- rates ------------------------------------------------------------------

CpuTimes Ticks(int cpu, uint64_t user, uint64_t nice, uint64_t system, uint64_t idle,
               uint64_t iowait, uint64_t irq, uint64_t softirq, uint64_t steal) {
  return {cpu, user, nice, system, idle, iowait, irq, softirq, steal};
}

TEST(ComputeCpuUsage, SplitsTicks) {
  // 1000 ticks pass: 300 user + 100 nice, 80 system + 10 irq + 10 softirq,
  // 400 idle, 50 iowait, 50 steal.
  const CpuUsage u = ComputeCpuUsage(Ticks(3, 100, 0, 50, 800, 20, 5, 5, 20),
                                     Ticks(3, 400, 100, 130, 1200, 70, 15, 15, 70));
  EXPECT_EQ(u.cpu, 3);
  EXPECT_DOUBLE_EQ(u.user_pct, 40);
  EXPECT_DOUBLE_EQ(u.system_pct, 10);
  EXPECT_DOUBLE_EQ(u.iowait_pct, 5);
  EXPECT_DOUBLE_EQ(u.steal_pct, 5);
  EXPECT_DOUBLE_EQ(u.busy_pct, 55);
}

TEST(ComputeCpuUsage, BackwardsCounterAndNoTicks) {
  // iowait went backwards (seen on real kernels): counts as no change.
  const CpuUsage u =
      ComputeCpuUsage(Ticks(0, 0, 0, 0, 0, 90, 0, 0, 0), Ticks(0, 50, 0, 0, 50, 10, 0, 0, 0));
  EXPECT_DOUBLE_EQ(u.user_pct, 50);
  EXPECT_DOUBLE_EQ(u.iowait_pct, 0);
  const CpuUsage idle =
      ComputeCpuUsage(Ticks(0, 5, 0, 0, 0, 0, 0, 0, 0), Ticks(0, 5, 0, 0, 0, 0, 0, 0, 0));
  EXPECT_DOUBLE_EQ(idle.busy_pct, 0);
}

TEST(ComputeCpuUsage, AFullyBusyIntervalIsExactly100) {
  // 11 ticks: 11 * (100.0 / 11) rounds above 100; the share must not.
  for (uint64_t ticks : {11, 22, 39, 44, 78}) {
    const CpuUsage u =
        ComputeCpuUsage(Ticks(0, 0, 0, 0, 0, 0, 0, 0, 0), Ticks(0, ticks, 0, 0, 0, 0, 0, 0, 0));
    EXPECT_EQ(u.busy_pct, 100.0) << ticks;
    EXPECT_EQ(u.user_pct, 100.0) << ticks;
  }
}

TEST(ComputeHostRates, TwoHandWrittenSamples) {
  HostCounters before, after;
  before.time_ns = 1'000'000'000;
  after.time_ns = 3'000'000'000;  // 2 s later
  // Two cores: core 0 fully busy in user, core 1 idle; the total is half busy.
  before.cpu.total = Ticks(-1, 1000, 0, 0, 1000, 0, 0, 0, 0);
  after.cpu.total = Ticks(-1, 1200, 0, 0, 1200, 0, 0, 0, 0);
  before.cpu.cores = {Ticks(0, 500, 0, 0, 500, 0, 0, 0, 0), Ticks(1, 500, 0, 0, 500, 0, 0, 0, 0)};
  after.cpu.cores = {Ticks(0, 700, 0, 0, 500, 0, 0, 0, 0), Ticks(1, 500, 0, 0, 700, 0, 0, 0, 0),
                     Ticks(2, 0, 0, 0, 100, 0, 0, 0, 0)};  // core 2 came online
  before.disks = {{"sda", 1000, 0, true}, {"sda1", 1000, 0, false}, {"sdb", 0, 0, true}};
  after.disks = {{"sda", 1000 + 4'000'000, 2'000'000, true},
                 {"sda1", 1000 + 4'000'000, 0, false},
                 {"sdb", 1'000'000, 0, true},
                 {"sdc", 9'000'000, 0, true}};  // hot-plugged: no rate yet

  const HostRates r = ComputeHostRates(before, after);
  EXPECT_DOUBLE_EQ(r.elapsed_s, 2);
  EXPECT_DOUBLE_EQ(r.cpu.busy_pct, 50);
  ASSERT_EQ(r.cores.size(), 2u);
  EXPECT_EQ(r.cores[0].cpu, 0);
  EXPECT_DOUBLE_EQ(r.cores[0].user_pct, 100);
  EXPECT_EQ(r.cores[1].cpu, 1);
  EXPECT_DOUBLE_EQ(r.cores[1].busy_pct, 0);
  ASSERT_EQ(r.disks.size(), 2u);
  EXPECT_EQ(r.disks[0].name, "sda");
  EXPECT_DOUBLE_EQ(r.disks[0].read_bytes_per_s, 2'000'000);
  EXPECT_DOUBLE_EQ(r.disks[0].write_bytes_per_s, 1'000'000);
  EXPECT_EQ(r.disks[1].name, "sdb");
  EXPECT_DOUBLE_EQ(r.disks[1].read_bytes_per_s, 500'000);
  EXPECT_EQ(r.disks_total.name, "total");
  EXPECT_DOUBLE_EQ(r.disks_total.read_bytes_per_s, 2'500'000);
  EXPECT_DOUBLE_EQ(r.disks_total.write_bytes_per_s, 1'000'000);

  const HostRates same = ComputeHostRates(after, after);
  EXPECT_DOUBLE_EQ(same.disks_total.read_bytes_per_s, 0);
  EXPECT_FALSE(r.cpu_pressure_pct.has_value());  // no PSI in either sample
}

TEST(ParseCpuPressure, SomeTotal) {
  constexpr std::string_view kPressure =
      "some avg10=1.50 avg60=13.55 avg300=55.25 total=4769945215\n"
      "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
  EXPECT_EQ(*ParseCpuPressureSomeUs(kPressure), 4769945215u);
  EXPECT_TRUE(HasError(ParseCpuPressureSomeUs("full avg10=0.00 total=0\n").status(),
                       StatusCode::kCorruption, {"/proc/pressure/cpu", "no 'some'"}));
  EXPECT_TRUE(HasError(ParseCpuPressureSomeUs("some avg10=1 total=x\n").status(),
                       StatusCode::kCorruption, {"/proc/pressure/cpu", "line 1", "total=x"}));
}

TEST(ComputeHostRates, CpuPressureIsTheShareOfTimeATaskWaited) {
  HostCounters before, after;
  before.time_ns = 0;
  after.time_ns = 2'000'000'000;
  before.cpu_pressure_some_us = 1'000'000;
  after.cpu_pressure_some_us = 1'500'000;  // 0.5 s of waiting in 2 s
  EXPECT_DOUBLE_EQ(*ComputeHostRates(before, after).cpu_pressure_pct, 25);
}

TEST(ComputeProcessTreeRates, PercentOfOneCore) {
  const ProcessTreeCounters before{.time_ns = 0, .processes = 2, .cpu_ticks = 1000};
  const ProcessTreeCounters after{
      .time_ns = 2'000'000'000, .processes = 3, .cpu_ticks = 1500, .rss_bytes = 4096, .threads = 7};
  const ProcessTreeRates r = ComputeProcessTreeRates(before, after, 100);
  EXPECT_DOUBLE_EQ(r.elapsed_s, 2);
  EXPECT_DOUBLE_EQ(r.cpu_pct, 250);  // 5 s of CPU in 2 s
  EXPECT_EQ(r.processes, 3);
  EXPECT_EQ(r.rss_bytes, 4096u);
  EXPECT_EQ(r.threads, 7);
  EXPECT_DOUBLE_EQ(ComputeProcessTreeRates(after, before, 100).cpu_pct, 0);  // backwards
  EXPECT_DOUBLE_EQ(ComputeProcessTreeRates(after, after, 100).cpu_pct, 0);   // no time
}

TEST(ParseSchedStat, RunAndWait) {
  SATURATE_ASSERT_OK_AND_ASSIGN(SchedStat s, ParseSchedStat("157448101 11941534 539\n"));
  EXPECT_EQ(s.run_ns, 157448101u);
  EXPECT_EQ(s.runq_wait_ns, 11941534u);
  EXPECT_TRUE(HasError(ParseSchedStat("157448101\n", "/proc/7/task/9/schedstat").status(),
                       StatusCode::kCorruption, {"/proc/7/task/9/schedstat", "157448101"}));
  EXPECT_TRUE(HasError(ParseSchedStat("1 -2 3").status(), StatusCode::kCorruption, {"-2"}));
}

TEST(GrowthBetween, IncreasesNewThreadsAndExitedOnes) {
  const ThreadScheds before{{10, {5, 1000, false}}, {11, {5, 500, false}}, {12, {5, 70, false}}};
  // 11 went backwards, 12 exited, 13 was born.
  const ThreadScheds after{{10, {9, 1600, false}}, {11, {9, 400, false}}, {13, {3, 50, false}}};
  const SchedGrowth g = GrowthBetween(before, after);
  EXPECT_EQ(g.runq_wait_ns, 600u + 0u + 50u);
  EXPECT_FALSE(g.saturate_threads);
  EXPECT_EQ(g.saturate_runq_wait_ns + g.saturate_run_ns, 0u);
  EXPECT_EQ(GrowthBetween(after, after).runq_wait_ns, 0u);
}

TEST(GrowthBetween, CountsSaturatesOwnThreadsApart) {
  const ThreadScheds before{{10, {100, 1000, false}}, {11, {200, 500, true}}};
  const ThreadScheds after{{10, {150, 1600, false}}, {11, {260, 900, true}}, {12, {7, 8, true}}};
  const SchedGrowth g = GrowthBetween(before, after);
  EXPECT_EQ(g.runq_wait_ns, 600u + 400u + 8u);
  EXPECT_TRUE(g.saturate_threads);
  EXPECT_EQ(g.saturate_runq_wait_ns, 400u + 8u);
  EXPECT_EQ(g.saturate_run_ns, 60u + 7u);
}

TEST(ReadThreadScheds, EveryThreadOfEachProcessAndWhoNamedIt) {
  TempDir root;
  auto put = [&](const std::string& file, const std::string& text) {
    std::filesystem::create_directories(
        std::filesystem::path(root.path() + "/" + file).parent_path());
    SATURATE_ASSERT_OK(WriteFileAtomic(root.path() + "/" + file, text));
  };
  put("12/task/12/schedstat", "5 100 1\n");
  put("12/task/12/comm", "python3\n");
  put("12/task/14/schedstat", "6 200 1\n");
  put("12/task/14/comm", "sat-feed-0\n");
  put("12/task/junk/schedstat", "7 300 1\n");
  put("20/task/20/schedstat", "8 400 1\n");  // no comm: not saturate's
  put("21/task/21/schedstat", "bad");
  EXPECT_EQ(ReadThreadScheds(root.path(), 12),
            (ThreadScheds{{12, {5, 100, false}}, {14, {6, 200, true}}}));
  EXPECT_EQ(ReadThreadScheds(root.path(), 20), (ThreadScheds{{20, {8, 400, false}}}));
  EXPECT_TRUE(ReadThreadScheds(root.path(), 21).empty());  // unreadable
  EXPECT_TRUE(ReadThreadScheds(root.path(), 99).empty());  // gone
}

// ---- the live /proc ---------------------------------------------------------

TEST(Live, HostCounters) {
  EXPECT_GT(ClockTicksPerSecond(), 0);
  EXPECT_GT(PageSizeBytes(), 0);
  SATURATE_ASSERT_OK_AND_ASSIGN(HostCounters before, ReadHostCounters());
  EXPECT_GE(before.cpu.cores.size(), 1u);
  EXPECT_GT(before.cpu.total.total_ticks(), 0u);
  EXPECT_GT(before.mem.total_bytes, 0u);
  EXPECT_LE(before.mem.available_bytes, before.mem.total_bytes);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  SATURATE_ASSERT_OK_AND_ASSIGN(HostCounters after, ReadHostCounters());
  const HostRates r = ComputeHostRates(before, after);
  EXPECT_GT(r.elapsed_s, 0);
  EXPECT_GE(r.cpu.busy_pct, 0);
  EXPECT_LE(r.cpu.busy_pct, 100);
  EXPECT_GE(r.disks_total.read_bytes_per_s, 0);
}

TEST(Live, OwnProcess) {
  SATURATE_ASSERT_OK_AND_ASSIGN(ProcessStat self, ReadProcess("/proc", ::getpid()));
  EXPECT_EQ(self.pid, ::getpid());
  EXPECT_EQ(self.ppid, ::getppid());
  SATURATE_ASSERT_OK_AND_ASSIGN(std::string comm, ReadFileToString("/proc/self/comm"));
  EXPECT_EQ(self.comm + "\n", comm);  // "procfs_test" under ctest
  EXPECT_EQ(self.state, 'R');
  EXPECT_GT(self.rss_pages, 0);
  EXPECT_GE(self.num_threads, 1);
  SATURATE_ASSERT_OK_AND_ASSIGN(std::vector<ProcessStat> all, ListProcesses());
  EXPECT_EQ(Pids(Descendants(all, ::getpid())).front(), ::getpid());
}

// Two threads that want a CPU each, on one CPU: each waits on the runqueue
// about half the time, and the reader sees it.
TEST(Live, ThreadsSharingOneCpuWaitForIt) {
  if (ReadThreadScheds("/proc", ::getpid()).empty()) {
    GTEST_SKIP() << "this kernel has no /proc/<pid>/task/<tid>/schedstat (CONFIG_SCHED_INFO)";
  }
  cpu_set_t saved, one;
  ASSERT_EQ(::sched_getaffinity(0, sizeof(saved), &saved), 0);
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &saved)) {
      CPU_SET(c, &one);
      break;
    }
  }
  const ThreadScheds before = ReadThreadScheds("/proc", ::getpid());
  std::atomic<bool> stop{false};
  auto spin = [&] {
    ::sched_setaffinity(0, sizeof(one), &one);  // this thread only
    while (!stop.load(std::memory_order_relaxed)) {
    }
  };
  std::thread a(spin), b([&] {
    base::NameThisThread("spin");
    spin();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const ThreadScheds after = ReadThreadScheds("/proc", ::getpid());  // while both still run
  stop = true;
  a.join();
  b.join();
  const SchedGrowth g = GrowthBetween(before, after);
  EXPECT_GE(g.runq_wait_ns, 100'000'000u) << "two spinning threads on one CPU for 300 ms";
  // The named one is saturate's: it waited and ran about half the time each.
  EXPECT_TRUE(g.saturate_threads);
  EXPECT_GE(g.saturate_runq_wait_ns, 50'000'000u);
  EXPECT_GE(g.saturate_run_ns, 50'000'000u);
  EXPECT_LT(g.saturate_runq_wait_ns, g.runq_wait_ns);
}

// Kills a process group and reaps its leader, even when an assertion fails.
struct ReapGroup {
  pid_t leader;
  ~ReapGroup() {
    ::kill(-leader, SIGKILL);
    ::kill(leader, SIGKILL);
    ::waitpid(leader, nullptr, 0);
  }
};

TEST(Live, ProcessTreeFollowsAForkedGrandchild) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // only async-signal-safe calls from here
    ::setpgid(0, 0);
    const pid_t grandchild = ::fork();
    if (grandchild == 0) {
      ::pause();
      ::_exit(0);
    }
    (void)!::write(fds[1], &grandchild, sizeof(grandchild));
    ::pause();
    ::_exit(0);
  }
  ReapGroup reap{child};
  ::close(fds[1]);
  pid_t grandchild = 0;
  ASSERT_EQ(::read(fds[0], &grandchild, sizeof(grandchild)), ssize_t{sizeof(grandchild)});
  ::close(fds[0]);
  ASSERT_GT(grandchild, 0);

  SATURATE_ASSERT_OK_AND_ASSIGN(std::vector<ProcessStat> all, ListProcesses());
  const std::vector<ProcessStat> tree = Descendants(all, child);
  ASSERT_EQ(Pids(tree), (std::vector<int>{child, grandchild}));
  EXPECT_EQ(tree[0].ppid, ::getpid());
  EXPECT_EQ(tree[1].ppid, child);
  EXPECT_EQ(Pids(Descendants(all, ::getpid())), (std::vector<int>{::getpid(), child, grandchild}));

  SATURATE_ASSERT_OK_AND_ASSIGN(ProcessTreeCounters sum, ReadProcessTree("/proc", child));
  EXPECT_GT(sum.time_ns, 0);
  EXPECT_EQ(sum.processes, 2);
  EXPECT_EQ(sum.threads, 2);
  EXPECT_GT(sum.rss_bytes, 0u);
}

}  // namespace
}  // namespace saturate::watch
