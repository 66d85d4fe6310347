#include "doctor/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "doctor/report.h"

namespace saturate::doctor::svg {
namespace {

std::string Format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

}  // namespace

// About `target` round ticks (1, 2 or 5 times a power of ten) covering [lo, hi].
std::vector<double> NiceTicks(double lo, double hi, int target) {
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / target;
  const double power = std::pow(10, std::floor(std::log10(raw)));
  const double step = raw / power <= 1   ? power
                      : raw / power <= 2 ? 2 * power
                      : raw / power <= 5 ? 5 * power
                                         : 10 * power;
  std::vector<double> ticks;
  for (double v = std::ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) {
    ticks.push_back(std::fabs(v) < step * 1e-9 ? 0 : v);
  }
  return ticks;
}

// Labels for ticks: as few decimals as the spacing needs, then `suffix`.
std::vector<Tick> Labelled(const std::vector<double>& at, const std::string& suffix) {
  const double step = at.size() > 1 ? at[1] - at[0] : 1;
  const char* fmt = step >= 1 ? "%.0f" : step >= 0.1 ? "%.1f" : "%.2f";
  std::vector<Tick> ticks;
  for (double v : at) ticks.push_back({v, Format(fmt, v) + suffix});
  return ticks;
}

std::string Num(double v) { return Format("%.1f", v); }

std::string SvgText(double x, double y, const std::string& anchor, const std::string& text,
                    const std::string& cls) {
  return "<text x=\"" + Num(x) + "\" y=\"" + Num(y) + "\" text-anchor=\"" + anchor + "\"" +
         (cls.empty() ? "" : " class=\"" + cls + "\"") + ">" + HtmlEscape(text) + "</text>";
}

std::string SvgLine(double x1, double y1, double x2, double y2, const std::string& cls) {
  return "<line x1=\"" + Num(x1) + "\" y1=\"" + Num(y1) + "\" x2=\"" + Num(x2) + "\" y2=\"" +
         Num(y2) + "\" class=\"" + cls + "\"/>";
}

// One axis of a chart: its line, a tick and label at each tick, a grid line
// across the plot per tick when `grid`, and the axis title.
std::string Axis(const Frame& f, Side side, const std::vector<Tick>& ticks, bool grid,
                 const std::string& title) {
  std::string svg = "<g class=\"axis-group\">";
  const double x0 = f.left, x1 = f.width - f.right;
  const double y0 = f.top, y1 = f.height - f.bottom;
  for (const Tick& t : ticks) {
    if (side == Side::kBottom) {
      const double x = f.X(t.at);
      if (grid) svg += SvgLine(x, y0, x, y1, "grid");
      svg += SvgLine(x, y1, x, y1 + 5, "axis");
      svg += SvgText(x, y1 + 18, "middle", t.label);
    } else {
      const double y = f.Y(t.at);
      if (grid) svg += SvgLine(x0, y, x1, y, "grid");
      svg += SvgLine(x0 - 5, y, x0, y, "axis");
      svg += SvgText(x0 - 8, y + 4, "end", t.label);
    }
  }
  if (side == Side::kBottom) {
    svg += SvgLine(x0, y1, x1, y1, "axis");
    if (!title.empty()) svg += SvgText((x0 + x1) / 2, f.height - 6, "middle", title, "axis-title");
  } else {
    svg += SvgLine(x0, y0, x0, y1, "axis");
    if (!title.empty()) {
      svg += "<text transform=\"translate(14 " + Num((y0 + y1) / 2) +
             ") rotate(-90)\" text-anchor=\"middle\" class=\"axis-title\">" + HtmlEscape(title) +
             "</text>";
    }
  }
  return svg + "</g>";
}

// An <svg> scaled to its container, labelled for screen readers.
std::string SvgOpen(const Frame& f, const std::string& label) {
  return "<svg viewBox=\"0 0 " + Num(f.width) + " " + Num(f.height) +
         "\" role=\"img\" aria-label=\"" + HtmlEscape(label) + "\"><title>" + HtmlEscape(label) +
         "</title>";
}

std::string Empty(const std::string& text) {
  return "<p class=\"empty\">" + HtmlEscape(text) + "</p>\n";
}

std::string Figure(const std::string& id, const std::string& caption, const std::string& body,
                   const std::string& note) {
  std::string html =
      "<figure id=\"" + id + "\"><figcaption>" + HtmlEscape(caption) + "</figcaption>\n" + body;
  if (!note.empty()) html += "<p class=\"note\">" + HtmlEscape(note) + "</p>";
  return html + "</figure>\n";
}

// At most `max` points: consecutive runs averaged, so a long run's page stays small.
Points Downsample(const Points& points, size_t max) {
  if (points.size() <= max) return points;
  Points out;
  const double per = double(points.size()) / double(max);
  for (size_t b = 0; b < max; ++b) {
    const size_t begin = size_t(b * per), end = std::max(begin + 1, size_t((b + 1) * per));
    double t = 0, v = 0;
    for (size_t i = begin; i < end; ++i) {
      t += points[i].first;
      v += points[i].second;
    }
    out.push_back({t / double(end - begin), v / double(end - begin)});
  }
  return out;
}

std::string Polyline(const Frame& f, const Series& s) {
  std::string coords;
  for (const auto& [x, y] : s.points) {
    coords +=
        (coords.empty() ? "" : " ") + Num(f.X(x)) + "," + Num(f.Y(std::clamp(y, f.y_min, f.y_max)));
  }
  if (s.points.size() == 1) {
    return "<circle cx=\"" + Num(f.X(s.points[0].first)) + "\" cy=\"" +
           Num(f.Y(s.points[0].second)) + "\" r=\"3\" fill=\"" + s.color + "\"/>";
  }
  std::string svg;
  if (s.area) {
    svg += "<polygon points=\"" + Num(f.X(s.points.front().first)) + "," + Num(f.Y(0)) + " " +
           coords + " " + Num(f.X(s.points.back().first)) + "," + Num(f.Y(0)) + "\" fill=\"" +
           s.color + "\" fill-opacity=\"0.12\"/>";
  }
  return svg + "<polyline points=\"" + coords + "\" fill=\"none\" stroke=\"" + s.color +
         "\" stroke-width=\"" + (s.area ? "2" : "1.5") + "\" stroke-linejoin=\"round\"" +
         (s.dashed ? " stroke-dasharray=\"5 3\"" : "") + "/>";
}

std::string Legend(const std::vector<Series>& series) {
  std::string html = "<p class=\"legend\">";
  for (const Series& s : series) {
    html += "<span><i style=\"background:" + s.color + "\"></i>" + HtmlEscape(s.name) + "</span>";
  }
  return html + "</p>\n";
}

const char* const kPageStyle = R"css(
:root { --fg: #1d232b; --muted: #5b6670; --line: #dfe3e8; --soft: #f4f6f8; --bad: #c2410c; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--fg); background: #fff;
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1120px; margin: 0 auto; padding: 28px 32px 48px; }
h1 { font-size: 26px; margin: 0; }
h2 { font-size: 19px; margin: 36px 0 10px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace;
  font-size: 13px; }
.verdict { font-size: 17px; margin: 6px 0 18px; }
.verdict.healthy { color: #047857; }
dl.meta { display: grid; grid-template-columns: max-content 1fr; gap: 2px 18px; margin: 0; }
dl.meta dt { color: var(--muted); }
dl.meta dd { margin: 0; overflow-wrap: anywhere; }
.tiles { display: flex; flex-wrap: wrap; gap: 12px; margin: 20px 0 0; padding: 0; list-style: none; }
.tiles li { background: var(--soft); border-radius: 8px; padding: 8px 16px; min-width: 140px; }
.tiles b { display: block; font-size: 22px; font-variant-numeric: tabular-nums; }
.tiles span { color: var(--muted); font-size: 13px; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; vertical-align: top; padding: 9px 10px; border-bottom: 1px solid var(--line); }
th { font-size: 13px; color: var(--muted); font-weight: 600; }
td.num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
table.measurements, table.loaders { width: auto; min-width: 60%; }
.findings .cause { font-weight: 600; white-space: nowrap; }
.findings .title { font-weight: 600; }
.bar { height: 6px; background: var(--bad); border-radius: 3px; margin: 4px 0 0 auto; }
ul.evidence { margin: 6px 0 0; padding-left: 18px; color: var(--muted); font-size: 14px; }
ul.evidence b { color: var(--fg); font-variant-numeric: tabular-nums; }
td.fix { background: #f0fdf4; width: 28%; }
.confidence { white-space: nowrap; color: var(--muted); }
.healthy-box { background: #ecfdf5; border-radius: 8px; padding: 14px 18px; }
figure { margin: 18px 0 30px; }
figcaption { font-weight: 600; margin-bottom: 6px; }
figure svg { display: block; width: 100%; height: auto; }
svg text { font-size: 12px; fill: var(--muted);
  font-family: system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif; }
svg text.value { fill: var(--fg); font-weight: 600; }
svg text.axis-title { font-size: 13px; }
svg .grid { stroke: #edf0f3; }
svg .axis { stroke: #8a949e; }
.legend { display: flex; flex-wrap: wrap; gap: 6px 18px; margin: 4px 0 0 56px; font-size: 13px;
  color: var(--muted); }
.legend i { display: inline-block; width: 14px; height: 4px; border-radius: 2px; margin-right: 6px;
  vertical-align: middle; }
.note { color: var(--muted); font-size: 14px; margin: 4px 0 0; }
.empty { color: var(--muted); font-style: italic; background: var(--soft); padding: 16px;
  border-radius: 8px; }
footer { color: var(--muted); font-size: 13px; margin-top: 40px; }
)css";

}  // namespace saturate::doctor::svg
