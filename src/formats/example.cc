#include "formats/example.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include <algorithm>
#include <bit>
#include <cstring>
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

Status ExtractExampleParsed(std::span<const std::byte> record, const format::Schema& schema,
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

namespace {

// Float lists are viewed as the record holds them: little-endian.
static_assert(std::endian::native == std::endian::little);

using google::protobuf::io::CodedInputStream;
using WF = google::protobuf::internal::WireFormatLite;

constexpr uint32_t kLengthDelimited1 = WF::MakeTag(1, WF::WIRETYPE_LENGTH_DELIMITED);
constexpr uint32_t kLengthDelimited2 = WF::MakeTag(2, WF::WIRETYPE_LENGTH_DELIMITED);
constexpr uint32_t kLengthDelimited3 = WF::MakeTag(3, WF::WIRETYPE_LENGTH_DELIMITED);

// One feature as the walk below finds it: where its values lie in the record.
struct FeatureView {
  int kind = 0;  // the tag of Feature's oneof: 1 bytes_list, 2 float_list, 3 int64_list
  int count = 0;
  std::span<const std::byte> first;   // bytes_list: the first value
  std::span<const std::byte> packed;  // float_list / int64_list: the packed values
};

// The walk over one tf.Example in the layout every writer produces (TensorFlow's
// SerializeToString, the tfrecord package, SerializeExample): each message's
// fields once and in field order, map entries as key then value, float and
// int64 lists packed. A CodedInputStream reads the record's bytes; values are
// views of them. Any other layout, which protobuf also accepts (a field repeated and merged, an
// unpacked list, unknown fields, a group, a key that is not ASCII), returns
// false, as does anything malformed: the generated parser then decides.
class CanonicalWalk {
 public:
  CanonicalWalk(std::span<const std::byte> record, const std::vector<std::string>& wanted)
      : base_(record.data()),
        size_(static_cast<int>(record.size())),
        in_(reinterpret_cast<const uint8_t*>(record.data()), static_cast<int>(record.size())),
        wanted_(wanted),
        found_(wanted.size()) {}

  bool Run() {
    uint32_t tag = in_.ReadTag();
    if (tag == kLengthDelimited1) {  // Example.features
      if (!Nested([&] { return Features(); })) return false;
      tag = in_.ReadTag();
    }
    return tag == 0 && in_.ConsumedEntireMessage();  // the end, not a zero tag
  }

  const std::vector<FeatureView>& found() const { return found_; }

 private:
  // Bytes left in the current message (the record at the top).
  uint32_t Left() const {
    const int limit = in_.BytesUntilLimit();
    return static_cast<uint32_t>(limit >= 0 ? limit : size_ - in_.CurrentPosition());
  }

  // Reads a length, limits the stream to it, runs `body`, which must consume
  // exactly that much.
  template <typename F>
  bool Nested(F body) {
    uint32_t length = 0;
    if (!in_.ReadVarint32(&length) || length > Left()) return false;
    const CodedInputStream::Limit limit = in_.PushLimit(static_cast<int>(length));
    if (!body() || in_.BytesUntilLimit() != 0) return false;
    in_.PopLimit(limit);
    return true;
  }

  // A length-delimited field's bytes, viewed where they lie.
  bool View(std::span<const std::byte>* out) {
    uint32_t length = 0;
    if (!in_.ReadVarint32(&length) || length > Left()) return false;
    *out = std::span(base_ + in_.CurrentPosition(), length);
    return in_.Skip(static_cast<int>(length));
  }

  bool Features() {
    for (uint32_t tag; (tag = in_.ReadTag()) != 0;) {
      if (tag != kLengthDelimited1 || !Nested([&] { return Entry(); })) return false;
    }
    return in_.ConsumedEntireMessage();
  }

  bool Entry() {
    std::span<const std::byte> key;
    if (in_.ReadTag() != kLengthDelimited1 || !View(&key)) return false;
    for (std::byte b : key) {
      if (static_cast<uint8_t>(b) >= 0x80) return false;  // UTF-8 checks: the parser's
    }
    FeatureView view;
    if (in_.ReadTag() != kLengthDelimited2 || !Nested([&] { return Feature(&view); })) {
      return false;
    }
    if (in_.BytesUntilLimit() != 0) return false;
    for (size_t i = 0; i < wanted_.size(); ++i) {
      const std::string& w = wanted_[i];
      if (w.size() != key.size() || std::memcmp(w.data(), key.data(), key.size()) != 0) continue;
      if (found_[i].kind != 0) return false;  // a key twice: the parser's rule
      found_[i] = view;
    }
    return true;
  }

  bool Feature(FeatureView* view) {
    const uint32_t tag = in_.ReadTag();
    if (tag == kLengthDelimited1) {
      view->kind = 1;
      if (!Nested([&] { return BytesList(view); })) return false;
    } else if (tag == kLengthDelimited2 || tag == kLengthDelimited3) {
      view->kind = tag == kLengthDelimited2 ? 2 : 3;
      if (!Nested([&] { return PackedList(view); })) return false;
    } else {
      return false;  // an empty Feature (no kind) or another field
    }
    return in_.BytesUntilLimit() == 0;
  }

  bool BytesList(FeatureView* view) {
    for (uint32_t tag; (tag = in_.ReadTag()) != 0;) {
      std::span<const std::byte> value;
      if (tag != kLengthDelimited1 || !View(&value)) return false;
      if (view->count++ == 0) view->first = value;
    }
    return in_.ConsumedEntireMessage();
  }

  // FloatList / Int64List: nothing, or field 1 packed, once.
  bool PackedList(FeatureView* view) {
    const uint32_t tag = in_.ReadTag();
    if (tag == 0) return in_.ConsumedEntireMessage();
    if (tag != kLengthDelimited1 || !View(&view->packed)) return false;
    if (view->kind == 2) {
      if (view->packed.size() % 4 != 0) return false;
      view->count = static_cast<int>(view->packed.size() / 4);
    } else {
      // Count the varints; each must end within the list and be at most 10
      // bytes whose last holds no bits past the 64th.
      size_t n = 0, run = 0;
      for (std::byte b : view->packed) {
        ++run;
        if ((static_cast<uint8_t>(b) & 0x80) == 0) {
          if (run > 10 || (run == 10 && static_cast<uint8_t>(b) > 1)) return false;
          ++n;
          run = 0;
        }
      }
      if (run != 0) return false;
      view->count = static_cast<int>(n);
    }
    return in_.ReadTag() == 0 && in_.ConsumedEntireMessage();
  }

  const std::byte* base_;
  const int size_;
  CodedInputStream in_;
  const std::vector<std::string>& wanted_;
  std::vector<FeatureView> found_;
};

// Decodes the packed varints of an int64_list (CanonicalWalk checked them).
void DecodeVarints(std::span<const std::byte> packed, std::vector<std::byte>* out) {
  const auto* p = reinterpret_cast<const uint8_t*>(packed.data());
  const uint8_t* end = p + packed.size();
  while (p < end) {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      const uint8_t b = *p++;
      v |= uint64_t{b & 0x7fu} << shift;
      if ((b & 0x80) == 0) break;
    }
    const size_t at = out->size();
    out->resize(at + 8);
    std::memcpy(out->data() + at, &v, 8);
  }
}

}  // namespace

bool ExtractExampleInPlace(std::span<const std::byte> record, const format::Schema& schema,
                           const std::vector<std::string>& features_of, Sample* sample) {
  if (record.size() > (size_t{1} << 31) - 1) return false;
  CanonicalWalk walk(record, features_of);
  if (!walk.Run()) return false;
  const std::vector<FeatureView>& found = walk.found();
  // The checks of ExtractExampleParsed; where one fails, it makes the error.
  std::vector<std::span<const std::byte>> fields(schema.fields.size());
  size_t owned = 0;
  for (size_t i = 0; i < schema.fields.size(); ++i) {
    const FieldSpec& spec = schema.fields[i];
    const FeatureView& f = found[i];
    const bool required = spec.kind == FieldKind::kImage || spec.kind == FieldKind::kInt64 ||
                          spec.kind == FieldKind::kFloat32;
    if (f.kind == 0) {
      if (required) return false;
      continue;
    }
    const bool bytes = spec.kind == FieldKind::kImage || spec.kind == FieldKind::kBytes;
    const bool ints = spec.kind == FieldKind::kInt64 ||
                      (spec.kind == FieldKind::kVarArray && spec.dtype == DType::kInt64);
    if (f.kind != (bytes ? 1 : ints ? 3 : 2)) return false;
    if (spec.kind != FieldKind::kVarArray && (f.count > 1 || (required && f.count != 1))) {
      return false;
    }
    if (f.count == 0) continue;
    if (bytes) {
      if (spec.kind == FieldKind::kImage && f.first.empty()) return false;
      fields[i] = f.first;
    } else if (!ints) {
      fields[i] = f.packed;  // little-endian floats, as the record holds them
    } else {
      ++owned;
    }
  }
  // int64s are varints in the record: decoded into the sample's storage.
  sample->owned.reserve(sample->owned.size() + owned);
  for (size_t i = 0; i < schema.fields.size() && owned > 0; ++i) {
    const FeatureView& f = found[i];
    if (f.kind != 3 || f.count == 0 || !fields[i].empty()) continue;
    --owned;
    sample->owned.emplace_back();
    DecodeVarints(f.packed, &sample->owned.back());
    fields[i] = sample->owned.back();
  }
  sample->fields = std::move(fields);
  return true;
}

Status ExtractExample(std::span<const std::byte> record, const format::Schema& schema,
                      const std::vector<std::string>& features_of, Sample* sample) {
  if (ExtractExampleInPlace(record, schema, features_of, sample)) return Status::OK();
  return ExtractExampleParsed(record, schema, features_of, sample);
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
