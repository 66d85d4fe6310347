// Test helpers: tar archives and TFRecord files built in memory.
// Thread-safety: pure functions.
#ifndef SATURATE_FORMATS_TEST_UTIL_H_
#define SATURATE_FORMATS_TEST_UTIL_H_

#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace saturate::formats {

// A pax tar archive of regular files (libarchive's writer), as bytes.
std::string MakeTar(const std::vector<std::pair<std::string, std::string>>& members);

// A TFRecord file of the given payloads.
std::string MakeTfrecord(const std::vector<std::string>& records);

// Writes `bytes` to `path` (test failure on error).
void WriteFile(const std::string& path, const std::string& bytes);

// A field's bytes as a string, for comparisons.
inline std::string Str(std::span<const std::byte> b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

}  // namespace saturate::formats

#endif  // SATURATE_FORMATS_TEST_UTIL_H_
