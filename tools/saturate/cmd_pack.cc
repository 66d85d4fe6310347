// saturate pack folder|table|idx|webdataset|tfrecord|hdf5: build a dataset from images, a
// table, IDX files, WebDataset tar shards, TFRecord files or HDF5 files (also as `saturate pack
// SOURCE... OUT`). Parquet is packed by the Python package's `saturate` command (pyarrow reads
// it); this tool says so.
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "formats/pattern.h"
#include "remote_flags.h"
#include "saturate/formats/source.h"
#include "saturate/pack/pack.h"

namespace saturate::cli {
namespace {

struct PackFlags {
  std::string shard_size = "256MiB";
  int threads = 0;
  bool force = false;
  bool skip_bad = false;
  int reencode_max_side = 0;
  int reencode_quality = 90;
  bool keep_jpeg_bytes = false;
  int restart_rows = -1;
  bool json = false;
  bool quiet = false;
  remote::RemoteOptions remote;  // OUT as s3://bucket/prefix
  std::string multipart_bytes = "64MiB";
};

void AddCommonFlags(CLI::App* cmd, PackFlags* f) {
  cmd->add_option("--shard-size", f->shard_size,
                  "Roll to a new shard past this size (B, KiB, MiB, GiB)")
      ->capture_default_str();
  cmd->add_option("-j,--threads", f->threads, "Decode/validate threads (0: one per core)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_flag("--force", f->force,
                "Replace an existing dataset at OUT (only once the new one is complete)");
  cmd->add_flag("--skip-bad", f->skip_bad,
                "Skip corrupt images (counted in the summary) instead of failing");
  cmd->add_option("--reencode-max-side", f->reencode_max_side,
                  "Re-encode images as JPEG with the longer side at most this (0: store as given)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--reencode-quality", f->reencode_quality, "JPEG quality when re-encoding")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  cmd->add_flag("--keep-jpeg-bytes", f->keep_jpeg_bytes,
                "Store JPEGs byte for byte (default: losslessly rewritten with a restart marker "
                "per MCU, 4-8% larger, so that the loader decodes only the MCUs around each "
                "crop)");
  cmd->add_option("--restart-rows", f->restart_rows,
                  "JPEG restart markers when rewriting: mcu (after every MCU), N (after every N "
                  "MCU rows) or 0 (none)")
      ->transform(CLI::Transformer({{"mcu", "-1"}}))
      ->check(CLI::Range(-1, 65535))
      ->option_text("mcu|N=mcu");
  cmd->add_flag("--json", f->json, "Print the summary as JSON");
  cmd->add_flag("-q,--quiet", f->quiet, "No progress bar");
  AddRemoteFlags(cmd, &f->remote, /*cache=*/false);
  cmd->add_option("--multipart-bytes", f->multipart_bytes,
                  "OUT as s3://: upload shards larger than this as multipart uploads")
      ->capture_default_str();
}

void PrintSummary(const std::string& out, const pack::PackSummary& s, bool json) {
  if (json) {
    nlohmann::json j = {{"dataset", out},
                        {"records", s.records},
                        {"bytes", s.bytes},
                        {"input_bytes", s.input_bytes},
                        {"shards", s.shards},
                        {"skipped", s.skipped},
                        {"skip_notes", s.skip_notes},
                        {"ignored_files", s.ignored_files},
                        {"seconds", s.seconds}};
    std::cout << j.dump(2) << "\n";
    return;
  }
  double rate = s.seconds > 0 ? static_cast<double>(s.records) / s.seconds : 0;
  std::cout << "packed " << s.records << " records into " << out << ": " << FormatBytes(s.bytes)
            << " in " << s.shards << " shard(s), " << FormatDuration(s.seconds) << " ("
            << static_cast<uint64_t>(rate) << " records/s)";
  if (s.skipped) std::cout << ", skipped " << s.skipped << " bad input(s)";
  if (s.ignored_files) std::cout << ", ignored " << s.ignored_files << " non-image file(s)";
  std::cout << "\n";
  for (const auto& note : s.skip_notes) std::cout << "  skipped: " << note << "\n";
}

// Runs one pack function with options from `flags`, prints, returns the exit code.
template <typename PackFn>
int RunPack(const std::string& out, const PackFlags& flags, PackFn pack_fn) {
  auto shard_bytes = ParseSize(flags.shard_size);
  if (!shard_bytes.ok())
    return ReportError("pack", shard_bytes.status().WithContext("--shard-size"));
  pack::PackOptions options;
  options.shard_bytes = *shard_bytes;
  options.threads = flags.threads;
  options.force = flags.force;
  options.skip_bad = flags.skip_bad;
  options.reencode_max_side = flags.reencode_max_side;
  options.reencode_quality = flags.reencode_quality;
  options.keep_jpeg_bytes = flags.keep_jpeg_bytes;
  options.restart_rows = flags.restart_rows;
  options.endpoint = flags.remote.endpoint;
  ProgressBar bar("pack", "rec");
  if (!flags.quiet) {
    options.progress = [&](const pack::PackProgress& p) {
      bar.Update(p.items_done, p.items_total, p.bytes_written);
    };
  }
  // OUT as s3://bucket/prefix: pack into a local staging directory, then
  // upload the shards and, last, the manifest (remote::UploadDataset).
  std::string local = out, staging;
  auto multipart = ParseSize(flags.multipart_bytes);
  if (!multipart.ok()) {
    return ReportError("pack", multipart.status().WithContext("--multipart-bytes"));
  }
  if (remote::IsRemoteUrl(out)) {
    std::string tmpl = (std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
                       std::string("/saturate-pack-XXXXXX");
    if (::mkdtemp(tmpl.data()) == nullptr) {
      return ReportError("pack", Status::FromErrno("staging directory " + tmpl, errno));
    }
    staging = tmpl;
    local = staging + "/dataset";
  }
  Result<pack::PackSummary> summary = pack_fn(options, local);
  bar.Finish();
  if (summary.ok() && !staging.empty()) {
    Status up = remote::UploadDataset(
        local, out, flags.force, remote::UploadStoreOptions(flags.remote.endpoint, *multipart));
    if (!up.ok()) summary = up.WithContext("uploading to " + out);
  }
  if (!staging.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(staging, ec);
  }
  if (!summary.ok()) return ReportError("pack", summary.status());
  PrintSummary(out, *summary, flags.json);
  return kExitOk;
}

std::vector<std::string> SplitCommas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

}  // namespace

// WebDataset / TFRecord inputs: ARGS is SOURCE... OUT (patterns, or the files a
// shell expanded); `prefix` ("webdataset:", "tfrecord:") forces the format.
struct SourceArgs {
  PackFlags flags;
  std::vector<std::string> args;
  formats::SourceOptions source;
};

void AddSourceFlags(CLI::App* cmd, SourceArgs* a, bool keys) {
  cmd->add_option("ARGS", a->args,
                  "SOURCE... OUT: input patterns or files (shards-{000..099}.tar, "
                  "'train-*.tfrecord', .gz too, in a bucket too: "
                  "'s3://bucket/dir/shards-*.tar'; data.h5), then the output dataset directory "
                  "(or s3://bucket/prefix)");
  if (keys) {
    cmd->add_option("--image-key", a->source.image_key,
                    "TFRecord: the image bytes feature (HDF5: the images' dataset, default "
                    "images)")
        ->capture_default_str();
    cmd->add_option("--label-key", a->source.label_key,
                    "TFRecord: the int64 label feature ('' for none) (HDF5: the labels' dataset, "
                    "default labels)")
        ->capture_default_str();
  }
  AddCommonFlags(cmd, &a->flags);
}

bool HasSuffix(const std::string& path, std::initializer_list<std::string_view> suffixes) {
  std::string lower = path;
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  return std::any_of(suffixes.begin(), suffixes.end(),
                     [&](std::string_view s) { return lower.ends_with(s); });
}
bool IsHdf5Name(const std::string& p) { return HasSuffix(p, {".h5", ".hdf5", ".he5"}); }
bool IsParquetName(const std::string& p) { return HasSuffix(p, {".parquet", ".parq"}); }

// This binary has no Parquet reader (Arrow C++ is not packaged where it is
// built); the pip package's `saturate` command packs Parquet with pyarrow.
int ParquetHint(const std::string& file) {
  return ReportError(
      "pack", Status::InvalidArgument(
                  file + ": Parquet is packed by the Python package, which reads it with pyarrow: "
                         "run `python -m saturate pack ...` (the pip-installed `saturate` command "
                         "does) after `pip install 'saturate[parquet]'`"));
}

// HDF5 files: ARGS is FILE... OUT (patterns expanded by saturate too).
int RunHdf5Pack(const SourceArgs& a, std::string image_key, std::string label_key) {
  if (a.args.size() < 2) {
    return ReportError("pack", Status::InvalidArgument("give FILE... and OUT"));
  }
  pack::Hdf5Spec spec;
  spec.image_key = std::move(image_key);
  spec.label_key = std::move(label_key);
  for (auto it = a.args.begin(); it != a.args.end() - 1; ++it) {
    auto files = formats::ExpandPattern(*it);
    if (!files.ok()) return ReportError("pack", files.status());
    spec.files.insert(spec.files.end(), files->begin(), files->end());
  }
  return RunPack(a.args.back(), a.flags, [&](const pack::PackOptions& o, const std::string& out) {
    return pack::PackHdf5(spec, out, o);
  });
}

int RunSourcePack(const SourceArgs& a, const std::string& prefix) {
  if (a.args.size() < 2) {
    return ReportError("pack", Status::InvalidArgument("give SOURCE... and OUT"));
  }
  std::vector<std::string> patterns(a.args.begin(), a.args.end() - 1);
  if (prefix.empty()) {
    for (const std::string& p : patterns) {
      if (IsParquetName(p)) return ParquetHint(p);
    }
    if (std::all_of(patterns.begin(), patterns.end(), IsHdf5Name)) {
      // The TFRecord defaults of --image-key / --label-key mean HDF5's own.
      const formats::SourceOptions tf;
      return RunHdf5Pack(a, a.source.image_key == tf.image_key ? "images" : a.source.image_key,
                         a.source.label_key == tf.label_key ? "labels" : a.source.label_key);
    }
  }
  for (std::string& p : patterns) {
    if (!prefix.empty() && !p.starts_with(prefix)) p = prefix + p;
    if (prefix.empty() && !formats::IsSourcePattern(p)) {
      return ReportError(
          "pack", Status::InvalidArgument(
                      p + ": not an ImageFolder directory, WebDataset (.tar, .tar.gz) or TFRecord "
                          "(.tfrecord[.gz]) name; use pack folder|table|idx|webdataset|tfrecord"));
    }
  }
  return RunPack(a.args.back(), a.flags, [&](const pack::PackOptions& o, const std::string& out) {
    return pack::PackSource(patterns, a.source, out, o);
  });
}

void RegisterPack(CLI::App& app, int* exit_code) {
  CLI::App* pack = app.add_subcommand(
      "pack",
      "Pack images, a CSV/JSONL table, IDX files, WebDataset tar shards, TFRecord or HDF5 files "
      "into a saturate dataset (Parquet: the Python package's `saturate pack`)");
  pack->require_subcommand(0, 1);

  // Flag storage, kept alive by the callbacks that the App owns.
  struct State {
    PackFlags folder_flags, table_flags, idx_flags;
    std::string folder_in, folder_out, table_in, table_out, idx_images, idx_labels, idx_out,
        idx_classes;
    pack::TableSpec table_spec;
    SourceArgs bare, wds, tf, h5, parquet;
  };
  auto st = std::make_shared<State>();

  // `saturate pack SOURCE... OUT`: the format from the names.
  AddSourceFlags(pack, &st->bare, /*keys=*/true);
  pack->callback([pack, exit_code, st] {
    if (!pack->get_subcommands().empty()) return;
    if (st->bare.args.empty()) {
      *exit_code = ReportError(
          "pack", Status::InvalidArgument("give a subcommand (folder, table, idx, webdataset, "
                                          "tfrecord, hdf5) or SOURCE... OUT; see --help"));
      return;
    }
    // `saturate pack ROOT OUT` with an ImageFolder directory: what a new user tries first.
    if (st->bare.args.size() == 2 && std::filesystem::is_directory(st->bare.args[0]) &&
        !formats::IsSourcePattern(st->bare.args[0])) {
      *exit_code = RunPack(st->bare.args[1], st->bare.flags,
                           [&st](const pack::PackOptions& o, const std::string& out) {
                             return pack::PackImageFolder(st->bare.args[0], out, o);
                           });
      return;
    }
    *exit_code = RunSourcePack(st->bare, "");
  });

  CLI::App* wds = pack->add_subcommand(
      "webdataset",
      "From WebDataset tar shards ({key}.jpg|png|cls|json|txt members; .tar or .tar.gz; brace "
      "ranges and globs)");
  AddSourceFlags(wds, &st->wds, /*keys=*/false);
  wds->callback([exit_code, st] { *exit_code = RunSourcePack(st->wds, "webdataset:"); });

  CLI::App* tf = pack->add_subcommand(
      "tfrecord",
      "From TFRecord files of tf.Example (CRC-checked; .gz too), e.g. ImageNet's "
      "train-00000-of-01024");
  AddSourceFlags(tf, &st->tf, /*keys=*/true);
  tf->callback([exit_code, st] { *exit_code = RunSourcePack(st->tf, "tfrecord:"); });

  CLI::App* h5 = pack->add_subcommand(
      "hdf5",
      "From HDF5 files (.h5, .hdf5): a dataset of encoded images (vlen uint8, bytes, opaque) or "
      "of raw uint8 pixels (N,H,W[,C]), and a dataset of integer labels");
  h5->add_option("ARGS", st->h5.args,
                 "FILE... OUT: input files or patterns ('train-*.h5'), then the output dataset "
                 "directory");
  st->h5.source.image_key = "images";
  st->h5.source.label_key = "labels";
  h5->add_option("--image-key", st->h5.source.image_key,
                 "The images' dataset (a path in the file, e.g. train/images)")
      ->capture_default_str();
  h5->add_option("--label-key", st->h5.source.label_key,
                 "The integer labels' dataset ('' for none)")
      ->capture_default_str();
  AddCommonFlags(h5, &st->h5.flags);
  h5->callback([exit_code, st] {
    *exit_code = RunHdf5Pack(st->h5, st->h5.source.image_key, st->h5.source.label_key);
  });

  CLI::App* parquet = pack->add_subcommand(
      "parquet",
      "From Parquet files (Hugging Face datasets): run by the Python package's `saturate` "
      "command, which reads them with pyarrow (pip install 'saturate[parquet]')");
  parquet->allow_extras();
  parquet->callback([parquet, exit_code] {
    auto rest = parquet->remaining();
    *exit_code = ParquetHint(rest.empty() ? std::string("parquet") : rest.front());
  });

  CLI::App* folder = pack->add_subcommand(
      "folder", "From a torchvision ImageFolder tree: ROOT/<class>/<image>.{jpg,png}");
  folder->add_option("ROOT", st->folder_in, "Input folder")->required();
  folder->add_option("OUT", st->folder_out, "Output dataset directory, or s3://bucket/prefix")
      ->required();
  AddCommonFlags(folder, &st->folder_flags);
  folder->callback([exit_code, st] {
    *exit_code = RunPack(st->folder_out, st->folder_flags,
                         [&st](const pack::PackOptions& o, const std::string& out) {
                           return pack::PackImageFolder(st->folder_in, out, o);
                         });
  });

  CLI::App* table = pack->add_subcommand(
      "table",
      "From a CSV or JSON Lines file: one row per image, a path column and a label column");
  table->add_option("TABLE", st->table_in, "Input .csv, .jsonl or .ndjson file")->required();
  table->add_option("OUT", st->table_out, "Output dataset directory, or s3://bucket/prefix")
      ->required();
  table
      ->add_option("--path-column", st->table_spec.path_column,
                   "Column with image paths (relative to TABLE's folder)")
      ->capture_default_str();
  table
      ->add_option("--label-column", st->table_spec.label_column,
                   "Column with integer labels or class names ('' for none)")
      ->capture_default_str();
  AddCommonFlags(table, &st->table_flags);
  table->callback([exit_code, st] {
    *exit_code = RunPack(st->table_out, st->table_flags,
                         [&st](const pack::PackOptions& o, const std::string& out) {
                           return pack::PackTable(st->table_in, st->table_spec, out, o);
                         });
  });

  CLI::App* idx = pack->add_subcommand(
      "idx", "From MNIST/Fashion-MNIST IDX files (plain or .gz): uint8[H,W] images + int64 labels");
  idx->add_option("IMAGES", st->idx_images, "images IDX file (e.g. train-images-idx3-ubyte.gz)")
      ->required();
  idx->add_option("LABELS", st->idx_labels, "labels IDX file (e.g. train-labels-idx1-ubyte.gz)")
      ->required();
  idx->add_option("OUT", st->idx_out, "Output dataset directory, or s3://bucket/prefix")
      ->required();
  idx->add_option("--class-names", st->idx_classes, "Comma-separated class names, label 0 first");
  AddCommonFlags(idx, &st->idx_flags);
  idx->callback([exit_code, st] {
    *exit_code = RunPack(st->idx_out, st->idx_flags,
                         [&st](const pack::PackOptions& o, const std::string& out) {
                           pack::IdxSpec spec{st->idx_images, st->idx_labels, {}};
                           if (!st->idx_classes.empty())
                             spec.class_names = SplitCommas(st->idx_classes);
                           return pack::PackIdx(spec, out, o);
                         });
  });
}

}  // namespace saturate::cli
