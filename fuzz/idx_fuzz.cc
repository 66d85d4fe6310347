// libFuzzer target for the IDX parser: any input must yield a value or a
// Status, never a crash, hang or allocation past the header's claimed size.
#include <cstddef>
#include <cstdint>
#include <span>

#include "pack/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto bytes = std::as_bytes(std::span(data, size));
  auto result = saturate::pack::ParseIdx(bytes, "fuzz.idx");
  if (result.ok()) {
    // A parsed array must be self-consistent.
    uint64_t n = 1;
    for (uint32_t d : result->dims) n *= d;
    if (n != result->data.size()) __builtin_trap();
    (void)saturate::pack::CheckIdxPair(*result, *result);
  }
  return 0;
}
