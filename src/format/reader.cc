#include "saturate/format/reader.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <functional>
#include <thread>

#include "base/file.h"
#include "format/shard_format.h"
#include "saturate/formats/source.h"

namespace saturate::format {

struct Dataset::Shard {
  std::string name;
  std::unique_ptr<ReadOnlyFile> file;  // null for a remote shard
  std::vector<IndexEntry> index;       // decoded and geometry-checked at Open()
};

std::span<const std::byte> Record::field(size_t i) const {
  FieldEntry e = ReadFieldEntry(bytes_, i);
  return {bytes_ + e.offset, e.length};
}

namespace {

// Reads `n` bytes at `offset` of a shard (into *scratch unless mapped).
using ShardRead = std::function<Result<std::span<const std::byte>>(
    uint64_t offset, uint64_t n, std::vector<std::byte>* scratch)>;

Status CheckShard(const ShardInfo& info, const Schema& schema, uint64_t fingerprint, uint64_t size,
                  const ShardRead& read, std::vector<IndexEntry>* index);

// Reads and checks a shard's header, footer and index.
Status OpenShard(const std::string& dir, const ShardInfo& info, const Schema& schema,
                 uint64_t fingerprint, bool use_mmap, std::unique_ptr<ReadOnlyFile>* file,
                 std::vector<IndexEntry>* index) {
  SATURATE_ASSIGN_OR_RETURN(*file, ReadOnlyFile::Open(dir + "/" + info.file, use_mmap));
  const ReadOnlyFile& f = **file;
  return CheckShard(
      info, schema, fingerprint, f.size(),
      [&f](uint64_t offset, uint64_t n, std::vector<std::byte>* scratch) {
        return f.Read(offset, n, scratch);
      },
      index);
}

Status CheckShard(const ShardInfo& info, const Schema& schema, uint64_t fingerprint, uint64_t size,
                  const ShardRead& read, std::vector<IndexEntry>* index) {
  if (size != info.bytes) {
    return Status::Corruption("size " + std::to_string(size) + " differs from manifest (" +
                              std::to_string(info.bytes) + ")");
  }
  std::vector<std::byte> scratch;
  SATURATE_ASSIGN_OR_RETURN(auto head, read(0, kHeaderBytes, &scratch));
  SATURATE_ASSIGN_OR_RETURN(ShardHeader header, DecodeHeader(head));
  if (header.num_fields != schema.fields.size() || header.schema_fingerprint != fingerprint) {
    return Status::Corruption("shard schema differs from the manifest's schema");
  }
  SATURATE_ASSIGN_OR_RETURN(auto tail, read(size - kFooterBytes, kFooterBytes, &scratch));
  SATURATE_ASSIGN_OR_RETURN(ShardFooter footer, DecodeFooter(tail));
  SATURATE_RETURN_IF_ERROR(CheckFooterGeometry(footer, size));
  if (footer.record_count != info.records) {
    return Status::Corruption("holds " + std::to_string(footer.record_count) +
                              " records, manifest says " + std::to_string(info.records));
  }
  SATURATE_ASSIGN_OR_RETURN(
      auto raw, read(footer.index_offset, footer.record_count * kIndexEntryBytes, &scratch));
  if (Checksum(raw) != footer.index_xxh3) {
    return Status::Corruption("index checksum mismatch at offset " +
                              std::to_string(footer.index_offset));
  }
  index->resize(footer.record_count);
  uint64_t expected = kHeaderBytes;
  for (uint64_t r = 0; r < footer.record_count; ++r) {
    IndexEntry e = DecodeIndexEntry(raw.data() + r * kIndexEntryBytes);
    Status s = CheckIndexEntry(e, expected, footer.index_offset);
    if (!s.ok()) return s.WithContext("record " + std::to_string(r));
    (*index)[r] = e;
    expected = e.offset + e.length;
  }
  if (expected != footer.index_offset) {
    return Status::Corruption("records end at " + std::to_string(expected) +
                              " but the index starts at " + std::to_string(footer.index_offset));
  }
  return Status::OK();
}

}  // namespace

Dataset::Dataset(std::string dir, Manifest manifest, ReaderOptions options)
    : dir_(std::move(dir)), manifest_(std::move(manifest)), options_(options) {}

Dataset::~Dataset() = default;

bool Dataset::mapped() const {
  return std::all_of(shards_.begin(), shards_.end(),
                     [](const Shard& s) { return s.file != nullptr && s.file->mapped(); });
}

Result<std::unique_ptr<Dataset>> Dataset::OpenRemote(const std::string& url,
                                                     ReaderOptions options) {
  SATURATE_ASSIGN_OR_RETURN(remote::ObjectUrl where, remote::ParseObjectUrl(url));
  remote::StoreOptions so;
  so.endpoint = options.remote.endpoint;
  so.retry = options.remote.retry;
  SATURATE_ASSIGN_OR_RETURN(std::shared_ptr<remote::ObjectStore> store,
                            remote::OpenObjectStore(where, so));
  const std::string manifest_name(kManifestFile);
  auto text = store->Get(manifest_name);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) {
      return Status::NotFound(url + ": not a saturate dataset (" + text.status().message() +
                              "; an interrupted pack leaves no " + manifest_name + ")");
    }
    return text.status();
  }
  SATURATE_ASSIGN_OR_RETURN(Manifest manifest, ParseManifest(*text, where.Describe(manifest_name)));
  std::vector<remote::ObjectInfo> objects;
  for (const ShardInfo& info : manifest.shards) objects.push_back({info.file, info.bytes});
  const std::string identity = url + "\n" + *text;
  char id[24];
  std::snprintf(id, sizeof(id), "%016llx",
                static_cast<unsigned long long>(
                    Checksum(std::as_bytes(std::span(identity.data(), identity.size())))));
  SATURATE_ASSIGN_OR_RETURN(
      auto reader, remote::RangeReader::Open(store, std::move(objects), id, options.remote));
  std::unique_ptr<Dataset> ds(new Dataset(url, std::move(manifest), options));
  // Each shard's header, footer and index: two requests per shard (the
  // header, and the index with the footer: their size follows from the
  // manifest's record count), shards checked on up to 16 threads at once.
  constexpr uint64_t kMaxTailBytes = uint64_t{64} << 20;
  const uint64_t fingerprint = SchemaFingerprint(ds->schema());
  const size_t count = ds->manifest_.shards.size();
  std::vector<std::vector<IndexEntry>> indexes(count);
  std::vector<Status> results(count);
  std::atomic<size_t> next{0};
  auto check = [&] {
    for (size_t i; (i = next.fetch_add(1)) < count;) {
      const ShardInfo& info = ds->manifest_.shards[i];
      std::vector<std::byte> tail;
      uint64_t tail_offset = info.bytes;
      auto read = [&](uint64_t offset, uint64_t n,
                      std::vector<std::byte>* scratch) -> Result<std::span<const std::byte>> {
        if (offset > info.bytes || n > info.bytes - offset) {
          return Status::Corruption("range " + std::to_string(offset) + "+" + std::to_string(n) +
                                    " outside the shard");
        }
        const uint64_t tail_bytes =
            std::min({info.bytes, kMaxTailBytes, info.records * kIndexEntryBytes + kFooterBytes});
        if (tail_offset == info.bytes && offset + n == info.bytes && n <= tail_bytes) {
          tail_offset = info.bytes - tail_bytes;
          tail.resize(info.bytes - tail_offset);
          Status got = store->GetRange(info.file, tail_offset, tail);
          if (!got.ok()) {
            tail_offset = info.bytes;
            return got;
          }
        }
        if (offset >= tail_offset) {
          return std::span<const std::byte>(tail.data() + (offset - tail_offset), n);
        }
        scratch->resize(n);
        SATURATE_RETURN_IF_ERROR(store->GetRange(info.file, offset, *scratch));
        return std::span<const std::byte>(*scratch);
      };
      results[i] = CheckShard(info, ds->schema(), fingerprint, info.bytes, read, &indexes[i]);
    }
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < std::min<size_t>(16, count); ++t) threads.emplace_back(check);
  check();
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < count; ++i) {
    const ShardInfo& info = ds->manifest_.shards[i];
    if (!results[i].ok()) return results[i].WithContext(where.Describe(info.file));
    ds->shard_start_.push_back(ds->total_records_);
    ds->total_records_ += info.records;
    ds->shards_.push_back(Shard{info.file, nullptr, std::move(indexes[i])});
  }
  ds->remote_ = std::move(reader);
  return ds;
}

bool Dataset::remote() const { return remote_ != nullptr || (source_ && source_->remote()); }

void Dataset::PlanReads(std::span<const uint64_t> indices, bool replace) const {
  if (source_) return source_->PlanReads(indices, replace);
  if (!remote_) return;
  std::vector<remote::ByteRange> ranges;
  ranges.reserve(indices.size());
  for (uint64_t index : indices) {
    if (index >= total_records_) continue;
    const auto [shard, local] = Locate(index);
    const IndexEntry& e = shard->index[local];
    ranges.push_back({static_cast<uint32_t>(shard - shards_.data()), e.offset, e.length});
  }
  remote_->Plan(ranges, replace);
}

void Dataset::CancelRemote() const {
  if (source_) source_->CancelRemote();
  if (remote_) remote_->Cancel();
}

remote::RemoteStats Dataset::remote_stats() const {
  if (source_) return source_->remote_stats();
  return remote_ ? remote_->stats() : remote::RemoteStats{};
}

Result<Record> Dataset::GetRemote(uint64_t index, const Shard& shard, uint64_t local) const {
  const IndexEntry& e = shard.index[local];
  const remote::ByteRange range{static_cast<uint32_t>(&shard - shards_.data()), e.offset, e.length};
  auto where = [&] {
    return remote_->store().Describe(shard.name) + ": record " + std::to_string(local) +
           " at offset " + std::to_string(e.offset);
  };
  for (int attempt = 0;; ++attempt) {
    auto bytes = remote_->Read(range);
    if (!bytes.ok()) return bytes.status().WithContext(where());
    const std::span<const std::byte> view(bytes->get(), e.length);
    Status st = options_.verify_checksums ? CheckRecordChecksum(view, e) : Status::OK();
    if (st.ok()) st = CheckFieldTable(view, schema());
    if (st.ok()) {
      Record rec;
      rec.owned_ = std::move(*bytes);
      rec.bytes_ = rec.owned_.get();
      rec.num_fields_ = schema().fields.size();
      rec.index_ = index;
      return rec;
    }
    // A cached copy may be what is bad: drop it and fetch from the source once.
    if (attempt == 0 && remote_->cached()) {
      remote_->Invalidate(range);
      continue;
    }
    return st.WithContext(where());
  }
}

Result<std::unique_ptr<Dataset>> Dataset::OpenSource(const std::string& pattern,
                                                     ReaderOptions options) {
  formats::SourceOptions so;
  so.verify = options.verify_checksums;
  so.progress = options.open_progress;
  so.remote = options.remote;
  SATURATE_ASSIGN_OR_RETURN(auto source, formats::Source::Open(pattern, so));
  Manifest m;
  m.schema = source->schema();
  for (size_t f = 0; f < source->num_files(); ++f) {
    m.shards.push_back({source->file_name(f), source->file_samples(f), source->file_bytes(f)});
  }
  m.metadata["source"] =
      (source->format() == formats::SourceFormat::kWebDataset ? "webdataset:" : "tfrecord:") +
      pattern;
  std::unique_ptr<Dataset> ds(new Dataset(pattern, std::move(m), options));
  ds->total_records_ = source->size();
  ds->source_ = std::move(source);
  return ds;
}

Result<Record> Dataset::GetSource(uint64_t index) const {
  formats::Sample sample;
  SATURATE_RETURN_IF_ERROR(source_->Read(index, &sample));
  // The writer's record layout (DatasetWriter::Append): field table, then
  // each payload at its field's alignment, padded to kRecordAlign.
  const Schema& s = schema();
  uint64_t size = s.fields.size() * kFieldEntryBytes;
  for (size_t i = 0; i < s.fields.size(); ++i) {
    const FieldSpec& spec = s.fields[i];
    const uint64_t n = sample.fields[i].size();
    if ((spec.fixed_bytes() != 0 && n != spec.fixed_bytes()) || n % spec.element_bytes() != 0 ||
        n > UINT32_MAX) {
      return Status::Corruption(source_->Describe(index) + ": field '" + spec.name + "' (" +
                                spec.ToString() + ") has " + std::to_string(n) + " bytes");
    }
    size = AlignUp(size, spec.alignment()) + n;
  }
  size = AlignUp(size, kRecordAlign);
  if (size > UINT32_MAX) {
    return Status::Corruption(source_->Describe(index) + ": sample is over 4 GiB");
  }
  Record rec;
  rec.owned_ = std::shared_ptr<std::byte[]>(
      new (std::align_val_t{kRecordAlign}) std::byte[size],
      [](std::byte* p) { ::operator delete[](p, std::align_val_t{kRecordAlign}); });
  std::byte* out = rec.owned_.get();
  uint64_t offset = s.fields.size() * kFieldEntryBytes;
  for (size_t i = 0; i < s.fields.size(); ++i) {
    const uint64_t aligned = AlignUp(offset, s.fields[i].alignment());
    std::memset(out + offset, 0, aligned - offset);
    offset = aligned;
    StoreLE<uint32_t>(out + i * kFieldEntryBytes, static_cast<uint32_t>(offset));
    StoreLE<uint32_t>(out + i * kFieldEntryBytes + 4,
                      static_cast<uint32_t>(sample.fields[i].size()));
    if (!sample.fields[i].empty()) {
      std::memcpy(out + offset, sample.fields[i].data(), sample.fields[i].size());
    }
    offset += sample.fields[i].size();
  }
  std::memset(out + offset, 0, size - offset);
  rec.bytes_ = out;
  rec.num_fields_ = s.fields.size();
  rec.index_ = index;
  if (!sample.image_entries.empty()) {
    for (size_t i = 0; i < s.fields.size(); ++i) {
      if (s.fields[i].kind == FieldKind::kImage) rec.entries_field_ = i;
    }
    rec.jpeg_entries_ = sample.image_entries;
  }
  return rec;
}

Result<std::unique_ptr<Dataset>> Dataset::Open(const std::string& dir, ReaderOptions options) {
  if (remote::IsRemoteUrl(dir) && !formats::IsSourcePattern(dir)) {
    return OpenRemote(dir, std::move(options));
  }
  std::error_code ec;
  if (formats::IsSourcePattern(dir) && !std::filesystem::is_directory(dir, ec)) {
    return OpenSource(dir, std::move(options));
  }
  if (!std::filesystem::is_directory(dir, ec)) {
    return Status::NotFound(dir + ": not a saturate dataset (not a directory)");
  }
  const std::string manifest_path = dir + "/" + std::string(kManifestFile);
  auto text = ReadFileToString(manifest_path);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) {
      return Status::NotFound(dir + ": not a saturate dataset (no " + std::string(kManifestFile) +
                              "; an interrupted pack leaves none)");
    }
    return text.status();
  }
  SATURATE_ASSIGN_OR_RETURN(Manifest manifest, ParseManifest(*text, manifest_path));
  std::unique_ptr<Dataset> ds(new Dataset(dir, std::move(manifest), options));
  const uint64_t fingerprint = SchemaFingerprint(ds->schema());
  for (const ShardInfo& info : ds->manifest_.shards) {
    Shard shard{info.file, nullptr, {}};
    Status s = OpenShard(dir, info, ds->schema(), fingerprint, options.use_mmap, &shard.file,
                         &shard.index);
    if (!s.ok()) return s.WithContext(dir + "/" + info.file);
    ds->shard_start_.push_back(ds->total_records_);
    ds->total_records_ += info.records;
    ds->shards_.push_back(std::move(shard));
  }
  // 32 MiB of bits at most; a larger dataset re-checks every read.
  constexpr uint64_t kMaxVerifiedRecords = uint64_t{1} << 28;
  if (ds->options_.verify_checksums && ds->total_records_ <= kMaxVerifiedRecords) {
    ds->verified_ = std::make_unique<std::atomic<uint64_t>[]>((ds->total_records_ + 63) / 64);
  }
  return ds;
}

bool Dataset::Verified(uint64_t index) const {
  return verified_ != nullptr &&
         (verified_[index / 64].load(std::memory_order_relaxed) >> (index % 64)) & 1;
}

void Dataset::MarkVerified(uint64_t index) const {
  if (verified_ != nullptr) {
    verified_[index / 64].fetch_or(uint64_t{1} << (index % 64), std::memory_order_relaxed);
  }
}

std::pair<const Dataset::Shard*, uint64_t> Dataset::Locate(uint64_t index) const {
  // Binary search over shard starts: O(log shards), independent of record count.
  const size_t s =
      std::upper_bound(shard_start_.begin(), shard_start_.end(), index) - shard_start_.begin() - 1;
  return {&shards_[s], index - shard_start_[s]};
}

void Dataset::Prefetch(uint64_t index, uint64_t max_bytes) const {
  if (index >= total_records_) return;
  if (source_) return source_->Prefetch(index, max_bytes);
  const auto [shard, local] = Locate(index);
  if (shard->file == nullptr) return;  // remote: PlanReads does the read-ahead
  const IndexEntry& e = shard->index[local];
  shard->file->Prefetch(e.offset, std::min(e.length, max_bytes));
}

void Dataset::PrefetchEntry(uint64_t index) const {
  if (index >= total_records_ || source_) return;
  const auto [shard, local] = Locate(index);
  if (shard->file != nullptr) __builtin_prefetch(&shard->index[local]);
}

Result<Record> Dataset::Get(uint64_t index) const {
  if (index >= total_records_) {
    return Status::InvalidArgument("record " + std::to_string(index) + " out of range (dataset " +
                                   dir_ + " has " + std::to_string(total_records_) + ")");
  }
  if (source_) return GetSource(index);
  const auto [shard_ptr, local] = Locate(index);
  const Shard& shard = *shard_ptr;
  if (shard.file == nullptr) return GetRemote(index, shard, local);
  const IndexEntry& e = shard.index[local];

  Record rec;
  std::vector<std::byte> scratch;
  SATURATE_ASSIGN_OR_RETURN(auto bytes, shard.file->Read(e.offset, e.length, &scratch));
  if (!Verified(index)) {
    Status st = options_.verify_checksums ? CheckRecordChecksum(bytes, e) : Status::OK();
    if (st.ok()) st = CheckFieldTable(bytes, schema());
    if (!st.ok()) {
      return st.WithContext(dir_ + "/" + shard.name + ": record " + std::to_string(local) +
                            " at offset " + std::to_string(e.offset));
    }
    MarkVerified(index);
  }
  if (!shard.file->mapped()) {
    // pread mode: the Record owns an aligned copy so typed views stay aligned.
    rec.owned_ = std::shared_ptr<std::byte[]>(
        new (std::align_val_t{kRecordAlign}) std::byte[bytes.size()],
        [](std::byte* p) { ::operator delete[](p, std::align_val_t{kRecordAlign}); });
    std::memcpy(rec.owned_.get(), bytes.data(), bytes.size());
    rec.bytes_ = rec.owned_.get();
  } else {
    rec.bytes_ = bytes.data();
  }
  rec.num_fields_ = schema().fields.size();
  rec.index_ = index;
  return rec;
}

}  // namespace saturate::format
