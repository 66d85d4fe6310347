#include "job/bootstrap.h"

#include <cstdlib>
#include <filesystem>

#include "base/file.h"

namespace saturate::job {

EnvVars BootstrapEnv(const std::string& dir, const char* parent_pythonpath) {
  std::string path = dir;
  if (parent_pythonpath != nullptr && *parent_pythonpath != '\0') {
    path += ":";
    path += parent_pythonpath;
  }
  return {{"PYTHONPATH", path}, {"SATURATE_AUTO", "1"}};
}

Result<EnvVars> WriteBootstrap(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IOError("cannot create " + dir + ": " + ec.message());
  const std::string absolute = fs::absolute(dir, ec).lexically_normal().string();
  if (ec) return Status::IOError("cannot resolve " + dir + ": " + ec.message());
  for (const BootstrapFile& f : BootstrapFiles()) {
    SATURATE_RETURN_IF_ERROR(WriteFileAtomic(absolute + "/" + std::string(f.name), f.content));
  }
  return BootstrapEnv(absolute, std::getenv("PYTHONPATH"));
}

}  // namespace saturate::job
