// ProgressMonitor: notices, while a multi-rank job runs, that its ranks
// stopped making progress, and names the rank that holds the others up.
//
// One hung rank (a deadlock, an endless loop, stuck I/O) or one dead rank
// keeps every other rank blocked in its next collective until the process
// group's timeout (often 30 minutes) with the whole allocation idle. The
// monitor is fed each rank's progress as read from its spans files
// (rank_scanner.h) about once a second and decides:
//   Stalled    the job has stepped before (2 or more step marks on some
//              rank) and for `stall_ns` no rank wrote a new step mark or
//              anything else. The suspect is, in this order: a rank whose
//              training process exited (its exit record) or is gone (the
//              caller says so for pids on its host) while the others wait:
//              dead; else the one rank with the lowest last step: hung; else
//              none ("all ranks stopped at step N": unknown).
//   Recovered  a step mark arrives after a Stalled.
// One Stalled per stall: nothing repeats until steps resume. A job whose
// ranks have all exited is ending, not stalled.
//
// In a synchronous job the hung rank often stopped at the same step as the
// others (it hangs inside step N, they wait in step N's collective). Its
// Python stack tells them apart: AddStacks() takes the ranks' main-thread
// frames (ParseStackDump: faulthandler's SIGUSR2 dump) and, when exactly one
// of them is not waiting in a collective (WaitsInCollective) while others
// are, names that one hung.
//
// Everything here is pure (no files, no clocks, no signals): times are the
// caller's, on any monotonic clock. Thread-safety: ProgressMonitor is a
// single-threaded state machine; the functions are reentrant.
#ifndef SATURATE_RANKS_MONITOR_H_
#define SATURATE_RANKS_MONITOR_H_

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace saturate::ranks {

inline constexpr int64_t kDefaultStallNs = 60'000'000'000;

// One rank as last observed.
struct RankProgress {
  int rank = 0;
  int world_size = 0;  // from its meta line (0: unknown)
  std::string host;
  int pid = 0;                    // its training process (the most step marks); 0: unknown
  int64_t step_marks = 0;         // that process's step marks so far
  int64_t last_step = 0;          // the highest step number it marked
  int64_t last_step_unix_ns = 0;  // when (0: no step yet)
  bool exited = false;            // its exit record was seen (sys.exit, an exception)
  bool alive = true;              // false: its pid is gone (known only on the caller's host)
  uint64_t file_bytes = 0;        // its spans files together
  std::string stacks_path;        // where SIGUSR2 makes it dump its stacks ("": no dumper)
  bool missing = false;           // no spans file yet (a placeholder from the world size)
  // The latest "loader" and "loader_remote" counters records of its
  // processes' loaders ("samples", "wait_ns", "remote_bytes_fetched", ...;
  // docs/trace.md), and of its device loaders' "loader_decode" records
  // ("gpu_decoded", "cpu_decoded", "gpu_permille", ...): totals summed over
  // loaders, closed ones included; gauges ("threads", "remote_in_flight",
  // "decode_mode", "gpu_permille", ...) of the loader that reported last.
  // Empty: no traced loader.
  std::map<std::string, int64_t> loader_counters;
  // The bits its training math runs in: the latest "model" counter's
  // precision_bits (the job's own word), else the auto-instrumentation's
  // "precision" record's (docs/auto.md); 0: neither.
  int64_t precision_bits = 0;
};

// One Python frame of a stack dump, innermost first in a stack.
struct StackFrame {
  std::string file;  // as dumped: "/usr/lib/python3/dist-packages/torch/autograd/graph.py"
  int line = 0;
  std::string function;  // "_engine_run_backward", "<module>"
  std::string source;    // the source line, when the caller could read it ("" otherwise)
};

enum class HangKind { kDead, kHung, kUnknown };
std::string_view HangKindName(HangKind kind);  // "dead", "hung", "unknown"

struct HangAlert {
  int64_t stalled_ns = 0;  // since the last new step mark
  HangKind kind = HangKind::kUnknown;
  int suspect_rank = -1;  // -1: none singled out
  // Why the suspect: "exit" (its exit record), "gone" (its pid vanished),
  // "steps" (the lowest last step) or "stacks" (the one not in a collective).
  std::string basis;
  std::vector<RankProgress> ranks;                // by rank, missing ones included
  std::map<int, std::vector<StackFrame>> stacks;  // rank -> main thread, innermost first
  std::string message;  // first line: the verdict; then one line per stack (indented)
};

struct MonitorEvent {
  enum class Kind { kNone, kStalled, kRecovered };
  Kind kind = Kind::kNone;
  HangAlert alert;      // kStalled (stacks not yet added)
  std::string message;  // kStalled: alert.message; kRecovered: "steps resumed after 75 s ..."
};

class ProgressMonitor {
 public:
  explicit ProgressMonitor(int64_t stall_ns = kDefaultStallNs) : stall_ns_(stall_ns) {}

  // `ranks`: every rank seen so far (any order); `now_ns` does not go back.
  MonitorEvent Update(const std::vector<RankProgress>& ranks, int64_t now_ns);

  bool stalled() const { return stalled_; }
  int64_t stall_ns() const { return stall_ns_; }

 private:
  struct Seen {
    int64_t step_marks = 0;
    uint64_t file_bytes = 0;
  };
  int64_t stall_ns_;
  bool started_ = false;
  bool stalled_ = false;
  int64_t last_step_ns_ = 0;   // when a new step mark was last seen
  int64_t last_write_ns_ = 0;  // when any rank's files last grew
  std::map<int, Seen> seen_;
};

// The verdict over ranks that stopped `stalled_ns` ago (Update's rules,
// message included). `ranks` by rank; placeholders for missing ranks are
// added from the largest world size.
HangAlert ClassifyStall(std::vector<RankProgress> ranks, int64_t stalled_ns);

// The main thread of the last dump in `text` (faulthandler's format:
// "Thread 0x... (most recent call first):" / "Current thread 0x..." blocks of
// '  File "PATH", line N in FUNC'): the block whose outermost frame is a
// module (not threading's _bootstrap), else one not started by threading,
// else the current thread's; among equals the last. At most `max_frames` frames, innermost first,
// without the frames of saturate's own bootstrap. Empty when `text` holds no dump.
std::vector<StackFrame> ParseStackDump(std::string_view text, size_t max_frames = 6);

// Whether the innermost frame waits on other ranks: inside torch.distributed,
// DistributedDataParallel, or autograd's backward (DDP all-reduces there).
bool WaitsInCollective(const std::vector<StackFrame>& frames);

// "hang_job.py:41 in hang: time.sleep(3600)", "torch/autograd/graph.py:825 in
// _engine_run_backward": the path from its package (or its base name).
std::string FormatFrame(const StackFrame& frame);

// Adds the ranks' stacks (rank -> frames) to `alert`, lets them single out
// the hung rank when the steps could not (a dead rank stays the suspect),
// and rewrites the message with the suspect's frames and, for each other
// rank with a stack, where it waits.
void AddStacks(std::map<int, std::vector<StackFrame>> stacks, HangAlert* alert);

// RUN/hang.json: {"t_unix_ns", "stalled_s", "suspect_rank" (null: none),
// "kind", "basis", "message", "stacks": {"1": ["hang_job.py:41 in hang", ...]},
// "ranks": [{"rank", "host", "pid", "last_step", "exited", "alive"}, ...]}.
nlohmann::json HangJson(const HangAlert& alert, int64_t t_unix_ns);

}  // namespace saturate::ranks

#endif  // SATURATE_RANKS_MONITOR_H_
