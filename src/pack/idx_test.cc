#include "pack/idx.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>

#include "base/file.h"
#include "base/testing.h"

namespace saturate::pack {
namespace {

using saturate::testing::HasError;

std::string MakeIdx(uint8_t dtype, const std::vector<uint32_t>& dims, std::string_view data) {
  std::string out = {0, 0, static_cast<char>(dtype), static_cast<char>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>((d >> shift) & 0xff);
  }
  return out + std::string(data);
}

std::span<const std::byte> Bytes(std::string_view s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

void WriteGzip(const std::string& path, std::string_view bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

const std::string kSixBytes = "\x01\x02\x03\x04\x05\x06";

TEST(IdxTest, ParsesUbyteArray) {
  std::string file = MakeIdx(kIdxUbyte, {1, 2, 3}, kSixBytes);
  SATURATE_ASSERT_OK_AND_ASSIGN(IdxArray a, ParseIdx(Bytes(file), "mem.idx"));
  EXPECT_EQ(a.dtype_code, kIdxUbyte);
  EXPECT_EQ(a.dims, (std::vector<uint32_t>{1, 2, 3}));
  EXPECT_EQ(a.data, (std::vector<uint8_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(IdxShapeString(a), "1x2x3");
}

TEST(IdxTest, ZeroSizedDimensionIsEmpty) {
  std::string file = MakeIdx(kIdxUbyte, {0, 28, 28}, "");
  SATURATE_ASSERT_OK_AND_ASSIGN(IdxArray a, ParseIdx(Bytes(file), "mem.idx"));
  EXPECT_TRUE(a.data.empty());
}

TEST(IdxTest, ReadsGzipAndPlainFiles) {
  testing::TempDir dir;
  std::string file = MakeIdx(kIdxUbyte, {3, 2}, kSixBytes);
  WriteGzip(dir.Join("a.idx.gz"), file);
  SATURATE_ASSERT_OK(WriteFileAtomic(dir.Join("a.idx"), file));
  for (const char* name : {"a.idx.gz", "a.idx"}) {
    SATURATE_ASSERT_OK_AND_ASSIGN(IdxArray a, ReadIdx(dir.Join(name)));
    EXPECT_EQ(a.dims, (std::vector<uint32_t>{3, 2})) << name;
    EXPECT_EQ(a.data.size(), 6u) << name;
  }
}

TEST(IdxTest, RejectsBadMagic) {
  std::string file("\x1f\x8b\x08\x00rest", 8);
  EXPECT_TRUE(HasError(ParseIdx(Bytes(file), "x.idx").status(), StatusCode::kCorruption,
                       {"x.idx: not an IDX file: bad magic 0x1f8b0800"}));
  EXPECT_TRUE(HasError(ParseIdx(Bytes(std::string_view("\0\0", 2)), "y.idx").status(),
                       StatusCode::kCorruption, {"y.idx: not an IDX file"}));
}

TEST(IdxTest, RejectsOtherDtypes) {
  std::string file = MakeIdx(0x0D, {1}, "abcd");
  EXPECT_TRUE(HasError(ParseIdx(Bytes(file), "f.idx").status(), StatusCode::kInvalidArgument,
                       {"f.idx: unsupported IDX dtype 0x0d (float32)"}));
}

TEST(IdxTest, RejectsTruncatedHeaderAndData) {
  std::string header_cut = MakeIdx(kIdxUbyte, {2, 3}, "").substr(0, 9);
  EXPECT_TRUE(HasError(ParseIdx(Bytes(header_cut), "h.idx").status(), StatusCode::kCorruption,
                       {"h.idx: truncated IDX header", "need 12 bytes, found 9"}));
  std::string data_cut = MakeIdx(kIdxUbyte, {2, 3}, kSixBytes.substr(0, 5));
  EXPECT_TRUE(HasError(ParseIdx(Bytes(data_cut), "d.idx").status(), StatusCode::kCorruption,
                       {"d.idx: truncated IDX data", "expects 6 bytes, found 5"}));
}

TEST(IdxTest, RejectsTrailingBytes) {
  std::string file = MakeIdx(kIdxUbyte, {2, 3}, kSixBytes + "zz");
  EXPECT_TRUE(HasError(ParseIdx(Bytes(file), "t.idx").status(), StatusCode::kCorruption,
                       {"t.idx: 2 trailing bytes after 6 bytes"}));
}

TEST(IdxTest, RejectsHugeDims) {
  // 2^16 * 2^16 * 2 = 8 GiB: over the cap without overflowing uint64.
  std::string big = MakeIdx(kIdxUbyte, {65536, 65536, 2}, "");
  EXPECT_TRUE(HasError(ParseIdx(Bytes(big), "b.idx").status(), StatusCode::kCorruption,
                       {"b.idx: IDX dims 65536x65536x2 exceed the limit"}));
  // (2^32-1)^3 would overflow uint64 if multiplied naively.
  std::string overflow = MakeIdx(kIdxUbyte, {0xffffffff, 0xffffffff, 0xffffffff}, "");
  EXPECT_TRUE(HasError(ParseIdx(Bytes(overflow), "o.idx").status(), StatusCode::kCorruption,
                       {"exceed the limit"}));
}

TEST(IdxTest, ReadReportsMissingAndDamagedFiles) {
  testing::TempDir dir;
  EXPECT_TRUE(HasError(ReadIdx(dir.Join("nope.gz")).status(), StatusCode::kNotFound,
                       {"nope.gz: no such file"}));
  // A gzip stream cut short must not pass for a short (but valid-looking) file.
  std::string gz = dir.Join("cut.gz");
  WriteGzip(gz, MakeIdx(kIdxUbyte, {4000}, std::string(4000, 'x')));
  std::filesystem::resize_file(gz, std::filesystem::file_size(gz) - 6);
  EXPECT_TRUE(HasError(ReadIdx(gz).status(), StatusCode::kCorruption, {"cut.gz: "}));
}

IdxArray Array(std::vector<uint32_t> dims) { return IdxArray{kIdxUbyte, std::move(dims), {}}; }

TEST(IdxTest, CheckIdxPair) {
  SATURATE_EXPECT_OK(CheckIdxPair(Array({10, 28, 28}), Array({10})));
  EXPECT_TRUE(HasError(CheckIdxPair(Array({10, 28, 28}), Array({9})), StatusCode::kInvalidArgument,
                       {"10 images but 9 labels"}));
  EXPECT_TRUE(HasError(CheckIdxPair(Array({10, 784}), Array({10})), StatusCode::kInvalidArgument,
                       {"N x H x W", "10x784"}));
  EXPECT_TRUE(HasError(CheckIdxPair(Array({10, 28, 28}), Array({10, 1})),
                       StatusCode::kInvalidArgument, {"1-D", "10x1"}));
}

TEST(IdxTest, ReadsRealFashionMnistTestSet) {
  const std::string dir = "/usr/share/datasets/fashion-mnist/";
  const std::string images_path = dir + "t10k-images-idx3-ubyte.gz";
  const std::string labels_path = dir + "t10k-labels-idx1-ubyte.gz";
  if (!std::filesystem::exists(images_path) || !std::filesystem::exists(labels_path)) {
    GTEST_SKIP() << "Fashion-MNIST not installed under " << dir;
  }
  SATURATE_ASSERT_OK_AND_ASSIGN(IdxArray images, ReadIdx(images_path));
  SATURATE_ASSERT_OK_AND_ASSIGN(IdxArray labels, ReadIdx(labels_path));
  SATURATE_ASSERT_OK(CheckIdxPair(images, labels));
  EXPECT_EQ(images.dims, (std::vector<uint32_t>{10000, 28, 28}));
  EXPECT_EQ(images.data.size(), 10000u * 28 * 28);
  ASSERT_EQ(labels.data.size(), 10000u);
  for (uint8_t label : labels.data) ASSERT_LE(label, 9);
}

}  // namespace
}  // namespace saturate::pack
