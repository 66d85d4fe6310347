// PrometheusText: builds a page in the Prometheus text exposition format
// (version 0.0.4), the format every Prometheus server scrapes. One family
// (HELP, TYPE, samples) at a time; label values and help text are escaped
// as the format requires, so any GPU name or command line is safe.
//
// Thread-safety: none; build a page on one thread.
#ifndef SATURATE_WATCH_PROMETHEUS_H_
#define SATURATE_WATCH_PROMETHEUS_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace saturate::watch {

using Labels = std::vector<std::pair<std::string, std::string>>;

class PrometheusText {
 public:
  // Starts a family; `type` is "gauge" or "counter". A family must not be
  // started twice in one page.
  void Family(std::string_view name, std::string_view type, std::string_view help);
  // A sample of the current family. Non-finite values are written as the
  // format spells them (NaN, +Inf, -Inf).
  void Sample(const Labels& labels, double value);

  const std::string& text() const { return text_; }

 private:
  std::string text_;
  std::string family_;
};

// The Content-Type a /metrics endpoint serves this format with.
inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace saturate::watch

#endif  // SATURATE_WATCH_PROMETHEUS_H_
