// A kernel that keeps its SMs busy for a given time: the "compute" that
// h2d_bench hides copies behind.
#include <cuda_runtime.h>

namespace saturate::bench {

__global__ void SpinKernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

int LaunchSpin(long long cycles, void* stream) {
  SpinKernel<<<1, 32, 0, static_cast<cudaStream_t>(stream)>>>(cycles);
  return cudaGetLastError();
}

}  // namespace saturate::bench
