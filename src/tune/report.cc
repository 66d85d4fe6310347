#include "tune/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>

#include "doctor/report.h"
#include "doctor/svg.h"

namespace saturate::tune {
namespace {

using nlohmann::json;
namespace svg = doctor::svg;
using doctor::HtmlEscape;

std::string Fmt(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

std::string Bytes(double b) {
  if (b >= double(1ull << 30)) return Fmt("%.2f GiB", b / double(1ull << 30));
  return Fmt("%.0f MiB", b / double(1ull << 20));
}

std::string Str(const json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
}

std::optional<double> Number(const json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_number()) return std::nullopt;
  return j[key].get<double>();
}

std::vector<std::string> ParamNames(const json& r) {
  std::vector<std::string> names;
  for (const json& p : r.value("params", json::array())) names.push_back(p["name"]);
  return names;
}

std::string PadRight(const std::string& s, size_t n) {
  return s.size() >= n ? s : s + std::string(n - s.size(), ' ');
}
std::string PadLeft(const std::string& s, size_t n) {
  return s.size() >= n ? s : std::string(n - s.size(), ' ') + s;
}

// One table row's cells.
std::vector<std::string> Cells(const json& t, const std::vector<std::string>& names) {
  std::vector<std::string> c;
  c.push_back(std::string(t.value("best", false) ? "*" : " ") + std::to_string(t.value("id", 0)));
  std::string stage = Str(t, "stage");
  if (t.value("budget_fraction", 1.0) < 1.0)
    stage += Fmt(" (%.0f%%)", 100 * t["budget_fraction"].get<double>());
  c.push_back(stage);
  for (const std::string& n : names) {
    c.push_back(t["config"].contains(n) ? t["config"][n].get<std::string>() : "");
  }
  const std::optional<double> tp = Number(t, "throughput");
  c.push_back(!tp ? "-" : *tp >= 1000 ? Fmt("%.0f", *tp) : Fmt("%.4g", *tp));
  c.push_back(Number(t, "noise_pct") ? Fmt("±%.1f%%", *Number(t, "noise_pct")) : "");
  c.push_back(Number(t, "device_busy_pct") ? Fmt("%.0f%%", *Number(t, "device_busy_pct")) : "");
  c.push_back(Number(t, "gpu_memory_peak_bytes") ? Bytes(*Number(t, "gpu_memory_peak_bytes")) : "");
  c.push_back(Number(t, "rss_peak_bytes") ? Bytes(*Number(t, "rss_peak_bytes")) : "");
  c.push_back(Number(t, "cpu_cores") ? Fmt("%.2f", *Number(t, "cpu_cores")) : "");
  std::string status = Str(t, "status");
  if (status == "failed") status += " (exit " + std::to_string(t.value("exit_code", 0)) + ")";
  c.push_back(status);
  return c;
}

}  // namespace

std::string ShellLine(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    if (!out.empty()) out += ' ';
    const bool plain = !a.empty() && a.find_first_not_of(
                                         "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                         "0123456789_-./=:,+@%") == std::string::npos;
    if (plain) {
      out += a;
      continue;
    }
    out += '\'';
    for (char ch : a) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    out += '\'';
  }
  return out;
}

std::string RenderTable(const json& r, bool color) {
  const std::vector<std::string> names = ParamNames(r);
  std::vector<std::string> header = {"#", "stage"};
  header.insert(header.end(), names.begin(), names.end());
  const std::string unit = r.value("unit", std::string());
  for (const char* h : {"", "noise", "busy", "GPU mem", "RSS", "CPU", "status"})
    header.push_back(h);
  header[2 + names.size()] = unit.empty() ? "throughput" : unit;
  std::vector<std::vector<std::string>> rows = {header};
  for (const json& t : r.value("trials", json::array())) rows.push_back(Cells(t, names));
  std::vector<size_t> width(header.size(), 0);
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  const size_t first_number = 2 + names.size();
  std::string out;
  for (size_t k = 0; k < rows.size(); ++k) {
    std::string line;
    for (size_t i = 0; i < rows[k].size(); ++i) {
      const bool right = i >= first_number && i + 1 < rows[k].size();
      line += (right ? PadLeft(rows[k][i], width[i]) : PadRight(rows[k][i], width[i])) + "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    const bool best = k > 0 && rows[k][0][0] == '*';
    if (color && (k == 0 || best))
      line = std::string(k == 0 ? "\033[1m" : "\033[1;32m") + line + "\033[0m";
    out += line + "\n";
  }
  if (r.contains("knee")) out += "knee: " + r["knee"].value("words", std::string()) + "\n";
  if (!r.contains("recommendation")) {
    out += "no recommendation: no trial measured a throughput\n";
    return out;
  }
  const json& rec = r["recommendation"];
  std::string config;
  for (const auto& [k, v] : rec["config"].items())
    config += (config.empty() ? "" : " ") + k + "=" + v.get<std::string>();
  out += "best (*): " + config;
  if (r.contains("best") && Number(r["best"], "throughput")) {
    out += Fmt(", %.5g ", *Number(r["best"], "throughput")) + unit;
  }
  out += "\n";
  if (r.value("mode", std::string()) == "command") out += "run: " + ShellLine(rec["argv"]) + "\n";
  std::string env;
  for (const auto& [k, v] : rec["env"].items()) env += " " + k + "=" + v.get<std::string>();
  out += "env:" + env + "\n";
  if (rec.contains("note")) out += "note: " + rec["note"].get<std::string>() + "\n";
  if (r.contains("verify")) out += "verify: " + r["verify"].value("verdict", std::string()) + "\n";
  return out;
}

namespace {

// ---- charts -----------------------------------------------------------------------------

struct XY {
  double x = 0, y = 0;
  bool best = false;
};

// An x axis in log2 when the values span a factor of 8 or more (threads and
// batch sizes grow by doubling), linear otherwise.
struct XScale {
  bool log2 = false;
  double Map(double x) const { return log2 ? std::log2(x) : x; }
};

XScale ScaleFor(const std::vector<double>& xs) {
  XScale s;
  if (xs.empty()) return s;
  const auto [lo, hi] = std::minmax_element(xs.begin(), xs.end());
  s.log2 = *lo > 0 && *hi / *lo >= 8;
  return s;
}

// A line chart of one or more series over shared x values (ticks at the
// data's x), with the best point ringed and an optional marker line.
std::string Chart(const std::string& id, const std::string& caption, const std::string& x_title,
                  const std::string& y_title,
                  const std::vector<std::pair<svg::Series, std::vector<XY>>>& lines,
                  std::optional<double> mark_x, const std::string& mark_label,
                  const std::vector<double>& failed_x = {}) {
  std::vector<double> xs = failed_x;
  double y_max = 0;
  for (const auto& [s, pts] : lines) {
    for (const XY& p : pts) {
      xs.push_back(p.x);
      y_max = std::max(y_max, p.y);
    }
  }
  if (xs.empty() || lines.empty())
    return svg::Figure(id, caption, svg::Empty("no measured trials to plot"));
  const XScale scale = ScaleFor(xs);
  std::sort(xs.begin(), xs.end());
  xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
  svg::Frame f;
  f.height = 280;
  f.x_min = scale.Map(xs.front());
  f.x_max = scale.Map(xs.back());
  if (f.x_max <= f.x_min) {
    f.x_min -= 1;
    f.x_max += 1;
  }
  const double pad = (f.x_max - f.x_min) * 0.04;
  f.x_min -= pad;
  f.x_max += pad;
  f.y_max = y_max > 0 ? y_max * 1.12 : 1;
  std::vector<svg::Tick> x_ticks;
  for (double x : xs) x_ticks.push_back({scale.Map(x), Fmt("%g", x)});
  std::string body = svg::SvgOpen(f, caption);
  body += svg::Axis(f, svg::Side::kLeft, svg::Labelled(svg::NiceTicks(0, f.y_max)), true, y_title);
  body += svg::Axis(f, svg::Side::kBottom, x_ticks, false, x_title);
  if (mark_x) {
    const double x = f.X(scale.Map(*mark_x));
    body += svg::SvgLine(x, f.top, x, f.height - f.bottom, "mark");
    body += svg::SvgText(x + 4, f.top + 12, "start", mark_label, "value");
  }
  for (double x : failed_x) {
    body += svg::SvgText(f.X(scale.Map(x)), f.Y(0) - 6, "middle", "✕ failed", "failed");
  }
  std::vector<svg::Series> legend;
  for (const auto& [s, pts] : lines) {
    svg::Series mapped = s;
    mapped.points.clear();
    for (const XY& p : pts) mapped.points.push_back({scale.Map(p.x), p.y});
    body += svg::Polyline(f, mapped);
    for (const XY& p : pts) {
      body += "<circle cx=\"" + svg::Num(f.X(scale.Map(p.x))) + "\" cy=\"" + svg::Num(f.Y(p.y)) +
              "\" r=\"" + (p.best ? "6" : "3") + "\" fill=\"" + (p.best ? "none" : s.color) +
              "\" stroke=\"" + s.color + "\" stroke-width=\"2\"><title>" +
              HtmlEscape(Fmt("%g", p.x) + ": " + Fmt("%.4g", p.y)) + "</title></circle>";
    }
    legend.push_back(s);
  }
  body += "</svg>\n" + svg::Legend(legend);
  return svg::Figure(id, caption, body);
}

// Search trials at the full budget whose settings equal the best's except
// `param`: the slice of the space through the recommendation.
std::vector<const json*> SliceThroughBest(const json& r, const std::string& param) {
  std::vector<const json*> out;
  if (!r.contains("best")) return out;
  if (!r.contains("trials")) return out;
  const json& best = r["best"]["config"];
  for (const json& t : r["trials"]) {  // by reference: `out` points into it
    if (t.contains("verify_round") || t.value("budget_fraction", 1.0) < 1.0) continue;
    bool same = true;
    for (const auto& [k, v] : best.items()) {
      if (k != param && t["config"].value(k, std::string()) != v.get<std::string>()) same = false;
    }
    if (same && t["config"].contains(param)) out.push_back(&t);
  }
  return out;
}

std::string ParamWithRole(const json& r, const std::string& role) {
  for (const json& p : r.value("params", json::array())) {
    if (p.value("role", std::string()) == role) return p["name"];
  }
  return "";
}

double ToNumber(const std::string& s) {
  try {
    return std::stod(s);
  } catch (...) {
    return std::nan("");
  }
}

std::vector<XY> Points(const std::vector<const json*>& trials, const std::string& param,
                       const char* key, double scale = 1) {
  std::vector<XY> pts;
  for (const json* t : trials) {
    const double x = ToNumber((*t)["config"][param].get<std::string>());
    const std::optional<double> y = Number(*t, key);
    if (std::isnan(x) || !y || Str(*t, "status") == "failed") continue;
    pts.push_back({x, *y * scale, t->value("best", false)});
  }
  std::sort(pts.begin(), pts.end(), [](const XY& a, const XY& b) { return a.x < b.x; });
  // A point measured twice (a re-visit) keeps its last measurement.
  std::vector<XY> unique;
  for (const XY& p : pts) {
    if (!unique.empty() && unique.back().x == p.x) {
      unique.back() = p;
    } else {
      unique.push_back(p);
    }
  }
  return unique;
}

std::string ThreadCharts(const json& r) {
  const std::string threads = ParamWithRole(r, "threads");
  if (threads.empty()) return "";
  const std::vector<const json*> slice = SliceThroughBest(r, threads);
  const std::string unit = r.value("unit", std::string("throughput"));
  std::optional<double> mark;
  std::string mark_label;
  if (r.contains("knee")) {
    mark = r["knee"]["threads"].get<double>();
    mark_label = "knee: " + Fmt("%g", *mark) + " threads";
  }
  std::string html = Chart("threads", "Throughput against " + threads, threads, unit,
                           {{svg::Series{"throughput (" + unit + ")", "#2563eb", {}, false, false},
                             Points(slice, threads, "throughput")}},
                           mark, mark_label);
  const std::vector<XY> cpu = Points(slice, threads, "cpu_cores");
  if (!cpu.empty()) {
    html += Chart("threads-cpu", "CPU used against " + threads, threads, "cores",
                  {{svg::Series{"CPU cores", "#ea580c", {}, false, false}, cpu}}, mark, mark_label);
  }
  if (r.contains("knee")) {
    html += "<p class=\"note\">" + HtmlEscape(r["knee"].value("words", std::string())) + "</p>\n";
  }
  return html;
}

std::string BatchCharts(const json& r) {
  const std::string batch = ParamWithRole(r, "batch");
  if (batch.empty()) return "";
  const std::vector<const json*> slice = SliceThroughBest(r, batch);
  std::vector<double> failed;
  for (const json* t : slice) {
    if (Str(*t, "status") == "failed")
      failed.push_back(ToNumber((*t)["config"][batch].get<std::string>()));
  }
  const std::string unit = r.value("unit", std::string("throughput"));
  std::string html = Chart("batch", "Throughput against " + batch, batch, unit,
                           {{svg::Series{"throughput (" + unit + ")", "#2563eb", {}, false, false},
                             Points(slice, batch, "throughput")}},
                           std::nullopt, "", failed);
  constexpr double kGiB = double(1ull << 30);
  std::vector<std::pair<svg::Series, std::vector<XY>>> memory;
  std::vector<XY> gpu = Points(slice, batch, "gpu_memory_peak_bytes", 1 / kGiB);
  if (!gpu.empty())
    memory.push_back({svg::Series{"peak GPU memory (GiB)", "#7c3aed", {}, false, false}, gpu});
  std::vector<XY> rss = Points(slice, batch, "rss_peak_bytes", 1 / kGiB);
  if (!rss.empty())
    memory.push_back({svg::Series{"peak host RSS (GiB)", "#059669", {}, false, true}, rss});
  if (!memory.empty()) {
    html += Chart("batch-memory", "Memory against " + batch, batch, "GiB", memory, std::nullopt, "",
                  failed);
  }
  return html;
}

std::string TrialsTable(const json& r) {
  const std::vector<std::string> names = ParamNames(r);
  std::string html = "<table class=\"trials\">\n<thead><tr><th>#</th><th>stage</th>";
  for (const std::string& n : names) html += "<th>" + HtmlEscape(n) + "</th>";
  html += "<th>" + HtmlEscape(r.value("unit", std::string("throughput"))) +
          "</th><th>noise</th><th>busy</th><th>GPU mem</th><th>RSS</th><th>CPU</th><th>status</th>"
          "</tr></thead>\n<tbody>\n";
  for (const json& t : r.value("trials", json::array())) {
    const std::vector<std::string> cells = Cells(t, names);
    html += std::string("<tr") + (t.value("best", false) ? " class=\"best\"" : "") + ">";
    for (size_t i = 0; i < cells.size(); ++i) {
      const bool num = i >= 2 + names.size() && i + 1 < cells.size();
      std::string cell = HtmlEscape(cells[i]);
      if (i + 1 == cells.size() && t.contains("output_tail")) {
        std::string tail;
        for (const json& line : t["output_tail"]) tail += line.get<std::string>() + "\n";
        cell += "<details><summary>output</summary><pre>" + HtmlEscape(tail) + "</pre></details>";
      }
      if (i + 1 == cells.size() && t.contains("dir")) {
        cell += "<br><code>" + HtmlEscape(Str(t, "dir")) + "</code>";
      }
      html += std::string("<td") + (num ? " class=\"num\"" : "") + ">" + cell + "</td>";
    }
    html += "</tr>\n";
  }
  return html + "</tbody>\n</table>\n";
}

std::string RecommendationBox(const json& r) {
  if (!r.contains("recommendation")) {
    return "<p class=\"verdict\">No recommendation: no trial measured a throughput.</p>\n";
  }
  const json& rec = r["recommendation"];
  std::string html = "<div class=\"healthy-box\">\n<dl class=\"meta\">";
  std::string config;
  for (const auto& [k, v] : rec["config"].items())
    config += (config.empty() ? "" : " ") + k + "=" + v.get<std::string>();
  html += "<dt>best</dt><dd><b class=\"mono\">" + HtmlEscape(config) + "</b>";
  if (r.contains("best") && Number(r["best"], "throughput")) {
    html += HtmlEscape(Fmt(" — %.5g ", *Number(r["best"], "throughput")) +
                       r.value("unit", std::string()));
  }
  html += "</dd>";
  if (r.value("mode", std::string()) == "command") {
    html += "<dt>run</dt><dd><code>" + HtmlEscape(ShellLine(rec["argv"])) + "</code></dd>";
  } else {
    html += "<dt>flags</dt><dd><code>" + HtmlEscape(ShellLine(rec["argv"])) + "</code></dd>";
  }
  std::string env;
  for (const auto& [k, v] : rec["env"].items())
    env += (env.empty() ? "" : " ") + k + "=" + v.get<std::string>();
  html += "<dt>environment</dt><dd><code>" + HtmlEscape(env) + "</code></dd>";
  if (rec.contains("note")) html += "<dt>note</dt><dd>" + HtmlEscape(Str(rec, "note")) + "</dd>";
  if (r.contains("verify")) {
    html +=
        "<dt>verified</dt><dd>" + HtmlEscape(r["verify"].value("verdict", std::string())) + "</dd>";
  }
  return html + "</dl>\n</div>\n";
}

constexpr const char* kExtraStyle = R"css(
svg .mark { stroke: #c2410c; stroke-dasharray: 4 3; }
svg text.failed { fill: #c2410c; }
tr.best td { background: #f0fdf4; font-weight: 600; }
table.trials td { padding: 6px 8px; }
pre { white-space: pre-wrap; font-size: 12px; }
)css";

}  // namespace

std::string RenderHtml(const json& r) {
  const bool feed = r.value("mode", std::string()) == "feed";
  const std::string subject =
      feed ? Str(r, "dataset") : ShellLine(r.value("command", std::vector<std::string>{}));
  std::string html = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  html += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  html += "<title>saturate tune: " + HtmlEscape(subject) + "</title>\n";
  html += "<style>" + std::string(svg::kPageStyle) + kExtraStyle +
          "</style>\n</head>\n<body>\n<main>\n";
  html += std::string("<header>\n<h1>saturate tune") + (feed ? " feed" : "") + "</h1>\n";
  html += "<p class=\"verdict\"><code>" + HtmlEscape(subject) + "</code> — " +
          std::to_string(r.value("trials", json::array()).size()) + " trials, " +
          HtmlEscape(Str(r, "strategy")) + "</p>\n</header>\n";
  html += "<section id=\"recommendation\">\n<h2>Recommendation</h2>\n" + RecommendationBox(r) +
          "</section>\n";
  html += "<section id=\"charts\">\n<h2>Charts</h2>\n" + ThreadCharts(r) + BatchCharts(r);
  html += "</section>\n";
  html += "<section id=\"trials\">\n<h2>Trials</h2>\n" + TrialsTable(r) + "</section>\n";
  html +=
      "<footer>Written by saturate tune. The same numbers as JSON: tune.json beside this page; "
      "each command trial's run directory opens with saturate report.</footer>\n</main>\n"
      "</body>\n</html>\n";
  return html;
}

}  // namespace saturate::tune
