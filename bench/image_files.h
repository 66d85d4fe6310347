// Image files for the decode benches (decode_bound, crop_decode_bench): which
// files under a folder are images, and their bytes. Thread-safety: reentrant.
#ifndef SATURATE_BENCH_IMAGE_FILES_H_
#define SATURATE_BENCH_IMAGE_FILES_H_

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "base/file.h"

namespace saturate::bench {

inline bool IsImage(const std::filesystem::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

// The file's bytes; empty when it cannot be read.
inline std::vector<std::byte> ReadFile(const std::filesystem::path& p) {
  Result<std::string> text = ReadFileToString(p.string());
  if (!text.ok()) return {};
  std::vector<std::byte> out(text->size());
  std::memcpy(out.data(), text->data(), text->size());
  return out;
}

}  // namespace saturate::bench

#endif  // SATURATE_BENCH_IMAGE_FILES_H_
