#include "pack/table.h"

#include <gtest/gtest.h>

#include <initializer_list>

#include "base/file.h"
#include "base/testing.h"

namespace saturate::pack {
namespace {

using saturate::testing::HasError;

::testing::AssertionResult CsvFails(std::string_view text,
                                    std::initializer_list<std::string_view> parts) {
  return HasError(ParseCsv(text, "m.csv").status(), StatusCode::kInvalidArgument, parts);
}
::testing::AssertionResult JsonlFails(std::string_view text,
                                      std::initializer_list<std::string_view> parts) {
  return HasError(ParseJsonl(text, "m.jsonl").status(), StatusCode::kInvalidArgument, parts);
}

using Row = std::vector<Cell>;
using Types = std::vector<ColumnType>;
constexpr auto kInt = ColumnType::kInt64;
constexpr auto kFloat = ColumnType::kFloat64;
constexpr auto kStr = ColumnType::kString;

// ---- CSV ---------------------------------------------------------------------

TEST(CsvTest, InfersColumnTypes) {
  SATURATE_ASSERT_OK_AND_ASSIGN(
      Table t, ParseCsv("id,score,name,big\n1,0.5,cat,9223372036854775808\n-2,1,7,3\n", "m.csv"));
  EXPECT_EQ(t.columns, (std::vector<std::string>{"id", "score", "name", "big"}));
  // int64 overflow is not an int, but it is a double.
  EXPECT_EQ(t.types, (Types{kInt, kFloat, kStr, kFloat}));
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(t.rows[0], (Row{int64_t{1}, 0.5, "cat", 9223372036854775808.0}));
  EXPECT_EQ(t.rows[1], (Row{int64_t{-2}, 1.0, "7", 3.0}));
}

TEST(CsvTest, EmptyCellMakesStringColumn) {
  SATURATE_ASSERT_OK_AND_ASSIGN(Table t, ParseCsv("a,b\n1,\n2,3", "m.csv"));
  EXPECT_EQ(t.types, (Types{kInt, kStr}));
  EXPECT_EQ(t.rows[0], (Row{int64_t{1}, ""}));
}

TEST(CsvTest, HandlesQuotesCrlfBomAndBlankLines) {
  std::string text =
      "\xEF\xBB\xBFpath,caption\r\n"
      "a.jpg,\"say \"\"hi\"\", ok\"\r\n"
      "\r\n"
      "\"b,c.jpg\",\"two\nlines\"\n"
      "\"\",plain";  // no final newline
  SATURATE_ASSERT_OK_AND_ASSIGN(Table t, ParseCsv(text, "m.csv"));
  EXPECT_EQ(t.columns, (std::vector<std::string>{"path", "caption"}));
  ASSERT_EQ(t.rows.size(), 3u);
  EXPECT_EQ(t.rows[0], (Row{"a.jpg", "say \"hi\", ok"}));
  EXPECT_EQ(t.rows[1], (Row{"b,c.jpg", "two\nlines"}));
  EXPECT_EQ(t.rows[2], (Row{"", "plain"}));
}

TEST(CsvTest, FinalLoneCarriageReturnEndsTheRecord) {
  SATURATE_ASSERT_OK_AND_ASSIGN(Table t, ParseCsv("a,b\r\n1,\"x\"\r", "m.csv"));
  EXPECT_EQ(t.rows[0], (Row{int64_t{1}, "x"}));
}

TEST(CsvTest, TrailingCommaIsAnEmptyField) {
  SATURATE_ASSERT_OK_AND_ASSIGN(Table t, ParseCsv("a,b\nx,\n", "m.csv"));
  EXPECT_EQ(t.rows[0], (Row{"x", ""}));
}

TEST(CsvTest, RejectsWrongFieldCountNamingLine) {
  EXPECT_TRUE(CsvFails("a,b\n1,2\n3\n", {"m.csv: line 3: 1 fields, but the header has 2"}));
  // Line numbers count the newlines inside quoted fields.
  EXPECT_TRUE(CsvFails("a,b\n\"x\ny\",1\n3,4,5\n", {"m.csv: line 4: 3 fields"}));
}

TEST(CsvTest, RejectsBadQuoting) {
  EXPECT_TRUE(CsvFails("a,b\n1,2\n3,\"abc\n4,5\n", {"m.csv: line 3: unterminated quoted field"}));
  EXPECT_TRUE(CsvFails("a,b\n\"x\"y,2\n", {"m.csv: line 2: unexpected character after closing"}));
  EXPECT_TRUE(CsvFails("a,b\nx\"y,2\n", {"m.csv: line 2: quote inside an unquoted field"}));
}

TEST(CsvTest, RejectsBadHeaders) {
  EXPECT_TRUE(CsvFails("a,b,a\n1,2,3\n", {"m.csv: line 1: duplicate column name 'a'"}));
  EXPECT_TRUE(CsvFails("\n\na,,c\n1,2,3\n", {"m.csv: line 3: column 2 has an empty name"}));
}

TEST(CsvTest, RejectsEmptyTables) {
  EXPECT_TRUE(CsvFails("a,b\n", {"m.csv: no rows"}));
  EXPECT_TRUE(CsvFails("", {"m.csv: no rows"}));
  EXPECT_TRUE(CsvFails("\xEF\xBB\xBF\r\n\n", {"m.csv: no rows"}));
}

// ---- JSONL -------------------------------------------------------------------

TEST(JsonlTest, ParsesTypesAndKeepsKeyOrder) {
  std::string text =
      "{\"path\": \"a.jpg\", \"label\": 3, \"w\": 2}\r\n"
      "\n"
      "  \n"
      "{\"label\": 4, \"w\": 0.5, \"path\": \"b.jpg\"}\n";
  SATURATE_ASSERT_OK_AND_ASSIGN(Table t, ParseJsonl(text, "m.jsonl"));
  EXPECT_EQ(t.columns, (std::vector<std::string>{"path", "label", "w"}));
  // `w` was int64 in row 1 and is promoted, including the earlier cell.
  EXPECT_EQ(t.types, (Types{kStr, kInt, kFloat}));
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(t.rows[0], (Row{"a.jpg", int64_t{3}, 2.0}));
  EXPECT_EQ(t.rows[1], (Row{"b.jpg", int64_t{4}, 0.5}));
}

TEST(JsonlTest, FloatColumnAcceptsLaterInts) {
  SATURATE_ASSERT_OK_AND_ASSIGN(Table t, ParseJsonl("{\"x\":1.5}\n{\"x\":-7}", "m.jsonl"));
  EXPECT_EQ(t.types, (Types{kFloat}));
  EXPECT_EQ(t.rows[1], (Row{-7.0}));
}

TEST(JsonlTest, RejectsUnsupportedValueTypes) {
  EXPECT_TRUE(JsonlFails("{\"a\":1}\n{\"a\":true}\n", {"m.jsonl: line 2: key 'a'", "boolean"}));
  EXPECT_TRUE(JsonlFails("{\"a\":null}\n", {"m.jsonl: line 1: key 'a'", "null"}));
  EXPECT_TRUE(JsonlFails("{\"a\":[1]}\n", {"m.jsonl: line 1: key 'a'", "array"}));
  EXPECT_TRUE(JsonlFails("{\"a\":{}}\n", {"m.jsonl: line 1: key 'a'", "object"}));
  EXPECT_TRUE(JsonlFails("{\"a\":18446744073709551615}\n", {"line 1: key 'a'", "int64 range"}));
}

TEST(JsonlTest, RejectsMixedNumbersAndStrings) {
  EXPECT_TRUE(JsonlFails("{\"a\":1,\"b\":\"x\"}\n\n{\"a\":\"2\",\"b\":\"y\"}\n",
                         {"m.jsonl: line 3: column 'a' mixes numbers and strings"}));
  EXPECT_TRUE(JsonlFails("{\"a\":\"x\"}\n{\"a\":2.5}\n",
                         {"m.jsonl: line 2: column 'a' mixes numbers and strings"}));
}

TEST(JsonlTest, RejectsKeyMismatch) {
  EXPECT_TRUE(JsonlFails("{\"a\":1,\"b\":2}\n{\"a\":1}\n", {"m.jsonl: line 2: missing key 'b'"}));
  EXPECT_TRUE(
      JsonlFails("{\"a\":1}\n{\"a\":1,\"c\":2}\n", {"m.jsonl: line 2: unexpected key 'c'"}));
  EXPECT_TRUE(JsonlFails("{\"a\":1,\"b\":2}\n{\"a\":1,\"c\":2}\n", {"line 2: unexpected key 'c'"}));
}

TEST(JsonlTest, RejectsMalformedLines) {
  EXPECT_TRUE(JsonlFails("{\"a\":1}\n{\"a\":\n", {"m.jsonl: line 2: invalid JSON"}));
  EXPECT_TRUE(JsonlFails("{\"a\":1} {\"a\":2}\n", {"m.jsonl: line 1: invalid JSON"}));
  EXPECT_TRUE(JsonlFails("[1,2]\n", {"m.jsonl: line 1: expected a JSON object, got array"}));
  EXPECT_TRUE(JsonlFails("{}\n", {"m.jsonl: line 1: object has no keys"}));
  EXPECT_TRUE(JsonlFails("\n \n", {"m.jsonl: no rows"}));
}

// ---- Table / ReadTable -------------------------------------------------------

TEST(TableTest, ColumnIndex) {
  Table t{{"a", "b", "c"}, {kInt, kInt, kInt}, {}};
  SATURATE_ASSERT_OK_AND_ASSIGN(size_t i, t.ColumnIndex("b", "m.csv"));
  EXPECT_EQ(i, 1u);
  EXPECT_TRUE(HasError(t.ColumnIndex("x", "m.csv").status(), StatusCode::kNotFound,
                       {"m.csv: unknown column 'x' (columns: a, b, c)"}));
}

TEST(TableTest, ReadTableDispatchesOnExtension) {
  testing::TempDir dir;
  SATURATE_ASSERT_OK(WriteFileAtomic(dir.Join("t.CSV"), "k,v\nx,1\n"));
  SATURATE_ASSERT_OK(WriteFileAtomic(dir.Join("t.jsonl"), "{\"k\":\"x\",\"v\":1}\n"));
  SATURATE_ASSERT_OK(WriteFileAtomic(dir.Join("t.ndjson"), "{\"k\":\"x\",\"v\":1}\n"));
  for (const char* name : {"t.CSV", "t.jsonl", "t.ndjson"}) {
    SATURATE_ASSERT_OK_AND_ASSIGN(Table t, ReadTable(dir.Join(name)));
    EXPECT_EQ(t.types, (Types{kStr, kInt})) << name;
    EXPECT_EQ(t.rows, (std::vector<Row>{{"x", int64_t{1}}})) << name;
  }
  SATURATE_ASSERT_OK(WriteFileAtomic(dir.Join("bad.jsonl"), "{\"k\":1}\n{\"k\":false}\n"));
  EXPECT_TRUE(HasError(ReadTable(dir.Join("bad.jsonl")).status(), StatusCode::kInvalidArgument,
                       {"bad.jsonl: line 2: key 'k'"}));
  EXPECT_TRUE(HasError(ReadTable(dir.Join("t.txt")).status(), StatusCode::kInvalidArgument,
                       {"t.txt: unknown table format"}));
  EXPECT_TRUE(
      HasError(ReadTable(dir.Join("gone.csv")).status(), StatusCode::kNotFound, {"gone.csv"}));
}

}  // namespace
}  // namespace saturate::pack
