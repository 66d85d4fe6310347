// saturate inspect DATASET: schema, counts, sizes, class names, one record.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "image/codec.h"
#include "remote_flags.h"
#include "saturate/format/reader.h"

namespace saturate::cli {
namespace {

using format::FieldKind;
using format::FieldSpec;
using nlohmann::json;

struct InspectFlags {
  std::string dataset;
  uint64_t record = 0;
  bool json = false;
  remote::RemoteOptions remote;
};

constexpr size_t kPreview = 8;  // array elements / text bytes shown

template <typename T>
json ArrayPreview(std::span<const std::byte> bytes) {
  json values = json::array();
  const size_t n = bytes.size() / sizeof(T);
  for (size_t i = 0; i < std::min(n, kPreview); ++i) {
    T v;
    std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
    values.push_back(v);
  }
  return {{"elements", n}, {"first", values}};
}

// A JSON description of one field's value, short enough to print.
json DescribeField(const FieldSpec& spec, const format::Record& rec, size_t field) {
  std::span<const std::byte> bytes = rec.field(field);
  json j = {{"bytes", bytes.size()}};
  switch (spec.kind) {
    case FieldKind::kInt64:
      j["value"] = rec.int64_at(field);
      break;
    case FieldKind::kFloat32:
      j["value"] = rec.float32_at(field);
      break;
    case FieldKind::kImage: {
      auto info = image::ProbeImage(bytes);
      if (info.ok()) {
        j["format"] = info->format == image::ImageFormat::kJpeg ? "jpeg" : "png";
        j["width"] = info->width;
        j["height"] = info->height;
        j["channels"] = info->channels;
      } else {
        j["error"] = info.status().message();
      }
      break;
    }
    case FieldKind::kBytes: {
      // Printable ASCII as is, anything else as '.', so any bytes print safely.
      std::string text;
      for (size_t i = 0; i < std::min<size_t>(bytes.size(), 64); ++i) {
        auto c = static_cast<unsigned char>(bytes[i]);
        text += c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '.';
      }
      j["text"] = text;
      break;
    }
    case FieldKind::kArray:
    case FieldKind::kVarArray:
      switch (spec.dtype) {
        case format::DType::kUInt8:
          j.update(ArrayPreview<uint8_t>(bytes));
          break;
        case format::DType::kInt32:
          j.update(ArrayPreview<int32_t>(bytes));
          break;
        case format::DType::kInt64:
          j.update(ArrayPreview<int64_t>(bytes));
          break;
        case format::DType::kFloat16:
        case format::DType::kBFloat16:
          j.update(ArrayPreview<uint16_t>(bytes));  // raw 16-bit float bits
          break;
        case format::DType::kFloat32:
          j.update(ArrayPreview<float>(bytes));
          break;
      }
      break;
  }
  return j;
}

int RunInspect(const InspectFlags& f) {
  format::ReaderOptions reader;
  reader.remote = f.remote;
  auto ds = format::Dataset::Open(f.dataset, reader);
  if (!ds.ok()) return ReportError("inspect", ds.status());
  const format::Manifest& m = (*ds)->manifest();
  json sample = nullptr;
  if ((*ds)->size() > 0) {
    auto rec = (*ds)->Get(f.record);
    if (!rec.ok()) return ReportError("inspect", rec.status());
    sample = json::object();
    for (size_t i = 0; i < m.schema.fields.size(); ++i) {
      sample[m.schema.fields[i].name] = DescribeField(m.schema.fields[i], *rec, i);
    }
  }
  if (f.json) {
    json fields = json::array();
    for (const auto& spec : m.schema.fields) fields.push_back(spec.ToString());
    json j = {{"dataset", f.dataset},         {"format_version", m.format_version},
              {"records", m.num_records()},   {"bytes", m.num_bytes()},
              {"shards", m.shards.size()},    {"schema", fields},
              {"class_names", m.class_names}, {"metadata", m.metadata},
              {"record", f.record},           {"sample", sample}};
    std::cout << j.dump(2) << "\n";
    return kExitOk;
  }
  std::cout << "dataset   " << f.dataset << " (format v" << m.format_version << ")\n"
            << "records   " << m.num_records() << " in " << m.shards.size() << " shard(s), "
            << FormatBytes(m.num_bytes()) << "\n"
            << "schema\n";
  for (const auto& spec : m.schema.fields) std::cout << "  " << spec.ToString() << "\n";
  if (!m.class_names.empty()) {
    std::cout << "classes   " << m.class_names.size() << ":";
    for (size_t i = 0; i < m.class_names.size() && i < 20; ++i)
      std::cout << " " << m.class_names[i];
    if (m.class_names.size() > 20) std::cout << " ...";
    std::cout << "\n";
  }
  for (const auto& [k, v] : m.metadata) std::cout << "meta      " << k << " = " << v << "\n";
  if (!sample.is_null()) {
    std::cout << "record " << f.record << "\n";
    for (const auto& spec : m.schema.fields) {
      std::cout << "  " << spec.name << ": " << sample[spec.name].dump() << "\n";
    }
  }
  return kExitOk;
}

}  // namespace

void RegisterInspect(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<InspectFlags>();
  CLI::App* cmd = app.add_subcommand(
      "inspect", "Print a dataset's schema, counts, sizes, class names and one sample record");
  cmd->add_option("DATASET", f->dataset,
                  "Dataset directory, s3:// / http(s):// URL, or WebDataset / TFRecord files")
      ->required();
  cmd->add_option("-r,--record", f->record, "Which record to show")->capture_default_str();
  cmd->add_flag("--json", f->json, "Machine-readable output");
  AddRemoteFlags(cmd, &f->remote);
  cmd->callback([exit_code, f] { *exit_code = RunInspect(*f); });
}

}  // namespace saturate::cli
