// libFuzzer target for TFRecord framing and tf.Example parsing: any input
// must yield records inside the input, fields of the sizes their types say,
// or a Status; never a crash, a hang or a read outside the input. Reading in
// place (protobuf's wire-format reader) must give the generated parser's
// fields wherever it accepts a record, and ExtractExample the parser's
// result (fields or error) everywhere.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "formats/example.h"
#include "formats/tfrecord.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace saturate::formats;  // NOLINT: a fuzz target
  auto bytes = std::as_bytes(std::span(data, size));
  auto spans = ScanTfrecord(bytes);
  if (!spans.ok()) return 0;
  std::vector<std::span<const std::byte>> records;
  for (size_t r = 0; r < spans->size(); ++r) {
    auto rec = ReadTfrecord(bytes, (*spans)[r], r, /*verify=*/true);
    if (rec.ok()) records.push_back(*rec);
  }
  if (records.empty()) return 0;
  auto plan = InferExampleFields(records, "image/encoded", "image/class/label");
  if (!plan.ok()) return 0;
  for (const auto& rec : records) {
    Sample sample, parsed, in_place;
    const saturate::Status s = ExtractExample(rec, plan->schema, plan->features, &sample);
    const saturate::Status p = ExtractExampleParsed(rec, plan->schema, plan->features, &parsed);
    if (s.ToString() != p.ToString()) __builtin_trap();
    if (ExtractExampleInPlace(rec, plan->schema, plan->features, &in_place)) {
      if (!p.ok() || in_place.fields.size() != parsed.fields.size()) __builtin_trap();
      for (size_t i = 0; i < parsed.fields.size(); ++i) {
        const auto& a = in_place.fields[i];
        const auto& b = parsed.fields[i];
        if (a.size() != b.size() || (!a.empty() && std::memcmp(a.data(), b.data(), a.size()) != 0))
          __builtin_trap();
      }
    }
    if (!s.ok()) continue;
    if (sample.fields.size() != plan->schema.fields.size()) __builtin_trap();
    for (size_t i = 0; i < sample.fields.size(); ++i) {
      const auto& spec = plan->schema.fields[i];
      const uint64_t fixed = spec.kind == saturate::format::FieldKind::kInt64     ? 8
                             : spec.kind == saturate::format::FieldKind::kFloat32 ? 4
                                                                                  : 0;
      if (fixed != 0 && sample.fields[i].size() != fixed) __builtin_trap();
    }
  }
  return 0;
}
