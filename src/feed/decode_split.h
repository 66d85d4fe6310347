// DecodeSplit: decode="auto"'s controller. Chooses the fraction of each
// batch's JPEG samples decoded on the GPU (the rest by the loader's CPU
// threads) so that both sides finish a batch at about the same time:
//
//   fraction = gpu_rate / (gpu_rate + cpu_rate_per_thread * threads)
//
// from measured rates, smoothed (exponential moving average) so one slow
// batch does not swing it, and clamped to [min_fraction, max_fraction] so
// that each side keeps being measured. Pure arithmetic on the counters it is
// given: tested on recorded rates without a GPU.
//
// Thread-safety: none; the DeviceLoader's consumer thread owns it (readers
// of the fraction get it through the loader's stats).
#ifndef SATURATE_FEED_DECODE_SPLIT_H_
#define SATURATE_FEED_DECODE_SPLIT_H_

#include <cstdint>

namespace saturate::feed {

class DecodeSplit {
 public:
  struct Options {
    double initial_fraction = 0.5;  // before both sides have been measured
    double min_fraction = 0.05;
    double max_fraction = 0.95;
    double smoothing = 0.25;  // weight of a new measurement in the moving average
  };

  DecodeSplit() : DecodeSplit(Options{}) {}
  explicit DecodeSplit(const Options& options);

  // The fraction that balances the two sides for the given rates (images/s);
  // unclamped, in [0, 1]; 0.5 when both are 0.
  static double Balance(double cpu_images_per_s, double gpu_images_per_s);

  // One interval's measurements: the CPU threads decoded `cpu_images` in
  // `cpu_thread_ns` (summed over threads) with `threads` threads at work; the
  // GPU decoded `gpu_images` in `gpu_ns` (wall time of its decode calls).
  // A side with no images in the interval leaves its rate as it was.
  void Observe(uint64_t cpu_images, uint64_t cpu_thread_ns, int threads, uint64_t gpu_images,
               uint64_t gpu_ns);

  double gpu_fraction() const { return fraction_; }
  double cpu_images_per_s_per_thread() const { return cpu_rate_; }  // 0 until measured
  double gpu_images_per_s() const { return gpu_rate_; }             // 0 until measured

 private:
  Options options_;
  double fraction_;
  double cpu_rate_ = 0;
  double gpu_rate_ = 0;
  int threads_ = 1;
};

}  // namespace saturate::feed

#endif  // SATURATE_FEED_DECODE_SPLIT_H_
