#include "saturate/format/writer.h"

#include <sys/stat.h>

#include <filesystem>

#include "base/file.h"
#include "format/shard_format.h"

namespace saturate::format {

// The shard being written: its file, and the index entries so far.
class DatasetWriter::Shard {
 public:
  Shard(uint32_t id, std::unique_ptr<WritableFile> file) : id_(id), file_(std::move(file)) {}

  uint32_t id() const { return id_; }
  uint64_t size() const { return file_->size(); }
  uint64_t records() const { return index_.size() / kIndexEntryBytes; }

  Status WriteHeader(const ShardHeader& header) {
    std::byte buf[kHeaderBytes];
    EncodeHeader(header, buf);
    return file_->Append(std::span<const std::byte>(buf, kHeaderBytes));
  }

  Status AppendRecord(std::span<const std::byte> record) {
    IndexEntry entry{file_->size(), record.size(), Checksum(record)};
    std::byte buf[kIndexEntryBytes];
    EncodeIndexEntry(entry, buf);
    index_.insert(index_.end(), buf, buf + kIndexEntryBytes);
    return file_->Append(record);
  }

  // Writes index + footer and commits the file; returns its ShardInfo.
  Result<ShardInfo> Close() {
    ShardFooter footer{file_->size(), records(), Checksum(index_)};
    SATURATE_RETURN_IF_ERROR(file_->Append(index_));
    std::byte buf[kFooterBytes];
    EncodeFooter(footer, buf);
    SATURATE_RETURN_IF_ERROR(file_->Append(std::span<const std::byte>(buf, kFooterBytes)));
    ShardInfo info{std::filesystem::path(file_->path()).filename().string(), records(),
                   file_->size()};
    SATURATE_RETURN_IF_ERROR(file_->Commit());
    return info;
  }

 private:
  uint32_t id_;
  std::unique_ptr<WritableFile> file_;
  std::vector<std::byte> index_;
};

DatasetWriter::DatasetWriter(std::string dir, Manifest manifest, uint64_t shard_bytes)
    : dir_(std::move(dir)),
      manifest_(std::move(manifest)),
      shard_bytes_(shard_bytes),
      fingerprint_(SchemaFingerprint(manifest_.schema)) {}

DatasetWriter::~DatasetWriter() = default;

Result<std::unique_ptr<DatasetWriter>> DatasetWriter::Create(const std::string& dir, Schema schema,
                                                             WriterOptions options) {
  SATURATE_RETURN_IF_ERROR(schema.Validate());
  if (schema.fields.size() > (1u << 16)) return Status::InvalidArgument("too many fields");
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return Status::NotFound(dir + ": output directory does not exist");
  }
  if (std::filesystem::exists(dir + "/" + std::string(kManifestFile), ec)) {
    return Status::AlreadyExists(dir + " already holds a dataset (manifest.json)");
  }
  Manifest m;
  m.schema = std::move(schema);
  m.class_names = std::move(options.class_names);
  m.metadata = std::move(options.metadata);
  return std::unique_ptr<DatasetWriter>(
      new DatasetWriter(dir, std::move(m), std::max<uint64_t>(options.shard_bytes, 1)));
}

uint64_t DatasetWriter::bytes_written() const {
  return manifest_.num_bytes() + (shard_ ? shard_->size() : 0);
}

Status DatasetWriter::Append(std::span<const std::span<const std::byte>> fields) {
  const Schema& schema = manifest_.schema;
  if (finished_) return Status::Internal("Append after Finish");
  if (fields.size() != schema.fields.size()) {
    return Status::InvalidArgument("record " + std::to_string(records_) + ": " +
                                   std::to_string(fields.size()) + " fields given, schema has " +
                                   std::to_string(schema.fields.size()));
  }
  // Lay out the record: field table, then each payload at its alignment.
  uint64_t size = schema.fields.size() * kFieldEntryBytes;
  for (size_t i = 0; i < fields.size(); ++i) {
    const FieldSpec& spec = schema.fields[i];
    uint64_t n = fields[i].size();
    if ((spec.fixed_bytes() != 0 && n != spec.fixed_bytes()) || n % spec.element_bytes() != 0) {
      return Status::InvalidArgument("record " + std::to_string(records_) + ": field '" +
                                     spec.name + "' (" + spec.ToString() + ") has " +
                                     std::to_string(n) + " bytes");
    }
    size = AlignUp(size, spec.alignment()) + n;
  }
  size = AlignUp(size, kRecordAlign);
  if (size > UINT32_MAX) {
    return Status::InvalidArgument("record " + std::to_string(records_) + " is over 4 GiB");
  }
  record_buf_.assign(size, std::byte{0});
  uint64_t offset = schema.fields.size() * kFieldEntryBytes;
  for (size_t i = 0; i < fields.size(); ++i) {
    offset = AlignUp(offset, schema.fields[i].alignment());
    std::byte* entry = record_buf_.data() + i * kFieldEntryBytes;
    StoreLE<uint32_t>(entry, static_cast<uint32_t>(offset));
    StoreLE<uint32_t>(entry + 4, static_cast<uint32_t>(fields[i].size()));
    if (!fields[i].empty())
      std::memcpy(record_buf_.data() + offset, fields[i].data(), fields[i].size());
    offset += fields[i].size();
  }

  if (shard_ && shard_->records() > 0 && shard_->size() + size > shard_bytes_) {
    SATURATE_RETURN_IF_ERROR(CloseShard());
  }
  if (!shard_) {
    uint32_t id = static_cast<uint32_t>(manifest_.shards.size());
    SATURATE_ASSIGN_OR_RETURN(auto file, WritableFile::Create(dir_ + "/" + ShardFileName(id)));
    shard_ = std::make_unique<Shard>(id, std::move(file));
    ShardHeader header;
    header.num_fields = static_cast<uint32_t>(schema.fields.size());
    header.schema_fingerprint = fingerprint_;
    header.shard_id = id;
    SATURATE_RETURN_IF_ERROR(shard_->WriteHeader(header));
  }
  SATURATE_RETURN_IF_ERROR(shard_->AppendRecord(record_buf_));
  ++records_;
  return Status::OK();
}

Status DatasetWriter::CloseShard() {
  SATURATE_ASSIGN_OR_RETURN(ShardInfo info, shard_->Close());
  manifest_.shards.push_back(std::move(info));
  shard_.reset();
  return Status::OK();
}

Status DatasetWriter::Finish() {
  if (finished_) return Status::Internal("Finish called twice");
  finished_ = true;
  if (shard_) SATURATE_RETURN_IF_ERROR(CloseShard());
  return WriteFileAtomic(dir_ + "/" + std::string(kManifestFile), SerializeManifest(manifest_));
}

}  // namespace saturate::format
