#include "base/thread_name.h"

#include <pthread.h>

namespace saturate::base {

void NameThisThread(std::string_view name) {
  constexpr size_t kMaxBytes = 15;  // TASK_COMM_LEN - 1
  std::string full = std::string(kThreadNamePrefix) + std::string(name);
  if (full.size() > kMaxBytes) full.resize(kMaxBytes);
  pthread_setname_np(pthread_self(), full.c_str());
}

bool IsSaturateThreadName(std::string_view comm) { return comm.starts_with(kThreadNamePrefix); }

}  // namespace saturate::base
