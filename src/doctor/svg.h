// Svg: the small chart kit of saturate's HTML reports (doctor's report.html,
// tune's report.html): a frame mapping data onto an SVG plot, round axis
// ticks, axes with grid lines, polylines with optional shading, a legend, a
// <figure> wrapper, and the page's stylesheet. Every text that goes into
// the markup is HTML-escaped here; colors and ids are the caller's constants.
//
// Thread-safety: plain values and reentrant pure functions.
#ifndef SATURATE_DOCTOR_SVG_H_
#define SATURATE_DOCTOR_SVG_H_

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace saturate::doctor::svg {

// A chart's geometry: an SVG `width` x `height` (viewBox units) with the
// plot inside the margins, and the data ranges mapped onto the plot.
struct Frame {
  double width = 960, height = 300;
  double left = 56, right = 20, top = 16, bottom = 48;
  double x_min = 0, x_max = 1, y_min = 0, y_max = 1;

  double X(double x) const { return left + (x - x_min) / (x_max - x_min) * (width - left - right); }
  double Y(double y) const {
    return height - bottom - (y - y_min) / (y_max - y_min) * (height - top - bottom);
  }
};

struct Tick {
  double at = 0;  // data units
  std::string label;
};

enum class Side { kBottom, kLeft };

using Points = std::vector<std::pair<double, double>>;

struct Series {
  std::string name;
  std::string color;
  Points points;
  bool area = false;  // shade under the line
  bool dashed = false;
};

// About `target` round ticks (1, 2 or 5 times a power of ten) covering [lo, hi].
std::vector<double> NiceTicks(double lo, double hi, int target = 5);
// Labels for ticks: as few decimals as the spacing needs, then `suffix`.
std::vector<Tick> Labelled(const std::vector<double>& at, const std::string& suffix = "");
std::string Num(double v);  // "%.1f", for coordinates

std::string SvgText(double x, double y, const std::string& anchor, const std::string& text,
                    const std::string& cls = "");
std::string SvgLine(double x1, double y1, double x2, double y2, const std::string& cls);
// One axis of a chart: its line, a tick and label at each tick, a grid line
// across the plot per tick when `grid`, and the axis title.
std::string Axis(const Frame& f, Side side, const std::vector<Tick>& ticks, bool grid,
                 const std::string& title);
// An <svg> scaled to its container, labelled for screen readers (close it with "</svg>").
std::string SvgOpen(const Frame& f, const std::string& label);
// A line through the points (clamped to the frame's y range); one point is a dot.
std::string Polyline(const Frame& f, const Series& s);
std::string Legend(const std::vector<Series>& series);

// A placeholder paragraph where a chart has no data.
std::string Empty(const std::string& text);
std::string Figure(const std::string& id, const std::string& caption, const std::string& body,
                   const std::string& note = "");
// At most `max` points: consecutive runs averaged, so a long run's page stays small.
Points Downsample(const Points& points, size_t max = 1200);

// The reports' stylesheet (goes inside <style>).
extern const char* const kPageStyle;

}  // namespace saturate::doctor::svg

#endif  // SATURATE_DOCTOR_SVG_H_
