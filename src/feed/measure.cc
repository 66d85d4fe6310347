#include "feed/measure.h"

#include <algorithm>
#include <chrono>

#include "base/cpu_time.h"

namespace saturate::feed {

double FeedMeasurement::wait_pct() const {
  return 100.0 * double(end.wait_ns - at_start.wait_ns) / 1e9 / std::max(elapsed_s, 1e-9);
}

Result<FeedMeasurement> MeasureFeed(BatchSource& loader, const FeedRunOptions& run,
                                    const std::function<void(const Batch&, uint64_t)>& on_batch) {
  using Clock = std::chrono::steady_clock;
  FeedMeasurement m;
  auto start = Clock::now();
  const auto deadline = start + std::chrono::duration<double>(run.seconds);
  double cpu_start = base::ProcessCpuSeconds();
  m.at_start = loader.stats();
  uint64_t epochs_done = 0;
  uint64_t epoch = loader.state().epoch;
  while (run.seconds <= 0 || Clock::now() < deadline) {
    SATURATE_ASSIGN_OR_RETURN(std::optional<Batch> batch, loader.Next());
    if (!batch) {
      if (run.epochs > 0 && ++epochs_done >= run.epochs) break;
      SATURATE_RETURN_IF_ERROR(loader.SetEpoch(++epoch));
      continue;
    }
    if (++m.batches == run.warmup) {  // time the steady state, after start-up
      start = Clock::now();
      cpu_start = base::ProcessCpuSeconds();
      m.at_start = loader.stats();
    } else if (m.batches > run.warmup) {
      m.samples += batch->size();
    }
    if (on_batch) on_batch(*batch, m.batches);
  }
  m.elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
  m.cpu_cores = (base::ProcessCpuSeconds() - cpu_start) / std::max(m.elapsed_s, 1e-9);
  m.end = loader.stats();
  return m;
}

}  // namespace saturate::feed
