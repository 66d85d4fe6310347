// h2d_bench: is the loader's host-to-device copy as fast as a pinned copy
// can be, and is it hidden behind compute? (issue 7's H2D bar: >= 90%.)
//
//   pinned      one cudaMemcpyAsync of a large page-locked buffer: the
//               machine's pinned H2D bandwidth, the reference.
//   loader      the device stage's copy pattern through device::Gpu: one
//               ImageNet batch (uint8 [B, 224, 224, 3] + int64 labels) per
//               batch, copied from pinned memory on the copy stream, back to
//               back; reported as a share of `pinned`.
//   overlap     the same copies on the copy stream while a kernel spins on
//               another stream for longer than the copies take: the share of
//               copy time hidden (100% = the copies cost nothing).
//
// usage: h2d_bench [--batch 256] [--batches 50] [--json]
// Needs a GPU; exits 2 with the reason where there is none.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "device/gpu.h"

namespace saturate::bench {
int LaunchSpin(long long cycles, void* stream);
}

namespace {

using Clock = std::chrono::steady_clock;
using saturate::device::Gpu;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

void Check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  std::fprintf(stderr, "h2d_bench: %s: %s\n", what, cudaGetErrorString(err));
  std::exit(1);
}

template <typename T>
T Value(saturate::Result<T> r, const char* what) {
  if (!r.ok()) {
    std::fprintf(stderr, "h2d_bench: %s: %s\n", what, r.status().ToString().c_str());
    std::exit(r.status().code() == saturate::StatusCode::kUnavailable ? 2 : 1);
  }
  return *r;
}

// Seconds for `batches` batch copies (image + labels) on `stream`.
double CopyBatches(Gpu& gpu, void* stream, void* dst, const void* src, size_t image_bytes,
                   size_t label_bytes, int batches) {
  const auto t0 = Clock::now();
  for (int i = 0; i < batches; ++i) {
    (void)gpu.CopyToDevice(dst, src, image_bytes, stream);
    (void)gpu.CopyToDevice(static_cast<char*>(dst) + image_bytes,
                           static_cast<const char*>(src) + image_bytes, label_bytes, stream);
  }
  Check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "sync");
  return Seconds(t0, Clock::now());
}

}  // namespace

int main(int argc, char** argv) {
  int batch = 256, batches = 50;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--batch" && i + 1 < argc) {
      batch = std::stoi(argv[++i]);
    } else if (a == "--batches" && i + 1 < argc) {
      batches = std::stoi(argv[++i]);
    } else if (a == "--json") {
      json = true;
    } else {
      std::fprintf(stderr, "usage: h2d_bench [--batch B] [--batches N] [--json]\n");
      return a == "--help" ? 0 : 64;
    }
  }
  auto gpu = Value(saturate::device::OpenCudaGpu(0), "cuda:0");
  const size_t image_bytes = size_t(batch) * 224 * 224 * 3, label_bytes = size_t(batch) * 8;
  const size_t big = size_t(256) << 20;
  void* host = Value(gpu->AllocPinned(std::max(big, image_bytes + label_bytes)), "pinned");
  void* dev = Value(gpu->AllocDevice(std::max(big, image_bytes + label_bytes)), "device");
  std::memset(host, 7, std::max(big, image_bytes + label_bytes));
  void* copy_stream = Value(gpu->CreateStream(), "stream");
  void* compute_stream = Value(gpu->CreateStream(), "stream");

  // Reference: large pinned copies, best of 5.
  double pinned_s = 1e9;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    (void)gpu->CopyToDevice(dev, host, big, copy_stream);
    Check(cudaStreamSynchronize(static_cast<cudaStream_t>(copy_stream)), "sync");
    pinned_s = std::min(pinned_s, Seconds(t0, Clock::now()));
  }
  const double pinned_gbs = big / pinned_s / 1e9;

  CopyBatches(*gpu, copy_stream, dev, host, image_bytes, label_bytes, 3);  // warm-up
  const double copy_s =
      CopyBatches(*gpu, copy_stream, dev, host, image_bytes, label_bytes, batches);
  const double loader_gbs = batches * double(image_bytes + label_bytes) / copy_s / 1e9;

  // Overlap: spin for twice the copy time on the compute stream.
  int clock_khz = 0;
  Check(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0), "clock rate");
  const long long cycles = static_cast<long long>(2 * copy_s * clock_khz * 1e3);
  auto spin = [&] {
    Check(static_cast<cudaError_t>(saturate::bench::LaunchSpin(cycles, compute_stream)), "spin");
  };
  auto t0 = Clock::now();
  spin();
  Check(cudaStreamSynchronize(static_cast<cudaStream_t>(compute_stream)), "sync");
  const double spin_s = Seconds(t0, Clock::now());
  t0 = Clock::now();
  spin();
  CopyBatches(*gpu, copy_stream, dev, host, image_bytes, label_bytes, batches);
  Check(cudaStreamSynchronize(static_cast<cudaStream_t>(compute_stream)), "sync");
  const double both_s = Seconds(t0, Clock::now());
  const double hidden_pct =
      100.0 * std::min(1.0, std::max(0.0, (spin_s + copy_s - both_s) / copy_s));

  const double ratio = loader_gbs / pinned_gbs;
  if (json) {
    std::printf(
        "{\"batch\": %d, \"batches\": %d, \"pinned_gbs\": %.3f, \"loader_gbs\": %.3f, "
        "\"loader_vs_pinned\": %.4f, \"copy_s\": %.6f, \"spin_s\": %.6f, \"both_s\": %.6f, "
        "\"hidden_pct\": %.2f}\n",
        batch, batches, pinned_gbs, loader_gbs, ratio, copy_s, spin_s, both_s, hidden_pct);
  } else {
    std::printf("pinned H2D (256 MiB copies)      %8.2f GB/s\n", pinned_gbs);
    std::printf("loader copy pattern (batch %4d)  %8.2f GB/s  = %.1f%% of pinned (bar >= 90%%)\n",
                batch, loader_gbs, 100 * ratio);
    std::printf(
        "overlap: copies %.1f ms, kernel %.1f ms, both %.1f ms -> %.1f%% of copy time hidden\n",
        copy_s * 1e3, spin_s * 1e3, both_s * 1e3, hidden_pct);
  }
  gpu->DestroyStream(copy_stream);
  gpu->DestroyStream(compute_stream);
  gpu->FreeDevice(dev);
  gpu->FreePinned(host);
  return 0;
}
