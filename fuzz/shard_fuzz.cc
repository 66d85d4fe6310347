// libFuzzer target: arbitrary bytes as a shard file, checked the way verify
// checks it. Must never crash, hang or read out of bounds.
#include <cstddef>
#include <cstdint>
#include <span>

#include "format/test_util.h"
#include "saturate/format/verify.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const saturate::format::Schema schema = saturate::format::AllTypesSchema();
  auto bytes = std::as_bytes(std::span(data, size));
  saturate::format::ShardInfo info{"fuzz.srec", 0, size};
  saturate::format::VerifyReport report;
  saturate::format::VerifyShardBytes(info, bytes, schema, &report);
  return 0;
}
