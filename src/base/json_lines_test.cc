#include "base/json_lines.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/testing.h"

namespace saturate {
namespace {

// The "n" of each object, in order; the torn flag in *torn.
Result<std::vector<int>> Ns(std::string_view text, bool* torn) {
  std::vector<int> ns;
  SATURATE_RETURN_IF_ERROR(ForEachJsonLine(
      text, "f.jsonl",
      [&](const nlohmann::json& j, size_t) {
        if (!j.contains("n")) return Status::Corruption("no n");
        ns.push_back(j["n"].get<int>());
        return Status::OK();
      },
      torn));
  return ns;
}

TEST(JsonLinesTest, ReadsObjectsAndSkipsBlankLines) {
  bool torn = true;
  SATURATE_ASSERT_OK_AND_ASSIGN(auto ns, Ns("{\"n\":1}\n\n  \n{\"n\":2}\r\n{\"n\":3}", &torn));
  EXPECT_EQ(ns, (std::vector<int>{1, 2, 3}));
  EXPECT_FALSE(torn);
}

TEST(JsonLinesTest, ATornLastLineIsSkippedAndReported) {
  bool torn = false;
  SATURATE_ASSERT_OK_AND_ASSIGN(auto ns, Ns("{\"n\":1}\n{\"n\":2}\n{\"n\":", &torn));
  EXPECT_EQ(ns, (std::vector<int>{1, 2}));
  EXPECT_TRUE(torn);
}

TEST(JsonLinesTest, ABadLineElsewhereNamesFileAndLine) {
  bool torn = false;
  EXPECT_TRUE(testing::HasError(Ns("{\"n\":1}\n\n[1]\n{\"n\":2}", &torn).status(),
                                StatusCode::kCorruption, {"f.jsonl:3", "not a JSON object"}));
  // The callback's errors get the same context.
  EXPECT_TRUE(testing::HasError(Ns("{\"n\":1}\n{\"m\":2}\n", &torn).status(),
                                StatusCode::kCorruption, {"f.jsonl:2", "no n"}));
}

}  // namespace
}  // namespace saturate

namespace saturate {
namespace {

TEST(JsonValueOrTest, WrongTypesGiveTheFallbackNeverAnException) {
  const nlohmann::json j = nlohmann::json::parse(
      R"({"host": 5, "n": "x", "big": 1e300, "ok": 7, "name": "a", "flag": 1, "f": 2})");
  EXPECT_EQ(JsonValueOr(j, "host", ""), "");
  EXPECT_EQ(JsonValueOr(j, "name", ""), "a");
  EXPECT_EQ(JsonValueOr(j, "missing", "d"), "d");
  EXPECT_EQ(JsonValueOr(j, "n", int64_t{3}), 3);
  EXPECT_EQ(JsonValueOr(j, "big", 4), 4);  // a float is no integer
  EXPECT_EQ(JsonValueOr(j, "ok", 0), 7);
  EXPECT_EQ(JsonValueOr(j, "flag", false), false);  // 1 is no boolean
  EXPECT_EQ(JsonValueOr(j, "f", 0.5), 2.0);
  EXPECT_EQ(JsonValueOr(j, "name", std::string("z")), "a");
}

}  // namespace
}  // namespace saturate
