// Trace: step-phase spans recorded to a run directory, for doctor, Perfetto
// (`saturate trace export`) and, when CUDA is present, Nsight (NVTX ranges).
//
// Recording is off until Start(dir) is called, or until the first span when
// the environment variable SATURATE_RUN_DIR names a run directory (as
// `saturate doctor` and `saturate watch` set it for the command they run).
// Each process writes RUN_DIR/spans-<pid>.jsonl (format: docs/trace.md):
// events go into a per-thread buffer and a background thread writes them out
// about every 100 ms, so recording a span costs two clock reads and a push
// (bar: <= 1 us, bench/trace_bench.cc).
//
// Timestamps are CLOCK_MONOTONIC nanoseconds, the clock meta.json's
// `start_monotonic_ns` and samples.jsonl's `t_ns` use, so spans and metric
// samples of one machine line up.
//
// Ownership: one recorder per process, never destroyed (so threads still
// recording during exit are safe); its file is flushed and closed at exit.
// A thread's unwritten events survive the thread's exit. After fork() the
// child records to its own spans-<childpid>.jsonl; events the parent had not
// yet written stay with the parent. A process ended by _exit() or a signal
// loses at most the last ~100 ms.
//
// Thread-safety: every function may be called from any thread. Phase is a
// scope guard for one thread. Stop() flushes and closes; spans recorded
// after Stop() are dropped until the next Start().
#ifndef SATURATE_TRACE_TRACE_H_
#define SATURATE_TRACE_TRACE_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "saturate/base/status.h"

namespace saturate::trace {

// Where a span comes from; doctor reads user phases by name ("data",
// "forward", "backward", "optimizer", "comm", "checkpoint", ...) and loader
// spans by category.
enum class Category : uint8_t { kUser, kLoader, kCheckpoint };

// Annotations kept per span and per counters record; more are dropped.
inline constexpr int kMaxSpanArgs = 6;
inline constexpr int kMaxCounterValues = 16;

// Starts recording into `run_dir` (created if missing). Replaces the
// directory a previous Start() or SATURATE_RUN_DIR chose, after a flush.
Status Start(const std::string& run_dir);
// Flushes and stops recording. Idempotent; also runs at process exit.
Status Stop();
// Writes buffered events out now (the background thread does it anyway).
Status Flush();
// Whether spans are being recorded (Start() was called or SATURATE_RUN_DIR is
// set). Cheap: one atomic load after the first call.
bool Enabled();
// The directory spans go to, "" when not recording.
std::string RunDir();

// CLOCK_MONOTONIC in nanoseconds.
int64_t NowNs();

// A completed span [start_ns, end_ns) on the calling thread. `args` are
// small integer annotations (e.g. {"samples", 256}, {"decode_ns", 1200000});
// at most kMaxSpanArgs are kept. Arg keys are not copied: they must be
// string literals (or otherwise live until the process ends). The name is
// copied. Ignored when not Enabled().
void RecordSpan(std::string_view name, int64_t start_ns, int64_t end_ns,
                Category category = Category::kUser,
                std::initializer_list<std::pair<const char*, int64_t>> args = {});

// Marks the end of a training step (one optimizer update): doctor measures
// step times between marks. Returns the number of the step that ended
// (1, 2, ...), counted per process.
uint64_t Step();

// A named counter record (e.g. the loader's cumulative stage counters),
// written as one event with its values. At most kMaxCounterValues values
// are kept; keys must be string literals, as for RecordSpan().
void RecordCounters(std::string_view name,
                    std::initializer_list<std::pair<const char*, int64_t>> values);

// Scope guard: a span from construction to destruction, plus an NVTX range
// when CUDA is present.
//
//   { saturate::trace::Phase p("forward"); loss = model(x); }
class Phase {
 public:
  explicit Phase(std::string_view name, Category category = Category::kUser);
  ~Phase();
  Phase(const Phase&) = delete;
  Phase& operator=(const Phase&) = delete;

 private:
  std::string_view name_;  // must outlive the guard (a literal, usually)
  Category category_;
  int64_t start_ns_;
  bool enabled_;
};

}  // namespace saturate::trace

#endif  // SATURATE_TRACE_TRACE_H_
