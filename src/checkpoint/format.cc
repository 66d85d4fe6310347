#include "checkpoint/format.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <charconv>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace saturate::checkpoint {
namespace {

using json = nlohmann::json;

json Body(const Manifest& m) {
  json files = json::array();
  for (const FileEntry& f : m.files) {
    files.push_back({{"name", f.name}, {"bytes", f.bytes}, {"xxh3", HexChecksum(f.xxh3)}});
  }
  json tensors = json::array();
  for (const TensorEntry& t : m.tensors) {
    tensors.push_back({{"name", t.name},
                       {"dtype", t.dtype},
                       {"shape", t.shape},
                       {"device", t.device},
                       {"file", t.file},
                       {"offset", t.offset},
                       {"bytes", t.bytes}});
  }
  return {{"format", kFormatName},
          {"format_version", kFormatVersion},
          {"step", m.step},
          {"created_unix_ms", m.created_unix_ms},
          {"files", files},
          {"tensors", tensors},
          {"metadata_file", m.metadata_file}};
}

// XXH3 of the canonical (compact, key-sorted) body: any change of meaning is
// caught, whitespace is not.
std::string BodyChecksum(const json& body) {
  std::string canon = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return HexChecksum(Checksum(std::as_bytes(std::span(canon.data(), canon.size()))));
}

bool ParseHex(const std::string& s, uint64_t* out) {
  if (s.size() != 16) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out, 16);
  return ec == std::errc() && end == s.data() + s.size();
}

Status Corrupt(std::string_view source, const std::string& what) {
  return Status::Corruption(std::string(source) + ": " + what);
}

// Thrown for a number field that is not an integer: nlohmann would convert
// a float such as 1e300, and that conversion is undefined behaviour.
struct NotAnInteger {
  std::string key;
};

template <typename T>
T IntegerAt(const json& j, const char* key) {
  const json& v = j.at(key);
  if (!v.is_number_integer()) throw NotAnInteger{key};
  return v.get<T>();
}

// Reads every field; nlohmann throws on a wrong type, which becomes Corruption.
Result<Manifest> FromJson(const json& j, std::string_view source) {
  Manifest m;
  try {
    if (j.at("format").get<std::string>() != kFormatName) {
      return Corrupt(source, "format is not '" + std::string(kFormatName) + "'");
    }
    const int version = IntegerAt<int>(j, "format_version");
    if (version != kFormatVersion) {
      return Corrupt(source, "unsupported format_version " + std::to_string(version) +
                                 " (this build reads " + std::to_string(kFormatVersion) + ")");
    }
    m.step = IntegerAt<uint64_t>(j, "step");
    m.created_unix_ms = IntegerAt<int64_t>(j, "created_unix_ms");
    m.metadata_file = j.at("metadata_file").get<std::string>();
    for (const json& f : j.at("files")) {
      FileEntry e{f.at("name").get<std::string>(), IntegerAt<uint64_t>(f, "bytes"), 0};
      if (!ParseHex(f.at("xxh3").get<std::string>(), &e.xxh3)) {
        return Corrupt(source, "file " + e.name + ": xxh3 is not 16 hex digits");
      }
      m.files.push_back(std::move(e));
    }
    for (const json& t : j.at("tensors")) {
      TensorEntry e;
      e.name = t.at("name").get<std::string>();
      e.dtype = t.at("dtype").get<std::string>();
      for (const json& d : t.at("shape")) {
        if (!d.is_number_integer()) throw NotAnInteger{"shape"};
        e.shape.push_back(d.get<int64_t>());
      }
      e.device = t.at("device").get<std::string>();
      e.file = t.at("file").get<std::string>();
      e.offset = IntegerAt<uint64_t>(t, "offset");
      e.bytes = IntegerAt<uint64_t>(t, "bytes");
      m.tensors.push_back(std::move(e));
    }
  } catch (const json::exception& e) {
    return Corrupt(source, std::string("malformed manifest: ") + e.what());
  } catch (const NotAnInteger& e) {
    return Corrupt(source, "malformed manifest: \"" + e.key + "\" is not an integer");
  }
  return m;
}

const FileEntry* FindFile(const Manifest& m, const std::string& name) {
  for (const FileEntry& f : m.files) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

Status CheckBounds(const Manifest& m, std::string_view source) {
  if (m.metadata_file.empty() || FindFile(m, m.metadata_file) == nullptr) {
    return Corrupt(source, "metadata file '" + m.metadata_file + "' is not listed in files");
  }
  for (const TensorEntry& t : m.tensors) {
    const FileEntry* f = FindFile(m, t.file);
    if (f == nullptr) return Corrupt(source, "tensor " + t.name + ": unknown file " + t.file);
    if (t.offset > f->bytes || t.bytes > f->bytes - t.offset) {
      return Corrupt(source, "tensor " + t.name + ": bytes [" + std::to_string(t.offset) + ", +" +
                                 std::to_string(t.bytes) + ") outside " + t.file + " (" +
                                 std::to_string(f->bytes) + " bytes)");
    }
  }
  return Status::OK();
}

}  // namespace

std::string StepDirName(uint64_t step) { return "step-" + std::to_string(step); }

bool ParseStepDirName(std::string_view name, uint64_t* step, bool* tmp) {
  constexpr std::string_view kPrefix = "step-";
  if (!name.starts_with(kPrefix)) return false;
  name.remove_prefix(kPrefix.size());
  *tmp = name.ends_with(kTmpSuffix);
  if (*tmp) name.remove_suffix(kTmpSuffix.size());
  if (name.empty() || name.size() > 20) return false;
  auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), *step);
  return ec == std::errc() && end == name.data() + name.size();
}

std::vector<uint64_t> LayoutTensors(std::span<const TensorRef> tensors, uint64_t* total_bytes) {
  std::vector<uint64_t> offsets;
  offsets.reserve(tensors.size());
  uint64_t at = 0;
  for (const TensorRef& t : tensors) {
    at = (at + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
    offsets.push_back(at);
    at += t.bytes;
  }
  *total_bytes = at;
  return offsets;
}

uint64_t Checksum(std::span<const std::byte> bytes) {
  return XXH3_64bits(bytes.data(), bytes.size());
}

std::string HexChecksum(uint64_t xxh3) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(xxh3));
  return buf;
}

StreamingChecksum::StreamingChecksum() : state_(XXH3_createState()) {
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_));
}
StreamingChecksum::~StreamingChecksum() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }
void StreamingChecksum::Update(const void* data, size_t bytes) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), data, bytes);
}
uint64_t StreamingChecksum::Digest() const {
  return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state_));
}

std::string SerializeManifest(const Manifest& m) {
  json j = Body(m);
  j["xxh3"] = BodyChecksum(j);
  return j.dump(1, ' ', false, json::error_handler_t::replace) + "\n";
}

Result<Manifest> ParseManifest(std::string_view text, std::string_view source) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Corrupt(source, "not a JSON object (manifest unreadable)");
  }
  SATURATE_ASSIGN_OR_RETURN(Manifest m, FromJson(j, source));
  if (!j.contains("xxh3") || !j["xxh3"].is_string() ||
      j["xxh3"].get<std::string>() != BodyChecksum(Body(m))) {
    return Corrupt(source, "manifest checksum mismatch (edited or damaged)");
  }
  SATURATE_RETURN_IF_ERROR(CheckBounds(m, source));
  return m;
}

}  // namespace saturate::checkpoint
