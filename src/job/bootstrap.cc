#include "job/bootstrap.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/file.h"
#include "base/rank_env.h"

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

namespace {

// docs/watch.md's meta.json, without samples or an end.
Status WriteMetaIfMissing(const std::string& dir, const std::vector<std::string>& command,
                          int pid) {
  const std::string path = dir + "/meta.json";
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) return Status::OK();
  const auto since_epoch = [](auto clock_now) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(clock_now.time_since_epoch())
        .count();
  };
  const nlohmann::json meta = {
      {"saturate_version", "0.1.0"},
      {"recorder", "saturate run-instrumented"},
      {"host", base::HostName()},
      {"cpus", sysconf(_SC_NPROCESSORS_ONLN)},
      {"command", command},
      {"pid", pid},
      {"auto_instrument", true},
      {"start_unix_ns", since_epoch(std::chrono::system_clock::now())},
      {"start_monotonic_ns", since_epoch(std::chrono::steady_clock::now())},
      {"schema", "docs/watch.md"}};
  return WriteFileAtomic(path, meta.dump(2) + "\n");
}

}  // namespace

Result<EnvVars> PrepareInstrumentedRun(const std::string& run_dir,
                                       const std::vector<std::string>& command, int pid) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) return Status::IOError("cannot create " + run_dir + ": " + ec.message());
  const std::string absolute = fs::absolute(run_dir, ec).lexically_normal().string();
  if (ec) return Status::IOError("cannot resolve " + run_dir + ": " + ec.message());
  SATURATE_RETURN_IF_ERROR(WriteMetaIfMissing(absolute, command, pid));
  SATURATE_ASSIGN_OR_RETURN(EnvVars env, WriteBootstrap(absolute + "/.auto"));
  env.emplace_back("SATURATE_RUN_DIR", absolute);
  return env;
}

}  // namespace saturate::job
