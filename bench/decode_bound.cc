// decode_bound: the decode-only bound for an image input pipeline. How many
// images per second libjpeg-turbo (through saturate::image::DecodeRgb) fully
// decodes -- whole image, 8/8 scale, no crop, no resize, no copy out -- on
// N threads, with every file read into memory first (no I/O in the timing).
//
// usage: decode_bound [--threads N] [--passes P] DIR_OR_FILE...
//   DIR is searched recursively for .jpg/.jpeg/.png files. The files are
//   split into N contiguous parts (thread t decodes part t), each thread
//   decodes its part P times (default 2) after one untimed warm-up pass over
//   the first 64 of its files. Prints one JSON object:
//   {"images": ..., "threads": N, "passes": P, "elapsed_s": ...,
//    "images_per_s": ..., "cpu_s": ..., "cpu_cores_used": ...,
//    "images_per_cpu_s": ..., "megapixels_per_s": ..., "bytes": ...}
//   images_per_s is (files x passes) / wall time from the moment all threads
//   start (a barrier) until the last one finishes.
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "image/codec.h"
#include "image_files.h"

namespace {

namespace fs = std::filesystem;

double CpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

using saturate::bench::IsImage;
using saturate::bench::ReadFile;

int Usage() {
  std::fprintf(stderr, "usage: decode_bound [--threads N] [--passes P] DIR_OR_FILE...\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, passes = 2;
  std::vector<fs::path> roots;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if ((a == "--threads" || a == "--passes") && i + 1 < argc) {
      int v = std::atoi(argv[++i]);
      if (v < 1) return Usage();
      (a == "--threads" ? threads : passes) = v;
    } else if (a.starts_with("-")) {
      return Usage();
    } else {
      roots.emplace_back(a);
    }
  }
  if (roots.empty()) return Usage();

  std::vector<fs::path> paths;
  for (const fs::path& r : roots) {
    if (fs::is_directory(r)) {
      for (const auto& e : fs::recursive_directory_iterator(r)) {
        if (e.is_regular_file() && IsImage(e.path())) paths.push_back(e.path());
      }
    } else {
      paths.push_back(r);
    }
  }
  std::sort(paths.begin(), paths.end());
  if (paths.empty()) {
    std::fprintf(stderr, "decode_bound: no images found\n");
    return 2;
  }
  std::vector<std::vector<std::byte>> files;
  files.reserve(paths.size());
  uint64_t total_bytes = 0;
  for (const fs::path& p : paths) {
    files.push_back(ReadFile(p));
    total_bytes += files.back().size();
  }

  const size_t n = files.size();
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::atomic<bool> failed{false};
  std::vector<uint64_t> pixels(static_cast<size_t>(threads), 0);
  std::vector<std::thread> pool;
  double cpu_start = 0;
  auto start = std::chrono::steady_clock::now();
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const size_t begin = n * static_cast<size_t>(t) / static_cast<size_t>(threads);
      const size_t end = n * static_cast<size_t>(t + 1) / static_cast<size_t>(threads);
      auto decode = [&](size_t i) -> uint64_t {
        saturate::image::ImageInfo info;
        auto px = saturate::image::DecodeRgb(files[i], &info);
        if (!px.ok()) {
          std::fprintf(stderr, "decode_bound: %s: %s\n", paths[i].c_str(),
                       px.status().ToString().c_str());
          failed = true;
          return 0;
        }
        return static_cast<uint64_t>(info.width) * static_cast<uint64_t>(info.height);
      };
      for (size_t i = begin; i < std::min(end, begin + 64); ++i) decode(i);  // warm-up
      ready.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      uint64_t px = 0;
      for (int p = 0; p < passes; ++p) {
        for (size_t i = begin; i < end; ++i) px += decode(i);
      }
      pixels[static_cast<size_t>(t)] = px;
    });
  }
  while (ready.load() < threads) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  cpu_start = CpuSeconds();
  start = std::chrono::steady_clock::now();
  go = true;
  for (std::thread& th : pool) th.join();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double cpu = CpuSeconds() - cpu_start;
  if (failed) return 3;
  uint64_t px = 0;
  for (uint64_t v : pixels) px += v;
  const double images = static_cast<double>(n) * passes;
  std::printf(
      "{\"images\": %zu, \"threads\": %d, \"passes\": %d, \"elapsed_s\": %.4f, "
      "\"images_per_s\": %.2f, \"cpu_s\": %.4f, \"cpu_cores_used\": %.3f, "
      "\"images_per_cpu_s\": %.2f, \"megapixels_per_s\": %.2f, \"bytes\": %llu}\n",
      n, threads, passes, elapsed, images / elapsed, cpu, cpu / elapsed, images / cpu,
      static_cast<double>(px) / elapsed / 1e6, static_cast<unsigned long long>(total_bytes));
  return 0;
}
