// The fleet report for people (terminal, HTML) and programs (JSON).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>

#include "doctor/report.h"
#include "doctor/svg.h"
#include "fleet/fleet.h"
#include "fleet/text.h"

namespace saturate::fleet {
namespace {

using text::Clock;
using text::Fmt;

using doctor::HtmlEscape;

std::string Hosts(const std::vector<std::string>& hosts) {
  std::string out;
  for (size_t i = 0; i < hosts.size() && i < 3; ++i) out += (i ? "," : "") + hosts[i];
  if (hosts.size() > 3) out += ",+" + std::to_string(hosts.size() - 3);
  return out;
}

std::string Cut(std::string s, size_t width) {
  if (s.size() > width) s = s.substr(0, width - 1) + "~";
  return s;
}

double BusyPct(const Group& g) { return g.hours > 0 ? 100 * g.busy_hours / g.hours : 0; }

// Columns shared by the job and user tables.
struct Row {
  std::string name, user, hosts;
  const Group* g;
};

std::string Table(const std::vector<Row>& rows, bool with_user, double price, int max_rows) {
  char line[256];
  std::string out;
  const std::string user_column = with_user ? " %-9s" : "%s";
  const std::string head = "  %-14s" + user_column + " %-16s %4s %8s %5s %8s %8s%s\n";
  std::snprintf(line, sizeof(line), head.c_str(), "name", with_user ? "user" : "", "nodes", "GPUs",
                "GPU-h", "busy", "idle-h", "wasted-h", price > 0 ? "     cost" : "");
  out += line;
  const std::string row = "  %-14s" + user_column + " %-16s %4d %8.2f %4.0f%% %8.2f %8.2f";
  int n = 0;
  for (const Row& r : rows) {
    if (n++ == max_rows) {
      out += "  ... " + std::to_string(rows.size() - size_t(max_rows)) + " more (--json)\n";
      break;
    }
    std::snprintf(line, sizeof(line), row.c_str(), Cut(r.name, 14).c_str(),
                  with_user ? Cut(r.user, 9).c_str() : "", Cut(r.hosts, 16).c_str(), r.g->gpus,
                  r.g->hours, BusyPct(*r.g), r.g->idle_hours, r.g->wasted_hours());
    out += line;
    if (price > 0) out += Fmt(" %8.2f", r.g->hours * price);
    out += "\n";
  }
  return out;
}

// Wraps `text` at `width` columns; its leading spaces stay, and every line
// after the first starts with `indent`.
std::string Wrap(const std::string& text, size_t width, const std::string& indent) {
  const size_t lead = text.find_first_not_of(' ');
  if (lead == std::string::npos) return text + "\n";
  std::string out, line = text.substr(0, lead);
  bool empty = true;  // no word on `line` yet
  for (size_t i = lead; i < text.size();) {
    size_t j = text.find(' ', i);
    if (j == std::string::npos) j = text.size();
    const std::string word = text.substr(i, j - i);
    if (!empty && line.size() + 1 + word.size() > width) {
      out += line + "\n";
      line = indent;
      empty = true;
    }
    if (!word.empty()) {
      line += (empty ? "" : " ") + word;
      empty = false;
    }
    i = j + 1;
  }
  return out + line + "\n";
}

nlohmann::json GroupJson(const Group& g, double price) {
  nlohmann::json j = {{"name", g.name},
                      {"nodes", g.hosts},
                      {"gpus", g.gpus},
                      {"used_gpus", g.used_gpus},
                      {"gpu_hours", g.hours},
                      {"busy_gpu_hours", g.busy_hours},
                      {"idle_allocated_gpu_hours", g.idle_hours},
                      {"sawtooth_wait_gpu_hours", g.wait_hours},
                      {"unused_gpu_hours", g.unused_hours},
                      {"wasted_gpu_hours", g.wasted_hours()}};
  if (!g.user.empty()) j["user"] = g.user;
  if (g.free_hours > 0) j["free_gpu_hours"] = g.free_hours;
  if (g.peak_mem_pct >= 0) j["peak_memory_pct"] = g.peak_mem_pct;
  if (price > 0) {
    j["cost"] = g.hours * price;
    j["wasted_cost"] = g.wasted_hours() * price;
  }
  return j;
}

// Utilization 0..100 -> a color from pale red (idle) to dark green (busy).
std::string HeatColor(double pct) {
  const double t = std::clamp(pct / 100, 0.0, 1.0);
  const int r = int(std::lround(230 - t * (230 - 20)));
  const int g = int(std::lround(90 + t * (140 - 90)));
  const int b = int(std::lround(80 - t * (80 - 60)));
  char buf[16];
  std::snprintf(buf, sizeof(buf), "#%02x%02x%02x", r, g, b);
  return buf;
}

// Rows: node/GPU; columns: time bins; a cell is the mean utilization of
// the samples in it (blank without samples).
std::string HeatMap(const FleetReport& r, const FleetInput& in) {
  namespace svg = doctor::svg;
  std::map<std::string, std::map<int, std::pair<double, int>>> rows;  // row -> bin -> sum, n
  const double span_s = std::max(r.end_s - r.start_s, r.step_s);
  const int bins = int(std::clamp(span_s / std::max(r.step_s, 1e-9), 1.0, 240.0));
  std::map<std::string, std::string> job_of_row;
  for (const Series& s : in.util) {
    const std::string row = HostOf(s.labels) + " gpu " + GpuOf(s.labels);
    const std::string job = JobOf(s.labels);
    if (!job.empty()) job_of_row[row] += (job_of_row[row].empty() ? "" : ", ") + job;
    for (const Point& p : s.points) {
      const int bin = std::clamp(int((p.t_s - r.start_s) / span_s * bins), 0, bins - 1);
      auto& cell = rows[row][bin];
      cell.first += p.value;
      cell.second += 1;
    }
  }
  if (rows.empty()) return svg::Empty("No GPU utilization samples in the window.");
  svg::Frame f;
  f.left = 220;
  const double row_h = 18;
  f.height = f.top + f.bottom + row_h * double(rows.size());
  f.x_min = r.start_s;
  f.x_max = r.start_s + span_s;
  std::string body = svg::SvgOpen(f, "GPU utilization per node and GPU over time");
  const double cell_w = (f.width - f.left - f.right) / bins;
  double y = f.top;
  for (const auto& [row, cells] : rows) {
    std::string label = row;
    if (job_of_row.count(row)) label += " (job " + job_of_row[row] + ")";
    body += svg::SvgText(f.left - 6, y + row_h * 0.7, "end", label);
    for (const auto& [bin, cell] : cells) {
      const double mean = cell.first / cell.second;
      body += "<rect x=\"" + svg::Num(f.left + bin * cell_w) + "\" y=\"" + svg::Num(y) +
              "\" width=\"" + svg::Num(cell_w + 0.2) + "\" height=\"" + svg::Num(row_h - 2) +
              "\" fill=\"" + HeatColor(mean) + "\"><title>" +
              HtmlEscape(row + " at " + Clock(r.start_s + (bin + 0.5) * span_s / bins) +
                         " UTC: " + Fmt("%.0f", mean) + "%") +
              "</title></rect>";
    }
    y += row_h;
  }
  std::vector<svg::Tick> ticks;
  for (double t : svg::NiceTicks(0, span_s / 60)) {
    ticks.push_back({r.start_s + t * 60, Fmt("%g", t) + " min"});
  }
  body +=
      svg::Axis(f, svg::Side::kBottom, ticks, false, "minutes since " + Clock(r.start_s) + " UTC");
  return svg::Figure("heatmap",
                     "GPU utilization per node and GPU (pale red: idle, green: busy; blank: "
                     "no samples)",
                     body + "</svg>");
}

std::string HtmlTable(const std::vector<Group>& groups, bool jobs, double price) {
  std::string out = "<table><tr><th>" + std::string(jobs ? "job</th><th>user" : "name") +
                    "</th><th>nodes</th><th>GPUs</th><th>GPU-h</th><th>busy</th><th>idle "
                    "allocated GPU-h</th><th>wasted GPU-h</th>" +
                    (price > 0 ? "<th>cost</th>" : "") + "</tr>";
  for (const Group& g : groups) {
    out += "<tr><td>" + HtmlEscape(g.name) + "</td>";
    if (jobs) out += "<td>" + HtmlEscape(g.user) + "</td>";
    out += "<td>" + HtmlEscape(Hosts(g.hosts)) + "</td><td>" + std::to_string(g.gpus) +
           "</td><td>" + Fmt("%.2f", g.hours) + "</td><td>" + Fmt("%.0f%%", BusyPct(g)) +
           "</td><td>" + Fmt("%.2f", g.idle_hours) + "</td><td>" + Fmt("%.2f", g.wasted_hours()) +
           "</td>";
    if (price > 0) out += "<td>" + Fmt("%.2f", g.hours * price) + "</td>";
    out += "</tr>";
  }
  return out + "</table>";
}

}  // namespace

std::string RenderText(const FleetReport& r, const std::string& source, int max_rows) {
  std::string out = "saturate fleet: " + source + ", " + Clock(r.start_s) + " to " +
                    Clock(r.end_s) + " UTC, step " + Fmt("%g", r.step_s) + " s\n";
  int allocated = 0;
  for (const Group& j : r.jobs) allocated += j.gpus;
  int gpus = 0;
  double free_hours = 0;
  for (const Group& n : r.nodes) gpus += n.gpus, free_hours += n.free_hours;
  out += std::to_string(gpus) + " GPUs on " + std::to_string(r.nodes.size()) + " nodes; " +
         std::to_string(r.jobs.size()) + " jobs of " + std::to_string(r.users.size()) +
         " users held " + std::to_string(allocated) + " of them; " + Fmt("%.2f", free_hours) +
         " GPU-h unallocated\n";
  if (!r.gaps.empty()) {
    out += "\nMissing or partial data (figures below are lower bounds where it applies):\n";
    for (const std::string& g : r.gaps) out += Wrap("  - " + g, 78, "    ");
  }
  if (r.jobs.empty()) return out + "\nNo series with a job label (job_id, hpc_job, pod, run_id).\n";
  out += "\nWhere the GPU-hours go, by job (most wasted first):\n";
  std::vector<Row> rows;
  for (const Group& j : r.jobs) rows.push_back({j.name, j.user, Hosts(j.hosts), &j});
  out += Table(rows, true, r.gpu_hour_price, max_rows);
  if (r.findings.empty()) {
    out += "\nNo idle allocation, saw-tooth, over-allocation or unused memory found.\n";
  } else {
    out += "\nFindings:\n";
    int n = 0;
    for (const Finding& f : r.findings) {
      if (n == max_rows) break;
      out += Wrap(std::to_string(++n) + ". [" + f.kind + "] " + f.message, 78, "   ");
      out += Wrap("   fix: " + f.fix, 78, "        ");
    }
  }
  out += "\nBy user:\n";
  rows.clear();
  for (const Group& u : r.users) rows.push_back({u.name, "", Hosts(u.hosts), &u});
  out += Table(rows, false, r.gpu_hour_price, max_rows);
  return out;
}

nlohmann::json ReportJson(const FleetReport& r) {
  nlohmann::json j = {
      {"start_unix_s", r.start_s}, {"end_unix_s", r.end_s}, {"step_s", r.step_s}, {"gaps", r.gaps}};
  if (r.gpu_hour_price > 0) j["gpu_hour_price"] = r.gpu_hour_price;
  for (const char* key : {"jobs", "users", "nodes"}) j[key] = nlohmann::json::array();
  for (const Group& g : r.jobs) j["jobs"].push_back(GroupJson(g, r.gpu_hour_price));
  for (const Group& g : r.users) j["users"].push_back(GroupJson(g, r.gpu_hour_price));
  for (const Group& g : r.nodes) j["nodes"].push_back(GroupJson(g, r.gpu_hour_price));
  j["findings"] = nlohmann::json::array();
  for (const Finding& f : r.findings) {
    j["findings"].push_back({{"kind", f.kind},
                             {"job", f.job},
                             {"user", f.user},
                             {"wasted_gpu_hours", f.wasted_gpu_hours},
                             {"message", f.message},
                             {"fix", f.fix}});
  }
  j["gpus"] = nlohmann::json::array();
  for (const Holding& h : r.holdings) {
    nlohmann::json g = {{"node", h.host},
                        {"gpu", h.gpu},
                        {"uuid", h.uuid},
                        {"model", h.model},
                        {"job", h.job},
                        {"user", h.user},
                        {"first_unix_s", h.first_s},
                        {"last_unix_s", h.last_s},
                        {"gpu_hours", h.hours},
                        {"mean_util_pct", h.mean_util_pct},
                        {"idle_allocated_gpu_hours", h.idle_hours},
                        {"sawtooth", h.sawtooth},
                        {"flips_per_sample", h.flips_per_sample}};
    if (h.peak_mem_mib >= 0) g["peak_memory_mib"] = h.peak_mem_mib;
    if (h.total_mem_mib > 0) g["memory_mib"] = h.total_mem_mib;
    j["gpus"].push_back(std::move(g));
  }
  return j;
}

std::string RenderHtml(const FleetReport& r, const FleetInput& in, const std::string& source) {
  std::string out =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>"
      "saturate fleet</title><style>" +
      std::string(doctor::svg::kPageStyle) +
      "</style></head><body><h1>Fleet: " + HtmlEscape(source) + "</h1><p>" +
      HtmlEscape(Clock(r.start_s)) + " to " + HtmlEscape(Clock(r.end_s)) + " UTC, step " +
      Fmt("%g", r.step_s) + " s</p>";
  if (!r.gaps.empty()) {
    out += "<h2>Missing or partial data</h2><ul>";
    for (const std::string& g : r.gaps) out += "<li>" + HtmlEscape(g) + "</li>";
    out += "</ul>";
  }
  out += HeatMap(r, in);
  out += "<h2>Findings</h2>";
  if (r.findings.empty()) out += "<p>None.</p>";
  out += "<ol>";
  for (const Finding& f : r.findings) {
    out += "<li><b>" + HtmlEscape(f.kind) + "</b>: " + HtmlEscape(f.message) +
           "<br>Fix: " + HtmlEscape(f.fix) + "</li>";
  }
  out += "</ol><h2>Jobs</h2>" + HtmlTable(r.jobs, true, r.gpu_hour_price);
  out += "<h2>Users</h2>" + HtmlTable(r.users, false, r.gpu_hour_price);
  out += "<h2>Nodes</h2>" + HtmlTable(r.nodes, false, r.gpu_hour_price);
  return out + "</body></html>\n";
}

}  // namespace saturate::fleet
