#include "feed/decode_split.h"

#include <algorithm>

namespace saturate::feed {

DecodeSplit::DecodeSplit(const Options& options)
    : options_(options),
      fraction_(std::clamp(options.initial_fraction, options.min_fraction, options.max_fraction)) {}

double DecodeSplit::Balance(double cpu_images_per_s, double gpu_images_per_s) {
  const double cpu = std::max(0.0, cpu_images_per_s), gpu = std::max(0.0, gpu_images_per_s);
  if (cpu + gpu <= 0) return 0.5;
  return gpu / (cpu + gpu);
}

void DecodeSplit::Observe(uint64_t cpu_images, uint64_t cpu_thread_ns, int threads,
                          uint64_t gpu_images, uint64_t gpu_ns) {
  auto blend = [&](double old_rate, double measured) {
    return old_rate <= 0 ? measured : old_rate + options_.smoothing * (measured - old_rate);
  };
  if (cpu_images > 0 && cpu_thread_ns > 0) {
    cpu_rate_ = blend(cpu_rate_, cpu_images * 1e9 / static_cast<double>(cpu_thread_ns));
  }
  if (gpu_images > 0 && gpu_ns > 0) {
    gpu_rate_ = blend(gpu_rate_, gpu_images * 1e9 / static_cast<double>(gpu_ns));
  }
  if (threads > 0) threads_ = threads;
  if (cpu_rate_ > 0 && gpu_rate_ > 0) {
    fraction_ = std::clamp(Balance(cpu_rate_ * threads_, gpu_rate_), options_.min_fraction,
                           options_.max_fraction);
  }
}

}  // namespace saturate::feed
