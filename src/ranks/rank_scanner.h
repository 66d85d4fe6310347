// Following a multi-rank job's progress while it runs: the file and process
// side of hang detection, around the pure ProgressMonitor (monitor.h).
//
//   RankScanner    follows RUN/rank-<r>/spans-*.jsonl (and RUN/<node>/rank-<r>/):
//                  each Scan reads only the bytes appended since the last one
//                  (the files are append-only; a torn last line waits for the
//                  next scan) and sums each rank up as a RankProgress.
//   RequestStacks  sends SIGUSR2 to the ranks on this host whose bootstrap
//   / ReadStacks   installed a stack dumper (their meta line names "stacks":
//                  a program that did not may use SIGUSR2 itself, so it is
//                  never signalled), then reads each new dump's main thread.
//   HangWatch      the three above and the monitor for a watch loop: polled
//                  every tick, scans once a second, and on a stall asks for
//                  stacks, waits for them without blocking, writes
//                  RUN/hang.json atomically and hands back what to print.
//
// Nothing here prints. Thread-safety: each object is used from one thread;
// IsAlive, RequestStacks and ReadStacks are reentrant.
#ifndef SATURATE_RANKS_RANK_SCANNER_H_
#define SATURATE_RANKS_RANK_SCANNER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ranks/monitor.h"
#include "saturate/base/status.h"

namespace saturate::ranks {

class RankScanner {
 public:
  // Reads at most `max_read_bytes` of one file per Scan (a large backlog is
  // read over several scans).
  // With `root_as_rank0`, a run without rank folders (one process, not a
  // launcher's ranks) has its RUN/spans-*.jsonl followed as rank 0.
  explicit RankScanner(std::string run_dir, uint64_t max_read_bytes = 16 << 20,
                       bool root_as_rank0 = false);

  // Every rank seen so far, by rank, with what its files gained since the
  // last Scan. `alive` is left true: only the caller knows which pids are
  // its host's. Unreadable files and lines that do not parse are skipped.
  std::vector<RankProgress> Scan();

  // Bytes read from spans files by all scans together.
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  struct File {
    int rank = 0;
    std::string dir;  // RUN/rank-<r>
    uint64_t offset = 0;
    uint64_t size = 0;
    std::string partial;  // a last line without its newline yet
    int pid = 0;
    std::string host;
    int world_size = 0;
    std::string stacks;  // file name, in dir
    int64_t unix_minus_monotonic_ns = 0;
    int64_t step_marks = 0;
    int64_t last_step = 0;
    int64_t last_step_ns = 0;  // CLOCK_MONOTONIC of its host
    bool exited = false;
    // loader_id -> the latest values of its counters records.
    struct Loader {
      int64_t ts_ns = 0;
      std::map<std::string, int64_t> values;
    };
    std::map<int64_t, Loader> loaders;
    // decoder_id -> the latest "loader_decode" record of a device loader.
    std::map<int64_t, Loader> decoders;
    // precision_bits of the last "model" and "precision" records (0: none).
    int64_t model_bits = 0, auto_bits = 0;
  };
  void Read(File* file, const std::string& path);
  void Line(std::string_view line, File* file);
  static void LoaderCounters(std::string_view line, File* file);
  static void PrecisionCounters(std::string_view line, File* file);

  std::string run_dir_;
  uint64_t max_read_bytes_;
  bool root_as_rank0_;
  uint64_t bytes_read_ = 0;
  std::map<std::string, File> files_;  // by path
};

// Whether `pid` runs on this host (a zombie counts as gone).
bool IsAlive(int pid);

struct StackRequest {
  int rank = 0;
  int pid = 0;
  std::string path;     // the stacks file
  uint64_t offset = 0;  // its size before the signal: the new dump starts there
};

// Sends SIGUSR2 once to each rank of `ranks` on `host` that is alive and
// named a stacks file; returns where each dump will appear.
std::vector<StackRequest> RequestStacks(const std::vector<RankProgress>& ranks,
                                        const std::string& host);

// rank -> the main thread's innermost frames of the dump each request got
// (ParseStackDump, at most `max_frames`), each with its source line when the
// file is readable here. A rank whose dump did not appear is left out.
std::map<int, std::vector<StackFrame>> ReadStacks(const std::vector<StackRequest>& requests,
                                                  size_t max_frames = 6);

struct HangWatchOptions {
  std::string run_dir;
  int64_t stall_ns = kDefaultStallNs;
  int64_t scan_every_ns = 1'000'000'000;
  int64_t stack_wait_ns = 500'000'000;  // after SIGUSR2, before reading the dumps
  std::string host;                     // this host ("": base::HostName())
  std::string hang_json;                // "": RUN/hang.json
};

struct HangEvent {
  enum class Kind { kStalled, kRecovered };
  Kind kind = Kind::kStalled;
  std::string message;  // kStalled: the alert's (several lines); kRecovered: one line
  HangAlert alert;      // kStalled, with stacks
  Status saved;         // writing hang.json
};

class HangWatch {
 public:
  explicit HangWatch(HangWatchOptions options);

  // Call as often as convenient with a monotonic `now_ns`; does nothing
  // until a scan or a stack read is due. Never blocks on the job.
  std::vector<HangEvent> Poll(int64_t now_ns);

  // A stall whose stacks are still awaited, completed now (the job ended).
  std::vector<HangEvent> Finish();

  const std::string& hang_json_path() const { return options_.hang_json; }

  // As of the last scan: the most step marks any rank made (0: none yet),
  // and whether the job is stalled now (between a Stalled and its recovery).
  int64_t steps() const { return steps_; }
  bool stalled() const { return stalled_; }

 private:
  HangEvent Complete();

  HangWatchOptions options_;
  RankScanner scanner_;
  ProgressMonitor monitor_;
  int64_t next_scan_ns_ = 0;
  struct Pending {
    HangAlert alert;
    std::vector<StackRequest> requests;
    int64_t due_ns = 0;
  };
  std::optional<Pending> pending_;
  std::optional<nlohmann::json> last_json_;  // the latest alert, for its recovery
  int64_t steps_ = 0;
  bool stalled_ = false;
};

}  // namespace saturate::ranks

#endif  // SATURATE_RANKS_RANK_SCANNER_H_
