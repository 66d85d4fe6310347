// Verify: is the recommended configuration really faster than the start?
// Both are re-run alternately (A B A B ...), so that a drift of the machine
// (clocks warming up, another job starting) touches both alike; each round's
// pair gives one ratio B/A. The gain is reliable only when every round agrees
// and the mean gain clears the noise of the repeats.
//
// Thread-safety: plain values and a pure function.
#ifndef SATURATE_TUNE_VERIFY_H_
#define SATURATE_TUNE_VERIFY_H_

#include <string>
#include <vector>

namespace saturate::tune {

struct VerifyResult {
  int rounds = 0;        // complete A/B pairs
  double ratio = 0;      // mean(B) / mean(A); 0 when not measurable
  double ratio_min = 0;  // the smallest and largest per-round ratio
  double ratio_max = 0;
  double noise_rel = 0;        // pooled relative spread of the repeats (std / mean)
  bool reliable_gain = false;  // B is faster beyond the noise in every round
  std::string verdict;  // "1.42x faster (1.38-1.47 over 2 rounds)" or "no reliable gain: ..."
};

// `baseline` (A) and `recommended` (B): throughput per round, in run order.
// A gain needs every round's ratio above 1 and the mean gain above both
// `min_gain_rel` and twice the noise.
VerifyResult CompareAB(const std::vector<double>& baseline, const std::vector<double>& recommended,
                       double min_gain_rel = 0.03);

}  // namespace saturate::tune

#endif  // SATURATE_TUNE_VERIFY_H_
