// tf.Example records (TFRecord payloads) as saturate fields.
//
// InferExampleFields chooses the fields from the first records of a file:
// the image key becomes `image`, the label key `label` (int64), every other
// feature keeps its name: bytes_list -> bytes, int64_list / float_list ->
// int64 / float32 when every probed record holds exactly one value, else
// int64[] / float32[]. ExtractExample then reads one record by that plan.
// Errors are Corruption (InvalidArgument for a missing image or label key at
// inference) naming the feature and field; callers add file and record.
//
// Thread-safety: pure functions.
#ifndef SATURATE_FORMATS_EXAMPLE_H_
#define SATURATE_FORMATS_EXAMPLE_H_

#include <span>
#include <string>
#include <vector>

#include "saturate/base/status.h"
#include "saturate/format/schema.h"
#include "saturate/formats/source.h"

namespace saturate::formats {

// A schema and, per field, the feature it comes from.
struct ExamplePlan {
  format::Schema schema;
  std::vector<std::string> features;
};

Result<ExamplePlan> InferExampleFields(std::span<const std::span<const std::byte>> records,
                                       const std::string& image_key, const std::string& label_key);

// The plan for a given schema (fields named image/label map to the keys).
ExamplePlan PlanForSchema(const format::Schema& schema, const std::string& image_key,
                          const std::string& label_key);

// Sets sample->fields from `record`: field i of `schema` from feature
// `features[i]`. The views point into `record` (the image bytes where they
// lie, no copy) or into the sample's storage, so `record` must outlive them.
// ExtractExampleInPlace reads records in the layout writers produce with
// protobuf's wire-format reader (io::CodedInputStream), copying nothing but
// int64 varints; it returns false, setting nothing, for any other layout
// protobuf also accepts, for malformed records and for any check that fails.
// ExtractExampleParsed parses with the generated tf.Example parser (the
// reference: views into sample->keep). ExtractExample tries the first and
// falls back to the second, which then makes the error; both give the same
// fields for every record the first accepts (example_test, tfrecord_fuzz).
Status ExtractExample(std::span<const std::byte> record, const format::Schema& schema,
                      const std::vector<std::string>& features, Sample* sample);
bool ExtractExampleInPlace(std::span<const std::byte> record, const format::Schema& schema,
                           const std::vector<std::string>& features, Sample* sample);
Status ExtractExampleParsed(std::span<const std::byte> record, const format::Schema& schema,
                            const std::vector<std::string>& features, Sample* sample);

// A serialized tf.Example (tests and fuzz seeds): features of one kind each.
struct ExampleValue {
  std::string name;
  std::vector<std::string> bytes;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  int kind = 0;  // 0 bytes, 1 float, 2 int64
};
std::string SerializeExample(const std::vector<ExampleValue>& features);

}  // namespace saturate::formats

#endif  // SATURATE_FORMATS_EXAMPLE_H_
