#include "tune/knee.h"

#include <cstdio>

namespace saturate::tune {

const char* ShapeName(Knee::Shape shape) {
  switch (shape) {
    case Knee::Shape::kNone:
      return "none";
    case Knee::Shape::kRising:
      return "rising";
    case Knee::Shape::kPlateau:
      return "plateau";
    case Knee::Shape::kDeclining:
      return "declining";
  }
  return "none";
}

Knee FindKnee(const std::vector<std::pair<double, double>>& points, double tolerance_rel) {
  Knee k;
  if (points.empty()) {
    k.words = "no measurements";
    return k;
  }
  for (size_t i = 1; i < points.size(); ++i) {
    if (points[i].second > points[k.best].second) k.best = i;
  }
  const double best = points[k.best].second;
  const double good_enough = best * (1.0 - tolerance_rel);
  // The fewest threads that come within the tolerance of the best: extra
  // threads beyond it cost CPU for gains inside the noise.
  while (k.knee < k.best && points[k.knee].second < good_enough) ++k.knee;
  bool falls = false;
  for (size_t i = k.best + 1; i < points.size(); ++i) {
    if (points[i].second < good_enough) falls = true;
  }
  char buf[160];
  const double at = points[k.knee].first;
  if (falls) {
    k.shape = Knee::Shape::kDeclining;
    std::snprintf(buf, sizeof(buf),
                  "throughput peaks at %g threads and falls past them; %g threads come within "
                  "%.0f%% of the peak",
                  points[k.best].first, at, 100.0 * tolerance_rel);
  } else if (k.knee + 1 < points.size()) {
    k.shape = Knee::Shape::kPlateau;
    std::snprintf(buf, sizeof(buf), "throughput levels off at %g threads; more threads do not help",
                  at);
  } else {
    k.shape = Knee::Shape::kRising;
    std::snprintf(buf, sizeof(buf),
                  "throughput still rises at %g threads, the most tried; try more", at);
  }
  k.words = buf;
  return k;
}

}  // namespace saturate::tune
