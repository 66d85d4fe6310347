// libFuzzer target for the manifest parsers: feeds the same input to ParseCsv
// and ParseJsonl; each must return a Table or a Status, never crash or hang.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <variant>

#include "pack/table.h"

namespace {

// Every returned table must satisfy the invariants table.h promises.
void CheckInvariants(const saturate::Result<saturate::pack::Table>& result) {
  if (!result.ok()) return;
  const auto& t = *result;
  if (t.columns.empty() || t.rows.empty() || t.types.size() != t.columns.size()) __builtin_trap();
  for (const auto& row : t.rows) {
    if (row.size() != t.columns.size()) __builtin_trap();
    for (size_t c = 0; c < row.size(); ++c) {
      if (row[c].index() != static_cast<size_t>(t.types[c])) __builtin_trap();
    }
  }
  (void)t.ColumnIndex(t.columns.back(), "fuzz");
  (void)t.ColumnIndex("no such column", "fuzz");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  CheckInvariants(saturate::pack::ParseCsv(text, "fuzz.csv"));
  CheckInvariants(saturate::pack::ParseJsonl(text, "fuzz.jsonl"));
  return 0;
}
