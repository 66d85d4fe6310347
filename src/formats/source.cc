#include "saturate/formats/source.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "base/file.h"
#include "formats/example.h"
#include "formats/pattern.h"
#include "formats/side_index.h"
#include "formats/tar_index.h"
#include "formats/tfrecord.h"
#include "image/transform.h"
#include "saturate/remote/objects.h"
#include "saturate/remote/range_reader.h"

namespace saturate::formats {
namespace {

using format::FieldKind;
using format::FieldSpec;

constexpr size_t kProbeSamples = 64;
constexpr uint32_t kKindTar = 1, kKindTfrecord = 2;
constexpr std::string_view kWdsPrefixes[] = {"webdataset:", "wds:"};
constexpr std::string_view kTfPrefix = "tfrecord:";

bool EndsWith(const std::string& s, std::string_view suffix) {
  if (s.size() < suffix.size()) return false;
  return std::equal(suffix.begin(), suffix.end(), s.end() - suffix.size(), [](char a, char b) {
    return a == std::tolower(static_cast<unsigned char>(b));
  });
}

// Splits "pattern?k=v&k=v" when what follows the last '?' is such a list.
std::string SplitKeys(const std::string& path, std::string* keys) {
  const size_t q = path.rfind('?');
  if (q == std::string::npos) return path;
  const std::string rest = path.substr(q + 1);
  if (rest.empty() || rest.find('=') == std::string::npos || rest.find('/') != std::string::npos) {
    return path;
  }
  *keys = rest;
  return path.substr(0, q);
}

bool IsWdsName(const std::string& p) {
  return EndsWith(p, ".tar") || EndsWith(p, ".tar.gz") || EndsWith(p, ".tgz");
}
bool IsTfName(const std::string& p) {
  return EndsWith(p, ".tfrecord") || EndsWith(p, ".tfrecords") || EndsWith(p, ".tfrecord.gz") ||
         EndsWith(p, ".tfrecords.gz");
}

bool IsImageExtension(const std::string& ext) {
  return ext == "jpg" || ext == "jpeg" || ext == "png";
}

// Each file stays open (mapped, with its descriptor for the pread fallback),
// and so does its index (its JPEG tables are read from the mapping):
// ImageNet's 1,024 TFRecord files pass a default soft limit of 1,024
// descriptors, so raise the soft limit toward the hard one when needed.
void RaiseFileLimit(size_t files) {
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  const rlim_t want = static_cast<rlim_t>(files) + 256;
  if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= want) return;
  rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? want : std::min(want, rl.rlim_max);
  ::setrlimit(RLIMIT_NOFILE, &rl);
}

int64_t MtimeNs(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

// Runs fn(i) for every i in [0, n), on up to `threads` threads.
void ParallelFor(size_t n, size_t threads, const std::function<void(size_t)>& fn) {
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) fn(i);
  };
  std::vector<std::jthread> pool;
  for (size_t t = 1; t < std::min(threads, n); ++t) pool.emplace_back(work);
  work();
}

}  // namespace

// Where a file's bytes are read: a local file (mapped), a remote object
// (range reads through the source's RangeReader, planned in the loader's
// order), or a remote object's bytes in memory while its index is made.
class Source::Data {
 public:
  virtual ~Data() = default;
  virtual uint64_t size() const = 0;
  // Bytes [offset, offset + n): a view into a mapping or into `scratch`.
  virtual Result<std::span<const std::byte>> Read(uint64_t offset, uint64_t n,
                                                  std::vector<std::byte>* scratch) const = 0;
  virtual void Prefetch(uint64_t /*offset*/, uint64_t /*n*/) const {}
};

namespace {

class LocalData final : public Source::Data {
 public:
  explicit LocalData(std::unique_ptr<ReadOnlyFile> file) : file_(std::move(file)) {}
  uint64_t size() const override { return file_->size(); }
  Result<std::span<const std::byte>> Read(uint64_t offset, uint64_t n,
                                          std::vector<std::byte>* scratch) const override {
    return file_->Read(offset, n, scratch);
  }
  void Prefetch(uint64_t offset, uint64_t n) const override { file_->Prefetch(offset, n); }

 private:
  std::unique_ptr<ReadOnlyFile> file_;
};

class MemoryData final : public Source::Data {
 public:
  explicit MemoryData(std::vector<std::byte> bytes) : bytes_(std::move(bytes)) {}
  uint64_t size() const override { return bytes_.size(); }
  Result<std::span<const std::byte>> Read(uint64_t offset, uint64_t n,
                                          std::vector<std::byte>*) const override {
    if (offset > bytes_.size() || n > bytes_.size() - offset) {
      return Status::Corruption("range " + std::to_string(offset) + "+" + std::to_string(n) +
                                " past the end (" + std::to_string(bytes_.size()) + " bytes)");
    }
    return std::span<const std::byte>(bytes_).subspan(offset, n);
  }

 private:
  std::vector<std::byte> bytes_;
};

class RemoteData final : public Source::Data {
 public:
  RemoteData(remote::RangeReader* reader, uint32_t object, uint64_t size)
      : reader_(reader), object_(object), size_(size) {}
  uint64_t size() const override { return size_; }
  Result<std::span<const std::byte>> Read(uint64_t offset, uint64_t n,
                                          std::vector<std::byte>* scratch) const override {
    SATURATE_ASSIGN_OR_RETURN(auto bytes, reader_->Read({object_, offset, n}));
    scratch->assign(bytes.get(), bytes.get() + n);
    return std::span<const std::byte>(*scratch);
  }

 private:
  remote::RangeReader* reader_;
  uint32_t object_;
  uint64_t size_;
};

}  // namespace

struct Source::File {
  std::string path, name;
  std::unique_ptr<Data> data;
  std::optional<uint32_t> object;  // remote: the object's number in the reader
  int64_t version = 0;             // remote: a hash of the object's ETag (the index's stamp)
  FileIndex index;                 // tar members or TFRecord records, and the samples' JPEG tables
  // WebDataset: sample s holds members [first[s], first[s + 1]) and keys[s].
  std::vector<uint32_t> first;
  std::vector<std::string> keys;
  uint64_t samples() const { return keys.empty() ? index.entries.size() : keys.size(); }
  void GroupSamples();  // WebDataset: consecutive members sharing a key are one sample
};

bool IsGzipName(const std::string& file) { return EndsWith(file, ".gz") || EndsWith(file, ".tgz"); }

bool IsSourcePattern(const std::string& path) {
  for (std::string_view p : kWdsPrefixes) {
    if (path.starts_with(p)) return true;
  }
  if (path.starts_with(kTfPrefix)) return true;
  std::string keys;
  const std::string pattern = SplitKeys(path, &keys);
  return IsWdsName(pattern) || IsTfName(pattern);
}

Result<SourceSpec> ParseSourceSpec(const std::string& path, const SourceOptions& defaults) {
  SourceSpec spec;
  spec.options = defaults;
  std::string rest = path;
  bool forced = false;
  for (std::string_view p : kWdsPrefixes) {
    if (rest.starts_with(p)) {
      rest = rest.substr(p.size());
      spec.format = SourceFormat::kWebDataset;
      forced = true;
    }
  }
  if (!forced && rest.starts_with(kTfPrefix)) {
    rest = rest.substr(kTfPrefix.size());
    spec.format = SourceFormat::kTfrecord;
    forced = true;
  }
  std::string keys;
  rest = SplitKeys(rest, &keys);
  if (!forced) {
    if (IsWdsName(rest)) {
      spec.format = SourceFormat::kWebDataset;
    } else if (IsTfName(rest)) {
      spec.format = SourceFormat::kTfrecord;
    } else {
      return Status::InvalidArgument(
          path +
          ": not a WebDataset (.tar, .tar.gz) or TFRecord (.tfrecord[.gz]) name; prefix "
          "it with webdataset: or tfrecord:");
    }
  }
  size_t start = 0;
  while (start < keys.size()) {
    size_t end = keys.find('&', start);
    if (end == std::string::npos) end = keys.size();
    const std::string kv = keys.substr(start, end - start);
    const size_t eq = kv.find('=');
    const std::string k = kv.substr(0, eq), v = eq == std::string::npos ? "" : kv.substr(eq + 1);
    if (k == "image_key") {
      spec.options.image_key = v;
    } else if (k == "label_key") {
      spec.options.label_key = v;
    } else if (k == "jpeg_index" && (v == "0" || v == "1")) {
      spec.options.index_jpeg = v == "1";
    } else {
      return Status::InvalidArgument(path + ": unknown key '" + kv +
                                     "' (known: image_key=, label_key=, jpeg_index=0|1)");
    }
    start = end + 1;
  }
  spec.pattern = rest;
  spec.remote =
      rest.starts_with("s3://") || rest.starts_with("http://") || rest.starts_with("https://");
  if (!spec.remote) {
    SATURATE_ASSIGN_OR_RETURN(spec.files, ExpandPattern(rest));
  }
  return spec;
}

Source::~Source() = default;

const std::string& Source::file_name(size_t f) const { return files_[f]->name; }
uint64_t Source::file_samples(size_t f) const { return files_[f]->samples(); }
uint64_t Source::file_bytes(size_t f) const { return files_[f]->data->size(); }

namespace {

// The index at `path`, if it reads. Its JPEG tables stay in the mapped
// file (a copy when it cannot be mapped).
std::optional<FileIndex> LoadIndex(const std::string& path) {
  auto file = ReadOnlyFile::Open(path, /*allow_mmap=*/true);
  if (!file.ok()) return std::nullopt;
  std::vector<std::byte> scratch;
  auto bytes = (*file)->Read(0, (*file)->size(), &scratch);
  if (!bytes.ok()) return std::nullopt;
  auto index = DecodeFileIndex(*bytes, path);
  if (!index.ok()) return std::nullopt;
  if ((*file)->mapped()) {
    index->storage = std::shared_ptr<const ReadOnlyFile>(std::move(*file));
  } else {
    auto copy = std::make_shared<std::vector<std::byte>>(index->jpeg_tables.begin(),
                                                         index->jpeg_tables.end());
    index->jpeg_tables = *copy;
    index->storage = std::move(copy);
  }
  return std::move(*index);
}

// A saved index of the data file `like` was made for (same kind, size and
// mtime), if one is current.
std::optional<FileIndex> FindIndex(const std::vector<std::string>& candidates,
                                   const FileIndex& like) {
  for (const std::string& c : candidates) {
    if (auto found = LoadIndex(c); found && found->kind == like.kind &&
                                   found->data_size == like.data_size &&
                                   found->data_mtime_ns == like.data_mtime_ns) {
      return found;
    }
  }
  return std::nullopt;
}

enum class IndexFrom { kNone, kSaved, kBuilt };

// Opens a local data file (unless `*data` is open already: a remote object)
// and finds its saved index, stamped with the data's size and `version`
// (a local file's mtime; a hash of a remote object's ETag); without a
// current one, builds (and saves) it when `build`, else leaves `*from` at
// kNone. A remote object's index counts only with its JPEG tables (when
// they are wanted): they are made while its bytes are in memory.
Status OpenFile(SourceFormat format, const SourceOptions& options, bool build, IndexFrom* from,
                std::unique_ptr<Source::Data>* data, FileIndex* out, const std::string& path,
                std::optional<int64_t> version) {
  if (*data == nullptr) {
    SATURATE_ASSIGN_OR_RETURN(auto file, ReadOnlyFile::Open(path, true));
    *data = std::make_unique<LocalData>(std::move(file));
  }
  const uint64_t size = (*data)->size();
  FileIndex index{format == SourceFormat::kWebDataset ? kKindTar : kKindTfrecord,
                  size,
                  version.value_or(MtimeNs(path)),
                  {}};
  const std::vector<std::string> candidates = IndexCandidates(path, options.index_dir);
  if (options.write_index) {
    if (auto found = FindIndex(candidates, index);
        found && (!version || !options.index_jpeg || found->has_jpeg_tables)) {
      *out = std::move(*found);
      *from = IndexFrom::kSaved;
      return Status::OK();
    }
  }
  *from = IndexFrom::kNone;
  if (!build) return Status::OK();
  std::vector<std::byte> scratch;
  std::span<const std::byte> bytes;
  if (size > 0) {
    SATURATE_ASSIGN_OR_RETURN(bytes, (*data)->Read(0, size, &scratch));
  }
  if (index.kind == kKindTar) {
    SATURATE_ASSIGN_OR_RETURN(std::vector<TarMember> members, IndexTar(bytes));
    for (TarMember& m : members) index.entries.push_back({std::move(m.name), m.offset, m.size});
  } else {
    SATURATE_ASSIGN_OR_RETURN(std::vector<TfrecordSpan> spans, ScanTfrecord(bytes));
    for (const TfrecordSpan& s : spans) index.entries.push_back({"", s.offset, s.length});
  }
  // Saved now, and again with the JPEG tables (MakeJpegTables), so that
  // a job stopped in between keeps the offsets.
  if (options.write_index) SaveFileIndex(index, candidates);
  *out = std::move(index);
  *from = IndexFrom::kBuilt;
  return Status::OK();
}

// Record `r` of a TFRecord file: its data, checksums checked when `verify`.
Result<std::span<const std::byte>> RecordData(const Source::Data& data, const IndexEntry& e,
                                              uint64_t r, bool verify,
                                              std::vector<std::byte>* scratch) {
  SATURATE_ASSIGN_OR_RETURN(
      auto bytes,
      data.Read(e.offset, kTfrecordHeaderBytes + e.size + kTfrecordFooterBytes, scratch));
  auto out = ReadTfrecord(bytes, {0, e.size}, r, verify);
  if (out.ok()) return out;
  // The message says "record N at offset 0: why" (offset in the slice read).
  const std::string& m = out.status().message();
  const size_t colon = m.find(": ");
  return Status::Corruption("record " + std::to_string(r) + " at offset " +
                            std::to_string(e.offset) +
                            (colon == std::string::npos ? ": " + m : m.substr(colon)));
}

}  // namespace

Result<std::unique_ptr<Source>> Source::Open(const std::string& path,
                                             const SourceOptions& defaults) {
  SATURATE_ASSIGN_OR_RETURN(SourceSpec spec, ParseSourceSpec(path, defaults));
  return Open(spec);
}

void Source::File::GroupSamples() {
  first.clear();
  keys.clear();
  std::string last;
  for (size_t m = 0; m < index.entries.size(); ++m) {
    std::string key, ext;
    if (!SplitSampleName(index.entries[m].name, &key, &ext)) continue;
    if (keys.empty() || key != last) {
      keys.push_back(key);
      first.push_back(static_cast<uint32_t>(m));
      last = key;
    }
  }
  first.push_back(static_cast<uint32_t>(index.entries.size()));
}

Status Source::OpenRemote(const SourceSpec& spec, const std::vector<std::string>* names) {
  remote::StoreOptions so;
  so.endpoint = spec.options.remote.endpoint;
  so.retry = spec.options.remote.retry;
  SATURATE_ASSIGN_OR_RETURN(RemoteFiles in, ExpandRemotePattern(spec.pattern, so));
  const size_t n = in.names.size();
  std::vector<Result<remote::ObjectStat>> stats(n, Status::Internal("not asked"));
  ParallelFor(n, 16, [&](size_t i) { stats[i] = in.store->Stat(in.names[i]); });
  std::vector<remote::ObjectInfo> objects;
  std::string identity;
  for (size_t i = 0; i < n; ++i) {
    SATURATE_RETURN_IF_ERROR(stats[i].status());
    objects.push_back({in.names[i], stats[i]->bytes});
    auto file = std::make_unique<File>();
    file->path = in.store->Describe(in.names[i]);
    file->name = names != nullptr && i < names->size() ? (*names)[i] : file->path;
    file->object = static_cast<uint32_t>(i);
    file->version =
        static_cast<int64_t>(XXH3_64bits(stats[i]->version.data(), stats[i]->version.size()) >> 1);
    identity += file->path + " " + std::to_string(stats[i]->bytes) + " " + stats[i]->version + "\n";
    files_.push_back(std::move(file));
  }
  char id[24];
  std::snprintf(id, sizeof(id), "%016llx",
                static_cast<unsigned long long>(XXH3_64bits(identity.data(), identity.size())));
  store_ = in.store;
  SATURATE_ASSIGN_OR_RETURN(
      reader_,
      remote::RangeReader::Open(std::move(in.store), std::move(objects), id, spec.options.remote));
  for (size_t i = 0; i < n; ++i) {
    files_[i]->data = std::make_unique<RemoteData>(reader_.get(), static_cast<uint32_t>(i),
                                                   reader_->objects()[i].bytes);
  }
  return Status::OK();
}

Status Source::BuildRemote(File& file) {
  std::vector<std::byte> bytes(file.data->size());
  SATURATE_RETURN_IF_ERROR(
      remote::FetchInto(*store_, reader_->objects()[*file.object].name, 0, bytes));
  std::unique_ptr<Data> remote_data = std::move(file.data);
  file.data = std::make_unique<MemoryData>(std::move(bytes));
  SourceOptions offsets_only = options_;
  offsets_only.write_index = false;  // saved once, with the tables
  IndexFrom from = IndexFrom::kNone;
  Status st =
      OpenFile(format_, offsets_only, true, &from, &file.data, &file.index, file.path, file.version)
          .WithContext(file.name);
  if (st.ok()) {
    if (format_ == SourceFormat::kWebDataset) file.GroupSamples();
    if (options_.index_jpeg) MakeJpegTables({&file});
    if (options_.write_index) {
      SaveFileIndex(file.index, IndexCandidates(file.path, options_.index_dir));
    }
  }
  file.data = std::move(remote_data);
  return st;
}

Result<std::unique_ptr<Source>> Source::Open(const SourceSpec& spec, const format::Schema* schema,
                                             const std::vector<std::string>* names) {
  for (const std::string& f : spec.files) {
    if (IsGzipName(f)) {
      return Status::InvalidArgument(
          f +
          " is gzip-compressed: only uncompressed files are read directly (at offsets); "
          "pack them once instead: saturate pack " +
          std::string(spec.format == SourceFormat::kWebDataset ? "webdataset" : "tfrecord") + " '" +
          spec.pattern + "' OUT");
    }
  }
  std::unique_ptr<Source> src(new Source());
  src->format_ = spec.format;
  src->options_ = spec.options;
  if (spec.remote) {
    if (IsGzipName(spec.pattern)) {
      return Status::InvalidArgument(spec.pattern +
                                     ": gzip'd objects are not read in place; pack them: "
                                     "saturate pack '" +
                                     spec.pattern + "' OUT");
    }
    SATURATE_RETURN_IF_ERROR(src->OpenRemote(spec, names));
  } else {
    RaiseFileLimit(2 * spec.files.size());
    for (size_t i = 0; i < spec.files.size(); ++i) {
      auto file = std::make_unique<File>();
      file->path = spec.files[i];
      file->name = names != nullptr && i < names->size() ? (*names)[i] : spec.files[i];
      src->files_.push_back(std::move(file));
    }
  }
  const size_t n = src->files_.size();
  std::vector<Status> results(n);
  std::vector<IndexFrom> from(n, IndexFrom::kNone);
  // Saved indexes first; the missing ones are made by one process at a time
  // (IndexBuildLock), which may find them made by another after its wait.
  // A remote object is read whole once, one at a time (its bytes are held
  // while its JPEG tables are made), every core on its tables.
  IndexBuildLock lock;
  for (bool build : {false, true}) {
    if (build) {
      if (std::find(from.begin(), from.end(), IndexFrom::kNone) == from.end()) break;
      if (spec.options.write_index) {
        lock =
            IndexBuildLock::Acquire(IndexCandidates(src->files_[0]->path, spec.options.index_dir));
      }
    }
    ParallelFor(n, spec.remote ? 16 : 8, [&](size_t i) {
      File& file = *src->files_[i];
      if (from[i] != IndexFrom::kNone) return;
      results[i] =
          OpenFile(spec.format, spec.options, build && !spec.remote, &from[i], &file.data,
                   &file.index, file.path, file.object ? std::optional(file.version) : std::nullopt)
              .WithContext(file.name);
    });
    if (build && spec.remote) {
      for (size_t i = 0; i < n && results[i].ok(); ++i) {
        if (from[i] != IndexFrom::kNone) continue;
        results[i] = src->BuildRemote(*src->files_[i]);
        if (results[i].ok()) from[i] = IndexFrom::kBuilt;
      }
    }
    for (size_t i = 0; i < n; ++i) SATURATE_RETURN_IF_ERROR(results[i]);
  }
  src->indexes_built_ = std::count(from.begin(), from.end(), IndexFrom::kBuilt);
  // WebDataset: consecutive members sharing a key are one sample.
  if (spec.format == SourceFormat::kWebDataset) {
    for (auto& file : src->files_) file->GroupSamples();
  }
  for (auto& file : src->files_) {
    src->file_start_.push_back(src->total_);
    src->total_ += file->samples();
  }
  if (src->total_ == 0) return Status::InvalidArgument(spec.pattern + ": no samples in any file");
  const File* first = nullptr;
  for (auto& file : src->files_) {
    if (file->samples() > 0) {
      first = file.get();
      break;
    }
  }
  if (spec.format == SourceFormat::kTfrecord) {
    ExamplePlan plan;
    if (schema != nullptr) {
      plan = PlanForSchema(*schema, spec.options.image_key, spec.options.label_key);
    } else {
      // Records that fail their checks are left out of the probe: Read()
      // reports them (or --skip-bad skips them) like any other.
      std::vector<std::vector<std::byte>> scratch(
          std::min(kProbeSamples, first->index.entries.size()));
      std::vector<std::span<const std::byte>> probe;
      Status first_error;
      for (size_t r = 0; r < scratch.size(); ++r) {
        auto data = RecordData(*first->data, first->index.entries[r], r, true, &scratch[r]);
        if (data.ok()) {
          probe.push_back(*data);
        } else if (first_error.ok()) {
          first_error = data.status().WithContext(first->name);
        }
      }
      if (probe.empty()) return first_error;
      auto inferred = InferExampleFields(probe, spec.options.image_key, spec.options.label_key);
      if (!inferred.ok()) return inferred.status().WithContext(first->name);
      plan = std::move(*inferred);
    }
    src->schema_ = std::move(plan.schema);
    src->features_ = std::move(plan.features);
    return Finish(std::move(src), &lock);
  }
  if (schema != nullptr) {
    src->schema_ = *schema;
    return Finish(std::move(src), &lock);
  }
  // WebDataset: the fields of the first samples.
  bool image = false, label = false;
  std::vector<std::string> others;
  for (size_t s = 0; s < std::min(kProbeSamples, first->keys.size()); ++s) {
    for (uint32_t m = first->first[s]; m < first->first[s + 1]; ++m) {
      std::string key, ext;
      if (!SplitSampleName(first->index.entries[m].name, &key, &ext)) continue;
      if (IsImageExtension(ext)) {
        image = true;
      } else if (ext == "cls") {
        label = true;
      } else if (std::find(others.begin(), others.end(), ext) == others.end()) {
        others.push_back(ext);
      }
    }
  }
  if (!image) {
    return Status::InvalidArgument(first->name +
                                   ": no .jpg/.jpeg/.png member in the first samples (sample '" +
                                   first->keys[0] + "')");
  }
  std::sort(others.begin(), others.end());
  src->schema_.fields = {FieldSpec{"key", FieldKind::kBytes},
                         FieldSpec{"image", FieldKind::kImage}};
  if (label) src->schema_.fields.push_back(FieldSpec{"label", FieldKind::kInt64});
  for (const std::string& ext : others) {
    if (ext == "key" || ext == "image" || ext == "label") continue;
    src->schema_.fields.push_back(FieldSpec{ext, FieldKind::kBytes});
  }
  return Finish(std::move(src), &lock);
}

Result<std::unique_ptr<Source>> Source::Finish(std::unique_ptr<Source> src, IndexBuildLock* lock) {
  const auto& fields = src->schema_.fields;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (fields[i].kind == FieldKind::kImage) src->image_field_ = i;
  }
  if (src->options_.index_jpeg && src->image_field_ < fields.size()) {
    src->LoadJpegTablesAfterWait(lock);
    std::vector<File*> lacking;
    for (auto& f : src->files_) {
      if (!f->index.has_jpeg_tables) lacking.push_back(f.get());
    }
    src->MakeJpegTables(lacking);
  }
  src->options_.progress = nullptr;  // for the open only: what it calls may not outlive it
  return src;
}

void Source::LoadJpegTablesAfterWait(IndexBuildLock* lock) {
  auto lacking = [](const std::unique_ptr<File>& f) { return !f->index.has_jpeg_tables; };
  if (!options_.write_index || lock->held() ||
      std::none_of(files_.begin(), files_.end(), lacking)) {
    return;
  }
  *lock = IndexBuildLock::Acquire(IndexCandidates(files_[0]->path, options_.index_dir));
  ParallelFor(files_.size(), 8, [&](size_t i) {
    File& file = *files_[i];
    if (file.index.has_jpeg_tables) return;
    auto found = FindIndex(IndexCandidates(file.path, options_.index_dir), file.index);
    if (found && found->has_jpeg_tables && found->entries.size() == file.index.entries.size()) {
      file.index = std::move(*found);
    }
  });
}

Result<std::span<const std::byte>> Source::ImageBytes(const File& file, uint64_t local,
                                                      Sample* sample) const {
  sample->owned.assign(1, {});
  if (format_ == SourceFormat::kWebDataset) {
    for (uint32_t m = file.first[local]; m < file.first[local + 1]; ++m) {
      const IndexEntry& e = file.index.entries[m];
      std::string key, ext;
      if (SplitSampleName(e.name, &key, &ext) && IsImageExtension(ext)) {
        return file.data->Read(e.offset, e.size, &sample->owned[0]);
      }
    }
    return std::span<const std::byte>();
  }
  SATURATE_ASSIGN_OR_RETURN(auto record, RecordData(*file.data, file.index.entries[local], local,
                                                    options_.verify, &sample->owned[0]));
  const format::Schema image_only{{FieldSpec{"image", FieldKind::kImage}}};
  const std::vector<std::string> feature{options_.image_key};
  std::vector<std::byte> keep_record = std::move(sample->owned[0]);
  SATURATE_RETURN_IF_ERROR(ExtractExample(record, image_only, feature, sample));
  sample->owned.push_back(std::move(keep_record));  // the views may point into it
  return sample->fields[0];
}

void Source::MakeJpegTables(const std::vector<File*>& files) {
  // Work in chunks of samples, so that one large file uses every core.
  constexpr uint64_t kChunk = 512;
  struct Chunk {
    File* file;
    uint64_t first, end;
    std::vector<std::byte> tables;
    std::vector<uint64_t> ends;  // where each sample's table ends in `tables`
  };
  std::vector<Chunk> chunks;
  for (File* file : files) {
    if (file->samples() == 0) {
      file->index.jpeg_table_starts.assign(1, 0);
      file->index.has_jpeg_tables = true;
    }
    for (uint64_t s = 0; s < file->samples(); s += kChunk) {
      chunks.push_back({file, s, std::min(file->samples(), s + kChunk), {}, {}});
    }
  }
  if (chunks.empty()) return;
  uint64_t total = 0, done = 0;
  for (const Chunk& k : chunks) total += k.end - k.first;
  std::mutex progress_mu;
  ParallelFor(chunks.size(), std::max(1u, std::thread::hardware_concurrency()), [&](size_t c) {
    Chunk& k = chunks[c];
    image::DecodeScratch scratch;
    Sample sample;
    for (uint64_t s = k.first; s < k.end; ++s) {
      // A sample that does not read gets no table: loading reports it.
      if (auto image = ImageBytes(*k.file, s, &sample); image.ok() && !image->empty()) {
        image::IndexJpegEntries(*image, &scratch, &k.tables);
      }
      k.ends.push_back(k.tables.size());
    }
    if (options_.progress) {
      std::lock_guard<std::mutex> lock(progress_mu);
      done += k.end - k.first;
      options_.progress(done, total);
    }
  });
  std::shared_ptr<std::vector<std::byte>> blob;  // the tables of the file being assembled
  for (const Chunk& k : chunks) {
    FileIndex& index = k.file->index;
    if (k.first == 0) {
      index.jpeg_table_starts.assign(1, 0);
      blob = std::make_shared<std::vector<std::byte>>();
    }
    const uint64_t base = blob->size();
    blob->insert(blob->end(), k.tables.begin(), k.tables.end());
    for (uint64_t end : k.ends) index.jpeg_table_starts.push_back(base + end);
    if (k.end == k.file->samples()) {
      index.jpeg_tables = *blob;
      index.storage = blob;
      index.has_jpeg_tables = true;
      if (options_.write_index && !k.file->object) {
        SaveFileIndex(index, IndexCandidates(k.file->path, options_.index_dir));
      }
    }
  }
}

std::pair<const Source::File*, uint64_t> Source::Locate(uint64_t index) const {
  const size_t f =
      std::upper_bound(file_start_.begin(), file_start_.end(), index) - file_start_.begin() - 1;
  return {files_[f].get(), index - file_start_[f]};
}

std::string Source::Describe(uint64_t index) const {
  if (index >= total_) return "sample " + std::to_string(index) + " (out of range)";
  const auto [file, local] = Locate(index);
  if (format_ == SourceFormat::kWebDataset)
    return file->name + ": sample '" + file->keys[local] + "'";
  return file->name + ": record " + std::to_string(local);
}

Status Source::Read(uint64_t index, Sample* sample) const {
  if (index >= total_) {
    return Status::InvalidArgument("sample " + std::to_string(index) + " out of range (" +
                                   std::to_string(total_) + " samples)");
  }
  sample->fields.clear();
  sample->owned.clear();
  sample->keep.reset();
  sample->image_entries = {};
  const auto [file, local] = Locate(index);
  SATURATE_RETURN_IF_ERROR(format_ == SourceFormat::kWebDataset
                               ? ReadWebDataset(*file, local, sample)
                               : ReadTfrecord(*file, local, sample));
  if (options_.index_jpeg) sample->image_entries = file->index.JpegTable(local);
  return Status::OK();
}

std::pair<uint64_t, uint64_t> Source::SampleSpan(const File& file, uint64_t local) const {
  if (format_ == SourceFormat::kTfrecord) {
    const IndexEntry& e = file.index.entries[local];
    return {e.offset, kTfrecordHeaderBytes + e.size + kTfrecordFooterBytes};
  }
  // From the sample's first member to the next sample's: the spans of a
  // file's samples tile it (the tar headers and padding between members
  // included), so the reader joins neighbours into one request.
  const auto& entries = file.index.entries;
  const uint32_t first = file.first[local], next = file.first[local + 1];
  if (first == next) return {0, 0};
  const uint64_t begin = entries[first].offset;
  const uint64_t end = local + 1 < file.keys.size()
                           ? entries[next].offset
                           : entries[next - 1].offset + entries[next - 1].size;
  return {begin, end - begin};
}

void Source::PlanReads(std::span<const uint64_t> indices, bool replace) const {
  if (!reader_) return;
  std::vector<remote::ByteRange> ranges;
  ranges.reserve(indices.size());
  for (uint64_t index : indices) {
    if (index >= total_) continue;
    const auto [file, local] = Locate(index);
    const auto [offset, length] = SampleSpan(*file, local);
    if (length > 0) ranges.push_back({*file->object, offset, length});
  }
  reader_->Plan(ranges, replace);
}

bool Source::remote() const { return reader_ != nullptr; }
void Source::CancelRemote() const {
  if (reader_) reader_->Cancel();
}
remote::RemoteStats Source::remote_stats() const {
  return reader_ ? reader_->stats() : remote::RemoteStats{};
}

Status Source::ReadWebDataset(const File& file, uint64_t local, Sample* sample) const {
  const std::string& key = file.keys[local];
  auto where = [&] { return file.name + ": sample '" + key + "'"; };
  sample->fields.assign(schema_.fields.size(), {});
  sample->owned.reserve(schema_.fields.size() + 1);
  // The sample's members lie back to back: one read of their span (a view
  // of a mapped file; one planned range of a remote object).
  const auto [span_offset, span_bytes] = SampleSpan(file, local);
  sample->owned.emplace_back();
  SATURATE_ASSIGN_OR_RETURN(auto span,
                            file.data->Read(span_offset, span_bytes, &sample->owned.back()));
  for (size_t i = 0; i < schema_.fields.size(); ++i) {
    const FieldSpec& spec = schema_.fields[i];
    if (spec.name == "key") {
      const auto* k = reinterpret_cast<const std::byte*>(key.data());
      sample->owned.emplace_back(k, k + key.size());
      sample->fields[i] = sample->owned.back();
      continue;
    }
    const IndexEntry* member = nullptr;
    for (uint32_t m = file.first[local]; m < file.first[local + 1] && member == nullptr; ++m) {
      std::string k, ext;
      if (!SplitSampleName(file.index.entries[m].name, &k, &ext)) continue;
      const bool match = spec.name == "image"   ? IsImageExtension(ext)
                         : spec.name == "label" ? ext == "cls"
                                                : ext == spec.name;
      if (match) member = &file.index.entries[m];
    }
    if (member == nullptr) {
      if (spec.kind == FieldKind::kBytes) continue;  // an optional text field: empty
      return Status::Corruption(
          where() + ": no " +
          (spec.name == "image" ? std::string(".jpg/.jpeg/.png") : std::string(".cls")) +
          " member (field '" + spec.name + "')");
    }
    std::span<const std::byte> bytes = span.subspan(member->offset - span_offset, member->size);
    if (spec.kind == FieldKind::kInt64) {
      std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
      const size_t b = text.find_first_not_of(" \t\r\n");
      const size_t e = text.find_last_not_of(" \t\r\n");
      text = b == std::string::npos ? "" : text.substr(b, e - b + 1);
      int64_t v = 0;
      auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (text.empty() || ec != std::errc() || p != text.data() + text.size()) {
        return Status::Corruption(where() + ": member '" + member->name + "' holds '" +
                                  text.substr(0, 40) + "', not an integer (field '" + spec.name +
                                  "')");
      }
      auto& out = sample->owned.emplace_back(8);
      std::memcpy(out.data(), &v, 8);
      sample->fields[i] = out;
    } else {
      if (spec.kind == FieldKind::kImage && bytes.empty()) {
        return Status::Corruption(where() + ": member '" + member->name +
                                  "' is empty (field 'image')");
      }
      sample->fields[i] = bytes;
    }
  }
  return Status::OK();
}

Status Source::ReadTfrecord(const File& file, uint64_t local, Sample* sample) const {
  sample->owned.emplace_back();
  auto data = RecordData(*file.data, file.index.entries[local], local, options_.verify,
                         &sample->owned.back());
  if (!data.ok()) return data.status().WithContext(file.name);
  Status s = ExtractExample(*data, schema_, features_, sample);
  if (!s.ok()) return s.WithContext(file.name + ": record " + std::to_string(local));
  return Status::OK();
}

void Source::Prefetch(uint64_t index, uint64_t max_bytes) const {
  if (index >= total_) return;
  const auto [file, local] = Locate(index);
  if (format_ == SourceFormat::kTfrecord) {
    const IndexEntry& e = file->index.entries[local];
    file->data->Prefetch(e.offset, std::min(max_bytes, e.size + kTfrecordHeaderBytes));
    return;
  }
  for (uint32_t m = file->first[local]; m < file->first[local + 1]; ++m) {
    const IndexEntry& e = file->index.entries[m];
    file->data->Prefetch(e.offset, std::min(max_bytes, e.size));
  }
}

}  // namespace saturate::formats
