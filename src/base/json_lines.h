// JSON Lines reading with crash semantics: the run directory's files
// (samples.jsonl, spans-*.jsonl) are appended line by line, so a process
// killed mid-write leaves at most its last line torn. That line is skipped
// and reported; a bad line anywhere else is corruption.
//
// Thread-safety: reentrant.
#ifndef SATURATE_BASE_JSON_LINES_H_
#define SATURATE_BASE_JSON_LINES_H_

#include <cstddef>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <type_traits>

#include "saturate/base/status.h"

namespace saturate {

// Calls `fn(object, line_number)` for each non-blank line of `text` (from
// `source`, named in messages). A last line that is not a JSON object is
// skipped and sets *torn_last_line; another is Corruption "SOURCE:LINE: not
// a JSON object". An error `fn` returns gets the "SOURCE:LINE" context.
Status ForEachJsonLine(std::string_view text, std::string_view source,
                       const std::function<Status(const nlohmann::json&, size_t)>& fn,
                       bool* torn_last_line);

// j[key] when it is there with the right type, else `fallback`. Unlike
// json::value(), never throws: files written by crashed, older or foreign
// processes may hold anything. Integral types take integers only (a float
// out of their range would be undefined to convert).
inline std::string JsonValueOr(const nlohmann::json& j, const char* key, const char* fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string(fallback);
}
template <typename T>
T JsonValueOr(const nlohmann::json& j, const char* key, T fallback) {
  auto it = j.find(key);
  if (it == j.end()) return fallback;
  if constexpr (std::is_same_v<T, bool>) {
    return it->is_boolean() ? it->template get<bool>() : fallback;
  } else if constexpr (std::is_same_v<T, std::string>) {
    return it->is_string() ? it->template get<std::string>() : fallback;
  } else if constexpr (std::is_integral_v<T>) {
    return it->is_number_integer() ? it->template get<T>() : fallback;
  } else {
    return it->is_number() ? it->template get<T>() : fallback;
  }
}

}  // namespace saturate

#endif  // SATURATE_BASE_JSON_LINES_H_
