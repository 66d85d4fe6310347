// Test helpers shared by unit tests: scratch directories and Status matchers.
// Thread-safety: not thread-safe; use from the test's main thread.
#ifndef SATURATE_BASE_TESTING_H_
#define SATURATE_BASE_TESTING_H_

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <string_view>

#include "saturate/base/status.h"

namespace saturate::testing {

// A fresh empty directory for the current test, removed when destroyed.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string Join(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// The bytes of the file at `path`; a test failure, and "", when it cannot be read.
std::string ReadFileOrFail(const std::string& path);

// Passes when `s` has `code` and its message contains every part.
::testing::AssertionResult HasError(const Status& s, StatusCode code,
                                    std::initializer_list<std::string_view> parts);

}  // namespace saturate::testing

#define SATURATE_ASSERT_OK(expr)           \
  do {                                     \
    const ::saturate::Status _s = (expr);  \
    ASSERT_TRUE(_s.ok()) << _s.ToString(); \
  } while (0)
#define SATURATE_EXPECT_OK(expr)           \
  do {                                     \
    const ::saturate::Status _s = (expr);  \
    EXPECT_TRUE(_s.ok()) << _s.ToString(); \
  } while (0)
// Unwraps a Result<T> into `lhs` or fails the test.
#define SATURATE_ASSERT_OK_AND_ASSIGN(lhs, rexpr) \
  SATURATE_ASSERT_OK_AND_ASSIGN_IMPL_(SATURATE_CONCAT_(_res_, __LINE__), lhs, rexpr)
#define SATURATE_ASSERT_OK_AND_ASSIGN_IMPL_(res, lhs, rexpr) \
  auto res = (rexpr);                                        \
  ASSERT_TRUE(res.ok()) << res.status().ToString();          \
  lhs = std::move(res).value()

#endif  // SATURATE_BASE_TESTING_H_
