// Names for saturate's own threads ("sat-feed-0", "sat-ckpt", ...), as the
// kernel shows them (/proc/<pid>/task/<tid>/comm, top -H, gdb, py-spy). The
// watcher tells them from the training job's threads by the prefix: their
// waits for a CPU cost the job data, not compute. Thread-safety: any thread
// names itself.
#ifndef SATURATE_BASE_THREAD_NAME_H_
#define SATURATE_BASE_THREAD_NAME_H_

#include <string>
#include <string_view>

namespace saturate::base {

inline constexpr std::string_view kThreadNamePrefix = "sat-";

// Names the calling thread kThreadNamePrefix + `name`, cut to the kernel's 15
// bytes. Best effort: a refusal leaves the old name.
void NameThisThread(std::string_view name);

// Whether a thread name (a comm file's text, trailing newline allowed) is one
// NameThisThread gave.
bool IsSaturateThreadName(std::string_view comm);

}  // namespace saturate::base

#endif  // SATURATE_BASE_THREAD_NAME_H_
