#include "saturate/format/schema.h"

#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <type_traits>

#include "format/shard_format.h"

namespace saturate::format {
namespace {

using nlohmann::json;

constexpr std::string_view kFormatName = "saturate-dataset";
constexpr uint64_t kMaxFieldBytes = uint64_t{1} << 40;

constexpr std::string_view kKindNames[] = {"bytes",   "image", "int64",
                                           "float32", "array", "var_array"};
constexpr std::string_view kDTypeNames[] = {"uint8",   "int32",   "int64",
                                            "float16", "float32", "bfloat16"};
constexpr size_t kDTypeSizes[] = {1, 4, 8, 2, 4, 2};

template <typename T>
bool FitsInteger(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>() <= std::numeric_limits<T>::max();
  if (v.is_number_integer()) {
    int64_t i = v.get<int64_t>();
    return std::is_signed_v<T>
               ? i >= std::numeric_limits<T>::min() &&
                     i <= static_cast<int64_t>(std::numeric_limits<T>::max())
               : i >= 0 && static_cast<uint64_t>(i) <= std::numeric_limits<T>::max();
  }
  return false;
}

// Reads `obj[key]` as T, or returns Corruption naming `source` and `where`.
template <typename T>
Status Get(const json& obj, const char* key, std::string_view source, const std::string& where,
           T* out) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    return Status::Corruption(std::string(source) + ": " + where + ": missing key '" + key + "'");
  }
  try {
    // nlohmann converts reals to integers without a range check (UB): only
    // accept integers that fit.
    if constexpr (std::is_integral_v<T>) {
      if (!FitsInteger<T>(*it))
        throw json::type_error::create(302, "not an integer in range", it.operator->());
    } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
      if (!it->is_array()) throw json::type_error::create(302, "not an array", it.operator->());
      for (const json& v : *it) {
        if (!FitsInteger<int64_t>(v)) throw json::type_error::create(302, "not an integer", &v);
      }
    }
    *out = it->get<T>();
  } catch (const json::exception&) {
    return Status::Corruption(std::string(source) + ": " + where + ": key '" + key +
                              "' has the wrong type");
  }
  return Status::OK();
}

Result<FieldSpec> ParseField(const json& j, std::string_view source, size_t i) {
  std::string where = "schema field " + std::to_string(i);
  if (!j.is_object())
    return Status::Corruption(std::string(source) + ": " + where + " is not an object");
  FieldSpec f;
  std::string kind;
  SATURATE_RETURN_IF_ERROR(Get(j, "name", source, where, &f.name));
  SATURATE_RETURN_IF_ERROR(Get(j, "type", source, where, &kind));
  auto ctx = std::string(source) + ": field '" + f.name + "'";
  auto k = ParseFieldKind(kind);
  if (!k.ok()) return Status::Corruption(ctx + ": unknown type '" + kind + "'");
  f.kind = *k;
  if (f.kind == FieldKind::kArray || f.kind == FieldKind::kVarArray) {
    std::string dtype;
    SATURATE_RETURN_IF_ERROR(Get(j, "dtype", source, where, &dtype));
    auto d = ParseDType(dtype);
    if (!d.ok()) return Status::Corruption(ctx + ": unknown dtype '" + dtype + "'");
    f.dtype = *d;
  }
  if (f.kind == FieldKind::kArray) {
    SATURATE_RETURN_IF_ERROR(Get(j, "shape", source, where, &f.shape));
  }
  return f;
}

Result<ShardInfo> ParseShard(const json& j, std::string_view source, size_t i) {
  std::string where = "shard " + std::to_string(i);
  if (!j.is_object())
    return Status::Corruption(std::string(source) + ": " + where + " is not an object");
  ShardInfo s;
  SATURATE_RETURN_IF_ERROR(Get(j, "file", source, where, &s.file));
  SATURATE_RETURN_IF_ERROR(Get(j, "records", source, where, &s.records));
  SATURATE_RETURN_IF_ERROR(Get(j, "bytes", source, where, &s.bytes));
  // Shard files live in the dataset directory itself: no paths, no escapes.
  if (s.file.empty() || s.file.find('/') != std::string::npos || s.file == "." || s.file == "..") {
    return Status::Corruption(std::string(source) + ": " + where + ": invalid file name '" +
                              s.file + "'");
  }
  if (s.bytes < kHeaderBytes + kFooterBytes || s.records > s.bytes / kIndexEntryBytes) {
    return Status::Corruption(std::string(source) + ": " + where + " (" + s.file +
                              "): record count and size are inconsistent");
  }
  return s;
}

template <typename Enum, size_t N>
Result<Enum> ParseName(std::string_view name, const std::string_view (&names)[N],
                       std::string_view what) {
  for (size_t i = 0; i < N; ++i) {
    if (names[i] == name) return static_cast<Enum>(i);
  }
  std::string known;
  for (auto n : names) known += (known.empty() ? "" : ", ") + std::string(n);
  return Status::InvalidArgument("unknown " + std::string(what) + " '" + std::string(name) +
                                 "' (known: " + known + ")");
}

}  // namespace

std::string_view FieldKindName(FieldKind kind) { return kKindNames[static_cast<size_t>(kind)]; }
std::string_view DTypeName(DType dtype) { return kDTypeNames[static_cast<size_t>(dtype)]; }
size_t DTypeSize(DType dtype) { return kDTypeSizes[static_cast<size_t>(dtype)]; }
Result<FieldKind> ParseFieldKind(std::string_view name) {
  return ParseName<FieldKind>(name, kKindNames, "field type");
}
Result<DType> ParseDType(std::string_view name) {
  return ParseName<DType>(name, kDTypeNames, "dtype");
}

uint64_t FieldSpec::fixed_bytes() const {
  switch (kind) {
    case FieldKind::kInt64:
      return 8;
    case FieldKind::kFloat32:
      return 4;
    case FieldKind::kArray: {
      uint64_t n = DTypeSize(dtype);
      for (int64_t d : shape) n *= static_cast<uint64_t>(d);
      return n;
    }
    default:
      return 0;
  }
}

uint64_t FieldSpec::element_bytes() const {
  return kind == FieldKind::kVarArray ? DTypeSize(dtype) : 1;
}

uint64_t FieldSpec::alignment() const {
  return kind == FieldKind::kInt64 || kind == FieldKind::kFloat32 ? 8 : 64;
}

std::string FieldSpec::ToString() const {
  std::string out = name + ": ";
  if (kind == FieldKind::kArray) {
    out += std::string(DTypeName(dtype)) + "[";
    for (size_t i = 0; i < shape.size(); ++i) out += (i ? "," : "") + std::to_string(shape[i]);
    return out + "]";
  }
  if (kind == FieldKind::kVarArray) return out + std::string(DTypeName(dtype)) + "[]";
  return out + std::string(FieldKindName(kind));
}

Result<size_t> Schema::FieldIndex(std::string_view name) const {
  std::string known;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (fields[i].name == name) return i;
    known += (i ? ", " : "") + fields[i].name;
  }
  return Status::NotFound("no field '" + std::string(name) + "' (fields: " + known + ")");
}

Status Schema::Validate() const {
  if (fields.empty()) return Status::InvalidArgument("schema has no fields");
  std::set<std::string> seen;
  for (const FieldSpec& f : fields) {
    if (f.name.empty()) return Status::InvalidArgument("schema field with an empty name");
    if (!seen.insert(f.name).second) {
      return Status::InvalidArgument("duplicate field name '" + f.name + "'");
    }
    if (f.kind == FieldKind::kArray) {
      if (f.shape.empty()) return Status::InvalidArgument("field '" + f.name + "': empty shape");
      uint64_t n = DTypeSize(f.dtype);
      for (int64_t d : f.shape) {
        if (d <= 0 || static_cast<uint64_t>(d) > kMaxFieldBytes / n) {
          return Status::InvalidArgument("field '" + f.name + "': bad shape " + f.ToString());
        }
        n *= static_cast<uint64_t>(d);
      }
    } else if (!f.shape.empty()) {
      return Status::InvalidArgument("field '" + f.name + "': only arrays have a shape");
    }
  }
  return Status::OK();
}

uint64_t Manifest::num_records() const {
  uint64_t n = 0;
  for (const ShardInfo& s : shards) n += s.records;
  return n;
}

uint64_t Manifest::num_bytes() const {
  uint64_t n = 0;
  for (const ShardInfo& s : shards) n += s.bytes;
  return n;
}

namespace {

json FieldToJson(const FieldSpec& f) {
  json j = {{"name", f.name}, {"type", FieldKindName(f.kind)}};
  if (f.kind == FieldKind::kArray || f.kind == FieldKind::kVarArray)
    j["dtype"] = DTypeName(f.dtype);
  if (f.kind == FieldKind::kArray) j["shape"] = f.shape;
  return j;
}

}  // namespace

namespace {

// The manifest as JSON, without its checksum.
json ManifestBody(const Manifest& m) {
  json fields = json::array();
  for (const FieldSpec& f : m.schema.fields) fields.push_back(FieldToJson(f));
  json shards = json::array();
  for (const ShardInfo& s : m.shards) {
    shards.push_back({{"file", s.file}, {"records", s.records}, {"bytes", s.bytes}});
  }
  return {{"format", kFormatName},          {"format_version", m.format_version},
          {"num_records", m.num_records()}, {"schema", fields},
          {"class_names", m.class_names},   {"shards", shards},
          {"metadata", m.metadata}};
}

// XXH3 of the canonical (compact, key-sorted) body, so any change of meaning
// (a class name, a count) is caught while whitespace is not.
std::string BodyChecksum(const json& body) {
  std::string canon = body.dump(-1, ' ', false, json::error_handler_t::replace);
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%016llx",
                static_cast<unsigned long long>(
                    Checksum(std::as_bytes(std::span(canon.data(), canon.size())))));
  return buf;
}

}  // namespace

std::string SerializeManifest(const Manifest& m) {
  json j = ManifestBody(m);
  j["xxh3"] = BodyChecksum(j);
  return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

Result<Manifest> ParseManifest(std::string_view text, std::string_view source) {
  const std::string src(source);
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::Corruption(src + ": not a JSON object (manifest unreadable)");
  }
  std::string format;
  SATURATE_RETURN_IF_ERROR(Get(j, "format", source, "manifest", &format));
  if (format != kFormatName) {
    return Status::Corruption(src + ": format is '" + format + "', expected '" +
                              std::string(kFormatName) + "'");
  }
  Manifest m;
  SATURATE_RETURN_IF_ERROR(Get(j, "format_version", source, "manifest", &m.format_version));
  if (m.format_version != kFormatVersion) {
    return Status::Corruption(src + ": unsupported format_version " +
                              std::to_string(m.format_version) + " (this build reads " +
                              std::to_string(kFormatVersion) + ")");
  }
  json fields, shards;
  SATURATE_RETURN_IF_ERROR(Get(j, "schema", source, "manifest", &fields));
  SATURATE_RETURN_IF_ERROR(Get(j, "shards", source, "manifest", &shards));
  if (!fields.is_array() || !shards.is_array()) {
    return Status::Corruption(src + ": 'schema' and 'shards' must be arrays");
  }
  for (size_t i = 0; i < fields.size(); ++i) {
    SATURATE_ASSIGN_OR_RETURN(FieldSpec f, ParseField(fields[i], source, i));
    m.schema.fields.push_back(std::move(f));
  }
  Status valid = m.schema.Validate();
  if (!valid.ok()) return Status::Corruption(src + ": " + valid.message());
  uint64_t total = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    SATURATE_ASSIGN_OR_RETURN(ShardInfo s, ParseShard(shards[i], source, i));
    if (s.records > UINT64_MAX / 2 - total)
      return Status::Corruption(src + ": record counts overflow");
    total += s.records;
    m.shards.push_back(std::move(s));
  }
  if (j.contains("class_names")) {
    SATURATE_RETURN_IF_ERROR(Get(j, "class_names", source, "manifest", &m.class_names));
  }
  if (j.contains("metadata")) {
    SATURATE_RETURN_IF_ERROR(Get(j, "metadata", source, "manifest", &m.metadata));
  }
  uint64_t declared = 0;
  SATURATE_RETURN_IF_ERROR(Get(j, "num_records", source, "manifest", &declared));
  if (declared != m.num_records()) {
    return Status::Corruption(src + ": num_records " + std::to_string(declared) +
                              " differs from the sum over shards " +
                              std::to_string(m.num_records()));
  }
  std::string stored;
  SATURATE_RETURN_IF_ERROR(Get(j, "xxh3", source, "manifest", &stored));
  if (stored != BodyChecksum(ManifestBody(m))) {
    return Status::Corruption(src + ": manifest checksum mismatch (edited or damaged)");
  }
  return m;
}

uint64_t SchemaFingerprint(const Schema& schema) {
  std::string canon;
  for (const FieldSpec& f : schema.fields) canon += FieldToJson(f).dump() + "\n";
  return Checksum(std::as_bytes(std::span(canon.data(), canon.size())));
}

}  // namespace saturate::format
