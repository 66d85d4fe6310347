#include "saturate/pack/pack.h"

#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <map>
#include <thread>

#include "base/file.h"
#include "formats/hdf5.h"
#include "formats/pattern.h"
#include "image/codec.h"
#include "pack/idx.h"
#include "pack/staging.h"
#include "pack/table.h"
#include "saturate/format/writer.h"
#include "saturate/formats/source.h"
#include "saturate/remote/objects.h"

namespace saturate::pack {
namespace {

namespace fs = std::filesystem;
using format::DatasetWriter;
using format::FieldKind;
using format::FieldSpec;
using format::Schema;
using Fields = std::vector<std::span<const std::byte>>;

constexpr size_t kMaxSkipNotes = 10;

int ThreadCount(int requested) {
  if (requested > 0) return requested;
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// One pack in progress: staging directory, writer, summary and progress.
class PackRun {
 public:
  static Result<std::unique_ptr<PackRun>> Begin(const std::string& out, Schema schema,
                                                format::WriterOptions writer_options,
                                                uint64_t items_total, const PackOptions& options) {
    SATURATE_ASSIGN_OR_RETURN(auto staging, Staging::Begin(out, options.force));
    writer_options.shard_bytes = options.shard_bytes;
    writer_options.metadata["created_by"] = "saturate pack";
    SATURATE_ASSIGN_OR_RETURN(
        auto writer, DatasetWriter::Create(staging->dir(), std::move(schema), writer_options));
    return std::unique_ptr<PackRun>(
        new PackRun(std::move(staging), std::move(writer), items_total, options));
  }

  Status Add(const Fields& fields, uint64_t input_bytes) {
    summary_.input_bytes += input_bytes;
    SATURATE_RETURN_IF_ERROR(writer_->Append(fields));
    return Advance();
  }

  Status Skip(const Status& why) {
    ++summary_.skipped;
    if (summary_.skip_notes.size() < kMaxSkipNotes) summary_.skip_notes.push_back(why.message());
    return Advance();
  }

  Result<PackSummary> Finish() {
    if (writer_->records_written() == 0) {
      return Status::InvalidArgument("no records to pack (all " + std::to_string(summary_.skipped) +
                                     " inputs were skipped)");
    }
    SATURATE_RETURN_IF_ERROR(writer_->Finish());
    SATURATE_RETURN_IF_ERROR(staging_->Commit());
    summary_.records = writer_->records_written();
    summary_.bytes = writer_->manifest().num_bytes();
    summary_.shards = writer_->manifest().shards.size();
    summary_.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    return summary_;
  }

  PackSummary& summary() { return summary_; }
  // Inputs whose count is learnt on the way (gzip'd files, one at a time).
  void set_items_total(uint64_t total) { items_total_ = total; }

 private:
  PackRun(std::unique_ptr<Staging> staging, std::unique_ptr<DatasetWriter> writer,
          uint64_t items_total, const PackOptions& options)
      : staging_(std::move(staging)),
        writer_(std::move(writer)),
        progress_(options.progress),
        items_total_(items_total) {}

  Status Advance() {
    ++items_done_;
    if (progress_) progress_({items_done_, items_total_, writer_->bytes_written()});
    return Status::OK();
  }

  // Order matters: the writer's files live inside the staging directory.
  std::unique_ptr<Staging> staging_;
  std::unique_ptr<DatasetWriter> writer_;
  std::function<void(const PackProgress&)> progress_;
  uint64_t items_total_;
  uint64_t items_done_ = 0;
  PackSummary summary_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// Runs `load(i)` for every i in [0, n) on `threads` threads, a window at a
// time, and hands the results to `sink(i, result)` in index order, so the
// dataset's record order does not depend on the thread count.
template <typename T, typename Load, typename Sink>
Status ForEachOrdered(size_t n, int threads, Load load, Sink sink) {
  const size_t window = static_cast<size_t>(threads) * 16;
  std::vector<std::optional<T>> results(window);
  for (size_t begin = 0; begin < n; begin += window) {
    const size_t count = std::min(window, n - begin);
    std::atomic<size_t> next{0};
    auto worker = [&] {
      for (size_t k; (k = next.fetch_add(1)) < count;) results[k].emplace(load(begin + k));
    };
    std::vector<std::jthread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
    worker();
    pool.clear();  // joins
    for (size_t k = 0; k < count; ++k) {
      SATURATE_RETURN_IF_ERROR(sink(begin + k, std::move(*results[k])));
      results[k].reset();
    }
  }
  return Status::OK();
}

// An image file read and checked (or re-encoded), ready to store.
struct LoadedImage {
  Status status;
  std::vector<std::byte> bytes;
  uint64_t input_bytes = 0;
};

// The bytes to store for an image file: checked, then re-encoded and/or
// restart-marked as the options say.
Result<std::vector<std::byte>> StoredBytes(std::span<const std::byte> raw,
                                           const PackOptions& options) {
  std::vector<std::byte> reencoded;
  if (options.reencode_max_side > 0) {
    SATURATE_ASSIGN_OR_RETURN(
        reencoded, image::ReencodeJpeg(raw, options.reencode_max_side, options.reencode_quality));
    raw = reencoded;
  }
  if (!options.keep_jpeg_bytes && image::SniffFormat(raw) == image::ImageFormat::kJpeg) {
    // Decodes all entropy-coded data strictly, so it validates too.
    auto marked = image::AddJpegRestartMarkers(raw, options.restart_rows);
    if (marked.status().code() != StatusCode::kUnimplemented) return marked;
  }
  if (!reencoded.empty()) return reencoded;
  SATURATE_RETURN_IF_ERROR(image::ValidateImage(raw).status());
  return std::vector<std::byte>(raw.begin(), raw.end());
}

LoadedImage LoadImage(const std::string& path, const PackOptions& options) {
  LoadedImage out;
  auto text = ReadFileToString(path);
  if (!text.ok()) {
    out.status = text.status();
    return out;
  }
  out.input_bytes = text->size();
  auto stored = StoredBytes(std::as_bytes(std::span(text->data(), text->size())), options);
  if (stored.ok()) out.bytes = std::move(*stored);
  out.status = stored.status();
  if (!out.status.ok()) out.status = out.status.WithContext(path);
  return out;
}

// Packs one image per item; `extra(i, image)` returns the record's fields.
template <typename FieldsFn>
Result<PackSummary> PackImages(const std::vector<std::string>& paths, PackRun* run,
                               const PackOptions& options, FieldsFn fields_of) {
  auto load = [&](size_t i) { return LoadImage(paths[i], options); };
  auto sink = [&](size_t i, LoadedImage img) -> Status {
    if (!img.status.ok()) {
      // I/O errors are not the file's fault: never skipped silently.
      if (options.skip_bad && img.status.code() == StatusCode::kCorruption) {
        return run->Skip(img.status);
      }
      return img.status;
    }
    return run->Add(fields_of(i, img.bytes), img.input_bytes);
  };
  SATURATE_RETURN_IF_ERROR(
      ForEachOrdered<LoadedImage>(paths.size(), ThreadCount(options.threads), load, sink));
  return run->Finish();
}

bool IsImageFile(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), ::tolower);
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

FieldSpec ImageField() { return FieldSpec{"image", FieldKind::kImage}; }
FieldSpec LabelField() { return FieldSpec{"label", FieldKind::kInt64}; }

}  // namespace

Result<PackSummary> PackImageFolder(const std::string& root, const std::string& out,
                                    const PackOptions& options) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return Status::NotFound(root + ": no such input folder");
  std::vector<std::string> classes;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    std::string name = entry.path().filename().string();
    if (entry.is_directory() && name[0] != '.') classes.push_back(name);
  }
  std::sort(classes.begin(), classes.end());
  std::vector<std::string> paths;
  std::vector<int64_t> labels;
  uint64_t ignored = 0;
  for (size_t c = 0; c < classes.size(); ++c) {
    std::vector<std::string> files;
    for (const auto& entry : fs::recursive_directory_iterator(
             root + "/" + classes[c], fs::directory_options::follow_directory_symlink, ec)) {
      if (!entry.is_regular_file()) continue;
      if (IsImageFile(entry.path())) {
        files.push_back(entry.path().string());
      } else {
        ++ignored;
      }
    }
    std::sort(files.begin(), files.end());
    paths.insert(paths.end(), files.begin(), files.end());
    labels.insert(labels.end(), files.size(), static_cast<int64_t>(c));
  }
  if (ec) return Status::IOError("cannot list " + root + ": " + ec.message());
  if (paths.empty()) {
    return Status::InvalidArgument(root + ": no .jpg/.jpeg/.png images in class sub-folders (" +
                                   std::to_string(classes.size()) + " sub-folder(s), " +
                                   std::to_string(ignored) + " other file(s) ignored)");
  }
  format::WriterOptions wo;
  wo.class_names = classes;
  wo.metadata["source"] = "imagefolder:" + root;
  SATURATE_ASSIGN_OR_RETURN(auto run, PackRun::Begin(out, Schema{{ImageField(), LabelField()}}, wo,
                                                     paths.size(), options));
  run->summary().ignored_files = ignored;
  return PackImages(paths, run.get(), options, [&](size_t i, const std::vector<std::byte>& img) {
    return Fields{img, format::AsBytes(labels[i])};
  });
}

namespace {

// How one table column becomes a field, and its per-row payloads.
struct ColumnPlan {
  size_t column = 0;
  FieldSpec field;
};

}  // namespace

Result<PackSummary> PackTable(const std::string& table_path, const TableSpec& spec,
                              const std::string& out, const PackOptions& options) {
  SATURATE_ASSIGN_OR_RETURN(Table table, ReadTable(table_path));
  SATURATE_ASSIGN_OR_RETURN(size_t path_col, table.ColumnIndex(spec.path_column, table_path));
  if (table.types[path_col] != ColumnType::kString) {
    return Status::InvalidArgument(table_path + ": path column '" + spec.path_column +
                                   "' must hold text");
  }
  Schema schema{{ImageField()}};
  format::WriterOptions wo;
  wo.metadata["source"] = "table:" + table_path;
  // Labels: integers are ids; text labels are class names, sorted into ids.
  std::vector<int64_t> labels(table.rows.size());
  std::optional<size_t> label_col;
  if (!spec.label_column.empty()) {
    SATURATE_ASSIGN_OR_RETURN(label_col, table.ColumnIndex(spec.label_column, table_path));
    schema.fields.push_back(LabelField());
    if (table.types[*label_col] == ColumnType::kFloat64) {
      return Status::InvalidArgument(table_path + ": label column '" + spec.label_column +
                                     "' holds reals; expected integers or class names");
    }
    if (table.types[*label_col] == ColumnType::kString) {
      std::map<std::string, int64_t> ids;
      for (const auto& row : table.rows) ids.emplace(std::get<std::string>(row[*label_col]), 0);
      for (auto& [name, id] : ids) {
        id = static_cast<int64_t>(wo.class_names.size());
        wo.class_names.push_back(name);
      }
      for (size_t r = 0; r < table.rows.size(); ++r) {
        labels[r] = ids[std::get<std::string>(table.rows[r][*label_col])];
      }
    } else {
      for (size_t r = 0; r < table.rows.size(); ++r) {
        labels[r] = std::get<int64_t>(table.rows[r][*label_col]);
      }
    }
  }
  std::vector<ColumnPlan> extras;
  for (size_t c = 0; c < table.columns.size(); ++c) {
    if (c == path_col || c == label_col) continue;
    const std::string& name = table.columns[c];
    if (name == "image" || name == "label") {
      return Status::InvalidArgument(table_path + ": column '" + name +
                                     "' clashes with the field pack creates; rename it");
    }
    FieldKind kind = table.types[c] == ColumnType::kInt64     ? FieldKind::kInt64
                     : table.types[c] == ColumnType::kFloat64 ? FieldKind::kFloat32
                                                              : FieldKind::kBytes;
    extras.push_back({c, FieldSpec{name, kind}});
    schema.fields.push_back(extras.back().field);
  }
  const std::string base = fs::path(table_path).parent_path().string();
  std::vector<std::string> paths;
  for (const auto& row : table.rows) {
    const std::string& p = std::get<std::string>(row[path_col]);
    paths.push_back(fs::path(p).is_absolute() || base.empty() ? p : base + "/" + p);
  }
  SATURATE_ASSIGN_OR_RETURN(auto run, PackRun::Begin(out, schema, wo, paths.size(), options));
  // Per-row scalar storage for extra columns, alive while the row is written.
  std::vector<int64_t> ints(extras.size());
  std::vector<float> floats(extras.size());
  return PackImages(paths, run.get(), options, [&](size_t r, const std::vector<std::byte>& img) {
    Fields f{img};
    if (label_col) f.push_back(format::AsBytes(labels[r]));
    for (size_t e = 0; e < extras.size(); ++e) {
      const Cell& cell = table.rows[r][extras[e].column];
      if (const auto* i = std::get_if<int64_t>(&cell)) {
        ints[e] = *i;
        f.push_back(format::AsBytes(ints[e]));
      } else if (const auto* d = std::get_if<double>(&cell)) {
        floats[e] = static_cast<float>(*d);
        f.push_back(format::AsBytes(floats[e]));
      } else {
        const auto& s = std::get<std::string>(cell);
        f.push_back(std::as_bytes(std::span(s.data(), s.size())));
      }
    }
    return f;
  });
}

Result<PackSummary> PackIdx(const IdxSpec& spec, const std::string& out,
                            const PackOptions& options) {
  SATURATE_ASSIGN_OR_RETURN(IdxArray images, ReadIdx(spec.images_path));
  SATURATE_ASSIGN_OR_RETURN(IdxArray labels, ReadIdx(spec.labels_path));
  SATURATE_RETURN_IF_ERROR(
      CheckIdxPair(images, labels).WithContext(spec.images_path + ", " + spec.labels_path));
  const uint64_t n = images.dims[0];
  const uint64_t h = images.dims[1], w = images.dims[2];
  const uint8_t max_label =
      labels.data.empty() ? 0 : *std::max_element(labels.data.begin(), labels.data.end());
  if (!spec.class_names.empty() && spec.class_names.size() <= max_label) {
    return Status::InvalidArgument(std::to_string(spec.class_names.size()) +
                                   " class names given but " + spec.labels_path + " has label " +
                                   std::to_string(max_label));
  }
  format::WriterOptions wo;
  wo.class_names = spec.class_names;
  wo.metadata["source"] = "idx:" + spec.images_path + "," + spec.labels_path;
  Schema schema{{FieldSpec{"image",
                           FieldKind::kArray,
                           format::DType::kUInt8,
                           {static_cast<int64_t>(h), static_cast<int64_t>(w)}},
                 LabelField()}};
  SATURATE_ASSIGN_OR_RETURN(auto run, PackRun::Begin(out, schema, wo, n, options));
  const std::byte* pixels = reinterpret_cast<const std::byte*>(images.data.data());
  for (uint64_t i = 0; i < n; ++i) {
    int64_t label = labels.data[i];
    SATURATE_RETURN_IF_ERROR(
        run->Add(Fields{std::span(pixels + i * h * w, h * w), format::AsBytes(label)}, h * w + 1));
  }
  return run->Finish();
}

namespace {

// Decompresses the gzip file `from` into `to`.
Status Gunzip(const std::string& from, const std::string& to) {
  gzFile in = gzopen(from.c_str(), "rb");
  if (in == nullptr) return Status::FromErrno(from, errno);
  FILE* out = std::fopen(to.c_str(), "wb");
  if (out == nullptr) {
    gzclose(in);
    return Status::FromErrno(to, errno);
  }
  std::vector<char> buf(1 << 20);
  Status status;
  for (;;) {
    const int n = gzread(in, buf.data(), static_cast<unsigned>(buf.size()));
    if (n < 0) {
      int err = 0;
      status = Status::Corruption(from + ": gzip: " + gzerror(in, &err));
      break;
    }
    if (n == 0) break;
    if (std::fwrite(buf.data(), 1, static_cast<size_t>(n), out) != static_cast<size_t>(n)) {
      status = Status::IOError(to + ": write failed");
      break;
    }
  }
  const int closed = gzclose(in);
  if (status.ok() && closed != Z_OK) {
    status = Status::Corruption(from + ": gzip: truncated or corrupt stream");
  }
  if (std::fclose(out) != 0 && status.ok()) status = Status::IOError(to + ": write failed");
  return status;
}

// A directory removed with everything in it when this goes out of scope.
struct ScratchDir {
  std::string path;
  ~ScratchDir() {
    std::error_code ec;
    if (!path.empty()) fs::remove_all(path, ec);
  }
};

// Fetches one object into `path` with parallel ranged GETs (a scratch file:
// no fsync, nothing to keep if the pack stops).
Status Fetch(remote::ObjectStore& store, const std::string& name, const std::string& path) {
  SATURATE_ASSIGN_OR_RETURN(remote::ObjectStat stat, store.Stat(name));
  std::vector<std::byte> bytes(stat.bytes);
  SATURATE_RETURN_IF_ERROR(remote::FetchInto(store, name, 0, bytes));
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return Status::FromErrno(path, errno);
  const bool written = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  if (std::fclose(f) != 0 || !written) return Status::IOError(path + ": write failed");
  return Status::OK();
}

struct LoadedSample {
  Status status;
  formats::Sample sample;
  std::vector<std::byte> image;
  uint64_t input_bytes = 0;
};

}  // namespace

Result<PackSummary> PackSource(const std::vector<std::string>& patterns,
                               const formats::SourceOptions& source, const std::string& out,
                               const PackOptions& options) {
  if (patterns.empty()) return Status::InvalidArgument("no input files");
  SATURATE_ASSIGN_OR_RETURN(formats::SourceSpec spec,
                            formats::ParseSourceSpec(patterns[0], source));
  std::string pattern = patterns[0];
  for (size_t p = 1; p < patterns.size(); ++p) {
    SATURATE_ASSIGN_OR_RETURN(formats::SourceSpec more,
                              formats::ParseSourceSpec(patterns[p], spec.options));
    if (more.format != spec.format) {
      return Status::InvalidArgument(patterns[p] + ": a different format than " + patterns[0]);
    }
    spec.files.insert(spec.files.end(), more.files.begin(), more.files.end());
    pattern += " " + patterns[p];
  }
  spec.options.write_index = false;
  spec.options.index_jpeg = false;  // Packing rewrites the JPEGs with restart markers.
  // Remote objects: fetched one at a time into the scratch folder, packed
  // and removed, so the disk holds one of them (and its unpacked copy).
  std::map<std::string, std::pair<remote::ObjectStore*, std::string>> remote_files;
  std::vector<std::shared_ptr<remote::ObjectStore>> stores;
  for (const std::string& p : patterns) {
    SATURATE_ASSIGN_OR_RETURN(formats::SourceSpec one, formats::ParseSourceSpec(p, spec.options));
    if (!one.remote) continue;
    remote::StoreOptions so;
    so.endpoint = options.endpoint;
    SATURATE_ASSIGN_OR_RETURN(formats::RemoteFiles in,
                              formats::ExpandRemotePattern(one.pattern, so));
    for (const std::string& name : in.names) {
      const std::string url = in.store->Describe(name);
      spec.files.push_back(url);
      remote_files[url] = {in.store.get(), name};
    }
    stores.push_back(std::move(in.store));
  }
  spec.remote = false;  // each group's files are local: fetched ones included
  const bool one_at_a_time = !remote_files.empty() ||
                             std::any_of(spec.files.begin(), spec.files.end(), formats::IsGzipName);
  // Local uncompressed files are opened together (the total is known up
  // front); gzip'd and remote ones are unpacked or fetched one at a time.
  std::vector<std::vector<std::string>> groups;
  if (one_at_a_time) {
    for (const std::string& f : spec.files) groups.push_back({f});
  } else {
    groups.push_back(spec.files);
  }
  ScratchDir scratch;
  std::unique_ptr<PackRun> run;
  Schema schema;
  size_t image_field = 0;
  uint64_t known = 0;
  const int threads = ThreadCount(options.threads);
  for (const std::vector<std::string>& group : groups) {
    formats::SourceSpec part = spec;
    part.files.clear();
    for (std::string f : group) {
      auto fetched = remote_files.find(f);
      if (fetched == remote_files.end() && !formats::IsGzipName(f)) {
        part.files.push_back(f);
        continue;
      }
      if (scratch.path.empty()) {
        scratch.path = out + ".unpack";
        std::error_code ec;
        fs::remove_all(scratch.path, ec);
        fs::create_directories(scratch.path, ec);
        if (ec) return Status::IOError(scratch.path + ": " + ec.message());
      }
      std::string name = fs::path(f).filename().string();
      if (fetched != remote_files.end()) {
        const auto& [store, object] = fetched->second;
        SATURATE_RETURN_IF_ERROR(Fetch(*store, object, scratch.path + "/fetched-" + name));
        f = scratch.path + "/fetched-" + name;
        if (!formats::IsGzipName(f)) {
          part.files.push_back(f);
          continue;
        }
      }
      name = name.ends_with(".tgz") ? name.substr(0, name.size() - 4) + ".tar"
                                    : name.substr(0, name.size() - 3);
      part.files.push_back(scratch.path + "/" + name);
      Status unpacked = Gunzip(f, part.files.back());
      if (fetched != remote_files.end()) {
        std::error_code ec;
        fs::remove(f, ec);
        unpacked = unpacked.WithContext(group[0]);
      }
      SATURATE_RETURN_IF_ERROR(unpacked);
    }
    SATURATE_ASSIGN_OR_RETURN(auto src,
                              formats::Source::Open(part, run ? &schema : nullptr, &group));
    if (!run) {
      schema = src->schema();
      SATURATE_ASSIGN_OR_RETURN(image_field, schema.FieldIndex("image"));
      format::WriterOptions wo;
      wo.metadata["source"] =
          (spec.format == formats::SourceFormat::kWebDataset ? "webdataset:" : "tfrecord:") +
          pattern;
      SATURATE_ASSIGN_OR_RETURN(run, PackRun::Begin(out, schema, wo, 0, options));
    }
    known += src->size();  // the progress total: the samples of the files opened so far
    run->set_items_total(known);
    auto load = [&](size_t i) {
      LoadedSample s;
      s.status = src->Read(i, &s.sample);
      if (!s.status.ok()) return s;
      for (const auto& f : s.sample.fields) s.input_bytes += f.size();
      auto stored = StoredBytes(s.sample.fields[image_field], options);
      if (stored.ok()) {
        s.image = std::move(*stored);
      } else {
        s.status = stored.status().WithContext(src->Describe(i) + ": field 'image'");
      }
      return s;
    };
    auto sink = [&](size_t, LoadedSample s) -> Status {
      if (!s.status.ok()) {
        if (options.skip_bad && s.status.code() == StatusCode::kCorruption) {
          return run->Skip(s.status);
        }
        return s.status;
      }
      Fields fields(s.sample.fields.begin(), s.sample.fields.end());
      fields[image_field] = s.image;
      return run->Add(fields, s.input_bytes);
    };
    SATURATE_RETURN_IF_ERROR(ForEachOrdered<LoadedSample>(src->size(), threads, load, sink));
    src.reset();
    for (const std::string& f : part.files) {
      if (!scratch.path.empty() && f.starts_with(scratch.path + "/")) {
        std::error_code ec;
        fs::remove(f, ec);
      }
    }
  }
  return run->Finish();
}

}  // namespace saturate::pack

namespace saturate::pack {
namespace {

// A stream record whose image fields are checked or re-encoded.
struct LoadedRecord {
  StreamRecord record;
  uint64_t input_bytes = 0;
};

}  // namespace

Result<PackSummary> PackStream(const StreamSpec& spec,
                               const std::function<Result<bool>(StreamRecord*)>& next,
                               const std::string& out, const PackOptions& options) {
  SATURATE_RETURN_IF_ERROR(spec.schema.Validate());
  std::vector<size_t> image_fields;
  for (size_t f = 0; f < spec.schema.fields.size(); ++f) {
    if (spec.schema.fields[f].kind == FieldKind::kImage) image_fields.push_back(f);
  }
  format::WriterOptions wo;
  wo.class_names = spec.class_names;
  wo.metadata["source"] = spec.source;
  SATURATE_ASSIGN_OR_RETURN(auto run,
                            PackRun::Begin(out, spec.schema, wo, spec.records_total, options));
  const int threads = ThreadCount(options.threads);
  // Records are pulled on this thread a window at a time (the reader need not
  // be thread-safe), then their images are checked on `threads` threads.
  const size_t window = static_cast<size_t>(threads) * 16;
  std::vector<StreamRecord> pending;
  bool more = true;
  uint64_t pulled = 0;
  while (more) {
    pending.clear();
    while (pending.size() < window) {
      StreamRecord r;
      SATURATE_ASSIGN_OR_RETURN(more, next(&r));
      if (!more) break;
      ++pulled;
      if (r.status.ok() && r.fields.size() != spec.schema.fields.size()) {
        return Status::Internal(r.name + ": " + std::to_string(r.fields.size()) +
                                " fields for a schema of " +
                                std::to_string(spec.schema.fields.size()));
      }
      pending.push_back(std::move(r));
    }
    if (spec.records_total < pulled) run->set_items_total(pulled);
    auto load = [&](size_t i) {
      LoadedRecord l;
      l.record = std::move(pending[i]);
      if (!l.record.status.ok()) return l;
      for (const auto& f : l.record.fields) l.input_bytes += f.size();
      for (size_t f : image_fields) {
        auto stored = StoredBytes(l.record.fields[f], options);
        if (!stored.ok()) {
          l.record.status = stored.status().WithContext(l.record.name + ": field '" +
                                                        spec.schema.fields[f].name + "'");
          break;
        }
        l.record.fields[f] = std::move(*stored);
      }
      return l;
    };
    auto sink = [&](size_t, LoadedRecord l) -> Status {
      if (!l.record.status.ok()) {
        if (options.skip_bad && l.record.status.code() == StatusCode::kCorruption) {
          return run->Skip(l.record.status);
        }
        return l.record.status;
      }
      Fields fields(l.record.fields.begin(), l.record.fields.end());
      return run->Add(fields, l.input_bytes);
    };
    SATURATE_RETURN_IF_ERROR(ForEachOrdered<LoadedRecord>(pending.size(), threads, load, sink));
  }
  return run->Finish();
}

Result<PackSummary> PackHdf5(const Hdf5Spec& spec, const std::string& out,
                             const PackOptions& options) {
  if (spec.files.empty()) return Status::InvalidArgument("no input files");
  formats::Hdf5Options ho{spec.image_key, spec.label_key};
  // Every file is opened first: the schema and the total come from all of
  // them, and a bad one fails before anything is written.
  std::vector<std::unique_ptr<formats::Hdf5File>> files;
  uint64_t total = 0;
  for (const std::string& path : spec.files) {
    SATURATE_ASSIGN_OR_RETURN(auto f, formats::Hdf5File::Open(path, ho));
    const formats::Hdf5File& first = files.empty() ? *f : *files[0];
    if (f->image_kind() != first.image_kind() || f->pixel_shape() != first.pixel_shape()) {
      return Status::InvalidArgument(path + ": dataset '" + spec.image_key +
                                     "' holds other images than in " + first.path() +
                                     " (encoded vs raw pixels, or another shape)");
    }
    total += f->size();
    files.push_back(std::move(f));
  }
  StreamSpec ss;
  ss.records_total = total;
  ss.source = "hdf5:" + spec.files[0] + (spec.files.size() > 1 ? " ..." : "");
  if (files[0]->image_kind() == formats::Hdf5File::ImageKind::kPixels) {
    ss.schema.fields.push_back(
        FieldSpec{"image", FieldKind::kArray, format::DType::kUInt8, files[0]->pixel_shape()});
  } else {
    ss.schema.fields.push_back(ImageField());
  }
  const bool labels = files[0]->has_labels();
  if (labels) ss.schema.fields.push_back(LabelField());
  // Rows per libhdf5 read: 256, or fewer large raw images (at most ~64 MiB).
  uint64_t pixel_bytes = 1;
  for (int64_t d : files[0]->pixel_shape()) pixel_bytes *= static_cast<uint64_t>(d);
  const uint64_t chunk_rows = std::clamp<uint64_t>((uint64_t{64} << 20) / pixel_bytes, 1, 256);
  size_t file = 0;
  uint64_t row = 0, chunk_begin = 0;
  std::vector<std::vector<std::byte>> chunk;
  auto next = [&](StreamRecord* r) -> Result<bool> {
    while (file < files.size() && row >= files[file]->size()) {
      ++file;
      row = chunk_begin = 0;
      chunk.clear();
    }
    if (file == files.size()) return false;
    const formats::Hdf5File& f = *files[file];
    if (row >= chunk_begin + chunk.size()) {
      chunk_begin = row;
      if (!f.ReadImages(row, std::min(chunk_rows, f.size() - row), &chunk).ok()) {
        // A chunk libhdf5 cannot read: row by row, so that only bad rows are bad.
        Status one = f.ReadImages(row, 1, &chunk);
        if (!one.ok()) {
          chunk.clear();
          r->status = one;
          r->name = f.path() + ": row " + std::to_string(row);
          chunk_begin = ++row;
          return true;
        }
      }
    }
    r->name = f.path() + ": row " + std::to_string(row);
    r->fields.clear();
    r->fields.push_back(std::move(chunk[row - chunk_begin]));
    if (labels) {
      const int64_t label = f.labels()[row];
      const auto* p = reinterpret_cast<const std::byte*>(&label);
      r->fields.emplace_back(p, p + sizeof(label));
    }
    ++row;
    return true;
  };
  return PackStream(ss, next, out, options);
}

}  // namespace saturate::pack
