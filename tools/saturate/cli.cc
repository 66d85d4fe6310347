#include "cli.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>

namespace saturate::cli {

int ReportError(std::string_view command, const Status& status) {
  std::cerr << "saturate " << command << ": " << status.ToString() << "\n";
  switch (status.code()) {
    case StatusCode::kOk:
      return kExitOk;
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
    case StatusCode::kAlreadyExists:
    case StatusCode::kUnavailable:
      return kExitUsage;
    case StatusCode::kCorruption:
      return kExitCorrupt;
    case StatusCode::kIOError:
      return kExitIO;
    case StatusCode::kCancelled:
      return kExitCancelled;
    default:
      return kExitInternal;
  }
}

Result<uint64_t> ParseSize(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos;
  if (pos == 0 || pos > 15) return Status::InvalidArgument("bad size '" + std::string(text) + "'");
  uint64_t n = std::stoull(std::string(text.substr(0, pos)));
  std::string unit(text.substr(pos));
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  int shift = 0;
  if (unit.empty() || unit == "b") {
    shift = 0;
  } else if (unit == "k" || unit == "kb" || unit == "kib") {
    shift = 10;
  } else if (unit == "m" || unit == "mb" || unit == "mib") {
    shift = 20;
  } else if (unit == "g" || unit == "gb" || unit == "gib") {
    shift = 30;
  } else {
    return Status::InvalidArgument("bad size unit in '" + std::string(text) +
                                   "' (use B, KiB, MiB or GiB)");
  }
  if (n == 0) return Status::InvalidArgument("size must be positive: '" + std::string(text) + "'");
  if (n > (UINT64_MAX >> shift))
    return Status::InvalidArgument("size too large: '" + std::string(text) + "'");
  return n << shift;
}

Result<int64_t> ParseDurationNs(std::string_view text) {
  const std::string t(text);
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  const std::string unit(end);
  double scale = 0;
  if (unit == "ns") {
    scale = 1;
  } else if (unit == "us") {
    scale = 1e3;
  } else if (unit == "ms") {
    scale = 1e6;
  } else if (unit == "s") {
    scale = 1e9;
  } else if (unit == "m" || unit == "min") {
    scale = 60e9;
  } else if (unit == "h") {
    scale = 3600e9;
  } else if (unit == "d") {
    scale = 86400e9;
  }
  if (end == t.c_str() || scale == 0) {
    return Status::InvalidArgument("bad duration '" + t +
                                   "' (e.g. 100ms, 1s, 2.5s, 5min, 24h, 7d)");
  }
  const double ns = v * scale;
  if (!(ns >= 1) || ns > 9e18) {
    return Status::InvalidArgument("duration out of range: '" + t + "'");
  }
  return static_cast<int64_t>(ns);
}

std::string FormatBytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

std::string FormatDuration(double seconds) {
  auto s = static_cast<long>(std::lround(std::max(0.0, seconds)));
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof(buf), "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%ld:%02ld", s / 60, s % 60);
  }
  return buf;
}

ProgressBar::ProgressBar(std::string label, std::string unit)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      enabled_(::isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

void ProgressBar::Update(uint64_t done, uint64_t total, uint64_t bytes) {
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (drawn_ && done < total && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  drawn_ = true;
  double elapsed = std::chrono::duration<double>(now - start_).count();
  double frac = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 0;
  double rate = elapsed > 0 ? static_cast<double>(done) / elapsed : 0;
  double eta = rate > 0 ? static_cast<double>(total - std::min(done, total)) / rate : 0;
  constexpr int kWidth = 28;
  int filled = static_cast<int>(frac * kWidth);
  std::string bar(static_cast<size_t>(filled), '=');
  if (filled < kWidth) bar += '>' + std::string(static_cast<size_t>(kWidth - filled - 1), ' ');
  std::fprintf(stderr, "\r%s [%s] %llu/%llu %5.1f%% %.0f %s/s %s ETA %s\033[K", label_.c_str(),
               bar.c_str(), static_cast<unsigned long long>(done),
               static_cast<unsigned long long>(total), frac * 100, rate, unit_.c_str(),
               bytes ? FormatBytes(bytes).c_str() : "", FormatDuration(eta).c_str());
  std::fflush(stderr);
}

void ProgressBar::Finish() {
  if (enabled_ && drawn_) std::fprintf(stderr, "\r\033[K");
}

}  // namespace saturate::cli
