// libFuzzer target: arbitrary bytes as manifest.json. A manifest that parses
// must serialize and parse back to the same value.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "saturate/format/schema.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto m = saturate::format::ParseManifest(text, "fuzz.json");
  if (!m.ok()) return 0;
  auto again = saturate::format::ParseManifest(saturate::format::SerializeManifest(*m), "again");
  if (!again.ok() || !(*again == *m)) std::abort();
  return 0;
}
