// memcpy_bound: the memory-bandwidth bound for a loader of small records.
// Copies a buffer far larger than the CPU caches on N threads (each its own
// contiguous part) in two ways and prints both copy rates (bytes copied per
// second, each byte read once and written once):
//   - copy_bytes_per_s: one memcpy per part. Past its non-temporal threshold
//     (GLIBC_TUNABLES glibc.cpu.x86_non_temporal_threshold) glibc streams the
//     stores past the caches, so no destination line is read first: the
//     bound of a writer with streaming stores.
//   - cached_copy_bytes_per_s: memcpy calls of 64 KiB, below that threshold,
//     so the stores are ordinary ones and every destination line is first
//     read for ownership: the bound of a writer whose output stays in the
//     caches for its reader (the loader's CPU batches).
// A loader that reads R and writes W bytes per sample can at best deliver
// 2 * rate / (R + W) samples/s on those threads (bench/feed_limits.py prints
// both beside its rate).
//
// usage: memcpy_bound [--threads N] [--mib M] [--passes P]
//   M MiB are copied (default 1024; source and destination are M MiB each),
//   P timed passes of each kind (default 5) after one untimed pass that
//   faults the pages in. Prints one JSON object:
//   {"threads": N, "bytes": ..., "passes": P, "elapsed_s": ...,
//    "copy_bytes_per_s": ..., "cached_elapsed_s": ...,
//    "cached_copy_bytes_per_s": ...}
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

// Below glibc's non-temporal threshold on any x86 server (3/4 of a thread's
// share of the last-level cache, at least 0x4040 bytes).
constexpr size_t kCachedCallBytes = 64 << 10;

// Copies part t of n of src into dst, `passes` times: in one memcpy, or in
// calls of at most `call_bytes`.
void CopyPart(const char* src, char* dst, size_t bytes, int t, int n, int passes,
              size_t call_bytes) {
  const size_t part = bytes / n, begin = part * t, len = t == n - 1 ? bytes - begin : part;
  for (int p = 0; p < passes; ++p) {
    for (size_t done = 0; done < len; done += call_bytes) {
      std::memcpy(dst + begin + done, src + begin + done, std::min(call_bytes, len - done));
    }
  }
}

double RunPasses(const char* src, char* dst, size_t bytes, int threads, int passes,
                 size_t call_bytes) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back(CopyPart, src, dst, bytes, t, threads, passes, call_bytes);
  }
  for (std::thread& th : pool) th.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, passes = 5;
  size_t mib = 1024;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--threads" || a == "--mib" || a == "--passes") && i + 1 < argc) {
      const long v = std::strtol(argv[++i], nullptr, 10);
      if (v <= 0) {
        std::fprintf(stderr, "memcpy_bound: %s must be a positive integer\n", a.c_str());
        return 2;
      }
      if (a == "--threads") threads = static_cast<int>(v);
      if (a == "--mib") mib = static_cast<size_t>(v);
      if (a == "--passes") passes = static_cast<int>(v);
    } else {
      std::fprintf(stderr, "usage: memcpy_bound [--threads N] [--mib M] [--passes P]\n");
      return 2;
    }
  }
  const size_t bytes = mib << 20;
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  RunPasses(src.data(), dst.data(), bytes, threads, 1, bytes);  // faults dst in
  const double s = RunPasses(src.data(), dst.data(), bytes, threads, passes, bytes);
  const double cached_s =
      RunPasses(src.data(), dst.data(), bytes, threads, passes, kCachedCallBytes);
  const double copied = static_cast<double>(bytes) * passes;
  std::printf(
      "{\"threads\": %d, \"bytes\": %zu, \"passes\": %d, \"elapsed_s\": %.6f, "
      "\"copy_bytes_per_s\": %.0f, \"cached_elapsed_s\": %.6f, "
      "\"cached_copy_bytes_per_s\": %.0f}\n",
      threads, bytes, passes, s, copied / s, cached_s, copied / cached_s);
  return dst[bytes / 2] == 1 ? 0 : 1;  // the copy happened (and is not optimized out)
}
