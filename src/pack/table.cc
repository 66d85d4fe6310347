#include "pack/table.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <unordered_set>

#include "base/file.h"

namespace saturate::pack {
namespace {

Status Invalid(std::string_view file, size_t line, std::string_view what) {
  return Status::InvalidArgument(std::string(file) + ": line " + std::to_string(line) + ": " +
                                 std::string(what));
}

Status NoRows(std::string_view file) {
  return Status::InvalidArgument(std::string(file) + ": no rows");
}

// Header names must be usable as keys: non-empty and unique.
Status CheckColumnNames(const std::vector<std::string>& columns, std::string_view file,
                        size_t line) {
  std::unordered_set<std::string_view> seen;
  for (size_t i = 0; i < columns.size(); ++i) {
    if (columns[i].empty()) {
      return Invalid(file, line, "column " + std::to_string(i + 1) + " has an empty name");
    }
    if (!seen.insert(columns[i]).second) {
      return Invalid(file, line, "duplicate column name '" + columns[i] + "'");
    }
  }
  return Status::OK();
}

// ---- CSV ---------------------------------------------------------------------

struct CsvRecord {
  size_t line;  // where the record starts
  std::vector<std::string> fields;
};

// A cursor over CSV text that tracks the physical line for messages.
class CsvScanner {
 public:
  CsvScanner(std::string_view text, std::string_view file) : text_(text), file_(file) {}

  // Splits the whole text into records.
  Result<std::vector<CsvRecord>> Records() {
    std::vector<CsvRecord> records;
    while (pos_ < text_.size()) {
      if (ConsumeNewline()) continue;  // blank line
      CsvRecord record{line_, {}};
      do {
        SATURATE_ASSIGN_OR_RETURN(std::string field, Field());
        record.fields.push_back(std::move(field));
      } while (Consume(','));
      if (pos_ < text_.size() && !ConsumeNewline()) {
        return Invalid(file_, line_, "unexpected character after closing quote");
      }
      records.push_back(std::move(record));
    }
    return records;
  }

 private:
  bool Consume(char c) {
    if (pos_ >= text_.size() || text_[pos_] != c) return false;
    ++pos_;
    return true;
  }
  // LF, CRLF, or a lone CR ending the text (a CRLF file cut after the CR).
  bool AtNewline() const {
    std::string_view rest = text_.substr(pos_);
    return rest.starts_with('\n') || rest.starts_with("\r\n") || rest == "\r";
  }
  bool ConsumeNewline() {
    if (!AtNewline()) return false;
    pos_ = std::min(pos_ + (text_[pos_] == '\r' ? 2 : 1), text_.size());
    ++line_;
    return true;
  }

  Result<std::string> Field() {
    if (Consume('"')) return QuotedField();
    std::string field;
    while (pos_ < text_.size() && text_[pos_] != ',' && !AtNewline()) {
      if (text_[pos_] == '"') return Invalid(file_, line_, "quote inside an unquoted field");
      field += text_[pos_++];
    }
    return field;
  }

  // After the opening quote: runs to the closing quote; "" is a literal quote.
  Result<std::string> QuotedField() {
    const size_t start_line = line_;
    std::string field;
    while (pos_ < text_.size()) {
      char c = text_[pos_++];
      if (c == '"') {
        if (!Consume('"')) return field;
      } else if (c == '\n') {
        ++line_;
      }
      field += c;
    }
    return Invalid(file_, start_line, "unterminated quoted field");
  }

  std::string_view text_;
  std::string_view file_;
  size_t pos_ = 0;
  size_t line_ = 1;
};

template <typename T>
bool ParseFully(std::string_view s, T* value) {
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, *value);
  return ec == std::errc() && ptr == end;
}

// Picks the narrowest type every cell of column `c` parses as, then converts
// the (still string) cells to it.
ColumnType InferCsvColumn(std::vector<std::vector<Cell>>& rows, size_t c) {
  auto all = [&](auto probe) {
    return std::all_of(rows.begin(), rows.end(), [&](const std::vector<Cell>& row) {
      return probe(std::get<std::string>(row[c]));
    });
  };
  int64_t i;
  double d;
  if (all([&](const std::string& s) { return ParseFully(s, &i); })) {
    for (auto& row : rows) {
      ParseFully(std::get<std::string>(row[c]), &i);
      row[c] = i;
    }
    return ColumnType::kInt64;
  }
  if (all([&](const std::string& s) { return ParseFully(s, &d); })) {
    for (auto& row : rows) {
      ParseFully(std::get<std::string>(row[c]), &d);
      row[c] = d;
    }
    return ColumnType::kFloat64;
  }
  return ColumnType::kString;
}

// ---- JSONL -------------------------------------------------------------------

using Json = nlohmann::ordered_json;  // ordered: columns keep file order

// Converts one JSON value to a cell, or says why it cannot be one.
Result<Cell> JsonCell(const Json& v, std::string_view file, size_t line, const std::string& key) {
  switch (v.type()) {
    case Json::value_t::number_integer:
      return Cell(v.get<int64_t>());
    case Json::value_t::number_unsigned:
      if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Invalid(file, line, "key '" + key + "': integer out of int64 range");
      }
      return Cell(v.get<int64_t>());
    case Json::value_t::number_float:
      return Cell(v.get<double>());
    case Json::value_t::string:
      return Cell(v.get<std::string>());
    default:
      return Invalid(file, line,
                     "key '" + key + "': unsupported JSON type " + v.type_name() +
                         " (expected a number or a string)");
  }
}

ColumnType TypeOf(const Cell& cell) {
  return static_cast<ColumnType>(cell.index());  // variant order matches the enum
}

// Widens `column` to also hold `seen`: int64 + float64 -> float64; numbers and
// strings do not mix.
Status MergeType(ColumnType* column, ColumnType seen, std::string_view file, size_t line,
                 const std::string& key) {
  if (*column == seen) return Status::OK();
  if (*column == ColumnType::kString || seen == ColumnType::kString) {
    return Invalid(file, line,
                   "column '" + key + "' mixes numbers and strings (" +
                       std::string(ColumnTypeName(seen)) + " here, " +
                       std::string(ColumnTypeName(*column)) + " in earlier rows)");
  }
  *column = ColumnType::kFloat64;
  return Status::OK();
}

Result<Json> ParseJsonLine(std::string_view line_text, std::string_view file, size_t line) {
  Json j;
  try {
    j = Json::parse(line_text);
  } catch (const nlohmann::json::exception& e) {
    // Drop nlohmann's "[json.exception...] parse error at line 1, " prefix:
    // its line is always 1 here, the real line is ours.
    std::string_view what = e.what();
    size_t column = what.find("column ");
    if (column != std::string_view::npos) what.remove_prefix(column);
    return Invalid(file, line, "invalid JSON: " + std::string(what));
  }
  if (!j.is_object()) {
    return Invalid(file, line, std::string("expected a JSON object, got ") + j.type_name());
  }
  return j;
}

// Names the first key of `columns` that `object` lacks.
std::string MissingKey(const std::vector<std::string>& columns, const Json& object) {
  for (const auto& c : columns) {
    if (!object.contains(c)) return c;
  }
  return "";
}

}  // namespace

std::string_view ColumnTypeName(ColumnType type) {
  switch (type) {
    case ColumnType::kInt64:
      return "int64";
    case ColumnType::kFloat64:
      return "float64";
    case ColumnType::kString:
      return "string";
  }
  return "unknown";
}

Result<size_t> Table::ColumnIndex(std::string_view name, std::string_view file) const {
  auto it = std::find(columns.begin(), columns.end(), name);
  if (it != columns.end()) return static_cast<size_t>(it - columns.begin());
  std::string list;
  for (const auto& c : columns) list += (list.empty() ? "" : ", ") + c;
  return Status::NotFound(std::string(file) + ": unknown column '" + std::string(name) +
                          "' (columns: " + list + ")");
}

Result<Table> ParseCsv(std::string_view text, std::string_view name) {
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  SATURATE_ASSIGN_OR_RETURN(std::vector<CsvRecord> records, CsvScanner(text, name).Records());
  if (records.size() < 2) return NoRows(name);
  Table table;
  table.columns = std::move(records[0].fields);
  SATURATE_RETURN_IF_ERROR(CheckColumnNames(table.columns, name, records[0].line));
  for (size_t r = 1; r < records.size(); ++r) {
    auto& fields = records[r].fields;
    if (fields.size() != table.columns.size()) {
      return Invalid(name, records[r].line,
                     std::to_string(fields.size()) + " fields, but the header has " +
                         std::to_string(table.columns.size()) + " columns");
    }
    table.rows.emplace_back(std::make_move_iterator(fields.begin()),
                            std::make_move_iterator(fields.end()));
  }
  for (size_t c = 0; c < table.columns.size(); ++c) {
    table.types.push_back(InferCsvColumn(table.rows, c));
  }
  return table;
}

Result<Table> ParseJsonl(std::string_view text, std::string_view name) {
  Table table;
  std::unordered_map<std::string, size_t> index;  // column name -> position
  size_t line = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = std::min(text.find('\n', pos), text.size());
    std::string_view line_text = text.substr(pos, end - pos);
    pos = end + 1;
    ++line;
    if (line_text.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    SATURATE_ASSIGN_OR_RETURN(Json object, ParseJsonLine(line_text, name, line));
    const bool first = table.rows.empty();
    if (first) {
      for (const auto& item : object.items()) {
        index.emplace(item.key(), table.columns.size());
        table.columns.push_back(item.key());
      }
      if (table.columns.empty()) return Invalid(name, line, "object has no keys");
    }
    std::vector<Cell> row(table.columns.size());
    for (const auto& item : object.items()) {
      auto it = index.find(item.key());
      if (it == index.end()) {
        return Invalid(name, line, "unexpected key '" + item.key() + "' (not in the first row)");
      }
      SATURATE_ASSIGN_OR_RETURN(row[it->second], JsonCell(item.value(), name, line, item.key()));
      if (first) {
        table.types.push_back(TypeOf(row[it->second]));
      } else {
        SATURATE_RETURN_IF_ERROR(
            MergeType(&table.types[it->second], TypeOf(row[it->second]), name, line, item.key()));
      }
    }
    if (object.size() != table.columns.size()) {
      return Invalid(name, line, "missing key '" + MissingKey(table.columns, object) + "'");
    }
    table.rows.push_back(std::move(row));
  }
  if (table.rows.empty()) return NoRows(name);
  // Columns promoted to float64 may still hold int64 cells from earlier rows.
  for (auto& row : table.rows) {
    for (size_t c = 0; c < row.size(); ++c) {
      if (table.types[c] == ColumnType::kFloat64 && std::holds_alternative<int64_t>(row[c])) {
        row[c] = static_cast<double>(std::get<int64_t>(row[c]));
      }
    }
  }
  return table;
}

Result<Table> ReadTable(const std::string& path) {
  std::string ext = path.substr(std::min(path.rfind('.'), path.size()));
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  const bool csv = ext == ".csv";
  if (!csv && ext != ".jsonl" && ext != ".ndjson") {
    return Status::InvalidArgument(path +
                                   ": unknown table format (expected .csv, .jsonl or .ndjson)");
  }
  SATURATE_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return csv ? ParseCsv(text, path) : ParseJsonl(text, path);
}

}  // namespace saturate::pack
