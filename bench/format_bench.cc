// format_bench: how fast saturate records come out of a dataset, next to the
// memcpy bandwidth of the same machine measured in the same run, and how fast
// `pack` turns a JPEG ImageFolder into a dataset.
//
//   memcpy/1MiB/random            1 MiB blocks from random positions of a
//                                 512 MiB buffer into a 1 MiB destination.
//   read/1MiB/{sequential,random} Dataset::Get of 1 MiB records (512 MiB in
//                                 all, 256 MiB shards), each record's bytes
//                                 copied into a 1 MiB destination like a
//                                 loader would; ".../no_checksum" opens the
//                                 dataset with verify_checksums=false.
//   read/4KiB/random, read/784B/random
//                                 small records (784 B is Fashion-MNIST's
//                                 uint8[28,28] image plus an int64 label).
//   pack/image_folder/threads:N   PackImageFolder of the folder given by
//                                 --photos=DIR or $SATURATE_BENCH_PHOTOS.
//
// Datasets are written once, on first use, into a temporary directory under
// $TMPDIR (or /tmp) that is removed at exit. Reads therefore come from the
// page cache, not from the disk. Each dataset is read once before it is
// timed, so page-table setup for the mappings is not in the numbers.
//
// The last lines printed compare random 1 MiB reads with memcpy; the bar is
// >= 50% of memcpy bandwidth.

#include <benchmark/benchmark.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "saturate/base/status.h"
#include "saturate/format/reader.h"
#include "saturate/format/schema.h"
#include "saturate/format/writer.h"
#include "saturate/pack/pack.h"

namespace {

namespace fs = std::filesystem;
using saturate::Status;
using saturate::format::Dataset;
using saturate::format::DatasetWriter;
using saturate::format::DType;
using saturate::format::FieldKind;
using saturate::format::FieldSpec;
using saturate::format::ReaderOptions;
using saturate::format::Schema;
using saturate::format::WriterOptions;

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kBigRecord = kMiB;       // bytes per large record and memcpy block
constexpr size_t kBigTotal = 512 * kMiB;  // large dataset and memcpy source size
constexpr uint64_t kShardBytes = uint64_t{256} << 20;
constexpr uint64_t kSmallRecords = 16384;   // 4 KiB records: 64 MiB
constexpr uint64_t kFmnistRecords = 60000;  // like Fashion-MNIST's training set

std::string g_photos;    // ImageFolder root for the pack benchmarks ("" = skip them)
std::string g_tmp_root;  // created on first use, removed by Cleanup()

// splitmix64: fast, deterministic filler for random payloads.
void FillRandom(std::span<std::byte> out, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
  size_t i = 0;
  for (; i + 8 <= out.size(); i += 8) {
    x += 0x9E3779B97F4A7C15ULL;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    std::memcpy(out.data() + i, &z, 8);
  }
  for (; i < out.size(); ++i) out[i] = std::byte(x >> (8 * (i % 8)));
}

// Visiting orders: 0..n-1, or a fixed-seed permutation of it (an epoch shuffle).
std::vector<uint64_t> Order(uint64_t n, bool shuffled) {
  std::vector<uint64_t> order(n);
  std::iota(order.begin(), order.end(), uint64_t{0});
  if (shuffled) std::shuffle(order.begin(), order.end(), std::mt19937_64(0x5A7u));
  return order;
}

const std::string& TmpRoot() {
  if (g_tmp_root.empty()) {
    const char* env = std::getenv("TMPDIR");
    std::string pattern = std::string(env && *env ? env : "/tmp") + "/saturate-bench-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      std::perror("format_bench: mkdtemp");
      std::exit(1);
    }
    g_tmp_root = pattern;
  }
  return g_tmp_root;
}

// ---- datasets ----------------------------------------------------------------

enum class DataKind { kBig, kSmall4K, kFmnist };

struct OpenDataset {
  std::unique_ptr<Dataset> checked;    // verify_checksums = true (the default)
  std::unique_ptr<Dataset> unchecked;  // verify_checksums = false
  size_t max_record = 0;               // bytes of the largest field payload
};

Status WriteDataset(DataKind kind, const std::string& dir, size_t* max_record) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IOError(dir + ": " + ec.message());
  Schema schema;
  uint64_t n = 0;
  size_t payload = 0;
  switch (kind) {
    case DataKind::kBig:
      schema.fields = {{.name = "data", .kind = FieldKind::kBytes}};
      n = kBigTotal / kBigRecord;
      payload = kBigRecord;
      break;
    case DataKind::kSmall4K:
      schema.fields = {{.name = "data", .kind = FieldKind::kBytes}};
      n = kSmallRecords;
      payload = 4096;
      break;
    case DataKind::kFmnist:
      schema.fields = {
          {.name = "image", .kind = FieldKind::kArray, .dtype = DType::kUInt8, .shape = {28, 28}},
          {.name = "label", .kind = FieldKind::kInt64}};
      n = kFmnistRecords;
      payload = 28 * 28;
      break;
  }
  *max_record = payload;
  WriterOptions options;
  options.shard_bytes = kShardBytes;
  auto writer = DatasetWriter::Create(dir, std::move(schema), options);
  if (!writer.ok()) return writer.status();
  std::vector<std::byte> buf(payload);
  for (uint64_t i = 0; i < n; ++i) {
    FillRandom(buf, i);
    const int64_t label = static_cast<int64_t>(i % 10);
    std::vector<std::span<const std::byte>> fields = {buf};
    if (kind == DataKind::kFmnist) fields.push_back(saturate::format::AsBytes(label));
    SATURATE_RETURN_IF_ERROR((*writer)->Append(fields));
  }
  return (*writer)->Finish();
}

// Reads every record once (untimed): faults the mappings in, checks the data.
Status WarmUp(const Dataset& ds) {
  uint64_t sink = 0;
  for (uint64_t i = 0; i < ds.size(); ++i) {
    auto rec = ds.Get(i);
    if (!rec.ok()) return rec.status();
    for (size_t f = 0; f < rec->num_fields(); ++f) {
      auto bytes = rec->field(f);
      for (size_t off = 0; off < bytes.size(); off += 4096) sink += uint8_t(bytes[off]);
    }
  }
  benchmark::DoNotOptimize(sink);
  return Status::OK();
}

std::map<DataKind, OpenDataset>& Datasets() {
  static auto* datasets = new std::map<DataKind, OpenDataset>();
  return *datasets;
}

// The dataset of `kind`, written and opened on first use; nullptr (and
// *error set) on failure.
const OpenDataset* GetDataset(DataKind kind, std::string* error) {
  auto& all = Datasets();
  if (auto it = all.find(kind); it != all.end()) return &it->second;
  static const char* const kNames[] = {"big-1MiB", "small-4KiB", "fmnist-784B"};
  const std::string dir = TmpRoot() + "/" + kNames[static_cast<int>(kind)];
  OpenDataset od;
  Status st = WriteDataset(kind, dir, &od.max_record);
  if (st.ok()) {
    auto checked = Dataset::Open(dir);
    ReaderOptions no_verify;
    no_verify.verify_checksums = false;
    auto unchecked = Dataset::Open(dir, no_verify);
    if (!checked.ok()) {
      st = checked.status();
    } else if (!unchecked.ok()) {
      st = unchecked.status();
    } else {
      od.checked = std::move(*checked);
      od.unchecked = std::move(*unchecked);
      st = WarmUp(*od.checked);
      if (st.ok()) st = WarmUp(*od.unchecked);
    }
  }
  if (!st.ok()) {
    *error = st.ToString();
    return nullptr;
  }
  return &all.emplace(kind, std::move(od)).first->second;
}

// ---- benchmarks --------------------------------------------------------------

// Baseline: memcpy of 1 MiB blocks at random 1 MiB-aligned positions.
void BM_Memcpy(benchmark::State& state) {
  static std::unique_ptr<std::byte[]> src;
  if (!src) {
    src.reset(new std::byte[kBigTotal]);
    FillRandom({src.get(), kBigTotal}, 42);  // touches every page
  }
  std::vector<std::byte> dst(kBigRecord);
  const std::vector<uint64_t> order = Order(kBigTotal / kBigRecord, /*shuffled=*/true);
  size_t pos = 0;
  for (auto _ : state) {
    std::memcpy(dst.data(), src.get() + order[pos] * kBigRecord, kBigRecord);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
    if (++pos == order.size()) pos = 0;
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(kBigRecord));
  state.SetItemsProcessed(int64_t(state.iterations()));
}

// Dataset::Get + copy of field 0 into a destination buffer (plus the label
// for two-field records), in sequential or shuffled order.
void BM_Read(benchmark::State& state, DataKind kind, bool shuffled, bool verify) {
  std::string error;
  const OpenDataset* od = GetDataset(kind, &error);
  if (od == nullptr) {
    state.SkipWithError(error.c_str());
    return;
  }
  const Dataset& ds = verify ? *od->checked : *od->unchecked;
  std::vector<std::byte> dst(od->max_record);
  const std::vector<uint64_t> order = Order(ds.size(), shuffled);
  const bool has_label = ds.schema().fields.size() > 1;
  size_t pos = 0;
  int64_t bytes = 0;
  int64_t label_sum = 0;
  for (auto _ : state) {
    auto rec = ds.Get(order[pos]);
    if (!rec.ok()) {
      error = rec.status().ToString();
      state.SkipWithError(error.c_str());
      break;
    }
    const auto field = rec->field(0);
    std::memcpy(dst.data(), field.data(), field.size());
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
    if (has_label) label_sum += rec->int64_at(1);
    bytes += int64_t(field.size());
    if (++pos == order.size()) pos = 0;
  }
  benchmark::DoNotOptimize(label_sum);
  state.SetBytesProcessed(bytes);
  state.SetItemsProcessed(int64_t(state.iterations()));
}

void BM_Pack(benchmark::State& state, int threads) {
  std::error_code ec;
  if (g_photos.empty() || !fs::is_directory(g_photos, ec)) {
    const std::string msg = g_photos.empty()
                                ? "no photo folder: pass --photos=DIR or set SATURATE_BENCH_PHOTOS"
                                : "photo folder " + g_photos + " is not a directory";
    state.SkipWithError(msg.c_str());
    return;
  }
  const std::string out = TmpRoot() + "/packed";
  saturate::pack::PackOptions options;
  options.threads = threads;
  options.force = true;
  int64_t images = 0;
  int64_t input_bytes = 0;
  for (auto _ : state) {
    auto summary = saturate::pack::PackImageFolder(g_photos, out, options);
    if (!summary.ok()) {
      const std::string msg = summary.status().ToString();
      state.SkipWithError(msg.c_str());
      break;
    }
    images += int64_t(summary->records);
    input_bytes += int64_t(summary->input_bytes);
  }
  fs::remove_all(out, ec);
  state.SetItemsProcessed(images);
  state.SetBytesProcessed(input_bytes);
}

// ---- reporting -----------------------------------------------------------------

// The console reporter, also keeping each benchmark's bytes/s and items/s.
class CapturingReporter : public benchmark::ConsoleReporter {
 public:
  // RunSpecifiedBenchmarks does not apply --benchmark_color to a reporter it
  // is handed, so colour follows whether stdout is a terminal.
  CapturingReporter() : ConsoleReporter(isatty(STDOUT_FILENO) ? OO_ColorTabular : OO_Tabular) {}

  struct Rates {
    double bytes_per_second = 0;
    double items_per_second = 0;
  };

  // Keyed by the registered name. With --benchmark_repetitions the median
  // aggregate is used; without, the single run.
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.error_occurred) continue;
      const bool median = run.run_type == Run::RT_Aggregate && run.aggregate_name == "median";
      if (run.run_type != Run::RT_Iteration && !median) continue;
      Entry& e = rates_[run.run_name.function_name];
      if (e.from_median && !median) continue;
      e.from_median = median;
      e.rates = {Counter(run, "bytes_per_second"), Counter(run, "items_per_second")};
    }
  }

  const Rates* Find(const std::string& name) const {
    auto it = rates_.find(name);
    return it == rates_.end() ? nullptr : &it->second.rates;
  }

 private:
  struct Entry {
    Rates rates;
    bool from_median = false;
  };
  static double Counter(const Run& run, const std::string& name) {
    auto it = run.counters.find(name);
    return it == run.counters.end() ? 0.0 : it->second.value;
  }
  std::map<std::string, Entry> rates_;
};

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

void PrintSummary(const CapturingReporter& reporter, int all_threads) {
  std::printf(
      "\nsummary (GiB/s = 2^30 bytes/s as above; medians when --benchmark_repetitions > 1):\n");
  const auto* memcpy_rate = reporter.Find("memcpy/1MiB/random");
  auto line = [&](const char* label, const std::string& name) {
    const auto* r = reporter.Find(name);
    if (r == nullptr) return;
    std::printf("  %-36s %8.2f GiB/s", label, r->bytes_per_second / kGiB);
    if (memcpy_rate != nullptr && memcpy_rate->bytes_per_second > 0) {
      std::printf("  (%5.1f%% of memcpy)",
                  100.0 * r->bytes_per_second / memcpy_rate->bytes_per_second);
    }
    std::printf("\n");
  };
  line("memcpy 1 MiB blocks, random", "memcpy/1MiB/random");
  line("read 1 MiB, sequential", "read/1MiB/sequential");
  line("read 1 MiB, sequential, no checksum", "read/1MiB/sequential/no_checksum");
  line("read 1 MiB, random", "read/1MiB/random");
  line("read 1 MiB, random, no checksum", "read/1MiB/random/no_checksum");
  auto items = [&](const char* label, const std::string& name, const char* unit) {
    if (const auto* r = reporter.Find(name)) {
      std::printf("  %-36s %10.0f %s\n", label, r->items_per_second, unit);
    }
  };
  items("read 4 KiB, random", "read/4KiB/random", "records/s");
  items("read 784 B (Fashion-MNIST), random", "read/784B/random", "records/s");
  items("pack ImageFolder, 1 thread", "pack/image_folder/threads:1", "images/s");
  items(("pack ImageFolder, " + std::to_string(all_threads) + " threads").c_str(),
        "pack/image_folder/threads:" + std::to_string(all_threads), "images/s");

  const auto* random_rate = reporter.Find("read/1MiB/random");
  if (memcpy_rate != nullptr && random_rate != nullptr && memcpy_rate->bytes_per_second > 0) {
    const double ratio = random_rate->bytes_per_second / memcpy_rate->bytes_per_second;
    std::printf("random 1 MiB reads (checksums verified) / memcpy = %.2f  (bar: >= 0.50) %s\n",
                ratio, ratio >= 0.5 ? "PASS" : "FAIL");
  } else {
    std::printf("random 1 MiB reads / memcpy: not measured (filtered out or failed)\n");
  }
}

void Cleanup() {
  Datasets().clear();  // unmap before removing the files
  if (!g_tmp_root.empty()) {
    std::error_code ec;
    fs::remove_all(g_tmp_root, ec);
    g_tmp_root.clear();
  }
}

// Takes --photos=DIR / --photos DIR out of argv (Google Benchmark rejects
// flags it does not know).
void TakePhotosFlag(int* argc, char** argv) {
  if (const char* env = std::getenv("SATURATE_BENCH_PHOTOS")) g_photos = env;
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    std::string_view arg = argv[i];
    if (arg.starts_with("--photos=")) {
      g_photos = std::string(arg.substr(9));
    } else if (arg == "--photos" && i + 1 < *argc) {
      g_photos = argv[++i];
    } else {
      argv[out++] = argv[i];
    }
  }
  *argc = out;
  argv[out] = nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  TakePhotosFlag(&argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  std::atexit(Cleanup);

  const int all_threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  using benchmark::kMillisecond;
  // Memcpy and reads are single-threaded and, after the warm-up, never block,
  // so their rates use the thread's CPU time: on a shared machine that is far
  // less noisy than wall time. Pack runs worker threads and writes files, so
  // it is timed by the wall clock.
  benchmark::RegisterBenchmark("memcpy/1MiB/random", BM_Memcpy);
  struct ReadCase {
    const char* name;
    DataKind kind;
    bool shuffled;
    bool verify;
  };
  for (const ReadCase& c : {
           ReadCase{"read/1MiB/sequential", DataKind::kBig, false, true},
           ReadCase{"read/1MiB/sequential/no_checksum", DataKind::kBig, false, false},
           ReadCase{"read/1MiB/random", DataKind::kBig, true, true},
           ReadCase{"read/1MiB/random/no_checksum", DataKind::kBig, true, false},
           ReadCase{"read/4KiB/random", DataKind::kSmall4K, true, true},
           ReadCase{"read/784B/random", DataKind::kFmnist, true, true},
       }) {
    benchmark::RegisterBenchmark(c.name, BM_Read, c.kind, c.shuffled, c.verify);
  }
  std::vector<int> pack_threads = {1};
  if (all_threads > 1) pack_threads.push_back(all_threads);
  for (int threads : pack_threads) {
    // Each iteration packs the whole folder; two of them bound the run time.
    benchmark::RegisterBenchmark(("pack/image_folder/threads:" + std::to_string(threads)).c_str(),
                                 BM_Pack, threads)
        ->UseRealTime()
        ->Unit(kMillisecond)
        ->Iterations(2);
  }

  CapturingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  PrintSummary(reporter, all_threads);
  benchmark::Shutdown();
  Cleanup();
  return 0;
}
