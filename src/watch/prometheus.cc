#include "watch/prometheus.h"

#include <cmath>
#include <cstdio>

namespace saturate::watch {
namespace {

// Label values escape \, " and newline; HELP text escapes \ and newline.
std::string Escape(std::string_view s, bool quotes) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quotes) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

}  // namespace

void PrometheusText::Family(std::string_view name, std::string_view type, std::string_view help) {
  family_ = name;
  text_ += "# HELP " + family_ + " " + Escape(help, /*quotes=*/false) + "\n";
  text_ += "# TYPE " + family_ + " " + std::string(type) + "\n";
}

void PrometheusText::Sample(const Labels& labels, double value) {
  text_ += family_;
  if (!labels.empty()) {
    text_ += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i > 0) text_ += ',';
      text_ += labels[i].first + "=\"" + Escape(labels[i].second, /*quotes=*/true) + "\"";
    }
    text_ += '}';
  }
  text_ += ' ' + FormatValue(value) + '\n';
}

}  // namespace saturate::watch
