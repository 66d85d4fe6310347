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
#include <string_view>

#include "saturate/base/status.h"

namespace saturate {

// Calls `fn(object, line_number)` for each non-blank line of `text` (from
// `source`, named in messages). A last line that is not a JSON object is
// skipped and sets *torn_last_line; another is Corruption "SOURCE:LINE: not
// a JSON object". An error `fn` returns gets the "SOURCE:LINE" context.
Status ForEachJsonLine(std::string_view text, std::string_view source,
                       const std::function<Status(const nlohmann::json&, size_t)>& fn,
                       bool* torn_last_line);

}  // namespace saturate

#endif  // SATURATE_BASE_JSON_LINES_H_
