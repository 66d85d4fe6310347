// Small text helpers of the fleet report: printf-style numbers and UTC clock
// times. Internal to src/fleet. Thread-safety: reentrant functions.
#ifndef SATURATE_FLEET_TEXT_H_
#define SATURATE_FLEET_TEXT_H_

#include <cstdio>
#include <ctime>
#include <string>

namespace saturate::fleet::text {

inline std::string Fmt(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

// "2026-11-26 14:16:24" (UTC) for unix seconds.
inline std::string Clock(double unix_s) {
  const std::time_t t = std::time_t(unix_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

}  // namespace saturate::fleet::text

#endif  // SATURATE_FLEET_TEXT_H_
