#include "saturate/base/status.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace saturate {
namespace {

Status FailIfNegative(int x) {
  if (x < 0) return Status::InvalidArgument("x is negative: " + std::to_string(x));
  return Status::OK();
}

Result<int> Half(int x) {
  if (x % 2 != 0) return Status::InvalidArgument("odd");
  return x / 2;
}

Status Chain(int x, int* out) {
  SATURATE_RETURN_IF_ERROR(FailIfNegative(x));
  SATURATE_ASSIGN_OR_RETURN(int h, Half(x));
  SATURATE_ASSIGN_OR_RETURN(*out, Half(h));
  return Status::OK();
}

TEST(StatusTest, OkByDefault) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.ToString(), "ok");
}

TEST(StatusTest, FactoriesSetCodeAndMessage) {
  Status s = Status::Corruption("shard-00001.srec: record 3: checksum mismatch");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_EQ(s.ToString(), "corruption: shard-00001.srec: record 3: checksum mismatch");
  EXPECT_EQ(Status::NotFound("x").code(), StatusCode::kNotFound);
  EXPECT_EQ(Status::AlreadyExists("x").code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(Status::Unimplemented("x").code(), StatusCode::kUnimplemented);
}

TEST(StatusTest, FromErrnoAppendsReason) {
  Status s = Status::FromErrno("open /nope", ENOENT);
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_NE(s.message().find("open /nope: "), std::string::npos);
  EXPECT_NE(s.message().find("No such file"), std::string::npos);
}

TEST(StatusTest, WithContextPrefixesAndKeepsCode) {
  Status s = Status::Corruption("bad magic").WithContext("data/shard-00000.srec");
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_EQ(s.message(), "data/shard-00000.srec: bad magic");
  EXPECT_TRUE(Status::OK().WithContext("ignored").ok());
}

TEST(StatusTest, MacrosPropagateFirstError) {
  int out = 0;
  EXPECT_TRUE(Chain(8, &out).ok());
  EXPECT_EQ(out, 2);
  EXPECT_EQ(Chain(-1, &out).message(), "x is negative: -1");
  EXPECT_EQ(Chain(6, &out).message(), "odd");  // 6 -> 3, then Half(3) fails
  EXPECT_EQ(Chain(3, &out).code(), StatusCode::kInvalidArgument);
}

TEST(ResultTest, HoldsValueOrStatus) {
  Result<std::string> r = std::string("abc");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "abc");
  EXPECT_EQ(r->size(), 3u);
  Result<std::string> e = Status::NotFound("missing");
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace saturate
