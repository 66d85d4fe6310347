// Fuzzes the checkpoint manifest parser (manifest.json of a step-N
// directory). It may refuse input (a Status), never crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "checkpoint/format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)saturate::checkpoint::ParseManifest(text, "manifest.json");
  return 0;
}
