// libFuzzer target for the tar indexer (libarchive over memory) and
// WebDataset's sample names: any input must yield members whose data lies
// inside the input, or a Status; never a crash or a hang.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "formats/tar_index.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto bytes = std::as_bytes(std::span(data, size));
  auto members = saturate::formats::IndexTar(bytes);
  if (!members.ok()) return 0;
  for (const auto& m : *members) {
    if (m.size > 0 && (m.offset > size || m.size > size - m.offset)) __builtin_trap();
    std::string key, ext;
    if (saturate::formats::SplitSampleName(m.name, &key, &ext) && (key.empty() || ext.empty())) {
      __builtin_trap();
    }
  }
  return 0;
}
