#include "job/bootstrap.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/testing.h"

namespace saturate::job {
namespace {

TEST(BootstrapTest, EmbedsBothFilesAsTheyAreInTheSourceTree) {
  ASSERT_EQ(BootstrapFiles().size(), 2u);
  EXPECT_EQ(BootstrapFiles()[0].name, "sitecustomize.py");
  EXPECT_EQ(BootstrapFiles()[1].name, "saturate_autotrace.py");
  for (const BootstrapFile& f : BootstrapFiles()) {
    EXPECT_EQ(f.content, testing::ReadFileOrFail(std::string(SATURATE_BOOTSTRAP_SOURCE_DIR) + "/" +
                                                 std::string(f.name)))
        << f.name << " is stale: the build did not regenerate bootstrap_files.cc";
  }
}

TEST(BootstrapTest, EnvChainsAnExistingPythonPath) {
  EXPECT_EQ(BootstrapEnv("/run/.auto", nullptr),
            (EnvVars{{"PYTHONPATH", "/run/.auto"}, {"SATURATE_AUTO", "1"}}));
  EXPECT_EQ(BootstrapEnv("/run/.auto", ""),
            (EnvVars{{"PYTHONPATH", "/run/.auto"}, {"SATURATE_AUTO", "1"}}));
  EXPECT_EQ(BootstrapEnv("/run/.auto", "/mine:/theirs"),
            (EnvVars{{"PYTHONPATH", "/run/.auto:/mine:/theirs"}, {"SATURATE_AUTO", "1"}}));
}

TEST(BootstrapTest, WritesTheFilesAndReturnsAnAbsolutePath) {
  testing::TempDir dir;
  const std::string cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  const char* saved = getenv("PYTHONPATH");
  const std::string saved_value = saved != nullptr ? saved : "";
  setenv("PYTHONPATH", "/opt/mine", 1);
  Result<EnvVars> env = WriteBootstrap("run/.auto");  // relative, parents created
  if (saved != nullptr) {
    setenv("PYTHONPATH", saved_value.c_str(), 1);
  } else {
    unsetenv("PYTHONPATH");
  }
  std::filesystem::current_path(cwd);
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  const std::string abs = dir.path() + "/run/.auto";
  ASSERT_EQ(env->size(), 2u);
  EXPECT_EQ((*env)[0], (std::pair<std::string, std::string>{"PYTHONPATH", abs + ":/opt/mine"}));
  EXPECT_EQ((*env)[1], (std::pair<std::string, std::string>{"SATURATE_AUTO", "1"}));
  for (const BootstrapFile& f : BootstrapFiles()) {
    EXPECT_EQ(testing::ReadFileOrFail(abs + "/" + std::string(f.name)), f.content) << f.name;
  }
  // Again into the same folder (tune's trials share one): replaced, no error.
  SATURATE_ASSERT_OK(WriteBootstrap(abs).status());
}

TEST(BootstrapTest, UnwritableFolderIsAnError) {
  testing::TempDir dir;
  std::ofstream(dir.Join("file")) << "x";
  EXPECT_FALSE(WriteBootstrap(dir.Join("file/.auto")).ok());
}

TEST(BootstrapTest, PreparesARunForACommandThatRecordsItself) {
  testing::TempDir dir;
  const std::string run = dir.Join("runs/exp1");
  Result<EnvVars> env = PrepareInstrumentedRun(run, {"python", "train.py"}, 4242);
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  ASSERT_EQ(env->size(), 3u);
  EXPECT_EQ((*env)[0].second.rfind(run + "/.auto", 0), 0u);  // PYTHONPATH first
  EXPECT_EQ((*env)[2], (std::pair<std::string, std::string>{"SATURATE_RUN_DIR", run}));
  nlohmann::json meta = nlohmann::json::parse(testing::ReadFileOrFail(run + "/meta.json"));
  EXPECT_EQ(meta["recorder"], "saturate run-instrumented");
  EXPECT_EQ(meta["pid"], 4242);
  EXPECT_EQ(meta["command"], (std::vector<std::string>{"python", "train.py"}));
  EXPECT_TRUE(meta.contains("start_monotonic_ns"));
  EXPECT_FALSE(meta.contains("samples_file"));
  // An outer watch's meta.json stays as it is.
  std::ofstream(run + "/meta.json", std::ios::trunc) << "{\"recorder\": \"outer\"}\n";
  SATURATE_ASSERT_OK(PrepareInstrumentedRun(run, {"python"}, 1).status());
  EXPECT_EQ(testing::ReadFileOrFail(run + "/meta.json"), "{\"recorder\": \"outer\"}\n");
}

}  // namespace
}  // namespace saturate::job
