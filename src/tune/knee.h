// Knee: where more loader threads stop paying. Given throughput measured at
// increasing thread counts, finds the fewest threads within `tolerance_rel`
// of the best throughput (the knee), and says what lies past it: more threads
// hurt (a later point falls clearly below the best), stop helping (a plateau),
// or the curve is still rising at the largest count tried.
//
// Thread-safety: plain values and a pure function.
#ifndef SATURATE_TUNE_KNEE_H_
#define SATURATE_TUNE_KNEE_H_

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace saturate::tune {

struct Knee {
  enum class Shape { kNone, kRising, kPlateau, kDeclining };
  Shape shape = Shape::kNone;  // kNone: no points
  // Index of the recommended point: the fewest threads within the tolerance
  // of the best. Past it, more threads do not help (kPlateau), or past
  // `best` they hurt (kDeclining).
  size_t knee = 0;
  size_t best = 0;    // index of the highest throughput
  std::string words;  // "throughput levels off at 4 threads; more threads do not help"
};

// `points`: (threads, throughput), threads ascending.
Knee FindKnee(const std::vector<std::pair<double, double>>& points, double tolerance_rel = 0.05);

const char* ShapeName(Knee::Shape shape);  // "none", "rising", "plateau", "declining"

}  // namespace saturate::tune

#endif  // SATURATE_TUNE_KNEE_H_
