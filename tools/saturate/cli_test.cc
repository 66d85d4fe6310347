#include "cli.h"

#include <gtest/gtest.h>

namespace saturate::cli {
namespace {

TEST(ParseDurationTest, UnitsAndErrors) {
  EXPECT_EQ(*ParseDurationNs("100ms"), 100'000'000);
  EXPECT_EQ(*ParseDurationNs("2.5s"), 2'500'000'000);
  EXPECT_EQ(*ParseDurationNs("250us"), 250'000);
  EXPECT_EQ(*ParseDurationNs("5min"), 300'000'000'000);
  EXPECT_EQ(*ParseDurationNs("24h"), 86'400'000'000'000);
  EXPECT_EQ(*ParseDurationNs("7d"), 7 * 86'400'000'000'000);
  for (const char* bad : {"", "100", "ms", "1y", "-1s", "0s", "1e30s", "nan s"}) {
    EXPECT_FALSE(ParseDurationNs(bad).ok()) << bad;
  }
}

TEST(ParseSizeTest, UnitsAndErrors) {
  EXPECT_EQ(*ParseSize("4096"), 4096u);
  EXPECT_EQ(*ParseSize("64KiB"), 64u << 10);
  EXPECT_EQ(*ParseSize("256MiB"), 256u << 20);
  EXPECT_EQ(*ParseSize("1g"), uint64_t{1} << 30);
  EXPECT_EQ(*ParseSize("3MB"), 3u << 20);
  for (const char* bad : {"", "MiB", "0", "12 MiB", "5TiB", "-3", "999999999999999G"}) {
    auto r = ParseSize(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(FormatTest, BytesAndDurations) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(uint64_t{3} << 30), "3.0 GiB");
  EXPECT_EQ(FormatDuration(65), "1:05");
  EXPECT_EQ(FormatDuration(7390), "2:03:10");
  EXPECT_EQ(FormatDuration(-1), "0:00");
}

TEST(ReportErrorTest, StatusCodesMapToDocumentedExitCodes) {
  EXPECT_EQ(ReportError("t", Status::InvalidArgument("x")), kExitUsage);
  EXPECT_EQ(ReportError("t", Status::NotFound("x")), kExitUsage);
  EXPECT_EQ(ReportError("t", Status::AlreadyExists("x")), kExitUsage);
  EXPECT_EQ(ReportError("t", Status::Corruption("x")), kExitCorrupt);
  EXPECT_EQ(ReportError("t", Status::IOError("x")), kExitIO);
  EXPECT_EQ(ReportError("t", Status::Internal("x")), kExitInternal);
  EXPECT_EQ(ReportError("t", Status::Cancelled("x")), kExitCancelled);
}

}  // namespace
}  // namespace saturate::cli
