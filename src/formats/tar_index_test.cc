#include "formats/tar_index.h"

#include "base/testing.h"
#include "formats/test_util.h"

namespace saturate::formats {
namespace {

using ::saturate::testing::HasError;

std::span<const std::byte> B(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

TEST(TarIndex, OffsetsPointAtMemberData) {
  const std::string long_name = std::string(150, 'd') + "/sample.jpg";  // needs a pax header
  const std::string tar = MakeTar({{"a.jpg", "JPEGDATA"}, {"a.cls", "7"}, {long_name, "xyz"}});
  auto members = IndexTar(B(tar));
  SATURATE_ASSERT_OK(members.status());
  ASSERT_EQ(members->size(), 3u);
  for (const TarMember& m : *members) {
    const std::string data = tar.substr(m.offset, m.size);
    const std::string want = m.name == "a.jpg" ? "JPEGDATA" : m.name == "a.cls" ? "7" : "xyz";
    EXPECT_EQ(data, want) << m.name;
  }
  EXPECT_EQ((*members)[2].name, long_name);
}

TEST(TarIndex, TruncatedMemberNamed) {
  const std::string tar = MakeTar({{"a.jpg", std::string(2000, 'x')}, {"b.jpg", "y"}});
  const std::string cut = tar.substr(0, 512 + 1000);
  EXPECT_TRUE(HasError(IndexTar(B(cut)).status(), StatusCode::kCorruption, {"a.jpg"}));
  EXPECT_FALSE(IndexTar(B(std::string(700, 'z'))).ok());
}

TEST(TarIndex, SampleNames) {
  std::string key, ext;
  ASSERT_TRUE(SplitSampleName("dir/abc.seg.JPG", &key, &ext));
  EXPECT_EQ(key, "dir/abc");
  EXPECT_EQ(ext, "seg.jpg");
  EXPECT_FALSE(SplitSampleName("dir/README", &key, &ext));
  EXPECT_FALSE(SplitSampleName("x.y/.hidden", &key, &ext));
}

}  // namespace
}  // namespace saturate::formats
