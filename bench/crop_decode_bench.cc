// crop_decode_bench: the loader's per-image work without the loader. Each
// JPEG/PNG file is read into memory, stored as `saturate pack` would store
// it (--restart), then decoded with DecodeCropResize (image/transform.h)
// to a 224x224 RGB crop on one thread: RandomResizedCrop (scale 0.08-1,
// ratio 3/4-4/3) and a coin-flip mirror, or Resize(256) + CenterCrop(224).
// The crops are drawn from a fixed seed, so two builds (or two restart
// intervals) do the same work, and the output digest says whether they
// gave the same bytes. No threads, no queue, no I/O in the timing: it
// isolates the decode path from the machine's other load better than
// `saturate bench feed`, which remains the end-to-end measure.
//
// --handover times instead what a loader worker does for an image it hands
// to the GPU decoder (decode="gpu"): read the header, draw the crop, cut a
// restart-marked JPEG (or, with --restart entries, one with its entry table)
// to the MCUs around it (PlanJpegForDecoder), and says
// what nvJPEG then receives: "handover_bytes" and "handover_pixels" as
// fractions of the files' bytes and pixels, and how many were cut.
//
// usage: crop_decode_bench [--crop random|center] [--restart mcu|keep|entries|N]
//                          [--passes P] [--size S] [--handover] DIR_OR_FILE...
//   --restart mcu (default): AddJpegRestartMarkers, a marker after every
//   MCU (saturate pack's default); keep: the bytes as given; N >= 0: a
//   marker after every N MCU rows, 0 for none (optimized tables only);
//   entries: the bytes as given, each with its entry table (IndexJpegEntries,
//   as a dataset's sidecar index holds them; "entry_bytes" is their size and
//   "index_us_per_image" what making them cost). Its digest is `mcu`'s.
//   Each pass decodes every file once, after one untimed warm-up pass.
// Prints one JSON object: {"images": ..., "passes": P, "cpu_us_per_image":
// best pass, "cpu_us_per_image_median": ..., "bytes": ..., "digest": ...}.
#include <time.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "image/codec.h"
#include "image/transform.h"
#include "image_files.h"

namespace {

namespace fs = std::filesystem;
using saturate::image::CropRect;

double ThreadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

using saturate::bench::IsImage;
using saturate::bench::ReadFile;

class Rng : public saturate::image::UniformSource {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  double Uniform() override { return double(gen_() >> 11) * 0x1.0p-53; }

 private:
  std::mt19937_64 gen_;
};

// The loader's crop planning: decided once the header gives the size.
class Planner : public saturate::image::CropPlanner {
 public:
  Planner(bool random, int size, uint64_t seed) : random_(random), size_(size), rng_(seed) {}
  CropRect Plan(int width, int height, bool* hflip) override {
    if (!random_) {
      *hflip = false;
      return saturate::image::ResizeThenCenterCropRect(width, height, size_ * 8 / 7, size_, size_);
    }
    const CropRect r =
        saturate::image::RandomResizedCropParams(width, height, 0.08, 1.0, 3.0 / 4, 4.0 / 3, rng_);
    *hflip = rng_.Uniform() < 0.5;
    return r;
  }

 private:
  bool random_;
  int size_;
  Rng rng_;
};

// What the GPU decoder is given, summed over a pass.
struct Handover {
  uint64_t cut = 0;
  double file_bytes = 0, sent_bytes = 0, file_pixels = 0, sent_pixels = 0;
};

// A GPU-path worker's work for one image (sample_plan.cc): the header,
// the crop, the cut. Adds to `sent` when given.
bool HandOver(const std::vector<std::byte>& f, std::span<const std::byte> entries, Planner& planner,
              saturate::image::DecodeScratch* scratch, Handover* sent) {
  const auto planned = saturate::image::PlanJpegForDecoder(f, planner, scratch, entries);
  if (!planned) {
    std::fprintf(stderr, "crop_decode_bench: a file the GPU path would not take (%s)\n",
                 saturate::image::ProbeImage(f).status().ToString().c_str());
    return false;
  }
  if (sent == nullptr) return true;
  const auto file = saturate::image::ProbeImage(f);
  const auto given = saturate::image::ProbeImage(planned->jpeg);
  if (!file.ok() || !given.ok()) return false;
  sent->cut += planned->cut;
  sent->file_bytes += double(f.size());
  sent->file_pixels += double(file->width) * file->height;
  sent->sent_bytes += double(planned->jpeg.size());
  sent->sent_pixels += double(given->width) * given->height;
  return true;
}

int Usage() {
  std::fprintf(stderr,
               "usage: crop_decode_bench [--crop random|center] [--restart mcu|keep|entries|N] "
               "[--passes P] [--size S] [--handover] DIR_OR_FILE...\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  bool random = true;
  std::string restart = "mcu";
  int passes = 3, size = 224;
  bool handover = false;
  std::vector<fs::path> paths;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--crop" && i + 1 < argc) {
      random = std::string(argv[++i]) == "random";
    } else if (a == "--restart" && i + 1 < argc) {
      restart = argv[++i];
    } else if (a == "--passes" && i + 1 < argc) {
      passes = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--size" && i + 1 < argc) {
      size = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--handover") {
      handover = true;
    } else if (!a.empty() && a[0] == '-') {
      return Usage();
    } else if (fs::is_directory(a)) {
      for (const auto& e : fs::recursive_directory_iterator(a)) {
        if (e.is_regular_file() && IsImage(e.path())) paths.push_back(e.path());
      }
    } else {
      paths.push_back(a);
    }
  }
  if (paths.empty()) return Usage();
  std::sort(paths.begin(), paths.end());

  std::vector<std::vector<std::byte>> files, entries;
  size_t bytes = 0, entry_bytes = 0;
  const bool with_entries = restart == "entries";
  saturate::image::DecodeScratch scratch;
  double index_s = 0;
  for (const fs::path& p : paths) {
    std::vector<std::byte> raw = ReadFile(p);
    if (with_entries) {
      const double t0 = ThreadCpuSeconds();
      entries.emplace_back();
      saturate::image::IndexJpegEntries(raw, &scratch, &entries.back());
      index_s += ThreadCpuSeconds() - t0;
      entry_bytes += entries.back().size();
    } else if (restart != "keep" &&
               saturate::image::SniffFormat(raw) == saturate::image::ImageFormat::kJpeg) {
      auto marked = restart == "mcu"
                        ? saturate::image::AddJpegRestartMarkers(raw)
                        : saturate::image::AddJpegRestartMarkers(raw, std::atoi(restart.c_str()));
      if (marked.ok()) raw = std::move(marked).value();
    }
    bytes += raw.size();
    files.push_back(std::move(raw));
  }

  std::vector<uint8_t> out(size_t(size) * size * 3);
  uint64_t digest = 0xcbf29ce484222325ull;
  std::vector<double> per_image;
  Handover sent;
  for (int pass = -1; pass < passes; ++pass) {
    Planner planner(random, size, 1234);  // The same crops every pass.
    const double t0 = ThreadCpuSeconds();
    for (size_t i = 0; i < files.size(); ++i) {
      const auto& f = files[i];
      const std::span<const std::byte> table =
          with_entries ? std::span<const std::byte>(entries[i]) : std::span<const std::byte>();
      if (handover) {
        if (!HandOver(f, table, planner, &scratch, pass == 0 ? &sent : nullptr)) return 1;
        continue;
      }
      const saturate::Status s = saturate::image::DecodeCropResize(
          f, planner, size, size, out.data(), &scratch, saturate::image::Layout::kHWC, table);
      if (!s.ok()) {
        std::fprintf(stderr, "crop_decode_bench: %s\n", s.ToString().c_str());
        return 1;
      }
      if (pass == 0) {
        for (uint8_t b : out) digest = (digest ^ b) * 0x100000001b3ull;
      }
    }
    if (pass >= 0) per_image.push_back((ThreadCpuSeconds() - t0) * 1e6 / double(files.size()));
  }
  std::vector<double> sorted = per_image;
  std::sort(sorted.begin(), sorted.end());
  if (handover) {
    std::printf(
        "{\"images\": %zu, \"passes\": %d, \"crop\": \"%s\", \"restart\": \"%s\", "
        "\"handover\": true, \"cpu_us_per_image\": %.1f, \"cpu_us_per_image_median\": %.1f, "
        "\"cut\": %llu, \"handover_bytes\": %.3f, \"handover_pixels\": %.3f}\n",
        files.size(), passes, random ? "random" : "center", restart.c_str(), sorted.front(),
        sorted[sorted.size() / 2], static_cast<unsigned long long>(sent.cut),
        sent.sent_bytes / std::max(1.0, sent.file_bytes),
        sent.sent_pixels / std::max(1.0, sent.file_pixels));
    return 0;
  }
  std::printf(
      "{\"images\": %zu, \"passes\": %d, \"crop\": \"%s\", \"restart\": \"%s\", "
      "\"cpu_us_per_image\": %.1f, \"cpu_us_per_image_median\": %.1f, \"bytes\": %zu, "
      "\"digest\": \"%016llx\", \"entry_bytes\": %zu, \"index_us_per_image\": %.1f}\n",
      files.size(), passes, random ? "random" : "center", restart.c_str(), sorted.front(),
      sorted[sorted.size() / 2], bytes, static_cast<unsigned long long>(digest), entry_bytes,
      index_s * 1e6 / double(files.size()));
  return 0;
}
