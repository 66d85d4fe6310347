// Child: runs the user's command under saturate (watch, and later doctor),
// as an argv vector, never through a shell. Forwards the termination
// signals saturate receives, and turns the way the child ended into the exit
// code a shell would report.
//
// Signals: SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to
// saturate (kill, a batch scheduler) are passed on to the child. Ones the
// terminal sends (Ctrl-C) already reach the child, which shares saturate's
// process group; they are not sent twice.
//
// Ownership: a Child owns the process until Wait() reaps it; destroying a
// Child that was not waited for kills (SIGKILL) and reaps it. One Child at a
// time may forward signals (they are process-wide). Thread-safety: Wait() and
// Poll() from one thread.
#ifndef SATURATE_WATCH_CHILD_H_
#define SATURATE_WATCH_CHILD_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "saturate/base/status.h"

namespace saturate::watch {

struct ChildOptions {
  // Where the child's stdout and stderr go: inherited (-1), or this fd
  // (e.g. a pipe's write end), which the parent may then close.
  int output_fd = -1;
  bool forward_signals = true;
  // Variables set in the child's environment on top of saturate's own
  // ("NAME", "value"), e.g. SATURATE_RUN_DIR for the trace library.
  std::vector<std::pair<std::string, std::string>> env;
};

class Child {
 public:
  static Result<Child> Spawn(const std::vector<std::string>& argv,
                             const ChildOptions& options = {});
  Child(Child&& other) noexcept;
  Child& operator=(Child&& other) = delete;
  Child(const Child&) = delete;
  ~Child();

  pid_t pid() const { return pid_; }
  // The exit code once the child ended (waits for it): its status, or
  // 128 + signal number when a signal ended it, as shells report.
  Result<int> Wait();
  // The exit code if it has ended, without blocking. Both may be called
  // again after the child was reaped.
  Result<std::optional<int>> Poll();
  // Ends the child if it still runs: SIGTERM, then SIGKILL once `grace_ns`
  // passed without it exiting. Returns its exit code (128 + the signal when
  // one of them ended it). A child that already ended is only reaped.
  Result<int> Terminate(int64_t grace_ns);

 private:
  explicit Child(pid_t pid, bool forwarding) : pid_(pid), forwarding_(forwarding) {}
  Result<std::optional<int>> Reap(bool block);

  pid_t pid_ = -1;
  bool forwarding_ = false;
  std::optional<int> exit_code_;  // set once reaped
};

}  // namespace saturate::watch

#endif  // SATURATE_WATCH_CHILD_H_
