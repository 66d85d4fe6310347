#include "formats/pattern.h"

#include <fstream>

#include "base/testing.h"

namespace saturate::formats {
namespace {

using ::saturate::testing::HasError;
using ::saturate::testing::TempDir;
using V = std::vector<std::string>;

TEST(Pattern, BraceRangeKeepsWidth) {
  auto r = ExpandBraces("s-{08..11}.tar");
  SATURATE_ASSERT_OK(r.status());
  EXPECT_EQ(*r, (V{"s-08.tar", "s-09.tar", "s-10.tar", "s-11.tar"}));
  EXPECT_EQ(*ExpandBraces("{3..1}"), (V{"3", "2", "1"}));
}

TEST(Pattern, BraceListsNest) {
  EXPECT_EQ(*ExpandBraces("{a,b{1..2}}.x"), (V{"a.x", "b1.x", "b2.x"}));
  EXPECT_EQ(*ExpandBraces("plain"), (V{"plain"}));
  EXPECT_EQ(*ExpandBraces("{x}"), (V{"{x}"}));
}

TEST(Pattern, BadBraces) {
  EXPECT_TRUE(
      HasError(ExpandBraces("a{1..2").status(), StatusCode::kInvalidArgument, {"unbalanced"}));
  EXPECT_TRUE(
      HasError(ExpandBraces("{0..99999999}").status(), StatusCode::kInvalidArgument, {"too long"}));
}

TEST(Pattern, GlobsSortAndMissingNamesFail) {
  TempDir dir;
  for (const char* n : {"b.tar", "a.tar", "c.txt"}) std::ofstream(dir.Join(n)) << "x";
  auto r = ExpandPattern(dir.Join("*.tar"));
  SATURATE_ASSERT_OK(r.status());
  EXPECT_EQ(*r, (V{dir.Join("a.tar"), dir.Join("b.tar")}));
  EXPECT_TRUE(
      HasError(ExpandPattern(dir.Join("{a,z}.tar")).status(), StatusCode::kNotFound, {"z.tar"}));
  EXPECT_TRUE(
      HasError(ExpandPattern(dir.Join("*.zip")).status(), StatusCode::kNotFound, {"no such"}));
}

TEST(Pattern, MatchAgainstListedNames) {
  const V listed = {"b/x-1.tar", "x-2.tar", "x-1.tar", "x-1.tar.satidx", "y.tar", "x-10.tar"};
  auto r = MatchPattern("x-*.tar", listed);
  SATURATE_ASSERT_OK(r.status());
  EXPECT_EQ(*r, (V{"x-1.tar", "x-10.tar", "x-2.tar"}));  // not b/x-1.tar: '*' stays in a segment
  r = MatchPattern("x-{1..3}.tar", listed);  // names without wildcards are kept, listed or not
  SATURATE_ASSERT_OK(r.status());
  EXPECT_EQ(*r, (V{"x-1.tar", "x-2.tar", "x-3.tar"}));
  r = MatchPattern("{b/x-?,y}.tar", listed);
  SATURATE_ASSERT_OK(r.status());
  EXPECT_EQ(*r, (V{"b/x-1.tar", "y.tar"}));
  EXPECT_TRUE(HasError(MatchPattern("z-*.tar", listed).status(), StatusCode::kNotFound,
                       {"z-*.tar", "no such object"}));
}

// "tfrecord:train-*" must match the same files after its first open wrote
// the indexes beside them.
TEST(Pattern, GlobsLeaveOutTheIndexesBesideTheData) {
  TempDir dir;
  for (const char* n : {"train-0", "train-0.satidx", "train-0.satidx.lock", "train-0.satidx.tmp42",
                        "train-1.satidx-notes"}) {
    std::ofstream(dir.Join(n)) << "x";
  }
  auto r = ExpandPattern(dir.Join("train-*"));
  SATURATE_ASSERT_OK(r.status());
  EXPECT_EQ(*r, (V{dir.Join("train-0"), dir.Join("train-1.satidx-notes")}));
}

}  // namespace
}  // namespace saturate::formats
