// Small statistics over repeated measurements, shared by trial measurement
// (noise of one trial) and verification (spread of A/B rounds).
//
// Thread-safety: pure functions.
#ifndef SATURATE_TUNE_STATS_H_
#define SATURATE_TUNE_STATS_H_

#include <cmath>
#include <vector>

namespace saturate::tune {

inline double Mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / static_cast<double>(v.size());
}

// Sample standard deviation relative to the mean; 0 for fewer than two
// values or a mean that is not positive.
inline double RelativeSpread(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double mean = Mean(v);
  if (!(mean > 0)) return 0;
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return std::sqrt(ss / static_cast<double>(v.size() - 1)) / mean;
}

// The relative standard error of the mean.
inline double RelativeStandardError(const std::vector<double>& v) {
  return v.size() < 2 ? 0 : RelativeSpread(v) / std::sqrt(static_cast<double>(v.size()));
}

}  // namespace saturate::tune

#endif  // SATURATE_TUNE_STATS_H_
