// Builds small datasets with every field type, for format tests and fuzz seeds.
// Thread-safety: not thread-safe; test helper.
#ifndef SATURATE_FORMAT_TEST_UTIL_H_
#define SATURATE_FORMAT_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "saturate/format/schema.h"
#include "saturate/format/writer.h"

namespace saturate::format {

// bytes, image, int64, float32, uint8[2,3], int32[] (variable length).
Schema AllTypesSchema();

// Deterministic payloads for record `i` of AllTypesSchema().
struct AllTypesRecord {
  std::string text;
  std::vector<std::byte> image;
  int64_t label;
  float weight;
  std::vector<uint8_t> grid;  // 6 values
  std::vector<int32_t> tokens;
  std::vector<std::span<const std::byte>> Fields() const;
};
AllTypesRecord MakeAllTypesRecord(uint64_t i);

// Writes `n` records of AllTypesSchema() into `dir` (which must exist).
Status WriteAllTypesDataset(const std::string& dir, uint64_t n, uint64_t shard_bytes = 4096);

}  // namespace saturate::format

#endif  // SATURATE_FORMAT_TEST_UTIL_H_
