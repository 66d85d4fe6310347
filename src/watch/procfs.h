// Host sampling from /proc for `saturate watch`: CPU (total and per core),
// memory, disk throughput and the CPU/RSS/threads of a process tree.
//
// Three layers:
//  * Parsers: pure functions over the text of one /proc file. They never touch
//    the file system, so tests feed them recorded files. A malformed file gives
//    Corruption naming the file (`source`) and the line or field.
//  * Readers: read the live files under an injectable root ("/proc", "/sys")
//    and stamp each sample with CLOCK_MONOTONIC. The only place that asks the
//    system for its clock tick rate and page size.
//  * Rates: pure functions of two samples and those constants.
//
// Counters are cumulative since boot, in the kernel's units (clock ticks,
// bytes); rates are per second or percent. A counter that went backwards (a
// known effect for iowait and on some hypervisors) counts as no change.
//
// Ownership: every type is a plain value; nothing holds a file open between
// calls. Thread-safety: all functions are reentrant and may run concurrently.
#ifndef SATURATE_WATCH_PROCFS_H_
#define SATURATE_WATCH_PROCFS_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "saturate/base/status.h"

namespace saturate::watch {

// ---- /proc/stat ------------------------------------------------------------

// One "cpu" line of /proc/stat. guest and guest_nice are not kept: the kernel
// already counts them in user and nice.
struct CpuTimes {
  int cpu = -1;  // core id from "cpuN"; -1 for the all-core "cpu" line
  uint64_t user_ticks = 0;
  uint64_t nice_ticks = 0;
  uint64_t system_ticks = 0;
  uint64_t idle_ticks = 0;
  uint64_t iowait_ticks = 0;
  uint64_t irq_ticks = 0;
  uint64_t softirq_ticks = 0;
  uint64_t steal_ticks = 0;

  uint64_t total_ticks() const {
    return user_ticks + nice_ticks + system_ticks + idle_ticks + iowait_ticks + irq_ticks +
           softirq_ticks + steal_ticks;
  }
};

struct CpuStat {
  CpuTimes total;                 // the "cpu" line: the sum over all online cores
  std::vector<CpuTimes> cores;    // "cpuN" lines in file order; offline cores are absent
  uint64_t context_switches = 0;  // "ctxt", 0 when absent
  uint64_t procs_running = 0;     // "procs_running", 0 when absent
};

// Needs the "cpu" line and at least one "cpuN" line, each with at least 8
// numbers (Linux >= 2.6.11).
Result<CpuStat> ParseCpuStat(std::string_view text, std::string_view source = "/proc/stat");

// ---- /proc/meminfo -----------------------------------------------------------

struct MemInfo {
  uint64_t total_bytes = 0;       // MemTotal
  uint64_t available_bytes = 0;   // MemAvailable (Linux >= 3.14)
  uint64_t free_bytes = 0;        // MemFree
  uint64_t buffers_bytes = 0;     // Buffers
  uint64_t cached_bytes = 0;      // Cached
  uint64_t swap_total_bytes = 0;  // SwapTotal
  uint64_t swap_free_bytes = 0;   // SwapFree

  // What programs hold and the kernel cannot reclaim: total - available.
  uint64_t used_bytes() const {
    return total_bytes > available_bytes ? total_bytes - available_bytes : 0;
  }
};

// Every field above is required and must be in kB.
Result<MemInfo> ParseMemInfo(std::string_view text, std::string_view source = "/proc/meminfo");

// ---- /proc/pressure/cpu (PSI) -----------------------------------------------

// The "some" line's total: microseconds during which at least one runnable
// task waited for a CPU. It grows only when there are more runnable tasks
// than cores, which is what CPU contention means.
Result<uint64_t> ParseCpuPressureSomeUs(std::string_view text,
                                        std::string_view source = "/proc/pressure/cpu");

// ---- /proc/diskstats --------------------------------------------------------

struct DiskCounters {
  std::string name;  // "sda", "nvme0n1p1", "loop0", ...
  uint64_t read_bytes = 0;
  uint64_t write_bytes = 0;
  // Set by ReadHostCounters with IsWholeDisk(); the parser leaves it false.
  bool whole_disk = false;
};

// Every device line, in file order. Sectors are 512 bytes in diskstats
// whatever the device's real sector size.
Result<std::vector<DiskCounters>> ParseDiskStats(std::string_view text,
                                                 std::string_view source = "/proc/diskstats");

// Whether block device `name` is a whole physical disk, the level at which
// throughput is summed without double counting. The rule, from sysfs:
// <sys_root>/class/block/<name>/device exists (backed by hardware: sda, vda,
// nvme0n1; not loop, ram, zram, dm-*, md*, which only pass I/O on to real
// disks or RAM) and <sys_root>/class/block/<name>/partition does not. A name
// sysfs does not know is not a whole disk.
bool IsWholeDisk(const std::string& sys_root, std::string_view name);

// Sum over the devices with whole_disk set.
DiskCounters SumWholeDisks(std::span<const DiskCounters> disks);

// ---- /proc/<pid>/stat -------------------------------------------------------

struct ProcessStat {
  int pid = 0;
  std::string comm;  // at most 15 bytes; may hold spaces and parentheses
  char state = '?';  // R, S, D, Z, T, I, ...
  int ppid = 0;
  uint64_t utime_ticks = 0;
  uint64_t stime_ticks = 0;
  // User and system time of children that exited and were waited for.
  uint64_t cutime_ticks = 0;
  uint64_t cstime_ticks = 0;
  int64_t num_threads = 0;
  uint64_t start_ticks = 0;  // "starttime": ticks after boot
  int64_t rss_pages = 0;
};

// comm is everything between the first '(' and the LAST ')'.
Result<ProcessStat> ParseProcessStat(std::string_view text,
                                     std::string_view source = "/proc/<pid>/stat");

// ---- process trees ------------------------------------------------------------

// The process `root_pid` and everything below it by ppid, root first, then
// breadth first. Empty when root_pid is not in `processes`. A process whose
// parent exited was reparented (to init or a subreaper) and leaves the tree.
std::vector<ProcessStat> Descendants(std::span<const ProcessStat> processes, int root_pid);

struct ProcessTreeCounters {
  int64_t time_ns = 0;  // CLOCK_MONOTONIC of the sample; 0 from SumProcesses
  int64_t processes = 0;
  // utime + stime + cutime + cstime over the tree: CPU of children that were
  // reaped stays counted, so the sum only drops when a process leaves the
  // tree without being waited for by a member.
  uint64_t cpu_ticks = 0;
  uint64_t rss_bytes = 0;
  int64_t threads = 0;
};

ProcessTreeCounters SumProcesses(std::span<const ProcessStat> processes, int64_t page_size_bytes);

// ---- /proc/<pid>/task/<tid>/schedstat ----------------------------------------

// One thread's scheduler times (CONFIG_SCHED_INFO): time on a CPU, and time
// runnable on a runqueue waiting for one. The second is CPU contention as the
// thread felt it, whoever caused it.
struct SchedStat {
  uint64_t run_ns = 0;
  uint64_t runq_wait_ns = 0;
};

// Needs the first two of the file's three numbers.
Result<SchedStat> ParseSchedStat(std::string_view text,
                                 std::string_view source = "/proc/<pid>/task/<tid>/schedstat");

// One thread's schedstat, and whether it is one of saturate's own threads
// (named by base::NameThisThread): their waits for a CPU cost the job data,
// which the data-wait findings price, not compute, so they are counted apart.
struct ThreadSched {
  uint64_t run_ns = 0;
  uint64_t runq_wait_ns = 0;
  bool saturate = false;
  bool operator==(const ThreadSched&) const = default;
};

// Every thread of process `pid`, by tid. Threads that exit while being read
// are left out; empty when the process exited, or the kernel has no
// schedstat files.
using ThreadScheds = std::unordered_map<int64_t, ThreadSched>;
ThreadScheds ReadThreadScheds(const std::string& proc_root, int pid);

// How much the threads' times grew from `before` to `after`: a thread in both
// adds its increase, a thread only in `after` (born since) its whole time; a
// thread that exited in between loses its last stretch.
struct SchedGrowth {
  uint64_t runq_wait_ns = 0;           // every thread
  uint64_t saturate_runq_wait_ns = 0;  // saturate's own threads
  uint64_t saturate_run_ns = 0;
  bool saturate_threads = false;  // `after` has one of saturate's threads
};
SchedGrowth GrowthBetween(const ThreadScheds& before, const ThreadScheds& after);

// ---- readers (live files) ---------------------------------------------------

struct HostCounters {
  int64_t time_ns = 0;  // CLOCK_MONOTONIC when the files were read
  CpuStat cpu;
  MemInfo mem;
  std::vector<DiskCounters> disks;               // every device; whole_disk set from sys_root
  std::optional<uint64_t> cpu_pressure_some_us;  // absent without PSI (kernel < 4.20, or off)
};

// Reads <proc_root>/stat, meminfo and diskstats. A missing diskstats (some
// sandboxes) gives no disks rather than an error. `whole_disks`, when given,
// remembers IsWholeDisk() per device across calls: the answer does not
// change, and asking /sys at every sample costs path lookups.
Result<HostCounters> ReadHostCounters(const std::string& proc_root = "/proc",
                                      const std::string& sys_root = "/sys",
                                      std::unordered_map<std::string, bool>* whole_disks = nullptr);

// Reads <proc_root>/<pid>/stat. NotFound when the process does not exist or
// exited while being read.
Result<ProcessStat> ReadProcess(const std::string& proc_root, int pid);

// The pids in a <pid>/task/<tid>/children file ("123 456 "): the children
// that thread forked. Anything that is not a pid ends the list.
std::vector<int> ParseChildren(std::string_view text);

// The children the main thread of `pid` forked, from
// <proc_root>/<pid>/task/<pid>/children; empty when the kernel lacks the
// file (CONFIG_PROC_CHILDREN) or the process exited.
std::vector<int> ReadChildren(const std::string& proc_root, int pid);

// Every numeric entry of proc_root, by pid. Processes that vanish mid-scan
// are skipped.
Result<std::vector<ProcessStat>> ListProcesses(const std::string& proc_root = "/proc");

// ListProcesses + Descendants + SumProcesses, stamped with CLOCK_MONOTONIC.
// NotFound when root_pid does not exist.
Result<ProcessTreeCounters> ReadProcessTree(const std::string& proc_root, int root_pid);

// CLOCK_MONOTONIC in nanoseconds: the clock every reader stamps samples with.
int64_t MonotonicNowNs();

// sysconf(_SC_CLK_TCK) (100 on every mainstream Linux) and the page size.
int64_t ClockTicksPerSecond();
int64_t PageSizeBytes();

// ---- rates between two samples (pure) ---------------------------------------

// Shares of the ticks that passed on one core (100 = that core fully busy) or
// on the "cpu" line (100 = every core fully busy, like top's "%Cpu(s)").
struct CpuUsage {
  int cpu = -1;           // as in CpuTimes
  double user_pct = 0;    // user + nice
  double system_pct = 0;  // system + irq + softirq
  double iowait_pct = 0;  // idle while waiting for I/O; not busy
  double steal_pct = 0;   // taken by the hypervisor; counted as busy
  double busy_pct = 0;    // everything but idle and iowait
};

// All zero when no tick passed.
CpuUsage ComputeCpuUsage(const CpuTimes& before, const CpuTimes& after);

struct DiskRate {
  std::string name;
  double read_bytes_per_s = 0;
  double write_bytes_per_s = 0;
};

struct HostRates {
  double elapsed_s = 0;
  CpuUsage cpu;                 // all cores, 0..100
  std::vector<CpuUsage> cores;  // cores present in both samples, in `after` order
  std::vector<DiskRate> disks;  // whole disks present in both samples
  DiskRate disks_total;         // name "total": the sum over `disks`
  // Share of the interval in which some runnable task waited for a CPU.
  std::optional<double> cpu_pressure_pct;
};

// Disk rates are 0 when no time passed.
HostRates ComputeHostRates(const HostCounters& before, const HostCounters& after);

struct ProcessTreeRates {
  double elapsed_s = 0;
  double cpu_pct = 0;      // of one core, like top: 250 = two and a half cores busy
  int64_t processes = 0;   // from `after`
  uint64_t rss_bytes = 0;  // from `after`
  int64_t threads = 0;     // from `after`
  // Mean threads of the tree runnable but waiting for a CPU (schedstat), over
  // the last second or so; set by the watcher, which reads it less often.
  std::optional<double> runq_wait_cores;
};

ProcessTreeRates ComputeProcessTreeRates(const ProcessTreeCounters& before,
                                         const ProcessTreeCounters& after,
                                         int64_t clock_ticks_per_s);

}  // namespace saturate::watch

#endif  // SATURATE_WATCH_PROCFS_H_
