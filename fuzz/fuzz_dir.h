// A scratch directory for the fuzzers that read files (run_fuzz, job_fuzz):
// made once per process under the temp directory, removed when it exits.
// Thread-safety: libFuzzer calls one input at a time.
#ifndef SATURATE_FUZZ_FUZZ_DIR_H_
#define SATURATE_FUZZ_FUZZ_DIR_H_

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace saturate::fuzz {

// `name` is the directory's prefix; the first call decides it.
inline const std::string& ScratchDir(const char* name) {
  static const std::string dir = [name] {
    std::string pattern =
        (std::filesystem::temp_directory_path() / (std::string(name) + ".XXXXXX")).string();
    if (mkdtemp(pattern.data()) == nullptr) abort();
    return pattern;
  }();
  static const int registered = std::atexit([] {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  });
  (void)registered;
  return dir;
}

// Replaces `dir`/`name` with `text`.
inline void WriteFile(const std::string& dir, const std::string& name, std::string_view text) {
  std::ofstream(dir + "/" + name, std::ios::binary | std::ios::trunc) << text;
}

}  // namespace saturate::fuzz

#endif  // SATURATE_FUZZ_FUZZ_DIR_H_
