// saturate bench feed DATASET: how fast the loader feeds, and where time goes.
#include <xxhash.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "feed/measure.h"
#include "feed_run.h"
#include "remote_flags.h"
#include "saturate/feed/device_loader.h"
#include "saturate/feed/loader.h"
#include "saturate/formats/source.h"

namespace saturate::cli {
namespace {

struct FeedFlags {
  std::string dataset;
  std::string threads = "auto";
  std::string prefetch = "auto";
  uint64_t batch = 64;
  uint64_t epochs = 1;
  uint64_t warmup = 2;
  uint64_t seed = 0;
  bool no_shuffle = false;
  bool block_shuffle = false;
  bool skip_bad = false;
  std::vector<std::string> transforms;
  std::string device = "cpu";
  std::string decode = "cpu";
  bool digest = false;
  bool json = false;
  remote::RemoteOptions remote;
};

// XXH3-64 over every output tensor's bytes, batch by batch in delivery order:
// a fingerprint of exactly what a training loop would see.
class OutputDigest {
 public:
  OutputDigest() : state_(XXH3_createState()) { XXH3_64bits_reset(state_.get()); }
  void Add(const feed::Batch& batch) {
    for (const feed::TensorView& t : batch.tensors()) {
      XXH3_64bits_update(state_.get(), t.data, t.bytes());
    }
  }
  std::string Hex() const {
    char hex[17];
    std::snprintf(hex, sizeof(hex), "%016llx",
                  static_cast<unsigned long long>(XXH3_64bits_digest(state_.get())));
    return hex;
  }

 private:
  struct Free {
    void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
  };
  std::unique_ptr<XXH3_state_t, Free> state_;
};

// "auto" -> 0, else a positive integer.
Result<int> ParseAuto(const char* flag, const std::string& value) {
  if (value == "auto") return 0;
  try {
    size_t used = 0;
    int n = std::stoi(value, &used);
    if (used == value.size() && n > 0) return n;
  } catch (const std::exception&) {
  }
  return Status::InvalidArgument(std::string(flag) + ": '" + value +
                                 "' (use a positive number or auto)");
}

Result<feed::LoaderOptions> MakeOptions(const FeedFlags& f) {
  feed::LoaderOptions o;
  o.dataset = f.dataset;
  o.batch_size = f.batch;
  o.seed = f.seed;
  o.shuffle = !f.no_shuffle;
  o.block_shuffle = f.block_shuffle;
  o.skip_bad = f.skip_bad;
  o.remote = f.remote;
  SATURATE_ASSIGN_OR_RETURN(o.threads, ParseAuto("--threads", f.threads));
  SATURATE_ASSIGN_OR_RETURN(o.prefetch, ParseAuto("--prefetch", f.prefetch));
  SATURATE_ASSIGN_OR_RETURN(o.fields, ParseTransforms(f.transforms));
  return o;
}

// The loader on the host, or with --device feeding a GPU.
Result<std::unique_ptr<feed::BatchSource>> OpenLoader(const FeedFlags& f,
                                                      const feed::LoaderOptions& options) {
  if (f.device == "cpu") {
    if (f.decode == "gpu") {
      return Status::InvalidArgument("--decode gpu needs --device cuda (or cuda:N)");
    }
    SATURATE_ASSIGN_OR_RETURN(std::unique_ptr<feed::Loader> loader, feed::Loader::Open(options));
    return std::unique_ptr<feed::BatchSource>(std::move(loader));
  }
  if (f.digest) {
    return Status::InvalidArgument("--digest hashes host memory; use it with --device cpu");
  }
  SATURATE_ASSIGN_OR_RETURN(
      std::unique_ptr<feed::DeviceLoader> loader,
      feed::DeviceLoader::Open(options, {.device = f.device, .decode = f.decode}));
  return std::unique_ptr<feed::BatchSource>(std::move(loader));
}

// The loader the flags ask for, with a progress bar while files read where
// they lie (tar, TFRecord) get their JPEG tables on first open.
Result<std::unique_ptr<feed::BatchSource>> OpenSource(const FeedFlags& f) {
  SATURATE_ASSIGN_OR_RETURN(feed::LoaderOptions options, MakeOptions(f));
  ProgressBar bar("indexing JPEGs", "image");
  options.open_progress = [&](uint64_t done, uint64_t total) { bar.Update(done, total); };
  auto source = OpenLoader(f, options);
  bar.Finish();
  return source;
}

int RunFeed(const FeedFlags& f) {
  auto loader = OpenSource(f);
  if (!loader.ok()) return ReportError("bench feed", loader.status());
  const uint64_t total = (*loader)->batches_per_epoch() * f.epochs;
  ProgressBar bar("feed", "batch");
  OutputDigest digest;
  auto m = feed::MeasureFeed(**loader, {.warmup = f.warmup, .epochs = f.epochs},
                             [&](const feed::Batch& batch, uint64_t batches) {
                               if (f.digest) digest.Add(batch);
                               bar.Update(batches, total);
                             });
  if (!m.ok()) return ReportError("bench feed", m.status());
  bar.Finish();
  const feed::LoaderStats& at_start = m->at_start;
  const feed::LoaderStats& end = m->end;
  const uint64_t samples = m->samples, measured = m->timed_batches(f.warmup);
  const double elapsed_s = m->elapsed_s, cpu_cores = m->cpu_cores, rate = m->samples_per_s();
  const uint64_t produced = std::max<uint64_t>(1, end.samples - at_start.samples);
  auto per_sample_us = [&](uint64_t a, uint64_t b) {
    return static_cast<double>(a - b) / static_cast<double>(produced) / 1e3;
  };
  if (f.json) {
    nlohmann::json j = {
        {"dataset", f.dataset},
        {"images_per_s", rate},
        {"samples", samples},
        {"batches", measured},
        {"warmup_batches", std::min(m->batches, f.warmup)},
        {"batch_size", f.batch},
        {"epochs", f.epochs},
        {"threads", end.threads},
        {"prefetch", end.prefetch},
        {"wait_ns_total", end.wait_ns - at_start.wait_ns},
        {"elapsed_s", elapsed_s},
        {"read_us_per_sample", per_sample_us(end.read_ns, at_start.read_ns)},
        {"decode_us_per_sample", per_sample_us(end.decode_ns, at_start.decode_ns)},
        {"transform_us_per_sample", per_sample_us(end.transform_ns, at_start.transform_ns)},
        {"cpu_cores_used", cpu_cores},
        {"skipped", end.skipped},
        {"device", f.device},
        {"h2d_bytes", end.h2d_bytes - at_start.h2d_bytes},
        {"decode", end.decode.empty() ? std::string("cpu") : end.decode},
        {"decode_backend", end.decode_backend},
        {"gpu_decoded", end.gpu_decoded - at_start.gpu_decoded},
        {"gpu_decode_fallbacks", end.gpu_decode_fallbacks - at_start.gpu_decode_fallbacks},
        {"gpu_decode_cut", end.gpu_decode_cut - at_start.gpu_decode_cut},
        {"gpu_decode_fraction", end.gpu_decode_fraction},
        {"cpu_decode_images_per_s_per_thread", end.cpu_decode_images_per_s_per_thread},
        {"gpu_decode_images_per_s", end.gpu_decode_images_per_s}};
    if (f.digest) j["digest"] = digest.Hex();
    if (end.remote.requests > 0) {
      const remote::RemoteStats& r = end.remote;
      j["remote"] = {{"requests", r.requests},
                     {"bytes_fetched", r.bytes_fetched},
                     {"retries", r.retries},
                     {"errors", r.errors},
                     {"request_ns", r.request_ns},
                     {"cache_hits", r.cache_hits},
                     {"cache_misses", r.cache_misses},
                     {"cache_checksum_failures", r.cache_checksum_failures},
                     {"cache_write_errors", r.cache_write_errors},
                     {"cache_evictions", r.cache_evictions}};
    }
    std::cout << j.dump(2) << "\n";
    return kExitOk;
  }
  std::printf("fed %llu samples in %llu batches: %.1f samples/s (%d threads, prefetch %d)\n",
              static_cast<unsigned long long>(samples), static_cast<unsigned long long>(measured),
              rate, end.threads, end.prefetch);
  std::printf("per sample (thread time): read %.1f us, decode %.1f us, transform %.1f us\n",
              per_sample_us(end.read_ns, at_start.read_ns),
              per_sample_us(end.decode_ns, at_start.decode_ns),
              per_sample_us(end.transform_ns, at_start.transform_ns));
  std::printf("consumer waited %.1f%% of %.2f s; CPU %.2f cores\n", m->wait_pct(), elapsed_s,
              cpu_cores);
  if (end.skipped)
    std::printf("skipped %llu bad samples\n", static_cast<unsigned long long>(end.skipped));
  if (!end.decode.empty() && end.decode != "cpu") {
    std::printf(
        "decode %s (%s): %llu images on the GPU (%llu cut to their crop, %llu refused and "
        "decoded on the CPU), GPU share %.0f%%",
        end.decode.c_str(), end.decode_backend.c_str(),
        static_cast<unsigned long long>(end.gpu_decoded - at_start.gpu_decoded),
        static_cast<unsigned long long>(end.gpu_decode_cut - at_start.gpu_decode_cut),
        static_cast<unsigned long long>(end.gpu_decode_fallbacks - at_start.gpu_decode_fallbacks),
        100.0 * end.gpu_decode_fraction);
    if (end.gpu_decode_images_per_s > 0) {
      std::printf("; rates: GPU %.0f images/s, CPU %.0f images/s per thread",
                  end.gpu_decode_images_per_s, end.cpu_decode_images_per_s_per_thread);
    }
    std::printf("\n");
  }
  if (f.digest) std::printf("output digest (XXH3-64 of every batch): %s\n", digest.Hex().c_str());
  if (end.remote.requests > 0) {
    const remote::RemoteStats& r = end.remote;
    const uint64_t blocks = r.cache_hits + r.cache_misses;
    std::printf("remote: %llu requests, %s fetched, %llu retries, %.1f ms mean latency",
                static_cast<unsigned long long>(r.requests), FormatBytes(r.bytes_fetched).c_str(),
                static_cast<unsigned long long>(r.retries),
                static_cast<double>(r.request_ns) / 1e6 / static_cast<double>(r.requests));
    if (blocks > 0) {
      std::printf("; cache hit ratio %.1f%%",
                  100.0 * static_cast<double>(r.cache_hits) / static_cast<double>(blocks));
    }
    std::printf("\n");
  }
  return kExitOk;
}

}  // namespace

void RegisterBench(CLI::App& app, int* exit_code) {
  CLI::App* bench = app.add_subcommand("bench", "Measure saturate's pipeline on this machine");
  bench->require_subcommand(1);
  auto f = std::make_shared<FeedFlags>();
  CLI::App* cmd = bench->add_subcommand(
      "feed", "Run the loader over a dataset as fast as it goes: samples/s and where time goes");
  cmd->add_option("DATASET", f->dataset,
                  "Dataset directory, s3:// / http(s):// URL, or WebDataset / TFRecord files")
      ->required();
  cmd->add_option("--threads", f->threads, "Decode threads: N or auto")->capture_default_str();
  cmd->add_option("--prefetch", f->prefetch, "Batches in flight: N or auto")->capture_default_str();
  cmd->add_option("-b,--batch", f->batch, "Batch size")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--epochs", f->epochs, "Epochs to run")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--warmup", f->warmup, "Batches excluded from the timing (start-up)")
      ->capture_default_str();
  cmd->add_option("--seed", f->seed, "Shuffle and augmentation seed")->capture_default_str();
  cmd->add_flag("--no-shuffle", f->no_shuffle, "Read in dataset order");
  cmd->add_flag("--block-shuffle", f->block_shuffle,
                "Shuffle ~4 MiB blocks of neighbouring records, then within windows of 16 blocks "
                "(remote datasets: neighbours are fetched together)");
  cmd->add_flag("--skip-bad", f->skip_bad, "Skip corrupt samples (counted) instead of failing");
  cmd->add_option("-t,--transform", f->transforms,
                  "Per-field transform FIELD:OPTION,... e.g. "
                  "image:crop=random,size=224,flip=0.5,dtype=uint8 (repeatable)");
  cmd->add_option("--device", f->device,
                  "cpu, or cuda / cuda:N to copy batches to that GPU (pinned buffers, side "
                  "stream, conversion in kernels)")
      ->capture_default_str();
  cmd->add_option("--decode", f->decode,
                  "Where JPEGs are decoded with --device cuda: cpu, gpu (nvJPEG; needs "
                  "libnvjpeg.so.13) or auto (split by measured rates)")
      ->check(CLI::IsMember({"cpu", "gpu", "auto"}))
      ->capture_default_str();
  cmd->add_flag("--digest", f->digest,
                "Print an XXH3-64 digest of all output bytes (same options, same digest: "
                "any thread count, any run)");
  cmd->add_flag("--json", f->json,
                "One JSON object: images_per_s, batches, threads, prefetch, "
                "wait_ns_total, elapsed_s, per-stage times, CPU");
  AddRemoteFlags(cmd, &f->remote);
  cmd->callback([exit_code, f] { *exit_code = RunFeed(*f); });
}

}  // namespace saturate::cli
