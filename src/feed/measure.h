// Timing a loader the way `saturate bench feed` and `saturate tune feed` do:
// batches are pulled as fast as the loader delivers them, epochs follow one
// another, and the first `warmup` batches (thread start-up, cold caches) are
// not timed. Thread-safety: one caller per loader.
#ifndef SATURATE_FEED_MEASURE_H_
#define SATURATE_FEED_MEASURE_H_

#include <cstdint>
#include <functional>

#include "saturate/base/status.h"
#include "saturate/feed/loader.h"

namespace saturate::feed {

struct FeedRunOptions {
  uint64_t warmup = 2;  // batches not timed
  uint64_t epochs = 0;  // stop after this many epochs; 0: no limit
  double seconds = 0;   // stop after this long; 0: no limit
};

struct FeedMeasurement {
  uint64_t batches = 0;  // delivered, warm-up included
  uint64_t samples = 0;  // in the timed batches
  double elapsed_s = 0;  // of the timed part
  double cpu_cores = 0;  // process CPU seconds / elapsed_s
  LoaderStats at_start, end;

  uint64_t timed_batches(uint64_t warmup) const { return batches > warmup ? batches - warmup : 0; }
  double samples_per_s() const { return elapsed_s > 0 ? double(samples) / elapsed_s : 0; }
  double wait_pct() const;  // of elapsed_s, the consumer blocked in Next()
};

// Runs `loader` from its current epoch until `run` says stop; calls
// `on_batch(batch, batches so far)` for every batch.
Result<FeedMeasurement> MeasureFeed(
    BatchSource& loader, const FeedRunOptions& run,
    const std::function<void(const Batch&, uint64_t)>& on_batch = {});

}  // namespace saturate::feed

#endif  // SATURATE_FEED_MEASURE_H_
