// CPU time used by this process (all threads, user + system), for
// "cores used" = CPU seconds / wall seconds. Thread-safety: any thread.
#ifndef SATURATE_BASE_CPU_TIME_H_
#define SATURATE_BASE_CPU_TIME_H_

namespace saturate::base {

double ProcessCpuSeconds();

}  // namespace saturate::base

#endif  // SATURATE_BASE_CPU_TIME_H_
