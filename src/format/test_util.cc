#include "format/test_util.h"

namespace saturate::format {

Schema AllTypesSchema() {
  return Schema{{
      {"text", FieldKind::kBytes, DType::kUInt8, {}},
      {"image", FieldKind::kImage, DType::kUInt8, {}},
      {"label", FieldKind::kInt64, DType::kUInt8, {}},
      {"weight", FieldKind::kFloat32, DType::kUInt8, {}},
      {"grid", FieldKind::kArray, DType::kUInt8, {2, 3}},
      {"tokens", FieldKind::kVarArray, DType::kInt32, {}},
  }};
}

AllTypesRecord MakeAllTypesRecord(uint64_t i) {
  AllTypesRecord r;
  r.text = "record-" + std::to_string(i);
  r.image.resize(i % 300);  // includes an empty payload at i == 0
  for (size_t k = 0; k < r.image.size(); ++k) r.image[k] = std::byte((i * 31 + k) & 0xff);
  r.label = static_cast<int64_t>(i) * 7 - 3;
  r.weight = static_cast<float>(i) * 0.5f;
  for (uint8_t k = 0; k < 6; ++k) r.grid.push_back(static_cast<uint8_t>(i + k));
  for (uint64_t k = 0; k < i % 17; ++k) r.tokens.push_back(static_cast<int32_t>(i * 100 + k));
  return r;
}

std::vector<std::span<const std::byte>> AllTypesRecord::Fields() const {
  return {std::as_bytes(std::span(text.data(), text.size())),
          std::span<const std::byte>(image),
          AsBytes(label),
          AsBytes(weight),
          AsBytes(std::span<const uint8_t>(grid)),
          AsBytes(std::span<const int32_t>(tokens))};
}

Status WriteAllTypesDataset(const std::string& dir, uint64_t n, uint64_t shard_bytes) {
  WriterOptions options;
  options.shard_bytes = shard_bytes;
  options.class_names = {"cat", "dog"};
  SATURATE_ASSIGN_OR_RETURN(auto writer, DatasetWriter::Create(dir, AllTypesSchema(), options));
  for (uint64_t i = 0; i < n; ++i) {
    AllTypesRecord r = MakeAllTypesRecord(i);
    auto fields = r.Fields();
    SATURATE_RETURN_IF_ERROR(writer->Append(fields));
  }
  return writer->Finish();
}

}  // namespace saturate::format
