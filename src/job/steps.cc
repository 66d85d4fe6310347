#include "job/steps.h"

#include <filesystem>
#include <fstream>

namespace saturate::job {

StepMarks CountStepMarks(const std::string& run_dir) {
  namespace fs = std::filesystem;
  StepMarks marks;
  std::error_code ec;
  // Every rank of a job takes the same steps: rank 0's are the job's.
  const fs::path rank0 = fs::path(run_dir) / "rank-0";
  const fs::path dir = fs::is_directory(rank0, ec) ? rank0 : fs::path(run_dir);
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename();
    if (!name.starts_with("spans-") || !name.ends_with(".jsonl")) continue;
    int64_t* count = name.ends_with("-auto.jsonl") ? &marks.auto_marks : &marks.explicit_marks;
    std::ifstream in(entry.path());
    std::string line;
    while (std::getline(in, line)) {
      if (in.eof()) break;  // no newline yet: the writer is mid-line
      // The writers write compact JSON; tolerate a space after ':'.
      *count += line.find("\"ph\":\"step\"") != std::string::npos ||
                line.find("\"ph\": \"step\"") != std::string::npos;
    }
  }
  return marks;
}

}  // namespace saturate::job
