#include "saturate/format/verify.h"

#include <filesystem>

#include "base/file.h"
#include "format/shard_format.h"
#include "saturate/format/reader.h"
#include "saturate/formats/source.h"
#include "saturate/remote/object_store.h"

namespace saturate::format {

std::string VerifyProblem::ToString() const {
  std::string out = file;
  if (record >= 0) out += ": record " + std::to_string(record);
  if (offset >= 0) out += (record >= 0 ? " at offset " : ": offset ") + std::to_string(offset);
  return out + ": " + what;
}

namespace {

class Checker {
 public:
  Checker(VerifyReport* report, size_t max_problems) : report_(report), max_(max_problems) {}
  void Add(std::string file, int64_t record, int64_t offset, std::string what) {
    ++report_->problem_count;
    if (report_->problems.size() < max_) {
      report_->problems.push_back({std::move(file), record, offset, std::move(what)});
    }
  }
  void Add(const std::string& file, int64_t record, int64_t offset, const Status& s) {
    Add(file, record, offset, s.message());
  }

 private:
  VerifyReport* report_;
  size_t max_;
};

// Checks one shard held in memory; reports every problem found in it.
void VerifyShardBytes(const ShardInfo& info, std::span<const std::byte> all, const Schema& schema,
                      VerifyReport* report, Checker* check) {
  const std::string& name = info.file;
  if (all.size() != info.bytes) {
    check->Add(name, -1, -1,
               "size " + std::to_string(all.size()) + " differs from manifest (" +
                   std::to_string(info.bytes) + "): truncated or appended");
  }
  auto header = DecodeHeader(all);
  if (!header.ok()) {
    check->Add(name, -1, 0, header.status());
  } else if (header->num_fields != schema.fields.size() ||
             header->schema_fingerprint != SchemaFingerprint(schema)) {
    check->Add(name, -1, 0, "shard schema differs from the manifest's schema");
  }
  auto footer = DecodeFooter(all);
  if (footer.ok()) {
    Status g = CheckFooterGeometry(*footer, all.size());
    if (!g.ok()) footer = g;
  }
  if (!footer.ok()) {
    // Without a footer the index cannot be found: nothing more to check here.
    return check->Add(name, -1, static_cast<int64_t>(all.size()) - int64_t{kFooterBytes},
                      footer.status());
  }
  if (footer->record_count != info.records) {
    check->Add(name, -1, -1,
               "holds " + std::to_string(footer->record_count) + " records, manifest says " +
                   std::to_string(info.records));
  }
  auto index = all.subspan(footer->index_offset, footer->record_count * kIndexEntryBytes);
  if (Checksum(index) != footer->index_xxh3) {
    check->Add(name, -1, static_cast<int64_t>(footer->index_offset), "index checksum mismatch");
  }
  uint64_t expected = kHeaderBytes;
  for (uint64_t r = 0; r < footer->record_count; ++r) {
    IndexEntry e = DecodeIndexEntry(index.data() + r * kIndexEntryBytes);
    const auto rec_no = static_cast<int64_t>(r);
    Status s = CheckIndexEntry(e, expected, footer->index_offset);
    if (!s.ok()) {
      // A broken entry makes the following offsets meaningless; stop this shard.
      return check->Add(name, rec_no,
                        static_cast<int64_t>(footer->index_offset + r * kIndexEntryBytes), s);
    }
    auto bytes = all.subspan(e.offset, e.length);
    s = CheckRecordChecksum(bytes, e);
    if (s.ok()) s = CheckFieldTable(bytes, schema);
    if (!s.ok()) check->Add(name, rec_no, static_cast<int64_t>(e.offset), s);
    expected = e.offset + e.length;
    ++report->records_checked;
  }
  if (expected != footer->index_offset) {
    check->Add(name, -1, static_cast<int64_t>(expected), "gap between last record and index");
  }
}

// Checks one shard file end to end; reports every problem found in it.
void VerifyShard(const std::string& dir, const ShardInfo& info, const Schema& schema, bool use_mmap,
                 VerifyReport* report, Checker* check) {
  const std::string& name = info.file;
  auto opened = ReadOnlyFile::Open(dir + "/" + name, use_mmap);
  if (!opened.ok()) return check->Add(name, -1, -1, opened.status());
  const ReadOnlyFile& f = **opened;
  std::vector<std::byte> scratch;
  auto all = f.Read(0, f.size(), &scratch);
  if (!all.ok()) return check->Add(name, -1, -1, all.status());
  VerifyShardBytes(info, *all, schema, report, check);
}

}  // namespace

void VerifyShardBytes(const ShardInfo& info, std::span<const std::byte> shard, const Schema& schema,
                      VerifyReport* report, size_t max_problems) {
  Checker check(report, max_problems);
  VerifyShardBytes(info, shard, schema, report, &check);
}

namespace {

// Parses the manifest into report->manifest; a bad one is the report's
// problem, and there is nothing more to check.
bool TakeManifest(const std::string& text, const std::string& name, VerifyReport* report,
                  Checker* check) {
  Result<Manifest> manifest = ParseManifest(text, name);
  if (!manifest.ok()) {
    check->Add(name, -1, -1, manifest.status());
    return false;
  }
  report->manifest = *std::move(manifest);
  return true;
}

// A remote dataset: the manifest, then each shard fetched whole (one at a
// time, so memory stays at one shard) and checked like a local one.
Result<VerifyReport> VerifyRemote(const std::string& url, const VerifyOptions& options) {
  SATURATE_ASSIGN_OR_RETURN(remote::ObjectUrl where, remote::ParseObjectUrl(url));
  remote::StoreOptions so;
  so.endpoint = options.endpoint;
  SATURATE_ASSIGN_OR_RETURN(auto store, remote::OpenObjectStore(where, so));
  VerifyReport report;
  Checker check(&report, options.max_problems);
  const std::string manifest_name(kManifestFile);
  auto text = store->Get(manifest_name);
  if (!text.ok()) {
    if (text.status().code() != StatusCode::kNotFound) return text.status();
    check.Add(manifest_name, -1, -1,
              "missing at " + where.Describe(manifest_name) + ": not a complete dataset");
    return report;
  }
  if (!TakeManifest(*text, manifest_name, &report, &check)) return report;
  const Manifest& manifest = report.manifest;
  const uint64_t total = manifest.num_bytes();
  std::vector<std::byte> bytes;
  for (const ShardInfo& info : manifest.shards) {
    bytes.resize(info.bytes);
    Status s = store->GetRange(info.file, 0, bytes);
    if (!s.ok()) {
      check.Add(info.file, -1, -1, s);
    } else {
      VerifyShardBytes(info, bytes, manifest.schema, &report, &check);
    }
    report.bytes_checked += info.bytes;
    if (options.progress) options.progress(report.bytes_checked, total);
  }
  return report;
}

}  // namespace

namespace {

// WebDataset / TFRecord sources (formats/source.h): opening checks the
// framing (and builds the index); then every sample is read as the loader
// reads it: TFRecord CRCs, tf.Example parsing, members and field types.
Result<VerifyReport> VerifySource(const std::string& pattern, const VerifyOptions& options) {
  VerifyReport report;
  Checker check(&report, options.max_problems);
  auto add = [&](const Status& s) {
    const std::string& m = s.message();
    const size_t colon = m.find(": ");
    if (colon == std::string::npos) return check.Add("", -1, -1, m);
    check.Add(m.substr(0, colon), -1, -1, m.substr(colon + 2));
  };
  ReaderOptions ro;
  ro.use_mmap = options.use_mmap;
  auto ds = Dataset::Open(pattern, ro);
  if (!ds.ok()) {
    if (ds.status().code() != StatusCode::kCorruption) return ds.status();
    add(ds.status());
    return report;
  }
  report.manifest = (*ds)->manifest();
  const uint64_t total = report.manifest.num_bytes();
  for (uint64_t i = 0; i < (*ds)->size(); ++i) {
    auto rec = (*ds)->Get(i);
    if (!rec.ok()) {
      add(rec.status());
      continue;
    }
    ++report.records_checked;
    for (size_t f = 0; f < rec->num_fields(); ++f) report.bytes_checked += rec->field(f).size();
    if (options.progress && (i % 1024 == 1023 || i + 1 == (*ds)->size())) {
      options.progress(std::min(report.bytes_checked, total), total);
    }
  }
  return report;
}

}  // namespace

Result<VerifyReport> VerifyDataset(const std::string& dir, const VerifyOptions& options) {
  if (remote::IsRemoteUrl(dir)) return VerifyRemote(dir, options);
  std::error_code ec;
  if (formats::IsSourcePattern(dir) && !std::filesystem::is_directory(dir, ec)) {
    return VerifySource(dir, options);
  }
  if (!std::filesystem::is_directory(dir, ec)) {
    return Status::NotFound(dir + ": no such dataset directory");
  }
  VerifyReport report;
  Checker check(&report, options.max_problems);
  const std::string manifest_name(kManifestFile);
  auto text = ReadFileToString(dir + "/" + manifest_name);
  if (!text.ok()) {
    check.Add(manifest_name, -1, -1,
              text.status().code() == StatusCode::kNotFound
                  ? "missing: not a complete dataset (an interrupted pack leaves none)"
                  : text.status().message());
    return report;
  }
  if (!TakeManifest(*text, manifest_name, &report, &check)) return report;
  const Manifest& manifest = report.manifest;
  const uint64_t total = manifest.num_bytes();
  for (const ShardInfo& info : manifest.shards) {
    VerifyShard(dir, info, manifest.schema, options.use_mmap, &report, &check);
    report.bytes_checked += info.bytes;
    if (options.progress) options.progress(report.bytes_checked, total);
  }
  return report;
}

}  // namespace saturate::format
