#include "base/testing.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "base/file.h"

namespace saturate::testing {

TempDir::TempDir() {
  const char* root = std::getenv("SATURATE_TEST_TMPDIR");
  std::filesystem::path base = root != nullptr ? root : std::filesystem::temp_directory_path();
  std::filesystem::create_directories(base);
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info != nullptr ? std::string(info->test_suite_name()) + "." + info->name()
                                     : std::string("test");
  for (char& c : name) {
    if (c == '/') c = '_';
  }
  std::string templ = (base / (name + ".XXXXXX")).string();
  char* made = ::mkdtemp(templ.data());
  if (made == nullptr) std::abort();
  path_ = made;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string ReadFileOrFail(const std::string& path) {
  Result<std::string> text = ReadFileToString(path);
  EXPECT_TRUE(text.ok()) << text.status().ToString();
  return text.ok() ? *text : std::string();
}

::testing::AssertionResult HasError(const Status& s, StatusCode code,
                                    std::initializer_list<std::string_view> parts) {
  if (s.code() != code) return ::testing::AssertionFailure() << "got " << s.ToString();
  for (std::string_view part : parts) {
    if (s.message().find(part) == std::string::npos) {
      return ::testing::AssertionFailure() << "'" << part << "' not in " << s.ToString();
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace saturate::testing
