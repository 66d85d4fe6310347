#include "formats/tfrecord.h"

#include <string>

#include "base/testing.h"

namespace saturate::formats {
namespace {

using ::saturate::testing::HasError;

std::span<const std::byte> B(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

TEST(Tfrecord, Crc32cKnownValues) {
  // RFC 3720 B.4 test vector and the classic "123456789" check value.
  EXPECT_EQ(Crc32c(B("123456789")), 0xE3069283u);
  EXPECT_EQ(Crc32c(B(std::string(32, '\0'))), 0x8A9136AAu);
  EXPECT_EQ(Crc32cPortable(B("123456789")), 0xE3069283u);
}

TEST(Tfrecord, FastCrcEqualsPortable) {
  std::string data;
  for (int i = 0; i < 300; ++i) data.push_back(static_cast<char>(i * 37 + 11));
  for (size_t len : {0, 1, 7, 8, 9, 15, 64, 299}) {
    for (size_t start : {0, 1, 3}) {
      auto b = B(data).subspan(start, len);
      EXPECT_EQ(Crc32c(b), Crc32cPortable(b)) << start << "+" << len;
    }
  }
}

TEST(Tfrecord, ScanAndReadRoundTrip) {
  std::vector<std::byte> file;
  AppendTfrecord(B("hello"), &file);
  AppendTfrecord(B(""), &file);
  AppendTfrecord(B("world!"), &file);
  auto spans = ScanTfrecord(file);
  SATURATE_ASSERT_OK(spans.status());
  ASSERT_EQ(spans->size(), 3u);
  EXPECT_EQ((*spans)[1].offset, 12u + 5 + 4);
  auto data = ReadTfrecord(file, (*spans)[2], 2, true);
  SATURATE_ASSERT_OK(data.status());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(data->data()), data->size()), "world!");
}

TEST(Tfrecord, BadDataCrcNamesRecord) {
  std::vector<std::byte> file;
  AppendTfrecord(B("hello"), &file);
  AppendTfrecord(B("world"), &file);
  file[21 + 12 + 1] ^= std::byte{1};  // a data byte of record 1
  auto spans = ScanTfrecord(file);
  SATURATE_ASSERT_OK(spans.status());  // the scan checks lengths only
  EXPECT_TRUE(HasError(ReadTfrecord(file, (*spans)[1], 1, true).status(), StatusCode::kCorruption,
                       {"record 1", "CRC-32C"}));
  EXPECT_TRUE(ReadTfrecord(file, (*spans)[1], 1, false).ok());
}

TEST(Tfrecord, TruncatedAndBadLength) {
  std::vector<std::byte> file;
  AppendTfrecord(B("hello"), &file);
  AppendTfrecord(B("world"), &file);
  std::vector<std::byte> cut(file.begin(), file.end() - 3);
  EXPECT_TRUE(
      HasError(ScanTfrecord(cut).status(), StatusCode::kCorruption, {"record 1", "truncated"}));
  file[0] ^= std::byte{4};
  EXPECT_TRUE(HasError(ScanTfrecord(file).status(), StatusCode::kCorruption,
                       {"record 0", "length checksum"}));
}

}  // namespace
}  // namespace saturate::formats
