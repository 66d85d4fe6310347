#include "saturate/feed/loader.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/cpu_time.h"
#include "base/thread_name.h"
#include "feed/autotune.h"
#include "feed/sample_plan.h"
#include "feed/sampler.h"
#include "saturate/trace/trace.h"

namespace saturate::feed {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxPrefetch = 16;  // ring size: the most batches in flight
constexpr int kDefaultPrefetch = 4;
// How much of the next record a worker asks the CPU to prefetch: all of a
// small record (the bound is memory latency), the head of a large one.
constexpr uint64_t kPrefetchBytes = 4096;
// How often Next() writes the "loader" counters record while tracing.
constexpr int64_t kCountersIntervalNs = 1'000'000'000;

// Loaders of this process, numbered for the counters record.
std::atomic<int64_t> next_loader_id{0};

// How many records ahead of the one being read a fixed-size chunk prefetches.
constexpr size_t kFixedPrefetchDistance = 4;
// A fixed-size chunk is read and written in groups of this many records,
// so that their bytes are still in the core's caches when written.
constexpr size_t kFixedGroupRecords = 32;
// The fewest records a fixed-size chunk holds (unless the batch holds
// fewer): they cost a fraction of a microsecond each, and claiming a chunk
// (the lock, the shared counters, the clock) must not cost as much as it.
constexpr uint64_t kMinFixedChunk = 64;

// The failures of one chunk's samples: their slots, and the first error.
struct ChunkErrors {
  std::vector<uint64_t> failed;  // small; usually empty
  Status first;
  uint64_t first_slot = UINT64_MAX;

  void Add(uint64_t slot, Status s) {
    if (s.ok()) return;
    failed.push_back(slot);
    if (first.ok()) {
      first = std::move(s);
      first_slot = slot;
    }
  }
};

uint64_t Nanos(Clock::time_point a, Clock::time_point b) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
}

class AlignedHostAllocator : public BatchAllocator {
 public:
  Result<void*> Allocate(size_t bytes) override {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (p == nullptr)
      return Status::IOError("out of memory allocating a " + std::to_string(bytes) + "-byte batch");
    return p;
  }
  void Free(void* ptr, size_t) override { std::free(ptr); }
};

}  // namespace

std::shared_ptr<BatchAllocator> HostAllocator() {
  static auto allocator = std::make_shared<AlignedHostAllocator>();
  return allocator;
}

size_t TensorView::bytes() const {
  size_t n = format::DTypeSize(dtype);
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

const TensorView* Batch::Find(std::string_view name) const {
  for (const TensorView& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

// State shared by the loader, its workers and every outstanding buffer, so
// that batches may outlive the loader. Everything is guarded by `mu`.
struct Shared {
  std::mutex mu;
  std::condition_variable work_cv;   // workers: work or a buffer became available
  std::condition_variable ready_cv;  // consumer: a batch completed
  bool stop = false;

  // The buffer pool: at most `capacity` buffers, allocated on first use.
  std::shared_ptr<BatchAllocator> allocator;
  size_t buffer_bytes = 0;
  size_t capacity = 0;
  size_t allocated = 0;
  std::vector<std::byte*> free;

  ~Shared() {
    for (std::byte* p : free) allocator->Free(p, buffer_bytes);
  }
};

// A pooled buffer; goes back to the free list when the last Batch copy dies.
class BatchBuffer {
 public:
  BatchBuffer(std::shared_ptr<Shared> shared, std::byte* data)
      : shared_(std::move(shared)), data_(data) {}
  ~BatchBuffer() {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->free.push_back(data_);
    shared_->work_cv.notify_all();
  }
  std::byte* data() const { return data_; }

 private:
  std::shared_ptr<Shared> shared_;
  std::byte* data_;
};

class Loader::Impl {
 public:
  // One batch being produced, in ring position seq % kMaxPrefetch.
  struct Slot {
    uint64_t batch = UINT64_MAX;  // its sequence number (see base_), UINT64_MAX when idle
    std::shared_ptr<BatchBuffer> buffer;
    uint64_t count = 0;      // samples in this batch
    uint64_t remaining = 0;  // samples not yet written
    std::vector<uint8_t> valid;
    Status error;
    uint64_t error_slot = UINT64_MAX;  // keep the first failing sample's error
  };

  Impl(LoaderOptions options, std::unique_ptr<format::Dataset> dataset, Sampler sampler,
       SamplePlan plan)
      : options_(std::move(options)),
        dataset_(std::move(dataset)),
        sampler_(std::move(sampler)),
        plan_(std::move(plan)),
        shared_(std::make_shared<Shared>()),
        slots_(kMaxPrefetch) {}

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      shared_->stop = true;
    }
    // A worker retrying a remote read against a dead server would hold the
    // join for minutes.
    dataset_->CancelRemote();
    shared_->work_cv.notify_all();
    shared_->ready_cv.notify_all();
    for (std::thread& t : workers_) t.join();
    // slots_ (and their buffers) go with the members, after the workers.
    if (trace::Enabled()) {
      std::unique_lock<std::mutex> lock(shared_->mu);
      const LoaderStats s = StatsLocked();
      lock.unlock();
      TraceCounters(s);
    }
  }

  Status Start() {
    if (options_.max_held_batches < 1) {
      return Status::InvalidArgument("max_held_batches must be at least 1");
    }
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const bool auto_threads = options_.threads <= 0, auto_prefetch = options_.prefetch <= 0;
    // Workers are started up to the most the tuner may use; those with an id
    // at or above threads_ sleep.
    max_threads_ = auto_threads ? cores : options_.threads;
    // "auto" starts at every core: the first batches come as fast as the
    // machine allows, and the tuner sizes down from its first windows.
    threads_ = auto_threads ? max_threads_ : options_.threads;
    prefetch_ = auto_prefetch ? kDefaultPrefetch : std::min(options_.prefetch, kMaxPrefetch);
    if (auto_threads || auto_prefetch) {
      AutotuneLimits limits;
      limits.cores = cores;
      // The training process's cores are protected by measuring the process's
      // CPU use (no thread is added while it is saturated), not by a fixed reserve.
      limits.reserved_cores = 0;
      limits.min_threads = auto_threads ? 1 : threads_;
      limits.max_threads = max_threads_;
      limits.max_prefetch = auto_prefetch ? kMaxPrefetch : prefetch_;
      limits.max_held_batches = options_.max_held_batches;
      limits.batch_bytes = plan_.batch_bytes();
      limits.ram_cap_bytes = options_.ram_cap_bytes > 0 ? options_.ram_cap_bytes : DefaultRamCap();
      tuner_.emplace(limits, threads_, prefetch_);
      threads_ = tuner_->threads();
      prefetch_ = tuner_->prefetch();
    }
    shared_->allocator = options_.allocator ? options_.allocator : HostAllocator();
    shared_->buffer_bytes = plan_.batch_bytes();
    shared_->capacity = static_cast<size_t>(prefetch_ + options_.max_held_batches);
    // Split batches into chunks so every thread gets work and locking stays
    // rare: four a thread for samples that are decoded, whose costs vary;
    // one a thread (at least kMinFixedChunk records) for fixed-size ones,
    // which cost alike and little (docs/benchmarks.md, "Feed at the
    // machine's limit").
    const uint64_t batch = options_.batch_size, threads = static_cast<uint64_t>(max_threads_);
    chunk_ = plan_.fixed_size()
                 ? std::max((batch + threads - 1) / threads, std::min(batch, kMinFixedChunk))
                 : std::max<uint64_t>(1, batch / (4 * threads));
    {
      std::unique_lock<std::mutex> lock(shared_->mu);
      StartEpochLocked(0, 0, 0, &lock);
      window_ = WindowStart();
    }
    for (int i = 0; i < max_threads_; ++i)
      workers_.emplace_back([this, i] {
        base::NameThisThread("feed-" + std::to_string(i));
        WorkerLoop(i);
      });
    return Status::OK();
  }

  uint64_t batches_per_epoch() const { return BatchesIn(sampler_.samples_per_rank()); }

  // Batches of the epoch in progress: batches_per_epoch(), except for an
  // epoch resumed elastically (shorter). Guarded by shared_->mu.
  uint64_t EpochBatchesLocked() const { return BatchesIn(order_.size()); }

  uint64_t BatchesIn(uint64_t samples) const {
    const uint64_t b = options_.batch_size;
    return options_.drop_last ? samples / b : (samples + b - 1) / b;
  }

  Result<std::optional<Batch>> Next() {
    const bool tracing = trace::Enabled();
    if (tracing && wait_start_ns_ < 0) wait_start_ns_ = trace::NowNs();
    std::unique_lock<std::mutex> lock(shared_->mu);
    if (delivered_ >= EpochBatchesLocked()) {
      wait_start_ns_ = -1;
      return std::optional<Batch>();
    }
    Slot& slot = slots_[head() % kMaxPrefetch];
    auto t0 = Clock::now();
    while (!SlotCompleteLocked(slot)) {
      if (AllBuffersHeldLocked(slot)) {
        wait_start_ns_ = -1;
        return Status::InvalidArgument("the consumer holds " + std::to_string(shared_->capacity) +
                                       " batches; release some or raise max_held_batches (now " +
                                       std::to_string(options_.max_held_batches) + ")");
      }
      shared_->ready_cv.wait(lock);
    }
    wait_ns_ += Nanos(t0, Clock::now());
    Batch batch;
    batch.epoch_ = epoch_;
    batch.index_ = delivered_;
    std::shared_ptr<BatchBuffer> buffer = std::move(slot.buffer);
    Status error = std::move(slot.error);
    finish_valid_.assign(slot.valid.begin(), slot.valid.end());  // reuses capacity
    const uint64_t count = slot.count;
    slot.batch = UINT64_MAX;
    slot.error = Status::OK();
    slot.error_slot = UINT64_MAX;
    ++delivered_;
    ++batches_delivered_;
    if (tuner_) AutotuneLocked();
    // Trace: the consumer's wait for this batch, and the counters once a second.
    int64_t wait_start_ns = -1, delivered_ns = 0;
    std::optional<LoaderStats> counters;
    if (tracing && wait_start_ns_ >= 0) {
      wait_start_ns = wait_start_ns_;
      delivered_ns = trace::NowNs();
      if (delivered_ns - last_counters_ns_ >= kCountersIntervalNs) {
        counters = StatsLocked();
        last_counters_ns_ = delivered_ns;
      }
    }
    wait_start_ns_ = -1;
    lock.unlock();
    shared_->work_cv.notify_all();
    if (wait_start_ns >= 0) {
      trace::RecordSpan("data_wait", wait_start_ns, delivered_ns, trace::Category::kLoader,
                        {{"epoch", static_cast<int64_t>(batch.epoch_)},
                         {"batch", static_cast<int64_t>(batch.index_)}});
    }
    if (counters) TraceCounters(*counters);

    if (!error.ok()) return error;
    batch.tensors_ = plan_.Finish(buffer->data(), finish_valid_, count, &batch.size_);
    if (batch.size_ != count && options_.image_deferral != nullptr) {
      for (uint64_t s = 0; s < count; ++s) {
        if (finish_valid_[s]) batch.source_slots_.push_back(static_cast<uint32_t>(s));
      }
    }
    batch.owner_ = std::move(buffer);
    return std::optional<Batch>(std::move(batch));
  }

  bool WaitForNext(std::chrono::nanoseconds timeout) {
    if (wait_start_ns_ < 0 && trace::Enabled()) wait_start_ns_ = trace::NowNs();
    std::unique_lock<std::mutex> lock(shared_->mu);
    auto t0 = Clock::now();
    const bool ready = shared_->ready_cv.wait_for(lock, timeout, [&] {
      if (delivered_ >= EpochBatchesLocked()) return true;
      const Slot& slot = slots_[head() % kMaxPrefetch];
      return SlotCompleteLocked(slot) || AllBuffersHeldLocked(slot);
    });
    wait_ns_ += Nanos(t0, Clock::now());
    return ready;
  }

  // Starts `epoch` at batch `batches_done`, or (elastic resume) at global
  // position `skip` of its order with batches_done 0.
  Status SetEpoch(uint64_t epoch, uint64_t batches_done, uint64_t skip = 0) {
    if (batches_done > BatchesIn(sampler_.SamplesPerRankFrom(skip))) {
      return Status::InvalidArgument("state is past the end of the epoch");
    }
    std::vector<std::shared_ptr<BatchBuffer>> released;
    wait_start_ns_ = -1;
    {
      std::unique_lock<std::mutex> lock(shared_->mu);
      if (epoch == epoch_ + 1 && batches_done == 0 && skip == 0 &&
          delivered_ == EpochBatchesLocked()) {
        NextEpochLocked();  // keeps the batches read ahead
      } else {
        released = StartEpochLocked(epoch, batches_done, skip, &lock);
      }
    }
    shared_->work_cv.notify_all();
    return Status::OK();  // `released` returns its buffers to the pool here
  }

  LoaderState state() const {
    std::lock_guard<std::mutex> lock(shared_->mu);
    return LoaderState{epoch_,
                       delivered_,
                       options_.seed,
                       dataset_->size(),
                       options_.batch_size,
                       sampler_.options().shard.rank,
                       sampler_.options().shard.world_size,
                       epoch_start_sample_};
  }

  LoaderStats stats() const {
    std::lock_guard<std::mutex> lock(shared_->mu);
    return StatsLocked();
  }

  const LoaderOptions& options() const { return options_; }
  const Sampler& sampler() const { return sampler_; }
  const SamplePlan& plan() const { return plan_; }
  uint64_t dataset_size() const { return dataset_->size(); }
  const format::Schema& schema() const { return dataset_->schema(); }
  const std::vector<std::string>& class_names() const { return dataset_->manifest().class_names; }

 private:
  // Measurements at the start of an autotuning window.
  struct Window {
    Clock::time_point start;
    LoaderStats stats;
    double cpu_s = 0;
  };

  LoaderStats StatsLocked() const {
    LoaderStats s = stats_;
    s.batches_delivered = batches_delivered_;
    s.wait_ns = wait_ns_;
    s.threads = threads_;
    s.prefetch = prefetch_;
    s.autotune_reason = last_reason_;
    if (dataset_->remote()) s.remote = dataset_->remote_stats();
    return s;
  }

  // The "loader" counters record of the spans file (docs/trace.md).
  void TraceCounters(const LoaderStats& s) const {
    auto i = [](uint64_t v) { return static_cast<int64_t>(v); };
    trace::RecordCounters("loader", {{"loader_id", trace_id_},
                                     {"batch_size", i(options_.batch_size)},
                                     {"threads", s.threads},
                                     {"prefetch", s.prefetch},
                                     {"samples", i(s.samples)},
                                     {"skipped", i(s.skipped)},
                                     {"read_ns", i(s.read_ns)},
                                     {"decode_ns", i(s.decode_ns)},
                                     {"transform_ns", i(s.transform_ns)},
                                     {"wait_ns", i(s.wait_ns)},
                                     {"batches_delivered", i(s.batches_delivered)}});
    if (!dataset_->remote()) return;
    // A second record (a record holds 16 values): what doctor's io_bound
    // finding says of a remote dataset (docs/remote.md).
    const remote::RemoteStats& r = s.remote;
    const int limit = options_.remote.requests > 0 ? options_.remote.requests
                                                   : remote::kDefaultConcurrentRequests;
    trace::RecordCounters("loader_remote", {{"loader_id", trace_id_},
                                            {"remote_requests", i(r.requests)},
                                            {"remote_bytes_fetched", i(r.bytes_fetched)},
                                            {"remote_request_ns", i(r.request_ns)},
                                            {"remote_retries", i(r.retries)},
                                            {"remote_errors", i(r.errors)},
                                            {"remote_cache_hits", i(r.cache_hits)},
                                            {"remote_cache_misses", i(r.cache_misses)},
                                            {"remote_in_flight", i(r.in_flight)},
                                            {"remote_concurrent_requests", limit}});
  }

  // A worker's work on one batch, recorded as one "load_batch" span when the
  // worker moves on to another batch or runs out of work.
  struct Stretch {
    uint64_t epoch = 0;
    uint64_t batch = UINT64_MAX;  // UINT64_MAX: none open
    int64_t start_ns = 0, end_ns = 0;
    uint64_t samples = 0;
    StageTimes times;
  };

  static void CloseStretch(Stretch* s) {
    if (s->batch == UINT64_MAX) return;
    auto i = [](uint64_t v) { return static_cast<int64_t>(v); };
    trace::RecordSpan("load_batch", s->start_ns, s->end_ns, trace::Category::kLoader,
                      {{"epoch", i(s->epoch)},
                       {"batch", i(s->batch)},
                       {"samples", i(s->samples)},
                       {"read_ns", i(s->times.read_ns)},
                       {"decode_ns", i(s->times.decode_ns)},
                       {"transform_ns", i(s->times.transform_ns)}});
    s->batch = UINT64_MAX;
  }

  static void ExtendStretch(uint64_t epoch, uint64_t batch, int64_t start_ns, int64_t end_ns,
                            uint64_t samples, const StageTimes& times, Stretch* s) {
    if (s->batch != batch || s->epoch != epoch) {
      CloseStretch(s);
      *s = Stretch{epoch, batch, start_ns, end_ns, 0, StageTimes{}};
    }
    s->end_ns = end_ns;
    s->samples += samples;
    s->times.read_ns += times.read_ns;
    s->times.decode_ns += times.decode_ns;
    s->times.transform_ns += times.transform_ns;
  }

  // A tenth of physical memory for batch buffers, unless the caller says.
  static uint64_t DefaultRamCap() {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * page / 10 : uint64_t{1} << 30;
  }

  Window WindowStart() const {
    LoaderStats s = stats_;
    s.batches_delivered = batches_delivered_;
    s.wait_ns = wait_ns_;
    return Window{Clock::now(), s, base::ProcessCpuSeconds()};
  }

  // Feeds the window that just ended to the tuner (once it is long enough)
  // and applies its decision: wake or park workers, grow the buffer pool.
  void AutotuneLocked() {
    const auto now = Clock::now();
    const uint64_t window_ns = Nanos(window_.start, now);
    // A window that has not seen 2 batches goes on (a slow step would
    // otherwise never fill one).
    if (window_ns < tuner_->min_window_ns() ||
        batches_delivered_ - window_.stats.batches_delivered <
            AutotuneController::kMinWindowBatches) {
      return;
    }
    AutotuneSample sample;
    sample.window_ns = window_ns;
    sample.batches_delivered = batches_delivered_ - window_.stats.batches_delivered;
    sample.consumer_wait_ns = wait_ns_ - window_.stats.wait_ns;
    sample.worker_busy_ns =
        (stats_.read_ns + stats_.decode_ns + stats_.transform_ns) -
        (window_.stats.read_ns + window_.stats.decode_ns + window_.stats.transform_ns);
    sample.threads = threads_;
    sample.prefetch = prefetch_;
    for (const Slot& slot : slots_) {
      if (slot.batch != UINT64_MAX && slot.batch >= head() && slot.remaining == 0) {
        ++sample.ready_batches;
      }
    }
    sample.process_cpu_util =
        (base::ProcessCpuSeconds() - window_.cpu_s) * 1e9 / static_cast<double>(window_ns);
    AutotuneDecision d = tuner_->Update(sample);
    threads_ = std::clamp(d.threads, 1, max_threads_);
    prefetch_ = std::clamp(d.prefetch, 1, kMaxPrefetch);
    shared_->capacity =
        std::max(shared_->capacity, static_cast<size_t>(prefetch_ + options_.max_held_batches));
    if (d.changed) last_reason_ = d.reason;
    window_ = WindowStart();
  }

  // Resets production to batch `first` of `epoch`. Waits for chunks in
  // progress to finish (they write into buffers about to be reused) and
  // returns the in-flight buffers, to be released once `lock` is dropped.
  std::vector<std::shared_ptr<BatchBuffer>> StartEpochLocked(uint64_t epoch, uint64_t first,
                                                             uint64_t skip,
                                                             std::unique_lock<std::mutex>* lock) {
    pausing_ = true;
    shared_->ready_cv.wait(*lock, [&] { return busy_ == 0; });
    pausing_ = false;
    epoch_ = epoch;
    epoch_start_sample_ = skip;
    sampler_.EpochIndicesFrom(epoch, skip, &order_);
    next_order_ready_ = false;
    if (dataset_->remote()) {  // the remote reader fetches ahead in this order
      dataset_->PlanReads(std::span<const uint64_t>(order_).subspan(
                              std::min<uint64_t>(order_.size(), first * options_.batch_size)),
                          /*replace=*/true);
    }
    base_ = 0;  // nothing is in flight: the numbering may restart
    delivered_ = first;
    cursor_batch_ = first;
    cursor_offset_ = 0;
    std::vector<std::shared_ptr<BatchBuffer>> released;
    for (Slot& s : slots_) {
      s.batch = UINT64_MAX;
      s.remaining = 0;
      s.error = Status::OK();
      s.error_slot = UINT64_MAX;
      if (s.buffer) released.push_back(std::move(s.buffer));
    }
    return released;
  }

  // Moves on to epoch_ + 1 once epoch_ is fully delivered, keeping the
  // batches the workers have already made of it.
  void NextEpochLocked() {
    base_ += EpochBatchesLocked();
    ++epoch_;
    epoch_start_sample_ = 0;
    if (next_order_ready_) {
      order_.swap(next_order_);
    } else {
      sampler_.EpochIndices(epoch_, &order_);
      if (dataset_->remote()) dataset_->PlanReads(order_, /*replace=*/false);
    }
    next_order_ready_ = false;
    delivered_ = 0;
  }

  // The sequence number of the next batch the consumer gets.
  uint64_t head() const { return base_ + delivered_; }

  uint64_t BatchCount(const std::vector<uint64_t>& order, uint64_t b) const {
    return std::min<uint64_t>(options_.batch_size, order.size() - b * options_.batch_size);
  }

  bool SlotCompleteLocked(const Slot& slot) const {
    return slot.batch == head() && slot.remaining == 0;
  }

  // Every buffer is held by the consumer, so the next batch can never be made.
  bool AllBuffersHeldLocked(const Slot& slot) const {
    return slot.batch != head() && shared_->free.empty() && shared_->allocated >= shared_->capacity;
  }

  bool CanStartLocked(int worker) const {
    if (pausing_ || worker >= threads_) return false;
    // At most one epoch ahead: the batches of epoch_ + 1 wait for its SetEpoch.
    if (cursor_batch_ >= base_ + EpochBatchesLocked() + batches_per_epoch()) return false;
    if (cursor_batch_ >= head() + static_cast<uint64_t>(prefetch_)) return false;
    if (cursor_offset_ > 0) return true;
    return !shared_->free.empty() || shared_->allocated < shared_->capacity;
  }

  Result<std::byte*> AcquireLocked() {
    if (!shared_->free.empty()) {
      std::byte* p = shared_->free.back();
      shared_->free.pop_back();
      return p;
    }
    SATURATE_ASSIGN_OR_RETURN(void* p, shared_->allocator->Allocate(shared_->buffer_bytes));
    ++shared_->allocated;
    return static_cast<std::byte*>(p);
  }

  void WorkerLoop(int worker) {
    SampleScratch scratch;
    std::vector<uint64_t> indices;
    indices.reserve(chunk_);
    Stretch stretch;  // tracing only
    std::unique_lock<std::mutex> lock(shared_->mu);
    while (true) {
      if (!shared_->stop && !CanStartLocked(worker)) CloseStretch(&stretch);  // going idle
      shared_->work_cv.wait(lock, [&] { return shared_->stop || CanStartLocked(worker); });
      if (shared_->stop) {
        CloseStretch(&stretch);
        return;
      }
      // Claim a chunk of the batch under the cursor, which may be in the
      // next epoch already.
      const uint64_t seq = cursor_batch_;
      const bool ahead = seq >= base_ + EpochBatchesLocked();
      if (ahead && !next_order_ready_) {
        sampler_.EpochIndices(epoch_ + 1, &next_order_);
        next_order_ready_ = true;
        if (dataset_->remote()) dataset_->PlanReads(next_order_, /*replace=*/false);
      }
      const std::vector<uint64_t>& order = ahead ? next_order_ : order_;
      const uint64_t epoch = epoch_ + (ahead ? 1 : 0);
      const uint64_t b = seq - base_ - (ahead ? EpochBatchesLocked() : 0);
      Slot& slot = slots_[seq % kMaxPrefetch];
      if (cursor_offset_ == 0) {
        auto buffer = AcquireLocked();
        if (!buffer.ok()) {
          slot.error = buffer.status();
          slot.batch = seq;
          slot.remaining = 0;
          ++cursor_batch_;
          shared_->ready_cv.notify_all();
          continue;
        }
        slot.buffer = std::make_shared<BatchBuffer>(shared_, *buffer);
        slot.batch = seq;
        slot.count = BatchCount(order, b);
        slot.remaining = slot.count;
        slot.valid.assign(slot.count, 1);
      }
      const uint64_t begin = cursor_offset_;
      const uint64_t end = std::min(begin + chunk_, slot.count);
      cursor_offset_ = end;
      if (end == slot.count) {
        ++cursor_batch_;
        cursor_offset_ = 0;
      }
      indices.assign(order.begin() + b * options_.batch_size + begin,
                     order.begin() + b * options_.batch_size + end);
      std::byte* data = slot.buffer->data();
      ++busy_;
      lock.unlock();

      StageTimes times;
      ChunkErrors errors;
      const bool tracing = trace::Enabled();
      const int64_t chunk_start_ns = tracing ? trace::NowNs() : 0;
      if (plan_.fixed_size()) {
        ProduceFixedChunk(indices, begin, data, &scratch, &times, &errors);
      } else {
        for (uint64_t k = 0; k < indices.size(); ++k) {
          if (k + 1 < indices.size()) dataset_->Prefetch(indices[k + 1], kPrefetchBytes);
          errors.Add(begin + k,
                     ProduceSample(indices[k], epoch, begin + k, data, &scratch, &times));
        }
      }
      // Once per chunk, before the chunk is published: a fence per sample
      // costs more than streaming saves.
      if (plan_.array_stores() == Stores::kStreaming) StreamingFence();
      const std::vector<uint64_t>& failed = errors.failed;
      if (tracing) {
        ExtendStretch(epoch, b, chunk_start_ns, trace::NowNs(), indices.size(), times, &stretch);
      }

      lock.lock();
      stats_.samples += indices.size() - failed.size();
      stats_.read_ns += times.read_ns;
      stats_.decode_ns += times.decode_ns;
      stats_.transform_ns += times.transform_ns;
      if (--busy_ == 0 && pausing_) shared_->ready_cv.notify_all();
      for (uint64_t f : failed) {
        slot.valid[f] = 0;
        if (options_.skip_bad) ++stats_.skipped;
      }
      if (!options_.skip_bad && !errors.first.ok() && errors.first_slot < slot.error_slot) {
        slot.error = errors.first;
        slot.error_slot = errors.first_slot;
      }
      slot.remaining -= indices.size();
      if (slot.remaining == 0) {
        ++stats_.batches_ready;
        shared_->ready_cv.notify_all();
      }
    }
  }

  // A chunk of fixed-size records, kFixedGroupRecords at a time. Each group
  // prefetches only its own records: prefetching across the previous
  // group's write pass (~100 KB of stores for Fashion-MNIST) measured slower.
  void ProduceFixedChunk(const std::vector<uint64_t>& indices, uint64_t begin, std::byte* data,
                         SampleScratch* scratch, StageTimes* times, ChunkErrors* errors) {
    for (size_t k = 0; k < indices.size(); k += kFixedGroupRecords) {
      const size_t n = std::min(kFixedGroupRecords, indices.size() - k);
      ProduceFixedGroup(std::span(indices).subspan(k, n), begin + k, data, scratch, times, errors);
    }
  }

  // A group of fixed-size records in two passes: read and verify them all
  // (prefetching a few ahead: small records in random order are bound by
  // memory latency), then write them output by output. Two clock reads per
  // group instead of two per sample.
  void ProduceFixedGroup(std::span<const uint64_t> indices, uint64_t begin, std::byte* data,
                         SampleScratch* scratch, StageTimes* times, ChunkErrors* errors) {
    const size_t n = indices.size();
    scratch->records.resize(n);
    scratch->records_ok.assign(n, 1);
    // Three distances. A record's index entry (itself a cache miss) is
    // loaded three times as far ahead as the record, and the record's first
    // line twice as far: that first touch pays the record's address
    // translation (a random record's page is rarely in the TLB) before the
    // whole record is asked for, which then waits only for its lines
    // (3-4% more samples/s on Fashion-MNIST, docs/benchmarks.md).
    constexpr size_t kD = kFixedPrefetchDistance;
    constexpr uint64_t kLineBytes = 64;
    for (size_t k = 0; k < std::min<size_t>(3 * kD, n); ++k) dataset_->PrefetchEntry(indices[k]);
    for (size_t k = kD; k < std::min<size_t>(2 * kD, n); ++k) {
      dataset_->Prefetch(indices[k], kLineBytes);
    }
    for (size_t k = 0; k < std::min<size_t>(kD, n); ++k) {
      dataset_->Prefetch(indices[k], kPrefetchBytes);
    }
    for (size_t k = 0; k < n; ++k) {
      if (k + 3 * kD < n) dataset_->PrefetchEntry(indices[k + 3 * kD]);
      if (k + 2 * kD < n) dataset_->Prefetch(indices[k + 2 * kD], kLineBytes);
      if (k + kD < n) dataset_->Prefetch(indices[k + kD], kPrefetchBytes);
      auto record = dataset_->Get(indices[k]);
      if (record.ok()) {
        scratch->records[k] = std::move(*record);
      } else {
        scratch->records_ok[k] = 0;
        errors->Add(begin + k, record.status().WithContext("read"));
      }
    }
    times->Lap(&times->read_ns);
    plan_.WriteFixedSamples(scratch->records, scratch->records_ok, begin, data);
    times->Lap(&times->transform_ns);
  }

  Status ProduceSample(uint64_t index, uint64_t epoch, uint64_t slot, std::byte* data,
                       SampleScratch* scratch, StageTimes* times) {
    auto record = dataset_->Get(index);
    times->Lap(&times->read_ns);
    if (!record.ok()) return record.status().WithContext("read");
    Status s = plan_.WriteSample(*record, index, options_.seed, epoch, slot, data, scratch, times);
    if (!s.ok()) {
      return s.WithContext(dataset_->dir() + ": record " + std::to_string(index));
    }
    return Status::OK();
  }

  const LoaderOptions options_;
  const std::unique_ptr<format::Dataset> dataset_;
  const Sampler sampler_;
  const SamplePlan plan_;
  std::shared_ptr<Shared> shared_;
  std::vector<std::thread> workers_;
  int max_threads_ = 1;  // workers started
  std::optional<AutotuneController> tuner_;

  // Guarded by shared_->mu (threads_ and prefetch_ change under autotuning).
  int threads_ = 1;  // workers allowed to claim work
  int prefetch_ = kDefaultPrefetch;
  Window window_;
  std::string last_reason_;
  uint64_t chunk_ = 1;

  // Guarded by shared_->mu.
  std::vector<Slot> slots_;
  std::vector<uint64_t> order_;       // this rank's record indices for epoch_
  std::vector<uint64_t> next_order_;  // ... for epoch_ + 1, once a worker reads ahead
  bool next_order_ready_ = false;
  std::vector<uint8_t> finish_valid_;  // consumer's copy of a batch's valid flags
  int busy_ = 0;                       // workers processing a claimed chunk
  bool pausing_ = false;               // an epoch reset waits for busy_ == 0
  uint64_t epoch_ = 0;
  uint64_t epoch_start_sample_ = 0;  // elastic resume: global positions read before epoch_
  // Batches are numbered in one sequence across epochs, so that the workers
  // can go on into the next epoch before the consumer asks for it; base_ is
  // the number of batch 0 of epoch_.
  uint64_t base_ = 0;
  uint64_t delivered_ = 0;                         // batches of epoch_ handed to the consumer
  uint64_t cursor_batch_ = 0, cursor_offset_ = 0;  // cursor_batch_: a sequence number
  uint64_t batches_delivered_ = 0;
  uint64_t wait_ns_ = 0;
  LoaderStats stats_;
  int64_t last_counters_ns_ = 0;  // when Next() last wrote the counters record

  // The consumer thread's own (tracing): when it began waiting for the next
  // batch, -1 when it is not waiting.
  int64_t wait_start_ns_ = -1;
  const int64_t trace_id_ = next_loader_id.fetch_add(1);
};

Loader::Loader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Loader::~Loader() = default;

Result<std::unique_ptr<format::Dataset>> Loader::OpenDataset(const LoaderOptions& options) {
  format::ReaderOptions reader;
  reader.remote = options.remote;
  reader.open_progress = options.open_progress;
  return format::Dataset::Open(options.dataset, reader);
}

Result<std::unique_ptr<Loader>> Loader::Open(const LoaderOptions& options) {
  if (options.batch_size == 0) return Status::InvalidArgument("batch_size must be positive");
  SATURATE_ASSIGN_OR_RETURN(auto dataset, OpenDataset(options));
  return Open(options, std::move(dataset));
}

Result<std::unique_ptr<Loader>> Loader::Open(const LoaderOptions& options,
                                             std::unique_ptr<format::Dataset> dataset) {
  if (options.batch_size == 0) return Status::InvalidArgument("batch_size must be positive");
  ShardSpec shard;
  if (options.rank || options.world_size) {
    shard.rank = options.rank.value_or(0);
    shard.world_size = options.world_size.value_or(1);
  } else {
    SATURATE_ASSIGN_OR_RETURN(shard, ShardSpecFromEnv());
  }
  SamplerOptions so;
  so.dataset_size = dataset->size();
  so.shuffle = options.shuffle;
  if (options.block_shuffle && dataset->size() > 0) {
    constexpr uint64_t kBlockBytes = uint64_t{4} << 20, kWindowBlocks = 16;
    so.block_records = std::max<uint64_t>(
        1, kBlockBytes * dataset->size() / std::max<uint64_t>(1, dataset->manifest().num_bytes()));
    so.window_blocks = kWindowBlocks;
  }
  so.seed = options.seed;
  so.drop_uneven = options.drop_uneven;
  so.shard = shard;
  SATURATE_ASSIGN_OR_RETURN(Sampler sampler, Sampler::Create(so));
  SATURATE_ASSIGN_OR_RETURN(
      SamplePlan plan, SamplePlan::Create(dataset->schema(), options.fields, options.batch_size));
  plan.set_image_deferral(options.image_deferral);
  if (options.allocator && options.allocator->read_by_device()) {
    plan.set_array_stores(Stores::kStreaming);
  }
  LoaderOptions kept = options;
  kept.open_progress = nullptr;  // for the open only: what it calls may not outlive it
  auto impl = std::make_unique<Impl>(std::move(kept), std::move(dataset), std::move(sampler),
                                     std::move(plan));
  SATURATE_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<Loader>(new Loader(std::move(impl)));
}

uint64_t Loader::batches_per_epoch() const { return impl_->batches_per_epoch(); }
uint64_t Loader::batch_bytes() const { return impl_->plan().batch_bytes(); }
uint32_t Loader::rank() const { return impl_->sampler().options().shard.rank; }
uint32_t Loader::world_size() const { return impl_->sampler().options().shard.world_size; }
const format::Schema& Loader::schema() const { return impl_->schema(); }
const std::vector<std::string>& Loader::class_names() const { return impl_->class_names(); }
Result<std::optional<Batch>> Loader::Next() { return impl_->Next(); }
bool Loader::WaitForNext(std::chrono::nanoseconds timeout) { return impl_->WaitForNext(timeout); }
Status Loader::SetEpoch(uint64_t epoch) { return impl_->SetEpoch(epoch, 0); }
LoaderState Loader::state() const { return impl_->state(); }
LoaderStats Loader::stats() const { return impl_->stats(); }

Status Loader::Restore(const LoaderState& s) {
  LoaderState now = state();
  if (s.seed != now.seed || s.dataset_size != now.dataset_size) {
    return Status::InvalidArgument(
        "loader state does not match this loader (seed and dataset size must be equal): state " +
        s.ToJson() + ", loader " + now.ToJson());
  }
  if (s.world_size == now.world_size && s.batch_size == now.batch_size && s.rank == now.rank &&
      s.epoch_start_sample == 0) {
    return impl_->SetEpoch(s.epoch, s.batches_done);
  }
  // Elastic: another world size or batch size. Every rank of the saved run
  // had delivered batches_done batches in lockstep, so the epoch's global
  // order is read up to one position, whichever rank's state this is.
  if (s.world_size == 0 || s.batch_size == 0) {
    return Status::InvalidArgument("loader state: world_size and batch_size must be positive");
  }
  SamplerOptions saved = impl_->sampler().options();
  saved.shard = {0, s.world_size};
  SATURATE_ASSIGN_OR_RETURN(Sampler before, Sampler::Create(saved));
  const uint64_t saved_samples = before.SamplesPerRankFrom(s.epoch_start_sample);
  const uint64_t saved_batches = impl_->options().drop_last
                                     ? saved_samples / s.batch_size
                                     : (saved_samples + s.batch_size - 1) / s.batch_size;
  if (s.batches_done > saved_batches) {
    return Status::InvalidArgument("loader state is past the end of its epoch: " + s.ToJson());
  }
  if (s.batches_done == saved_batches) return impl_->SetEpoch(s.epoch + 1, 0);
  return impl_->SetEpoch(s.epoch, 0,
                         s.epoch_start_sample + s.batches_done * s.batch_size * s.world_size);
}

}  // namespace saturate::feed

namespace saturate::feed {

std::string LoaderState::ToJson() const {
  return nlohmann::json{{"epoch", epoch},
                        {"batches_done", batches_done},
                        {"seed", seed},
                        {"dataset_size", dataset_size},
                        {"batch_size", batch_size},
                        {"rank", rank},
                        {"world_size", world_size},
                        {"epoch_start_sample", epoch_start_sample}}
      .dump();
}

Result<LoaderState> LoaderState::FromJson(std::string_view text) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::InvalidArgument("loader state is not a JSON object");
  }
  LoaderState s;
  try {
    s.epoch = j.at("epoch").get<uint64_t>();
    s.batches_done = j.at("batches_done").get<uint64_t>();
    s.seed = j.at("seed").get<uint64_t>();
    s.dataset_size = j.at("dataset_size").get<uint64_t>();
    s.batch_size = j.at("batch_size").get<uint64_t>();
    s.rank = j.at("rank").get<uint32_t>();
    s.world_size = j.at("world_size").get<uint32_t>();
    s.epoch_start_sample =
        j.value("epoch_start_sample", uint64_t{0});  // absent before elastic resume
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument(std::string("loader state: ") + e.what());
  }
  return s;
}

}  // namespace saturate::feed
