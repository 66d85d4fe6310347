// The manifest table that `saturate pack` reads: named, typed columns loaded
// from CSV (RFC 4180) or JSON Lines, chosen by file extension.
//
// Typing: JSONL cells keep their JSON type (int -> kInt64, float -> kFloat64,
// string -> kString); an int column that later sees a float becomes kFloat64.
// CSV columns are inferred: kInt64 if every cell parses fully as int64, else
// kFloat64 if every cell parses as a double, else kString. Cells always hold
// the alternative matching their column's type. There are no nulls: booleans,
// nulls, arrays and objects in JSONL are errors; an empty CSV cell makes its
// column kString.
//
// Errors are InvalidArgument (the file content is wrong) and name the file,
// the 1-based line and the column; reading the file may also give NotFound or
// IOError.
//
// Ownership: Table is a plain value. Thread-safety: free functions without
// shared state; a const Table may be read from many threads.
#ifndef SATURATE_PACK_TABLE_H_
#define SATURATE_PACK_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "saturate/base/status.h"

namespace saturate::pack {

enum class ColumnType { kInt64, kFloat64, kString };

// "int64", "float64", "string".
std::string_view ColumnTypeName(ColumnType type);

using Cell = std::variant<int64_t, double, std::string>;

struct Table {
  std::vector<std::string> columns;     // unique, non-empty names, in file order
  std::vector<ColumnType> types;        // one per column
  std::vector<std::vector<Cell>> rows;  // each row has columns.size() cells

  // Position of column `name`, or NotFound "<file>: unknown column 'x'
  // (columns: a, b, c)". `file` is only used in the message.
  Result<size_t> ColumnIndex(std::string_view name, std::string_view file) const;
};

// Parses CSV: header row first; quoted fields with "" escapes may hold commas
// and newlines; CRLF or LF; final newline optional; a UTF-8 BOM is skipped;
// blank lines are skipped. `name` is used in error messages.
Result<Table> ParseCsv(std::string_view text, std::string_view name);

// Parses JSON Lines: one object per line, blank lines ignored; every row has
// exactly the keys of the first row (any order).
Result<Table> ParseJsonl(std::string_view text, std::string_view name);

// Reads `path` and parses it by extension: .csv, or .jsonl / .ndjson
// (case-insensitive). Other extensions are InvalidArgument.
Result<Table> ReadTable(const std::string& path);

}  // namespace saturate::pack

#endif  // SATURATE_PACK_TABLE_H_
