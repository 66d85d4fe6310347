#include "tune/measure.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "doctor/analysis.h"
#include "tune/stats.h"

namespace saturate::tune {
namespace {

size_t WarmupCount(size_t n, const MeasureOptions& options, int64_t at_least) {
  const auto by_fraction =
      static_cast<size_t>(std::ceil(static_cast<double>(n) * options.warmup_fraction));
  return std::max(by_fraction, static_cast<size_t>(std::max<int64_t>(at_least, 0)));
}

// Steps per second over the marks after the warm-up, and its noise from up
// to four equal stretches.
void StepRate(const std::vector<int64_t>& marks, const MeasureOptions& options, Measurement* m) {
  const size_t skip = WarmupCount(marks.size(), options, options.warmup_steps);
  if (marks.size() < skip + 2) return;
  const size_t first = skip, last = marks.size() - 1;
  const double span_s = static_cast<double>(marks[last] - marks[first]) / 1e9;
  if (!(span_s > 0)) return;
  const size_t intervals = last - first;
  m->measured_steps = static_cast<int64_t>(intervals);
  m->throughput = static_cast<double>(intervals) / span_s;
  const size_t chunks = std::min<size_t>(4, intervals);
  std::vector<double> rates;
  for (size_t c = 0; c < chunks; ++c) {
    const size_t a = first + intervals * c / chunks, b = first + intervals * (c + 1) / chunks;
    const double s = static_cast<double>(marks[b] - marks[a]) / 1e9;
    if (b > a && s > 0) rates.push_back(static_cast<double>(b - a) / s);
  }
  m->noise_rel = RelativeStandardError(rates);
}

}  // namespace

Measurement MeasureRun(const doctor::Run& run, const MeasureOptions& options) {
  Measurement m;
  const doctor::Features f = doctor::ComputeFeatures(run);
  m.duration_s = f.duration_s;
  m.device_busy_pct = f.device_busy_pct;
  m.cpu_cores = f.tree_cpu_cores;
  if (f.tree_rss_max_bytes) m.rss_peak_bytes = static_cast<uint64_t>(*f.tree_rss_max_bytes);
  for (const doctor::SamplePoint& s : run.samples) {
    for (const doctor::GpuPoint& g : s.gpus) {
      if (g.memory_used_bytes) {
        m.gpu_memory_peak_bytes =
            std::max(m.gpu_memory_peak_bytes.value_or(0), *g.memory_used_bytes);
      }
    }
  }
  // The training process: the one that marked the most steps.
  const std::vector<int64_t>* marks = nullptr;
  int pid = 0;
  for (const auto& [p, v] : run.step_marks_ns) {
    if (marks == nullptr || v.size() > marks->size()) {
      marks = &v;
      pid = p;
    }
  }
  if (marks == nullptr) return m;
  m.steps = static_cast<int64_t>(marks->size());
  for (const doctor::LoaderCounters& l : run.loaders) {
    const auto it = l.values.find("batch_size");
    if (l.pid == pid && it != l.values.end() && it->second > 0) m.batch_size = it->second;
  }
  StepRate(*marks, options, &m);
  m.unit = "steps/s";
  if (m.throughput && m.batch_size) {
    *m.throughput *= static_cast<double>(*m.batch_size);
    m.unit = "samples/s";
  }
  return m;
}

std::optional<MetricValue> SteadyMetric(const std::vector<double>& values,
                                        const MeasureOptions& options) {
  if (values.empty()) return std::nullopt;
  if (values.size() < 3) return MetricValue{values.back(), 0};
  const size_t skip = std::min(values.size() - 1, WarmupCount(values.size(), options, 1));
  std::vector<double> steady(values.begin() + static_cast<long>(skip), values.end());
  const double noise = RelativeStandardError(steady);
  std::sort(steady.begin(), steady.end());
  const size_t n = steady.size();
  const double median = n % 2 == 1 ? steady[n / 2] : (steady[n / 2 - 1] + steady[n / 2]) / 2;
  return MetricValue{median, noise};
}

Result<MetricScanner> MetricScanner::Create(const std::string& pattern) {
  try {
    return MetricScanner(std::regex(pattern, std::regex::ECMAScript));
  } catch (const std::regex_error& e) {
    return Status::InvalidArgument("--metric '" + pattern + "': not a regular expression (" +
                                   e.what() + ")");
  }
}

void MetricScanner::Add(std::string_view chunk) {
  partial_.append(chunk);
  size_t start = 0;
  while (true) {
    const size_t nl = partial_.find('\n', start);
    if (nl == std::string::npos) break;
    ScanLine(partial_.substr(start, nl - start));
    start = nl + 1;
  }
  partial_.erase(0, start);
  // A line without end (a progress bar redrawn with \r) must not grow forever.
  if (partial_.size() > (1 << 16)) partial_.erase(0, partial_.size() - (1 << 16));
}

void MetricScanner::Finish() {
  if (!partial_.empty()) ScanLine(partial_);
  partial_.clear();
}

void MetricScanner::ScanLine(const std::string& line) {
  // A line may carry several readings (progress bars redraw with \r).
  auto begin = std::sregex_iterator(line.begin(), line.end(), re_);
  for (auto it = begin; it != std::sregex_iterator(); ++it) {
    const std::smatch& match = *it;
    const std::string text = match.size() > 1 ? match[1].str() : match[0].str();
    double v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec == std::errc() && end == text.data() + text.size() && std::isfinite(v)) {
      values_.push_back(v);
    }
  }
}

}  // namespace saturate::tune
