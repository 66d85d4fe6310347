// formats::Hdf5File: the samples of one HDF5 file, read with libhdf5's C API,
// for `saturate pack hdf5` (pack::PackHdf5; docs/formats.md).
//
// A file holds an image dataset of N samples, either
//   - encoded images (JPEG/PNG bytes), shape (N,): variable-length uint8
//     (h5py's `vlen_dtype(np.uint8)`), byte strings (fixed `S<n>`, NUL padding
//     dropped, or variable-length) or opaque values (`np.void`); or
//   - raw pixels, uint8 of shape (N,H,W) or (N,H,W,C);
// and optionally an integer dataset of N labels, shape (N,) or (N,1). Any
// other shape or element type fails Open() naming file, dataset, shape and type.
//
// libhdf5's own error printing is switched off around every call; its
// messages go into the returned Status instead. No fuzz target: libhdf5 is
// the parser, and this reader only checks what it reports.
//
// Ownership: an Hdf5File owns its open file and dataset handles.
// Thread-safety: none; use one Hdf5File from one thread (Debian's libhdf5 is
// built thread-safe, but behind one global lock, so reading from many threads
// would not be faster).
#ifndef SATURATE_FORMATS_HDF5_H_
#define SATURATE_FORMATS_HDF5_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "saturate/base/status.h"

namespace saturate::formats {

struct Hdf5Options {
  std::string image_key = "images";  // the images' dataset, a path in the file
  std::string label_key = "labels";  // the labels' dataset; "" for none
};

class Hdf5File {
 public:
  enum class ImageKind { kEncoded, kPixels };

  // NotFound when the file or a named dataset is missing (the message lists
  // the file's datasets); Corruption when a dataset has an unexpected shape
  // or type, or the label count differs from the image count.
  static Result<std::unique_ptr<Hdf5File>> Open(const std::string& path,
                                                const Hdf5Options& options);
  ~Hdf5File();
  Hdf5File(const Hdf5File&) = delete;
  Hdf5File& operator=(const Hdf5File&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size() const { return samples_; }
  ImageKind image_kind() const { return kind_; }
  // kPixels: {H, W} or {H, W, C}.
  const std::vector<int64_t>& pixel_shape() const { return pixel_shape_; }
  bool has_labels() const { return has_label_key_; }
  // Every label, read at Open().
  const std::vector<int64_t>& labels() const { return labels_; }

  // Samples [begin, begin + count): one byte vector per image (encoded bytes,
  // or H*W[*C] pixels). A read libhdf5 refuses is a Corruption naming file,
  // dataset and rows.
  Status ReadImages(uint64_t begin, uint64_t count,
                    std::vector<std::vector<std::byte>>* images) const;

 private:
  struct Handles;
  Hdf5File() = default;

  std::string path_;
  Hdf5Options options_;
  std::unique_ptr<Handles> h_;
  ImageKind kind_ = ImageKind::kEncoded;
  uint64_t samples_ = 0;
  std::vector<int64_t> pixel_shape_;
  std::vector<int64_t> labels_;
  bool has_label_key_ = false;
};

}  // namespace saturate::formats

#endif  // SATURATE_FORMATS_HDF5_H_
