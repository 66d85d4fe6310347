#include "tune/verify.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "tune/stats.h"

namespace saturate::tune {
namespace {

std::string Fixed(const char* fmt, double a, double b, double c, int n) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), fmt, a, b, c, n);
  return buf;
}

}  // namespace

VerifyResult CompareAB(const std::vector<double>& baseline, const std::vector<double>& recommended,
                       double min_gain_rel) {
  VerifyResult r;
  const size_t n = std::min(baseline.size(), recommended.size());
  std::vector<double> ratios;
  for (size_t i = 0; i < n; ++i) {
    if (baseline[i] > 0 && recommended[i] > 0) ratios.push_back(recommended[i] / baseline[i]);
  }
  r.rounds = static_cast<int>(ratios.size());
  if (ratios.empty()) {
    r.verdict = "no reliable gain: no round measured both configurations";
    return r;
  }
  const std::vector<double> a(baseline.begin(), baseline.begin() + static_cast<long>(n));
  const std::vector<double> b(recommended.begin(), recommended.begin() + static_cast<long>(n));
  r.ratio = Mean(b) / Mean(a);
  r.ratio_min = *std::min_element(ratios.begin(), ratios.end());
  r.ratio_max = *std::max_element(ratios.begin(), ratios.end());
  // The spread of each side's repeats, and of the per-round ratios (which
  // catches drift that moves both sides together less than it moves one).
  r.noise_rel = std::max({RelativeSpread(a), RelativeSpread(b), RelativeSpread(ratios)});
  const double needed = std::max(min_gain_rel, 2.0 * r.noise_rel);
  r.reliable_gain = r.ratio_min > 1.0 && r.ratio - 1.0 > needed;
  const std::string measured =
      Fixed("%.2fx (%.2f-%.2f over %d rounds)", r.ratio, r.ratio_min, r.ratio_max, r.rounds);
  if (r.reliable_gain) {
    r.verdict = measured + ": a reliable gain";
  } else {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "inside the noise (+/-%.1f%%, %.1f%% needed)",
                  100.0 * r.noise_rel, 100.0 * needed);
    r.verdict = "no reliable gain: " + measured + ", " + buf;
  }
  return r;
}

}  // namespace saturate::tune
