#include "formats/example.h"

#include <algorithm>
#include <map>

#include "example.pb.h"

namespace saturate::formats {
namespace {

namespace pb = tfproto;
using format::DType;
using format::FieldKind;
using format::FieldSpec;

const char* KindName(pb::Feature::KindCase k) {
  switch (k) {
    case pb::Feature::kBytesList:
      return "bytes_list";
    case pb::Feature::kFloatList:
      return "float_list";
    case pb::Feature::kInt64List:
      return "int64_list";
    default:
      return "empty feature";
  }
}

int ValueCount(const pb::Feature& f) {
  switch (f.kind_case()) {
    case pb::Feature::kBytesList:
      return f.bytes_list().value_size();
    case pb::Feature::kFloatList:
      return f.float_list().value_size();
    case pb::Feature::kInt64List:
      return f.int64_list().value_size();
    default:
      return 0;
  }
}

Result<std::shared_ptr<pb::Example>> Parse(std::span<const std::byte> record) {
  auto ex = std::make_shared<pb::Example>();
  if (!ex->ParseFromArray(record.data(), static_cast<int>(record.size()))) {
    return Status::Corruption("not a tf.Example (protobuf parse failed, " +
                              std::to_string(record.size()) + " bytes)");
  }
  return ex;
}

std::string FeatureList(const pb::Example& ex) {
  std::vector<std::string> names;
  for (const auto& [name, f] : ex.features().feature()) names.push_back(name);
  std::sort(names.begin(), names.end());
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

}  // namespace

Result<ExamplePlan> InferExampleFields(std::span<const std::span<const std::byte>> records,
                                       const std::string& image_key, const std::string& label_key) {
  if (records.empty()) return Status::InvalidArgument("no records to infer the fields from");
  struct Seen {
    pb::Feature::KindCase kind;
    bool single = true;
  };
  std::map<std::string, Seen> seen;
  std::shared_ptr<pb::Example> first;
  for (size_t r = 0; r < records.size(); ++r) {
    auto ex = Parse(records[r]);
    if (!ex.ok()) return ex.status().WithContext("record " + std::to_string(r));
    if (!first) first = *ex;
    for (const auto& [name, f] : (*ex)->features().feature()) {
      auto [it, added] = seen.emplace(name, Seen{f.kind_case()});
      if (!added && it->second.kind != f.kind_case() &&
          f.kind_case() != pb::Feature::KIND_NOT_SET) {
        if (it->second.kind == pb::Feature::KIND_NOT_SET) {
          it->second.kind = f.kind_case();
        } else {
          return Status::Corruption("record " + std::to_string(r) + ": feature '" + name +
                                    "' is a " + KindName(f.kind_case()) +
                                    ", an earlier record's is a " + KindName(it->second.kind));
        }
      }
      if (ValueCount(f) != 1) it->second.single = false;
    }
  }
  auto require = [&](const std::string& key, pb::Feature::KindCase kind,
                     const char* flag) -> Status {
    auto it = seen.find(key);
    if (it == seen.end()) {
      return Status::InvalidArgument("no feature '" + key + "' in the first record (features: " +
                                     FeatureList(*first) + "); choose one with " + flag);
    }
    if (it->second.kind != kind) {
      return Status::InvalidArgument("feature '" + key + "' is a " + KindName(it->second.kind) +
                                     ", expected a " + KindName(kind) + " (" + flag + ")");
    }
    return Status::OK();
  };
  SATURATE_RETURN_IF_ERROR(require(image_key, pb::Feature::kBytesList, "--image-key"));
  ExamplePlan plan;
  plan.schema.fields.push_back(FieldSpec{"image", FieldKind::kImage});
  plan.features.push_back(image_key);
  if (!label_key.empty()) {
    SATURATE_RETURN_IF_ERROR(require(label_key, pb::Feature::kInt64List, "--label-key"));
    plan.schema.fields.push_back(FieldSpec{"label", FieldKind::kInt64});
    plan.features.push_back(label_key);
  }
  for (const auto& [name, s] : seen) {  // std::map: sorted by name
    if (name == image_key || name == label_key) continue;
    if (name == "image" || name == "label") {
      return Status::InvalidArgument("feature '" + name +
                                     "' has the name of the image or label field; choose it "
                                     "with --image-key / --label-key");
    }
    FieldSpec spec{name, FieldKind::kBytes};
    if (s.kind == pb::Feature::kInt64List) {
      spec = s.single ? FieldSpec{name, FieldKind::kInt64}
                      : FieldSpec{name, FieldKind::kVarArray, DType::kInt64};
    } else if (s.kind == pb::Feature::kFloatList) {
      spec = s.single ? FieldSpec{name, FieldKind::kFloat32}
                      : FieldSpec{name, FieldKind::kVarArray, DType::kFloat32};
    } else if (s.kind != pb::Feature::kBytesList) {
      continue;  // never had a value: no type to give it
    }
    plan.schema.fields.push_back(spec);
    plan.features.push_back(name);
  }
  return plan;
}

ExamplePlan PlanForSchema(const format::Schema& schema, const std::string& image_key,
                          const std::string& label_key) {
  ExamplePlan plan{schema, {}};
  for (const FieldSpec& f : schema.fields) {
    plan.features.push_back(f.name == "image" ? image_key : f.name == "label" ? label_key : f.name);
  }
  return plan;
}

Status ExtractExample(std::span<const std::byte> record, const format::Schema& schema,
                      const std::vector<std::string>& features_of, Sample* sample) {
  if (record.size() > (size_t{1} << 31) - 1) {
    return Status::Corruption("record of " + std::to_string(record.size()) + " bytes is too large");
  }
  SATURATE_ASSIGN_OR_RETURN(std::shared_ptr<pb::Example> ex, Parse(record));
  const auto& features = ex->features().feature();
  sample->fields.assign(schema.fields.size(), {});
  for (size_t i = 0; i < schema.fields.size(); ++i) {
    const FieldSpec& spec = schema.fields[i];
    const std::string& key = features_of[i];
    auto where = [&] {
      return "feature '" + key + "'" + (key == spec.name ? "" : " (field '" + spec.name + "')");
    };
    auto it = features.find(key);
    const bool required = spec.kind == FieldKind::kImage || spec.kind == FieldKind::kInt64 ||
                          spec.kind == FieldKind::kFloat32;
    if (it == features.end() || it->second.kind_case() == pb::Feature::KIND_NOT_SET) {
      if (required) return Status::Corruption(where() + ": missing");
      continue;  // bytes and var arrays: empty
    }
    const pb::Feature& f = it->second;
    const bool bytes = spec.kind == FieldKind::kImage || spec.kind == FieldKind::kBytes;
    const bool ints = spec.kind == FieldKind::kInt64 ||
                      (spec.kind == FieldKind::kVarArray && spec.dtype == DType::kInt64);
    const pb::Feature::KindCase want = bytes  ? pb::Feature::kBytesList
                                       : ints ? pb::Feature::kInt64List
                                              : pb::Feature::kFloatList;
    if (f.kind_case() != want) {
      return Status::Corruption(where() + ": is a " + KindName(f.kind_case()) + ", expected a " +
                                KindName(want));
    }
    const int n = ValueCount(f);
    if (spec.kind != FieldKind::kVarArray && (n > 1 || (required && n != 1))) {
      return Status::Corruption(where() + ": " + std::to_string(n) +
                                " values, expected one (the schema, from the first records, has "
                                "one)");
    }
    if (n == 0) continue;
    if (bytes) {
      const std::string& v = f.bytes_list().value(0);
      if (spec.kind == FieldKind::kImage && v.empty()) {
        return Status::Corruption(where() + ": empty image");
      }
      sample->fields[i] = std::as_bytes(std::span(v.data(), v.size()));
    } else if (ints) {
      const auto& v = f.int64_list().value();
      sample->fields[i] = std::as_bytes(std::span(v.data(), static_cast<size_t>(v.size())));
    } else {
      const auto& v = f.float_list().value();
      sample->fields[i] = std::as_bytes(std::span(v.data(), static_cast<size_t>(v.size())));
    }
  }
  sample->keep = std::move(ex);
  return Status::OK();
}

std::string SerializeExample(const std::vector<ExampleValue>& features) {
  pb::Example ex;
  auto* map = ex.mutable_features()->mutable_feature();
  for (const ExampleValue& v : features) {
    pb::Feature& f = (*map)[v.name];
    if (v.kind == 0) {
      for (const auto& b : v.bytes) f.mutable_bytes_list()->add_value(b);
      if (v.bytes.empty()) f.mutable_bytes_list();
    } else if (v.kind == 1) {
      for (float x : v.floats) f.mutable_float_list()->add_value(x);
      if (v.floats.empty()) f.mutable_float_list();
    } else {
      for (int64_t x : v.ints) f.mutable_int64_list()->add_value(x);
      if (v.ints.empty()) f.mutable_int64_list();
    }
  }
  return ex.SerializeAsString();
}

}  // namespace saturate::formats
