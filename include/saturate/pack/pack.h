// pack: turns images, tables and IDX arrays into a saturate dataset, once,
// offline, so training reads memory-mapped records instead of decoding
// folders of files ("preprocess offline into a fast format").
//
// Every Pack* function writes into `OUT.partial` next to the output and
// renames it to `OUT` only after the manifest is written, so a failed or
// killed pack never leaves anything that looks like a dataset at OUT. With
// `force`, an existing dataset at OUT is replaced only after the new one is
// complete; a directory that is not a saturate dataset is never replaced.
//
// Thread-safety: each call is independent; work is spread over
// `options.threads` threads internally and the progress callback is called
// from the calling thread only.
#ifndef SATURATE_PACK_PACK_H_
#define SATURATE_PACK_PACK_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "saturate/base/status.h"
#include "saturate/format/schema.h"

namespace saturate::formats {
struct SourceOptions;
}

namespace saturate::pack {

struct PackProgress {
  uint64_t items_done = 0;
  uint64_t items_total = 0;
  uint64_t bytes_written = 0;
};

struct PackOptions {
  uint64_t shard_bytes = uint64_t{256} << 20;
  int threads = 0;            // 0: one per core
  bool force = false;         // replace an existing dataset at OUT
  bool skip_bad = false;      // skip unreadable/corrupt images (counted) instead of failing
  int reencode_max_side = 0;  // > 0: re-encode images as JPEG, longer side at most this
  int reencode_quality = 90;  // JPEG quality when re-encoding
  // JPEGs are stored losslessly rewritten with optimized Huffman tables and
  // restart markers (image::AddJpegRestartMarkers): the same pixels, and the
  // loader then Huffman-decodes only the MCUs around each crop. true keeps
  // their bytes.
  bool keep_jpeg_bytes = false;
  // Where the rewrite puts restart markers: -1 after every MCU (the loader
  // cuts rows and columns), N > 0 after every N MCU rows (it cuts rows, N at
  // a time), 0 none (no cut). The loader reads every choice, and datasets
  // packed by earlier versions (every MCU); docs/benchmarks.md, "Restart
  // interval (issue 26)", has the measurements behind the default.
  int restart_rows = -1;
  std::function<void(const PackProgress&)> progress;
  // s3:// inputs (PackSource): the S3 endpoint; empty: AWS_ENDPOINT_URL, else AWS.
  std::string endpoint;
};

struct PackSummary {
  uint64_t records = 0;
  uint64_t bytes = 0;  // dataset bytes on disk
  uint64_t input_bytes = 0;
  uint64_t shards = 0;
  uint64_t skipped = 0;                 // bad inputs skipped under skip_bad
  std::vector<std::string> skip_notes;  // the first few skipped inputs and why
  uint64_t ignored_files = 0;           // files that are not JPEG/PNG (ImageFolder)
  double seconds = 0;
};

// torchvision ImageFolder layout: ROOT/<class>/**/<image>.{jpg,jpeg,png}.
// Sorted class folder names become label ids; schema {image, label:int64}.
Result<PackSummary> PackImageFolder(const std::string& root, const std::string& out,
                                    const PackOptions& options);

// A CSV or JSON Lines table with one row per image. `path_column` holds the
// image path (relative to the table's folder); `label_column` (optional, ""
// for none) holds an integer label or a class name. Other columns are kept as
// fields: integers as int64, reals as float32, text as bytes.
struct TableSpec {
  std::string path_column = "path";
  std::string label_column = "label";
};
Result<PackSummary> PackTable(const std::string& table_path, const TableSpec& spec,
                              const std::string& out, const PackOptions& options);

// MNIST-style IDX files (gzip'd or plain): images N×H×W uint8 become a
// fixed-shape uint8[H,W] field "image", labels an int64 field "label".
struct IdxSpec {
  std::string images_path;
  std::string labels_path;
  std::vector<std::string> class_names;  // optional; must cover every label
};
Result<PackSummary> PackIdx(const IdxSpec& spec, const std::string& out,
                            const PackOptions& options);

// WebDataset tar shards (.tar, .tar.gz) or TFRecord files of tf.Example
// (.tfrecord, gzip'd too), named by patterns as formats::Source takes them
// (`shards-{000..099}.tar`, `train-*.tfrecord`; several patterns, or the
// files a shell expanded, are read in order and must be of one format). Fields as the source names
// them (docs/formats.md); images are checked and stored as for PackImageFolder.
// gzip'd files are unpacked one at a time into `OUT.unpack/` (removed after).
// Patterns may name objects (s3://bucket/dir/shards-{000..099}.tar, or a
// glob in the last part, matched against the location's listing;
// http(s):// without globs): each is fetched into `OUT.unpack/` when its turn
// comes and removed once packed, and errors name it by its URL.
// A bad sample (missing image, bad checksum, wrong field type) fails the pack
// naming file, member or record and field, or is skipped under skip_bad.
Result<PackSummary> PackSource(const std::vector<std::string>& patterns,
                               const formats::SourceOptions& source, const std::string& out,
                               const PackOptions& options);

// Samples handed over one at a time, by a reader saturate does not own the
// format of: HDF5 files here (PackHdf5), Parquet through the Python binding
// (pyarrow reads, saturate._parquet). `next` fills one record and returns
// true, false at the end, or an error that stops the pack. Image fields
// (kind kImage) are checked, re-encoded and restart-marked as for
// PackImageFolder, on `options.threads` threads; a record whose `status` is
// not OK, or whose image does not decode, fails the pack naming `name` and
// the field, or is skipped under skip_bad when it is a Corruption.
struct StreamRecord {
  std::vector<std::vector<std::byte>> fields;  // one payload per schema field, in order
  std::string name;                            // "FILE: row 12", for errors and skip notes
  Status status;                               // not OK: this sample is bad
};
struct StreamSpec {
  format::Schema schema;
  std::vector<std::string> class_names;
  std::string source;          // the manifest's "source" metadata, e.g. "hdf5:a.h5"
  uint64_t records_total = 0;  // for the progress bar; 0 when unknown
};
Result<PackSummary> PackStream(const StreamSpec& spec,
                               const std::function<Result<bool>(StreamRecord*)>& next,
                               const std::string& out, const PackOptions& options);

// HDF5 files (formats/hdf5.h): a dataset of encoded images (variable-length
// uint8, byte strings or opaque values, one per sample) becomes the image
// field `image`, or one of raw uint8 pixels (N,H,W) or (N,H,W,C) a uint8
// array field `image` (as PackIdx); an integer dataset of N labels the int64
// field `label`. Several files are packed in order and must agree.
struct Hdf5Spec {
  std::vector<std::string> files;
  std::string image_key = "images";  // the images' dataset (a path in the file)
  std::string label_key = "labels";  // the labels' dataset ("" for none)
};
Result<PackSummary> PackHdf5(const Hdf5Spec& spec, const std::string& out,
                             const PackOptions& options);

}  // namespace saturate::pack

#endif  // SATURATE_PACK_PACK_H_
