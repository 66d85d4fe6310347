#include "base/json_lines.h"

#include <string>
#include <utility>
#include <vector>

namespace saturate {

Status ForEachJsonLine(std::string_view text, std::string_view source,
                       const std::function<Status(const nlohmann::json&, size_t)>& fn,
                       bool* torn_last_line) {
  *torn_last_line = false;
  std::vector<std::pair<std::string_view, size_t>> lines;  // non-blank, with their numbers
  for (size_t number = 1; !text.empty(); ++number) {
    const size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    if (line.find_first_not_of(" \t\r") != std::string_view::npos) lines.emplace_back(line, number);
  }
  for (size_t i = 0; i < lines.size(); ++i) {
    const auto [line, number] = lines[i];
    const std::string where = std::string(source) + ":" + std::to_string(number);
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      if (i + 1 == lines.size()) {
        *torn_last_line = true;
        break;
      }
      return Status::Corruption(where + ": not a JSON object");
    }
    Status s = fn(j, number);
    if (!s.ok()) return s.WithContext(where);
  }
  return Status::OK();
}

}  // namespace saturate
