#include "doctor/report.h"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <set>
#include <utility>
#include <vector>

#include "doctor/svg.h"

namespace saturate::doctor {
namespace {

// ---- numbers and words -------------------------------------------------------

std::string Format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

// "850 µs", "130 ms", "62.3 s", "4 min 05 s", "2 h 03 min".
std::string Seconds(double s) {
  if (s < 0.001 && s > 0) return Format("%.0f µs", s * 1e6);
  if (s < 0.01 && s > 0) return Format("%.1f ms", s * 1e3);
  if (s < 1) return Format("%.0f ms", s * 1e3);
  if (s < 100) return Format("%.1f s", s);
  const int64_t whole = std::llround(s);
  if (whole < 3600) {
    return Format("%.0f min ", double(whole / 60)) + Format("%02.0f s", double(whole % 60));
  }
  return Format("%.0f h ", double(whole / 3600)) + Format("%02.0f min", double(whole % 3600 / 60));
}

std::string Percent(double pct) { return Format("%.1f%%", pct); }

// A measured number with its unit: "52.0%", "2.1 ms", "2800 samples/s", "6 cores".
std::string ValueWithUnit(double v, const std::string& unit) {
  if (unit == "%") return Percent(v);
  const double a = std::fabs(v);
  const char* fmt = a == std::floor(a) || a >= 100 ? "%.0f" : a >= 10 ? "%.1f" : "%.2f";
  std::string text = Format(fmt, v);
  return unit.empty() ? text : text + " " + unit;
}

// The command as a shell would need it typed (arguments with spaces or quotes quoted).
std::string CommandLine(const std::vector<std::string>& argv) {
  std::string line;
  for (const std::string& arg : argv) {
    if (!line.empty()) line += ' ';
    const bool plain =
        !arg.empty() && arg.find_first_of(" \t\n'\"\\$`&|;<>()*?!#~") == std::string::npos;
    if (plain) {
      line += arg;
      continue;
    }
    line += '\'';
    for (char c : arg) line += c == '\'' ? std::string("'\\''") : std::string(1, c);
    line += '\'';
  }
  return line;
}

double DurationS(const Run& run, const Analysis& analysis) {
  return analysis.features.duration_s > 0 ? analysis.features.duration_s
                                          : double(run.meta.duration_ns) / 1e9;
}

std::string GpuWords(const Run& run) {
  const int n = run.meta.gpu_count;
  if (n == 0) return "no GPU: device = the training process";
  return std::to_string(n) + (n == 1 ? " GPU" : " GPUs");
}

// The measurements a reader wants first, as short phrases.
std::vector<std::string> HeadlineNumbers(const Features& f) {
  std::vector<std::string> parts;
  if (f.device_busy_pct) parts.push_back(Format("device busy %.0f%%", *f.device_busy_pct));
  if (f.data_wait_pct) parts.push_back(Format("data wait %.0f%% of step time", *f.data_wait_pct));
  if (f.steps > 0) {
    std::string steps = std::to_string(f.steps) + (f.steps == 1 ? " step" : " steps");
    if (f.step_time_median_s) steps += ", median " + Seconds(*f.step_time_median_s);
    parts.push_back(steps);
  }
  return parts;
}

// "start-up: 57.1 s to the end of the first step (48.1 s of it in torch.compile); the
// causes count the 4.0 s of training after it", when the start-up is a tenth
// of the run or more, or compiled; "" otherwise.
std::string StartupWords(const Features& f) {
  if (!f.startup_s || f.duration_s <= 0) return "";
  const double compile_s = std::max(0.0, f.compile_s - f.compile_in_window_s);
  if (*f.startup_s < 0.1 * f.duration_s && compile_s <= 0) return "";
  std::string out = "start-up: " + Seconds(*f.startup_s) + " to the end of the first step";
  if (compile_s > 0) out += " (" + Seconds(compile_s) + " of it in torch.compile)";
  return out + "; the causes count the " + Seconds(f.active_s) + " of training after it";
}

std::string HealthyWords(const Features& f, double min_pct) {
  std::string text = Format("no cause costs more than %g%% of the run", min_pct);
  if (f.device_busy_pct)
    text += Format(": the device was busy %.0f%% of the time", *f.device_busy_pct);
  return text;
}

// ---- the JPEG decode split of a GPU-fed loader (docs/gpu.md) -------------------

// "auto (nvJPEG)", "auto (GPU decoder unavailable: CPU only)", "cpu".
std::string DecodeModeWords(const Features& f) {
  if (f.decode_mode == "cpu") return "cpu";
  return f.decode_mode +
         (f.decode_gpu_decoder ? " (nvJPEG)" : " (GPU decoder unavailable: CPU only)");
}

// "300 images/s per thread x 8 threads = 2400 images/s"; "" when unmeasured.
std::string CpuDecodeRateWords(const Features& f) {
  if (!f.decode_cpu_per_s_per_thread) return "";
  std::string out = Format("%.0f images/s per thread", *f.decode_cpu_per_s_per_thread);
  if (f.loader_threads && *f.loader_threads > 0) {
    const double threads = double(*f.loader_threads);
    out += Format(" x %.0f", threads) + (threads == 1 ? " thread" : " threads") +
           Format(" = %.0f images/s", threads * *f.decode_cpu_per_s_per_thread);
  }
  return out;
}

// One line for the terminal: "JPEG decode: auto (nvJPEG); GPU 62% of each
// batch now; CPU 300 images/s per thread x 8 threads = 2400 images/s, GPU
// 4000 images/s; decoded 240 on the CPU, 400 on the GPU". "" without a
// device loader's record.
std::string DecodeWords(const Features& f) {
  if (f.decode_mode.empty()) return "";
  std::string out = "JPEG decode: " + DecodeModeWords(f);
  if (f.decode_gpu_decoder && f.decode_gpu_share) {
    out += Format("; GPU %.0f%% of each batch now", 100 * *f.decode_gpu_share);
  }
  std::vector<std::string> rates;
  if (!CpuDecodeRateWords(f).empty()) rates.push_back("CPU " + CpuDecodeRateWords(f));
  if (f.decode_gpu_per_s) rates.push_back(Format("GPU %.0f images/s", *f.decode_gpu_per_s));
  for (size_t i = 0; i < rates.size(); ++i) out += (i == 0 ? "; " : ", ") + rates[i];
  if (f.decode_cpu_images + f.decode_gpu_images > 0) {
    out += Format("; decoded %.0f on the CPU", double(f.decode_cpu_images)) +
           Format(", %.0f on the GPU", double(f.decode_gpu_images));
    if (f.decode_gpu_fallbacks > 0) {
      out += Format(" (%.0f refused by the GPU decoder)", double(f.decode_gpu_fallbacks));
    }
  }
  return out;
}

// "16-bit; convolution weights: 3 of 3 NCHW; Linear/Embedding weights: 1 of 1
// with a size not a multiple of 8" (what tensor-core advice rests on); "" when
// not recorded.
std::string PrecisionWords(const Features& f) {
  if (!f.precision_bits) return "";
  std::string out = std::to_string(*f.precision_bits) + "-bit";
  if (f.precision_source == "model") {
    out += " (the job's \"model\" counter)";
  } else if (f.tf32_matmul && *f.precision_bits >= 32) {
    out += " (TF32 matmuls allowed)";
  }
  if (f.model_shapes) {
    const Features::ModelShapes& m = *f.model_shapes;
    auto of = [](int64_t part, int64_t whole) {
      return std::to_string(part) + " of " + std::to_string(whole);
    };
    if (m.conv_weights > 0) {
      out += "; convolution weights: " + of(m.conv_nchw_weights, m.conv_weights) + " NCHW";
    }
    if (m.matrix_weights > 0) {
      out += "; Linear/Embedding weights: " + of(m.matrix_unaligned_weights, m.matrix_weights) +
             " with a size not a multiple of 8";
    }
  }
  return out;
}

// ---- ranks of a job ------------------------------------------------------------

// "data_wait" -> "data wait".
std::string ReasonWords(const std::string& reason) {
  std::string words = reason;
  std::replace(words.begin(), words.end(), '_', ' ');
  return words;
}

// The hosts of a job: the view's list, else those its rows name.
size_t HostCount(const RanksView& v) {
  if (!v.hosts.empty()) return v.hosts.size();
  std::set<std::string> hosts;
  for (const RankRow& r : v.rows) {
    if (!r.host.empty()) hosts.insert(r.host);
  }
  return hosts.size();
}

// "4 on 2 hosts".
std::string RanksCountWords(const RanksView& v) {
  const size_t hosts = HostCount(v);
  return std::to_string(v.world_size) + " on " + std::to_string(hosts) +
         (hosts == 1 ? " host" : " hosts");
}

// "rank 3 is the straggler: the others wait 41 ms a step (data wait)"; empty without one.
std::string StragglerWords(const RanksView& v) {
  if (!v.straggler) return "";
  std::string text = "rank " + std::to_string(*v.straggler) +
                     " is the straggler: the others wait " + Seconds(v.others_wait_per_step_s) +
                     " a step";
  if (!v.straggler_reason.empty()) text += " (" + ReasonWords(v.straggler_reason) + ")";
  return text;
}

// Whether clocks of several hosts were put on one axis (and so have a method to name).
bool ClocksAligned(const RanksView& v) {
  return HostCount(v) > 1 && !v.clock_method.empty() && v.clock_method != "none" &&
         v.clock_method != "one host";
}

// "aligned by collectives, residual skew 0.4 ms".
std::string ClockWords(const RanksView& v) {
  return "aligned by " + v.clock_method + Format(", residual skew %.1f ms", v.residual_skew_ms);
}

// ---- the terminal summary ----------------------------------------------------

constexpr size_t kColumns = 80;

// Terminal columns of UTF-8 text (one per code point; the summary has no wide characters).
size_t Columns(const std::string& text) {
  size_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

std::string PadRight(const std::string& text, size_t columns) {
  const size_t have = Columns(text);
  return have >= columns ? text : text + std::string(columns - have, ' ');
}

std::string PadLeft(const std::string& text, size_t columns) {
  const size_t have = Columns(text);
  return have >= columns ? text : std::string(columns - have, ' ') + text;
}

// ANSI SGR `code` around `text` when `color`.
std::string Paint(bool color, const char* code, const std::string& text) {
  return color ? std::string("\033[") + code + "m" + text + "\033[0m" : text;
}

// `text` word-wrapped to kColumns: the first line continues a line already
// `first_column` wide, later lines start with `indent` spaces. A word longer
// than a line stays whole.
std::string Wrap(const std::string& text, size_t first_column, size_t indent) {
  std::string out;
  size_t column = first_column;
  bool line_empty = true;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = text.find_first_not_of(' ', pos);
    if (start == std::string::npos) break;
    const size_t end = std::min(text.find(' ', start), text.size());
    const std::string word = text.substr(start, end - start);
    const size_t need = Columns(word) + (line_empty ? 0 : 1);
    if (!line_empty && column + need > kColumns) {
      out += "\n" + std::string(indent, ' ');
      column = indent;
      line_empty = true;
    }
    if (!line_empty) out += ' ';
    out += word;
    column += Columns(word) + (line_empty ? 0 : 1);
    line_empty = false;
    pos = end;
  }
  return out;
}

// `parts` joined by " · ", broken between parts so that lines stay under kColumns.
std::string JoinWrapped(const std::vector<std::string>& parts) {
  std::string out;
  size_t column = 0;
  for (const std::string& part : parts) {
    if (column > 0 && column + 3 + Columns(part) > kColumns) {
      out += "\n";
      column = 0;
    } else if (column > 0) {
      out += " · ";
      column += 3;
    }
    out += part;
    column += Columns(part);
  }
  return out;
}

// ("expect", the prediction's model) and, after --check-fix, ("check", the
// measured gain against it): the lines under a finding's fix.
std::vector<std::pair<std::string, std::string>> PredictionLines(const Finding& x) {
  std::vector<std::pair<std::string, std::string>> lines;
  if (x.prediction) lines.emplace_back("expect", x.prediction->model);
  if (x.check) {
    const FixCheck& c = *x.check;
    lines.emplace_back("check", c.knob + " " + c.from + " -> " + c.to + ": " + c.verdict +
                                    (x.demoted ? " (demoted: the fix gave no reliable gain)" : ""));
  }
  return lines;
}

// "1.0/step", or "0.8/step in 5% of steps" for a site that runs in bursts
// ("1.0", "0.8 in 5% of steps" without the unit, for a "per step" column).
std::string PerStepWords(const SiteStat& x, bool unit = true) {
  std::string out = Format(unit ? "%.2g/step" : "%.2g", x.per_step);
  if (RunsInBursts(x)) out += Format(" in %.2g%% of steps", 100 * *x.step_share);
  return out;
}

// Red for the causes that cost a fifth of the run or more, yellow above 5%.
const char* SeverityColor(double pct) { return pct >= 20 ? "1;31" : pct >= 5 ? "1;33" : "1"; }

}  // namespace

// "train.py:42 .item() 1.0/step 0.31 s; ..." for the top three sites.
std::string SitesWords(const std::vector<SiteStat>& sites) {
  std::string out;
  for (size_t i = 0; i < std::min<size_t>(sites.size(), 3); ++i) {
    const SiteStat& x = sites[i];
    out += (i ? "; " : "") + x.site + " " + x.op + " " + PerStepWords(x) + " " + Seconds(x.total_s);
  }
  if (sites.size() > 3) out += Format("; %g more", double(sites.size() - 3));
  return out;
}

// What the auto-instrumentation did not capture, or why it did not run;
// empty when it captured everything it looks for.
std::string AutoWords(const Features& f) {
  const AutoSummary& a = f.auto_info;
  if (a.enabled == false) return "auto-instrumentation: off (--no-auto)";
  if (a.processes == 0) {
    return a.enabled ? "auto-instrumentation: nothing recorded (no Python process imported torch)"
                     : "";
  }
  std::string out;
  if (!a.missing.empty()) {
    out = "auto-instrumentation: not captured:";
    for (const auto& [hook, why] : a.missing) out += " " + hook + " (" + why + ")";
  }
  if (a.errors > 0) {
    out += (out.empty() ? "auto-instrumentation: " : "; ") +
           Format("%g recording errors: some events may be missing", double(a.errors));
  }
  return out;
}

std::string RenderSummary(const Run& run, const Analysis& analysis, bool color, int max_findings) {
  const Features& f = analysis.features;
  std::vector<std::string> header = {"saturate doctor: " + run.meta.dir,
                                     Seconds(DurationS(run, analysis)), GpuWords(run)};
  if (run.meta.exit_code && *run.meta.exit_code != 0) {
    header.push_back("exit " + std::to_string(*run.meta.exit_code));
  }
  std::string out = Paint(color, "1", JoinWrapped(header)) + "\n";
  const std::vector<std::string> numbers = HeadlineNumbers(f);
  if (!numbers.empty()) out += JoinWrapped(numbers) + "\n";
  if (!StartupWords(f).empty()) out += Wrap(StartupWords(f), 0, 2) + "\n";
  if (f.ranks.world_size > 0) {
    std::string ranks = "ranks: " + RanksCountWords(f.ranks);
    if (f.ranks.straggler) ranks += "; " + StragglerWords(f.ranks);
    out += Wrap(ranks, 0, 2) + "\n";
    if (ClocksAligned(f.ranks)) {
      out += Wrap("clocks: " + ClockWords(f.ranks), 0, 2) + "\n";
    } else if (HostCount(f.ranks) > 1) {
      out += Wrap("clocks: not aligned across hosts (times are as each host's clock reads)", 0, 2) +
             "\n";
    }
  }
  if (!DecodeWords(f).empty()) out += Wrap(DecodeWords(f), 0, 2) + "\n";
  // Where tensor cores are at stake: on a GPU.
  if (f.gpu_count > 0 && !PrecisionWords(f).empty()) {
    out += Wrap("math: " + PrecisionWords(f), 0, 2) + "\n";
  }
  if (f.steps == 0) {
    out += "no step data: no optimizer step or saturate.step() mark was recorded\n";
  }
  if (!AutoWords(f).empty()) out += Wrap(AutoWords(f), 0, 2) + "\n";
  out += "\n";

  std::vector<const Finding*> ranked, notes;
  for (const Finding& finding : analysis.findings) {
    (finding.info ? notes : ranked).push_back(&finding);
  }
  const size_t shown = std::min(ranked.size(), size_t(std::max(max_findings, 0)));
  // Columns: rank, cause, time lost, title; each as wide as its widest cell.
  std::vector<std::string> ranks, causes, times;
  size_t rank_w = 0, cause_w = 0, time_w = 0;
  for (size_t i = 0; i < shown; ++i) {
    const Finding& finding = *ranked[i];
    ranks.push_back(std::to_string(i + 1) + ".");
    causes.push_back(finding.cause);
    times.push_back(Format("%.1f s", finding.time_lost_s) +
                    Format(" (%2.0f%%)", finding.time_lost_pct));
    rank_w = std::max(rank_w, Columns(ranks.back()));
    cause_w = std::max(cause_w, Columns(causes.back()));
    time_w = std::max(time_w, Columns(times.back()));
  }
  for (size_t i = 0; i < shown; ++i) {
    const Finding& finding = *ranked[i];
    const std::string lead = " " + PadLeft(ranks[i], rank_w) + " ";
    const size_t title_column = Columns(lead) + cause_w + 2 + time_w + 2;
    out += lead + Paint(color, SeverityColor(finding.time_lost_pct), PadRight(causes[i], cause_w)) +
           "  " + PadLeft(times[i], time_w) + "  " +
           Wrap(finding.title, title_column, title_column) + "\n";
    if (!finding.fix.empty()) {
      const std::string fix_lead = std::string(Columns(lead), ' ') + "fix: ";
      out += std::string(Columns(lead), ' ') + Paint(color, "32", "fix:") + " " +
             Wrap(finding.fix, Columns(fix_lead), Columns(fix_lead)) + "\n";
    }
    for (const auto& [label, text] : PredictionLines(finding)) {
      const std::string line_lead = std::string(Columns(lead), ' ') + label + ": ";
      out += line_lead + Wrap(text, Columns(line_lead), Columns(line_lead)) + "\n";
    }
    if (!finding.sites.empty()) {
      const std::string at_lead = std::string(Columns(lead), ' ') + "at:  ";
      out += at_lead + Wrap(SitesWords(finding.sites), Columns(at_lead), Columns(at_lead)) + "\n";
    }
  }
  if (ranked.empty()) {
    out += Paint(color, "32", HealthyWords(f, analysis.min_time_lost_pct)) + ".\n";
  } else if (shown < ranked.size()) {
    const size_t more = ranked.size() - shown;
    out += std::to_string(more) + (more == 1 ? " more finding" : " more findings") +
           " in the report.\n";
  } else {
    out += Format("no other cause above %g%% of the run.\n", analysis.min_time_lost_pct);
  }
  // Info findings cost no measured time: a note each, after the ranking.
  for (const Finding* note : notes) {
    out += Paint(color, "1", "note:") + " " + Wrap(note->title, 6, 6) + "\n";
    if (!note->fix.empty()) out += "      " + Wrap(note->fix, 6, 6) + "\n";
    if (!note->sites.empty()) out += "      at: " + Wrap(SitesWords(note->sites), 10, 10) + "\n";
  }
  return out;
}

std::string HtmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

namespace {

// ---- SVG charts (doctor/svg.h) -----------------------------------------------

using svg::Axis;
using svg::Downsample;
using svg::Empty;
using svg::Figure;
using svg::Frame;
using svg::Labelled;
using svg::Legend;
using svg::NiceTicks;
using svg::Num;
using svg::Points;
using svg::Polyline;
using svg::Series;
using svg::Side;
using svg::SvgLine;
using svg::SvgOpen;
using svg::SvgText;
using svg::Tick;

constexpr const char* kGpuColors[] = {"#059669", "#7c3aed", "#db2777", "#0891b2",
                                      "#65a30d", "#ca8a04", "#4b5563", "#9333ea"};

std::string TimelineChart(const Run& run, const Analysis& analysis) {
  std::vector<Series> series;
  const std::string busy_name = run.meta.gpu_count > 0
                                    ? "device busy (GPU utilization)"
                                    : "device busy (training process outside data wait)";
  series.push_back(
      {busy_name, "#2563eb", Downsample(analysis.features.device_busy_timeline), true});
  Series cpu{"host CPU busy (all cores)", "#ea580c", {}};
  std::set<int> gpu_indices;
  for (const SamplePoint& s : run.samples) {
    cpu.points.push_back({double(s.t_ns) / 1e9, s.cpu_busy_pct});
    for (const GpuPoint& g : s.gpus) {
      if (!g.lost && g.util_pct) gpu_indices.insert(g.index);
    }
  }
  cpu.points = Downsample(cpu.points);
  series.push_back(std::move(cpu));
  // One line per GPU only when there are several: with one, it is the device line.
  if (gpu_indices.size() > 1) {
    for (int index : gpu_indices) {
      Series gpu{"GPU " + std::to_string(index) + " utilization",
                 kGpuColors[size_t(index) % std::size(kGpuColors)],
                 {},
                 false,
                 true};
      for (const SamplePoint& s : run.samples) {
        for (const GpuPoint& g : s.gpus) {
          if (g.index == index && !g.lost && g.util_pct) {
            gpu.points.push_back({double(s.t_ns) / 1e9, *g.util_pct});
          }
        }
      }
      gpu.points = Downsample(gpu.points);
      series.push_back(std::move(gpu));
    }
  }
  std::erase_if(series, [](const Series& s) { return s.points.empty(); });
  const std::string caption = "Utilization over time";
  if (series.empty()) {
    return Figure("timeline", caption,
                  Empty("no utilization samples recorded (samples.jsonl is empty or missing)"));
  }
  Frame f;
  f.x_max = DurationS(run, analysis);
  for (const Series& s : series) f.x_max = std::max(f.x_max, s.points.back().first);
  if (f.x_max <= 0) f.x_max = 1;
  f.y_max = 100;
  std::string svg =
      SvgOpen(f, "Device, host CPU and GPU utilization (%) over the run's " + Seconds(f.x_max));
  svg += Axis(f, Side::kLeft, Labelled(NiceTicks(0, 100), "%"), true, "busy");
  svg += Axis(f, Side::kBottom, Labelled(NiceTicks(0, f.x_max, 8)), true, "time since start (s)");
  // Drawn last to first, so the device line is on top.
  for (auto it = series.rbegin(); it != series.rend(); ++it) svg += Polyline(f, *it);
  svg += "</svg>\n";
  return Figure("timeline", caption, svg + Legend(series));
}

std::string Truncate(const std::string& text, size_t max_columns) {
  if (Columns(text) <= max_columns) return text;
  std::string out;
  size_t columns = 0;
  for (unsigned char c : text) {
    if ((c & 0xC0) != 0x80 && ++columns > max_columns - 1) break;
    out += char(c);
  }
  return out + "…";
}

std::string PhaseColor(const std::string& name, size_t i) {
  if (name == "data_wait" || name == "data") return "#dc2626";
  if (name == "copy" || name == "h2d") return "#f59e0b";
  if (name == "other") return "#9ca3af";
  constexpr const char* kBlues[] = {"#2563eb", "#3b82f6", "#1d4ed8", "#60a5fa", "#1e40af"};
  return kBlues[i % std::size(kBlues)];
}

// A bar across row `row` (rows `row_height` tall) from x0 to x1 in data
// units, at least `min_width` wide, with `tooltip` (escaped here).
std::string RowBar(const Frame& f, double row, double row_height, double x0, double x1,
                   double min_width, const std::string& color, const std::string& tooltip) {
  return "<rect x=\"" + Num(f.X(x0)) + "\" y=\"" + Num(f.Y(row) - row_height * 0.32) +
         "\" width=\"" + Num(std::max(f.X(x1) - f.X(x0), min_width)) + "\" height=\"" +
         Num(row_height * 0.64) + "\" fill=\"" + color + "\"><title>" + HtmlEscape(tooltip) +
         "</title></rect>";
}

std::string PhaseChart(const Features& features) {
  const std::string caption = "Where step time goes (step-phase breakdown)";
  if (features.phases.empty()) {
    return Figure("phases", caption,
                  Empty("no step spans recorded — mark steps with saturate.step() and phases "
                        "with saturate.phase(\"forward\") etc. to see where step time goes"));
  }
  constexpr double kRow = 30;
  Frame f;
  f.left = 170;
  f.right = 150;
  f.top = 10;
  f.height = f.top + f.bottom + kRow * double(features.phases.size());
  f.x_max = 100;
  f.y_max = double(features.phases.size());  // row i spans [n-i-1, n-i]
  std::string svg = SvgOpen(f, "Share of step time per phase");
  std::vector<Tick> names;
  std::string bars;
  for (size_t i = 0; i < features.phases.size(); ++i) {
    const PhaseShare& p = features.phases[i];
    const double row = f.y_max - double(i) - 0.5;
    names.push_back({row, Truncate(p.name, 22)});
    const double pct = std::clamp(p.pct_of_steps, 0.0, 100.0);
    bars += RowBar(f, row, kRow, 0, pct, 1.0, PhaseColor(p.name, i),
                   p.name + ": " + Percent(p.pct_of_steps) + ", " + Seconds(p.total_s));
    bars += SvgText(f.X(pct) + 6, f.Y(row) + 4, "start",
                    Percent(p.pct_of_steps) + " · " + Seconds(p.total_s), "value");
  }
  svg += Axis(f, Side::kBottom, Labelled(NiceTicks(0, 100), "%"), true, "share of step time");
  svg += Axis(f, Side::kLeft, names, false, "");
  svg += bars + "</svg>\n";
  return Figure("phases", caption, svg);
}

// A few consecutive steps around the median one, each a row of the phases
// that filled it, left to right: where a step's time goes, step by step.
std::string WaterfallChart(const Features& features) {
  const std::string caption = "Step waterfall (steps around the median one)";
  if (features.waterfall.empty()) {
    return Figure("waterfall", caption, Empty("no steps with phases recorded"));
  }
  constexpr double kRow = 26;
  Frame f;
  f.left = 90;
  f.top = 10;
  f.height = f.top + f.bottom + kRow * double(features.waterfall.size());
  double longest_s = 0;
  for (const StepWaterfall& w : features.waterfall) longest_s = std::max(longest_s, w.dur_s);
  const bool ms = longest_s < 2;
  const double scale = ms ? 1000 : 1;
  f.x_max = std::max(longest_s * scale, 1e-6);
  f.y_max = double(features.waterfall.size());
  // Colors by phase name, in order of first appearance, so a name keeps its color.
  std::vector<std::string> names;
  auto color_of = [&](const std::string& name) {
    auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end()) it = names.insert(names.end(), name);
    return PhaseColor(name, size_t(it - names.begin()));
  };
  std::string svg = SvgOpen(f, "Phases of consecutive steps");
  std::vector<Tick> rows;
  std::string bars;
  for (size_t i = 0; i < features.waterfall.size(); ++i) {
    const StepWaterfall& w = features.waterfall[i];
    const double row = f.y_max - double(i) - 0.5;
    rows.push_back({row, "step " + std::to_string(w.step)});
    for (const auto& [name, offset_s, dur_s] : w.segments) {
      bars += RowBar(f, row, kRow, offset_s * scale, (offset_s + dur_s) * scale, 0.5,
                     color_of(name), name + ": " + Seconds(dur_s));
    }
  }
  std::vector<Series> legend;
  for (const std::string& name : names) legend.push_back({name, color_of(name), {}});
  svg += Axis(f, Side::kBottom, Labelled(NiceTicks(0, f.x_max), ms ? " ms" : " s"), true,
              "time since the step began (gaps: time in no phase)");
  svg += Axis(f, Side::kLeft, rows, false, "");
  svg += bars + "</svg>\n" + Legend(legend);
  return Figure("waterfall", caption, svg);
}

std::string EdgeLabel(double edge) { return Format("%g", edge); }

std::string IdleGapChart(const Features& features) {
  const Histogram& h = features.idle_gaps_s;
  const std::string caption = "Idle gaps: how long the device waited each time";
  int64_t total = 0;
  for (int64_t c : h.counts) total += c;
  if (h.counts.empty() || total == 0) {
    return Figure("idle-gaps", caption,
                  Empty("no idle gaps recorded: the device never sat idle (GPU under 10% busy, "
                        "or a data_wait span) long enough to count"));
  }
  Frame f;
  f.height = 260;
  const size_t n = h.counts.size();
  f.x_max = double(n);
  const int64_t max_count = *std::max_element(h.counts.begin(), h.counts.end());
  std::vector<double> y_ticks = NiceTicks(0, double(max_count), 4);
  if (y_ticks.size() > 1 && y_ticks[1] - y_ticks[0] < 1) y_ticks = {0, double(max_count)};
  f.y_max = std::max(y_ticks.back(), double(max_count) * 1.12);  // room for the count labels
  std::vector<Tick> buckets;
  std::string bars;
  for (size_t i = 0; i < n; ++i) {
    std::string label;
    if (i == 0) {
      label = "< " + EdgeLabel(h.upper_edges.empty() ? 0 : h.upper_edges[0]) + " s";
    } else if (i >= h.upper_edges.size()) {
      label = "≥ " + EdgeLabel(h.upper_edges.back()) + " s";
    } else {
      label = EdgeLabel(h.upper_edges[i - 1]) + "–" + EdgeLabel(h.upper_edges[i]) + " s";
    }
    buckets.push_back({double(i) + 0.5, label});
    const double x = f.X(double(i) + 0.1), w = f.X(double(i) + 0.9) - x;
    const double top = f.Y(double(h.counts[i]));
    bars += "<rect x=\"" + Num(x) + "\" y=\"" + Num(top) + "\" width=\"" + Num(w) + "\" height=\"" +
            Num(f.Y(0) - top) + "\" fill=\"#7c3aed\"><title>" + HtmlEscape(label) + ": " +
            std::to_string(h.counts[i]) + "</title></rect>";
    if (h.counts[i] > 0) {
      bars += SvgText(x + w / 2, top - 5, "middle", std::to_string(h.counts[i]), "value");
    }
  }
  std::string svg = SvgOpen(f, "Histogram of idle gap lengths");
  svg += Axis(f, Side::kLeft, Labelled(y_ticks), true, "gaps");
  svg += Axis(f, Side::kBottom, buckets, false, "idle gap length");
  svg += bars + "</svg>\n";
  std::string note = std::to_string(total) + (total == 1 ? " idle gap" : " idle gaps") +
                     " (GPU under 10% busy, or data_wait spans).";
  if (features.idle_period_s) {
    note += " They recur about every " + Seconds(*features.idle_period_s) +
            ": a saw-tooth, the device waiting for each batch.";
  }
  return Figure("idle-gaps", caption, svg, note);
}

// ---- ranks: heat maps and table ----------------------------------------------

// More steps than this are binned, so a long run's heat map stays small;
// a job of many ranks gets fewer columns, at most kMaxHeatCells cells in all.
constexpr size_t kMaxHeatColumns = 200;
constexpr size_t kMaxHeatCells = 12000;
constexpr size_t kMinHeatColumns = 12;

size_t HeatColumns(size_t rows) {
  return std::clamp(kMaxHeatCells / std::max<size_t>(rows, 1), kMinHeatColumns, kMaxHeatColumns);
}

// A sequential scale (ColorBrewer YlOrRd), light for 0 to dark for 1.
std::string HeatColor(double t) {
  constexpr int kStops[][3] = {
      {255, 255, 204}, {254, 217, 118}, {253, 141, 60}, {227, 26, 28}, {128, 0, 38}};
  constexpr size_t kLast = std::size(kStops) - 1;
  const double at = std::clamp(std::isfinite(t) ? t : 0.0, 0.0, 1.0) * double(kLast);
  const size_t i = std::min(size_t(at), kLast - 1);
  const double w = at - double(i);
  char buf[8];
  std::snprintf(buf, sizeof(buf), "#%02x%02x%02x",
                int(std::lround(kStops[i][0] + (kStops[i + 1][0] - kStops[i][0]) * w)),
                int(std::lround(kStops[i][1] + (kStops[i + 1][1] - kStops[i][1]) * w)),
                int(std::lround(kStops[i][2] + (kStops[i + 1][2] - kStops[i][2]) * w)));
  return buf;
}

// A cell's seconds: "0.123 s", "1.23 s", "0.0004 s".
std::string CellSeconds(double s) { return Format("%.3g s", s); }

// The means of consecutive runs of `per_column` values (the last run may be shorter).
std::vector<double> BinMeans(const std::vector<double>& values, size_t per_column) {
  std::vector<double> out;
  for (size_t begin = 0; begin < values.size(); begin += per_column) {
    const size_t end = std::min(values.size(), begin + per_column);
    double sum = 0;
    for (size_t i = begin; i < end; ++i) sum += values[i];
    out.push_back(sum / double(end - begin));
  }
  return out;
}

double Mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / double(v.size());
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  if (v.size() % 2 == 1) return v[mid];
  return (v[mid] + *std::max_element(v.begin(), v.begin() + mid)) / 2;
}

bool IsStraggler(const RanksView& view, const RankRow& row) {
  return view.straggler && *view.straggler == row.rank;
}

// The most steps any rank recorded in `values`.
size_t MostSteps(const RanksView& view, std::vector<double> RankRow::*values) {
  size_t most = 0;
  for (const RankRow& r : view.rows) most = std::max(most, (r.*values).size());
  return most;
}

// Words for the two ends of a heat map's scale: {"fastest", "slowest"}.
struct ScaleWords {
  const char* low;
  const char* high;
};

// A rank x step heat map of `values` (RankRow::step_s, data_wait_s or
// wait_s): one row per rank, one column per step, or per run of consecutive
// steps (their mean) when there are more than HeatColumns(); the colour
// runs from the smallest cell to the largest, with a legend of both.
std::string RankHeatMap(const RanksView& view, std::vector<double> RankRow::*values,
                        const std::string& id, const std::string& caption, const std::string& what,
                        ScaleWords words) {
  const size_t most = MostSteps(view, values);
  const size_t max_columns = HeatColumns(view.rows.size());
  const size_t per_column = std::max<size_t>(1, (most + max_columns - 1) / max_columns);
  std::vector<std::vector<double>> cells;
  double lo = 0, hi = 0;
  bool any = false;
  for (const RankRow& r : view.rows) {
    cells.push_back(BinMeans(r.*values, per_column));
    for (double v : cells.back()) {
      lo = any ? std::min(lo, v) : v;
      hi = any ? std::max(hi, v) : v;
      any = true;
    }
  }
  const size_t n = view.rows.size();
  // Rows shrink for large jobs; below 12 units only every k-th row (and the straggler) is named.
  const double row_h = n <= 40 ? 18.0 : std::max(3.0, 720.0 / double(n));
  const size_t label_every = row_h >= 12 ? 1 : size_t(std::ceil(12.0 / row_h));
  Frame f;
  f.left = 240;
  f.top = 34;  // the scale's legend
  f.height = f.top + f.bottom + row_h * double(n);
  const size_t columns = std::max<size_t>(1, (most + per_column - 1) / per_column);
  f.x_max = double(columns * per_column);    // in steps: column c spans [c, c + 1) * per_column
  f.y_max = double(std::max<size_t>(n, 1));  // row i spans [n-i-1, n-i]
  std::string svg = SvgOpen(f, caption);
  std::string body;
  for (size_t i = 0; i < n; ++i) {
    const RankRow& r = view.rows[i];
    const double row = f.y_max - double(i) - 0.5;
    const bool straggler = IsStraggler(view, r);
    if (straggler || i % label_every == 0) {
      std::string label = "rank " + std::to_string(r.rank);
      if (!r.host.empty()) label += " · " + Truncate(r.host, straggler ? 16 : 24);
      if (straggler) label += " · straggler";
      body += SvgText(f.left - 8, f.Y(row) + 4, "end", label, straggler ? "value" : "");
    }
    if (cells[i].empty()) {
      body +=
          SvgText(f.left + 6, f.Y(row) + 4, "start", r.note.empty() ? "no steps recorded" : r.note);
      continue;
    }
    for (size_t c = 0; c < cells[i].size(); ++c) {
      const double v = cells[i][c];
      const size_t first = c * per_column + 1, last = std::min((c + 1) * per_column, most);
      const std::string steps = per_column == 1 ? "step " + std::to_string(first)
                                                : "steps " + std::to_string(first) + "–" +
                                                      std::to_string(last) + " (mean)";
      // RowBar fills 64% of the height it is given; a cell fills 90% of its row.
      body +=
          RowBar(f, row, row_h / 0.64 * 0.9, double(c * per_column), double((c + 1) * per_column),
                 0.5, HeatColor(hi > lo ? (v - lo) / (hi - lo) : 0),
                 "rank " + std::to_string(r.rank) + ", " + steps + ": " + CellSeconds(v));
    }
  }
  // The scale: swatches from the low end to the high end, centred above the plot.
  constexpr int kSwatches = 10;
  constexpr double kSwatchW = 18;
  const double mid = (f.left + f.width - f.right) / 2, x0 = mid - kSwatches * kSwatchW / 2;
  std::string scale = SvgText(x0 - 6, 18, "end", std::string(words.low) + " " + CellSeconds(lo));
  for (int k = 0; k < kSwatches; ++k) {
    scale += "<rect x=\"" + Num(x0 + k * kSwatchW) + "\" y=\"8\" width=\"" + Num(kSwatchW) +
             "\" height=\"12\" fill=\"" + HeatColor(double(k) / (kSwatches - 1)) + "\"/>";
  }
  scale += SvgText(x0 + kSwatches * kSwatchW + 6, 18, "start", CellSeconds(hi) + " " + words.high);
  std::vector<Tick> ticks;
  for (double step : NiceTicks(1, double(std::max<size_t>(most, 1)), 8)) {
    if (step >= 1) ticks.push_back({step - 0.5, Format("%.0f", step)});
  }
  svg += Axis(f, Side::kBottom, ticks, false,
              per_column == 1 ? "step" : "step (" + std::to_string(per_column) + " per column)");
  svg += scale + body + "</svg>\n";
  std::string note;
  if (!any) note = "no " + what + " recorded";
  return Figure(id, caption, svg, note);
}

// The exit column: the note, else the exit code, and "left early" for a
// rank that ended with fewer steps than the most any rank took.
std::string ExitWords(const RankRow& r, size_t most_steps) {
  if (!r.note.empty()) return r.note;
  std::string words = r.exit_code ? std::to_string(*r.exit_code) : r.exited ? "exited" : "—";
  if (!r.exception.empty()) words = "failed: " + r.exception.substr(0, 80);
  if ((r.exited || r.exit_code) && r.step_s.size() < most_steps) words += ", left early";
  return words;
}

std::string RanksTable(const RanksView& view) {
  const size_t most = MostSteps(view, &RankRow::step_s);
  std::string html =
      "<table class=\"ranks\">\n<thead><tr><th class=\"num\">rank</th><th>host</th><th>GPU</th><th "
      "class=\"num\">steps</th><th class=\"num\">median step s</th><th class=\"num\">mean data "
      "wait s</th><th class=\"num\">mean wait for others s</th><th class=\"num\">clock offset "
      "ms</th><th>exit</th></tr></thead>\n<tbody>\n";
  auto seconds = [](const std::vector<double>& v, double s) {
    return v.empty() ? std::string("—") : Format("%.3f", s);
  };
  for (const RankRow& r : view.rows) {
    const std::string offset =
        r.step_s.empty() && !r.note.empty() ? "—" : Format("%.1f", r.clock_offset_ms);
    std::string rank = std::to_string(r.rank);
    if (IsStraggler(view, r)) rank = "<b>" + rank + "</b> straggler";
    html += "<tr><td class=\"num\">" + rank + "</td><td class=\"mono\">" + HtmlEscape(r.host) +
            "</td><td class=\"mono\">" + (r.gpu.empty() ? "—" : HtmlEscape(r.gpu)) +
            "</td><td class=\"num\">" + std::to_string(r.step_s.size()) +
            "</td><td class=\"num\">" + seconds(r.step_s, Median(r.step_s)) +
            "</td><td class=\"num\">" + seconds(r.data_wait_s, Mean(r.data_wait_s)) +
            "</td><td class=\"num\">" + seconds(r.wait_s, Mean(r.wait_s)) +
            "</td><td class=\"num\">" + offset + "</td><td>" + HtmlEscape(ExitWords(r, most)) +
            "</td></tr>\n";
  }
  return html + "</tbody>\n</table>\n";
}

// The job as its ranks: who ran where, how clocks were put on one axis, the
// straggler, then rank x step heat maps and a row per rank.
std::string RanksSection(const RanksView& view) {
  constexpr size_t kHostsNamed = 8;
  std::string hosts;
  for (size_t i = 0; i < std::min(view.hosts.size(), kHostsNamed); ++i) {
    hosts += (i == 0 ? "" : ", ") + view.hosts[i];
  }
  if (view.hosts.size() > kHostsNamed) {
    hosts += " and " + std::to_string(view.hosts.size() - kHostsNamed) + " more";
  }
  std::string text = std::to_string(view.world_size) + " ranks on " +
                     std::to_string(HostCount(view)) + (HostCount(view) == 1 ? " host" : " hosts");
  if (!hosts.empty()) text += " (" + hosts + ")";
  if (ClocksAligned(view)) {
    text += "; clocks " + ClockWords(view);
  } else if (HostCount(view) > 1) {
    text += "; clocks not aligned across hosts (times are as each host's clock reads)";
  }
  text += ".";
  if (view.straggler) {
    std::string straggler = StragglerWords(view);
    straggler[0] = 'R';
    text += " " + straggler + ".";
  } else {
    text += " No rank held the others back.";
  }
  std::string html =
      "<section id=\"ranks\" aria-labelledby=\"ranks-h\">\n<h2 id=\"ranks-h\">Ranks</h2>\n"
      "<p>" +
      HtmlEscape(text) + "</p>\n";
  html += RankHeatMap(view, &RankRow::step_s, "rank-steps", "Step time, rank by step", "step time",
                      {"fastest", "slowest"});
  if (MostSteps(view, &RankRow::data_wait_s) > 0) {
    html += RankHeatMap(view, &RankRow::data_wait_s, "rank-data-wait",
                        "Data wait per step, rank by step", "data wait", {"least", "most"});
  }
  const bool waits = std::any_of(view.rows.begin(), view.rows.end(), [](const RankRow& r) {
    return std::any_of(r.wait_s.begin(), r.wait_s.end(), [](double s) { return s > 0; });
  });
  if (waits) {
    html += RankHeatMap(view, &RankRow::wait_s, "rank-wait",
                        "Waiting for the other ranks per step, rank by step", "wait",
                        {"least", "most"});
  }
  return html + RanksTable(view) + "</section>\n";
}

// ---- the page ----------------------------------------------------------------

std::string UtcTime(int64_t unix_ns) {
  const time_t t = time_t(unix_ns / 1000000000);
  struct tm tm {};
  if (unix_ns <= 0 || gmtime_r(&t, &tm) == nullptr) return "";
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

std::string GiB(uint64_t bytes) { return Format("%.1f GiB", double(bytes) / double(1ull << 30)); }

std::string MetaList(const Run& run, const Analysis& analysis) {
  const RunMeta& m = run.meta;
  std::vector<std::pair<std::string, std::string>> rows;  // already escaped
  rows.push_back({"command", "<code>" + HtmlEscape(CommandLine(m.command)) + "</code>"});
  rows.push_back({"run directory", "<code>" + HtmlEscape(m.dir) + "</code>"});
  std::string host = m.host;
  if (m.cpus > 0) host += " · " + std::to_string(m.cpus) + " CPUs";
  if (m.mem_total_bytes > 0) host += " · " + GiB(m.mem_total_bytes) + " memory";
  rows.push_back({"host", HtmlEscape(host)});
  const std::string started = UtcTime(m.start_unix_ns);
  if (!started.empty()) rows.push_back({"started", HtmlEscape(started)});
  rows.push_back({"duration", HtmlEscape(Seconds(DurationS(run, analysis)))});
  std::string gpus = GpuWords(run);
  for (size_t i = 0; i < m.gpu_memory_total_bytes.size(); ++i) {
    gpus += (i == 0 ? " (" : ", ") + GiB(m.gpu_memory_total_bytes[i]);
    if (i + 1 == m.gpu_memory_total_bytes.size()) gpus += ")";
  }
  if (!m.gpu_status.empty()) gpus += " — " + m.gpu_status;
  rows.push_back({"GPUs", HtmlEscape(gpus)});
  std::string exit_code = "not recorded";
  if (m.exit_code) {
    exit_code = std::to_string(*m.exit_code) + (*m.exit_code == 0 ? "" : " (the command failed)");
  }
  rows.push_back({"exit code", HtmlEscape(exit_code)});
  std::string html = "<dl class=\"meta\">\n";
  for (const auto& [name, value] : rows) {
    html += "<dt>" + HtmlEscape(name) + "</dt><dd>" + value + "</dd>\n";
  }
  return html + "</dl>\n";
}

std::string Tiles(const Features& f) {
  std::vector<std::pair<std::string, std::string>> tiles;
  if (f.device_busy_pct) tiles.push_back({Percent(*f.device_busy_pct), "device busy"});
  if (f.data_wait_pct)
    tiles.push_back({Percent(*f.data_wait_pct), "of step time waiting for data"});
  if (f.steps > 0) tiles.push_back({std::to_string(f.steps), "steps"});
  if (f.step_time_median_s) tiles.push_back({Seconds(*f.step_time_median_s), "median step"});
  if (f.host_cpu_busy_pct) tiles.push_back({Percent(*f.host_cpu_busy_pct), "host CPU busy"});
  if (tiles.empty()) return "";
  std::string html = "<ul class=\"tiles\">";
  for (const auto& [value, what] : tiles) {
    html += "<li><b>" + HtmlEscape(value) + "</b><span>" + HtmlEscape(what) + "</span></li>";
  }
  return html + "</ul>\n";
}

std::string ConfidenceWords(double c) {
  const char* word = c >= 0.75 ? "high" : c >= 0.5 ? "medium" : "low";
  return std::string(word) + Format(" (%.0f%%)", c * 100);
}

std::string FindingsTable(const Analysis& analysis) {
  if (analysis.findings.empty()) {
    return "<p class=\"healthy-box\">" +
           HtmlEscape(HealthyWords(analysis.features, analysis.min_time_lost_pct)) + ".</p>\n";
  }
  std::string html =
      "<table class=\"findings\">\n<thead><tr><th>#</th><th>cause</th><th class=\"num\">time "
      "lost</th><th>what is wrong, and the evidence</th><th>fix</th><th>confidence</th></tr>"
      "</thead>\n<tbody>\n";
  for (size_t i = 0; i < analysis.findings.size(); ++i) {
    const Finding& finding = analysis.findings[i];
    html += "<tr><td class=\"num\">" + std::to_string(i + 1) + "</td>";
    html += "<td class=\"cause mono\">" + HtmlEscape(finding.cause) + "</td>";
    html += "<td class=\"num\">" + Format("%.1f s", finding.time_lost_s) + "<br>" +
            Percent(finding.time_lost_pct) + " of the run<div class=\"bar\" style=\"width:" +
            Format("%.0f", std::clamp(finding.time_lost_pct, 1.0, 100.0)) + "%\"></div></td>";
    html += "<td><div class=\"title\">" + HtmlEscape(finding.title) + "</div>";
    if (!finding.evidence.empty()) {
      html += "<ul class=\"evidence\">";
      for (const Evidence& e : finding.evidence) {
        html += "<li><b>" + HtmlEscape(ValueWithUnit(e.value, e.unit)) + "</b> " +
                HtmlEscape(e.text.empty() ? e.key : e.text) + "</li>";
      }
      html += "</ul>";
    }
    if (!finding.sites.empty()) {
      html +=
          "<table class=\"sites\"><thead><tr><th>call site</th><th>call</th><th "
          "class=\"num\">per step</th><th class=\"num\">time</th></tr></thead><tbody>";
      for (const SiteStat& x : finding.sites) {
        html += "<tr><td class=\"mono\">" + HtmlEscape(x.site) + "</td><td class=\"mono\">" +
                HtmlEscape(x.op) + "</td><td class=\"num\">" + HtmlEscape(PerStepWords(x, false)) +
                "</td><td class=\"num\">" + Seconds(x.total_s) + "</td></tr>";
      }
      html += "</tbody></table>";
    }
    html += "</td><td class=\"fix\">" + HtmlEscape(finding.fix);
    if (finding.fix_value) {
      html += "<br><code>" + HtmlEscape(finding.fix_value->first) + " = " +
              HtmlEscape(ValueWithUnit(finding.fix_value->second, "")) + "</code>";
    }
    for (const auto& [label, text] : PredictionLines(finding)) {
      html += "<br><i>" + HtmlEscape(label) + ":</i> " + HtmlEscape(text);
    }
    html += "</td><td class=\"confidence\">" + ConfidenceWords(finding.confidence) + "</td></tr>\n";
  }
  return html + "</tbody>\n</table>\n";
}

// Every measurement the rules saw, for the reader who wants to check them.
std::string MeasurementsTable(const Features& f) {
  std::vector<std::pair<std::string, std::string>> rows;
  auto add = [&rows](const std::string& what, const std::optional<double>& v,
                     const std::string& unit) {
    if (v) rows.push_back({what, unit == "s" ? Seconds(*v) : ValueWithUnit(*v, unit)});
  };
  add("run duration", f.duration_s, "s");
  add("device busy, mean", f.device_busy_pct, "%");
  add("idle gaps recur every", f.idle_period_s, "s");
  if (f.steps > 0) rows.push_back({"steps", std::to_string(f.steps)});
  add("median step time", f.step_time_median_s, "s");
  add("start-up, to the end of the first step", f.startup_s, "s");
  if (f.compiles > 0) {
    add("torch.compile, in all", f.compile_s, "s");
    add("torch.compile, during training", f.compile_in_window_s, "s");
  }
  add("data wait, share of step time", f.data_wait_pct, "%");
  add("host→device copy, share of step time", f.copy_pct, "%");
  add("communication, share of step time", f.comm_pct, "%");
  add("samples per second consumed by training", f.samples_per_s, "samples/s");
  auto add_int = [&add](const std::string& what, const std::optional<int64_t>& v) {
    add(what, v ? std::optional<double>(double(*v)) : std::nullopt, "");
  };
  add_int("loader threads", f.loader_threads);
  add_int("loader prefetch depth", f.loader_prefetch);
  add_int("loader batch size", f.loader_batch_size);
  add("loader CPU per sample",
      f.loader_cpu_ns_per_sample ? std::optional<double>(*f.loader_cpu_ns_per_sample / 1e9)
                                 : std::nullopt,
      "s");
  if (!PrecisionWords(f).empty()) rows.push_back({"training math", PrecisionWords(f)});
  if (!f.decode_mode.empty()) {
    rows.push_back({"JPEG decode (decode=)", DecodeModeWords(f)});
    if (f.decode_gpu_decoder) {
      add("JPEGs handed to the GPU, share of each batch now",
          f.decode_gpu_share ? std::optional<double>(100 * *f.decode_gpu_share) : std::nullopt,
          "%");
    }
    rows.push_back({"images decoded on the CPU / on the GPU",
                    Format("%.0f", double(f.decode_cpu_images)) +
                        Format(" / %.0f", double(f.decode_gpu_images))});
    if (!CpuDecodeRateWords(f).empty()) rows.push_back({"CPU decode rate", CpuDecodeRateWords(f)});
    add("GPU decode rate", f.decode_gpu_per_s, "images/s");
    if (f.decode_gpu_fallbacks > 0) {
      add_int("JPEGs the GPU decoder refused (decoded on the CPU)", f.decode_gpu_fallbacks);
    }
  }
  for (size_t i = 0; i < f.gpu_busy_pct.size(); ++i) {
    add("GPU " + std::to_string(i) + " busy, mean over training", f.gpu_busy_pct[i], "%");
  }
  add("GPU memory used, maximum", f.gpu_memory_used_max_pct, "%");
  add("busy GPU time clock-limited by power or heat", f.throttled_pct, "%");
  add("host CPU busy, mean of all cores", f.host_cpu_busy_pct, "%");
  add("host CPU iowait, mean", f.host_iowait_pct, "%");
  add("CPU used by the training process tree", f.tree_cpu_cores, "cores");
  add("CPU used by everything else", f.other_cpu_cores, "cores");
  add("training threads waiting for a CPU, mean", f.training_runq_wait_cores, "threads");
  add("host memory headroom, minimum", f.mem_headroom_pct, "%");
  add("disk reads, mean", f.disk_read_mb_per_s, "MB/s");
  add("checkpointing on the training thread", f.checkpoint_s, "s");
  if (f.checkpoints > 0) rows.push_back({"checkpoints", std::to_string(f.checkpoints)});
  std::string html = "<table class=\"measurements\">\n<tbody>\n";
  for (const auto& [what, value] : rows) {
    html += "<tr><td>" + HtmlEscape(what) + "</td><td class=\"num\">" + HtmlEscape(value) +
            "</td></tr>\n";
  }
  return html + "</tbody>\n</table>\n";
}

std::string LoaderTable(const Run& run) {
  if (run.loaders.empty()) return "";
  std::string html = "<h2>Loader counters</h2>\n<table class=\"loaders\">\n<tbody>\n";
  for (const LoaderCounters& l : run.loaders) {
    std::string values;
    for (const auto& [name, v] : l.values) {
      values += (values.empty() ? "" : " · ") + name + " " + std::to_string(v);
    }
    html += "<tr><td class=\"mono\">pid " + std::to_string(l.pid) + "</td><td class=\"mono\">" +
            HtmlEscape(values) + "</td></tr>\n";
  }
  return html + "</tbody>\n</table>\n";
}

std::string Verdict(const Run& run, const Analysis& analysis) {
  // Info findings sort last, so a first one means nothing was ranked.
  if (analysis.findings.empty() || analysis.findings.front().info) {
    return "<p class=\"verdict healthy\">" +
           HtmlEscape(HealthyWords(analysis.features, analysis.min_time_lost_pct)) + ".</p>\n";
  }
  const Finding& top = analysis.findings.front();
  const auto n = std::count_if(analysis.findings.begin(), analysis.findings.end(),
                               [](const Finding& x) { return !x.info; });
  return "<p class=\"verdict\">" + std::to_string(n) + (n == 1 ? " cause" : " causes") +
         " of lost device time. The largest, <b class=\"mono\">" + HtmlEscape(top.cause) +
         "</b>, costs " + Format("%.1f s", top.time_lost_s) + " (" + Percent(top.time_lost_pct) +
         ") of the " + Seconds(DurationS(run, analysis)) + " run.</p>\n";
}

std::string Basename(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

}  // namespace

std::string RenderHtml(const Run& run, const Analysis& analysis) {
  const Features& f = analysis.features;
  std::string html = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  html += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  html += "<title>saturate doctor: " + HtmlEscape(Basename(run.meta.dir)) + "</title>\n";
  html += "<style>" + std::string(svg::kPageStyle) + "</style>\n</head>\n<body>\n<main>\n";
  html += "<header>\n<h1>saturate doctor</h1>\n" + Verdict(run, analysis) +
          MetaList(run, analysis) + Tiles(f) + "</header>\n";
  html +=
      "<section id=\"findings\" aria-labelledby=\"findings-h\">\n<h2 id=\"findings-h\">"
      "Findings, by time lost</h2>\n" +
      FindingsTable(analysis) + "</section>\n";
  if (f.ranks.world_size > 0) html += RanksSection(f.ranks);
  html +=
      "<section id=\"charts\" aria-labelledby=\"charts-h\">\n<h2 id=\"charts-h\">Charts</h2>\n" +
      TimelineChart(run, analysis) + PhaseChart(f) + WaterfallChart(f) + IdleGapChart(f) +
      "</section>\n";
  html +=
      "<section id=\"measurements\" aria-labelledby=\"measurements-h\">\n"
      "<h2 id=\"measurements-h\">Measurements</h2>\n" +
      MeasurementsTable(f) + LoaderTable(run) + "</section>\n";
  std::vector<std::string> notes = run.warnings;
  if (!StartupWords(f).empty()) notes.push_back(StartupWords(f));
  if (!AutoWords(f).empty()) notes.push_back(AutoWords(f));
  if (!notes.empty()) {
    html += "<section id=\"notes\">\n<h2>Notes from reading the run</h2>\n<ul>\n";
    for (const std::string& w : notes) html += "<li>" + HtmlEscape(w) + "</li>\n";
    html += "</ul>\n</section>\n";
  }
  html +=
      "<footer>Written by saturate doctor. The same numbers as JSON: findings.json in the run "
      "directory.</footer>\n</main>\n</body>\n</html>\n";
  return html;
}

}  // namespace saturate::doctor
