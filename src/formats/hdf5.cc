#include "formats/hdf5.h"

#if SATURATE_WITH_HDF5
#include <hdf5.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

namespace saturate::formats {
namespace {

// Switches libhdf5's error printing (to stderr) off while it lives; the
// library's messages are read from its error stack instead (LastError).
class QuietErrors {
 public:
  QuietErrors() {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~QuietErrors() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }
  QuietErrors(const QuietErrors&) = delete;
  QuietErrors& operator=(const QuietErrors&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// The most specific message on libhdf5's error stack (then cleared).
std::string LastError() {
  std::string msg;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_DOWNWARD,
      [](unsigned n, const H5E_error2_t* err, void* data) -> herr_t {
        auto* out = static_cast<std::string*>(data);
        if (n == 0 && err->desc != nullptr) *out = err->desc;
        return 0;
      },
      &msg);
  H5Eclear2(H5E_DEFAULT);
  return msg.empty() ? "libhdf5 reports an error" : "libhdf5: " + msg;
}

// Closes an HDF5 identifier of any kind when it goes out of scope.
class Id {
 public:
  explicit Id(hid_t id = -1) : id_(id) {}
  ~Id() { reset(); }
  Id(Id&& other) noexcept : id_(other.id_) { other.id_ = -1; }
  Id& operator=(Id&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = other.id_;
      other.id_ = -1;
    }
    return *this;
  }
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }
  void reset() {
    if (id_ >= 0) H5Idec_ref(id_);
    id_ = -1;
  }

 private:
  hid_t id_;
};

std::vector<hsize_t> Dims(hid_t dataset) {
  Id space(H5Dget_space(dataset));
  if (!space.ok()) return {};
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank <= 0) return {};
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return dims;
}

std::string ShapeText(const std::vector<hsize_t>& dims) {
  std::string s = "(";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(dims[i]);
  }
  if (dims.size() == 1) s += ",";
  return s + ")";
}

// A type as h5py / numpy users know it: uint8, float32, S20, vlen uint8, ...
std::string TypeText(hid_t type) {
  const size_t size = H5Tget_size(type);
  switch (H5Tget_class(type)) {
    case H5T_INTEGER:
      return std::string(H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") +
             std::to_string(size * 8);
    case H5T_FLOAT:
      return "float" + std::to_string(size * 8);
    case H5T_STRING:
      return H5Tis_variable_str(type) > 0 ? "variable-length string" : "S" + std::to_string(size);
    case H5T_OPAQUE:
      return "opaque (V" + std::to_string(size) + ")";
    case H5T_VLEN: {
      Id super(H5Tget_super(type));
      return "vlen " + (super.ok() ? TypeText(super.get()) : std::string("?"));
    }
    case H5T_COMPOUND:
      return "compound";
    case H5T_ENUM:
      return "enum";
    case H5T_ARRAY:
      return "array";
    case H5T_REFERENCE:
      return "reference";
    case H5T_BITFIELD:
      return "bitfield";
    case H5T_TIME:
      return "time";
    default:
      return "unknown type";
  }
}

bool IsUint8(hid_t type) {
  return H5Tget_class(type) == H5T_INTEGER && H5Tget_size(type) == 1 &&
         H5Tget_sign(type) == H5T_SGN_NONE;
}

// "'images' (10,) vlen uint8, 'labels' (10,) int64": what the file holds.
std::string ListDatasets(hid_t file) {
  std::vector<std::string> names;
  H5Lvisit(
      file, H5_INDEX_NAME, H5_ITER_INC,
      [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
        static_cast<std::vector<std::string>*>(data)->push_back(name);
        return 0;
      },
      &names);
  H5Eclear2(H5E_DEFAULT);
  std::string out;
  for (const std::string& name : names) {
    Id d(H5Dopen2(file, name.c_str(), H5P_DEFAULT));
    if (!d.ok()) continue;  // a group
    Id type(H5Dget_type(d.get()));
    if (!out.empty()) out += ", ";
    out += "'" + name + "' " + ShapeText(Dims(d.get())) + " " + TypeText(type.get());
  }
  H5Eclear2(H5E_DEFAULT);
  return out.empty() ? "no datasets" : out;
}

}  // namespace

struct Hdf5File::Handles {
  Id file, images, image_type;
  // How encoded images are stored.
  enum class Storage { kPixels, kVlenBytes, kVlenString, kFixed } storage = Storage::kPixels;
  size_t fixed_size = 0;
  std::vector<hsize_t> dims;
};

Hdf5File::~Hdf5File() {
  if (h_) {
    QuietErrors quiet;
    h_.reset();
  }
}

Result<std::unique_ptr<Hdf5File>> Hdf5File::Open(const std::string& path,
                                                 const Hdf5Options& options) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return Status::NotFound(path + ": no such file");
  }
  QuietErrors quiet;
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    H5Eclear2(H5E_DEFAULT);
    return Status::Corruption(path + ": not an HDF5 file (no HDF5 signature)");
  }
  std::unique_ptr<Hdf5File> f(new Hdf5File());
  f->path_ = path;
  f->options_ = options;
  f->h_ = std::make_unique<Handles>();
  Handles& h = *f->h_;
  h.file = Id(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!h.file.ok()) return Status::Corruption(path + ": cannot open: " + LastError());

  auto open_dataset = [&](const std::string& key, const char* flag) -> Result<Id> {
    // H5Lexists fails (not false) when a group on the way is missing.
    htri_t exists = H5Lexists(h.file.get(), key.c_str(), H5P_DEFAULT);
    Id d;
    if (exists > 0) d = Id(H5Dopen2(h.file.get(), key.c_str(), H5P_DEFAULT));
    if (!d.ok()) {
      H5Eclear2(H5E_DEFAULT);
      return Status::NotFound(path + ": no dataset '" + key + "' (" + flag + "); the file holds " +
                              ListDatasets(h.file.get()));
    }
    return d;
  };

  // Images.
  SATURATE_ASSIGN_OR_RETURN(h.images, open_dataset(options.image_key, "--image-key"));
  h.image_type = Id(H5Dget_type(h.images.get()));
  h.dims = Dims(h.images.get());
  const hid_t type = h.image_type.get();
  const H5T_class_t cls = H5Tget_class(type);
  const std::string what =
      path + ": dataset '" + options.image_key + "' " + ShapeText(h.dims) + " " + TypeText(type);
  if (IsUint8(type) && (h.dims.size() == 3 || h.dims.size() == 4)) {
    f->kind_ = ImageKind::kPixels;
    h.storage = Handles::Storage::kPixels;
    for (size_t i = 1; i < h.dims.size(); ++i) {
      f->pixel_shape_.push_back(static_cast<int64_t>(h.dims[i]));
    }
  } else if (h.dims.size() == 1 && (cls == H5T_VLEN || cls == H5T_STRING || cls == H5T_OPAQUE)) {
    f->kind_ = ImageKind::kEncoded;
    if (cls == H5T_VLEN) {
      Id super(H5Tget_super(type));
      if (!super.ok() || !(IsUint8(super.get()) || (H5Tget_class(super.get()) == H5T_INTEGER &&
                                                    H5Tget_size(super.get()) == 1))) {
        return Status::Corruption(what + ": expected encoded images as vlen uint8");
      }
      h.storage = Handles::Storage::kVlenBytes;
    } else if (cls == H5T_STRING && H5Tis_variable_str(type) > 0) {
      h.storage = Handles::Storage::kVlenString;
    } else {
      h.storage = Handles::Storage::kFixed;
      h.fixed_size = H5Tget_size(type);
    }
  } else {
    return Status::Corruption(what +
                              ": expected encoded images, shape (N,) of vlen uint8, bytes or "
                              "opaque, or raw pixels, uint8 of shape (N, H, W) or (N, H, W, C)");
  }
  f->samples_ = h.dims[0];

  // Labels.
  if (!options.label_key.empty()) {
    f->has_label_key_ = true;
    SATURATE_ASSIGN_OR_RETURN(Id labels,
                              open_dataset(options.label_key, "--label-key, '' for none"));
    Id ltype(H5Dget_type(labels.get()));
    const std::vector<hsize_t> ldims = Dims(labels.get());
    const std::string lwhat = path + ": dataset '" + options.label_key + "' " + ShapeText(ldims) +
                              " " + TypeText(ltype.get());
    if (H5Tget_class(ltype.get()) != H5T_INTEGER ||
        !(ldims.size() == 1 || (ldims.size() == 2 && ldims[1] == 1))) {
      return Status::Corruption(lwhat + ": expected integer labels of shape (N,) or (N, 1)");
    }
    if (ldims[0] != f->samples_) {
      return Status::Corruption(lwhat + ": " + std::to_string(ldims[0]) + " labels for " +
                                std::to_string(f->samples_) + " images in '" + options.image_key +
                                "'");
    }
    f->labels_.resize(f->samples_);
    if (f->samples_ > 0 && H5Dread(labels.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                                   f->labels_.data()) < 0) {
      return Status::Corruption(lwhat + ": cannot read: " + LastError());
    }
  }
  return f;
}

Status Hdf5File::ReadImages(uint64_t begin, uint64_t count,
                            std::vector<std::vector<std::byte>>* images) const {
  images->clear();
  if (count == 0) return Status::OK();
  if (begin + count > samples_) {
    return Status::InvalidArgument(path_ + ": rows " + std::to_string(begin) + "+" +
                                   std::to_string(count) + " past " + std::to_string(samples_));
  }
  QuietErrors quiet;
  const Handles& h = *h_;
  const std::string where =
      path_ + ": dataset '" + options_.image_key + "' " +
      (count == 1 ? "row " + std::to_string(begin)
                  : "rows " + std::to_string(begin) + ".." + std::to_string(begin + count - 1));
  Id file_space(H5Dget_space(h.images.get()));
  std::vector<hsize_t> start(h.dims.size(), 0), extent = h.dims;
  start[0] = begin;
  extent[0] = count;
  if (!file_space.ok() || H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(),
                                              nullptr, extent.data(), nullptr) < 0) {
    return Status::Corruption(where + ": " + LastError());
  }
  Id mem_space(H5Screate_simple(static_cast<int>(extent.size()), extent.data(), nullptr));
  auto read = [&](hid_t mem_type, void* buf) -> Status {
    if (H5Dread(h.images.get(), mem_type, mem_space.get(), file_space.get(), H5P_DEFAULT, buf) <
        0) {
      return Status::Corruption(where + ": cannot read: " + LastError());
    }
    return Status::OK();
  };
  images->resize(count);
  switch (h.storage) {
    case Handles::Storage::kPixels: {
      size_t per = 1;
      for (int64_t d : pixel_shape_) per *= static_cast<size_t>(d);
      std::vector<std::byte> all(per * count);
      SATURATE_RETURN_IF_ERROR(read(H5T_NATIVE_UCHAR, all.data()));
      for (uint64_t i = 0; i < count; ++i) {
        (*images)[i].assign(all.begin() + static_cast<ptrdiff_t>(i * per),
                            all.begin() + static_cast<ptrdiff_t>((i + 1) * per));
      }
      break;
    }
    case Handles::Storage::kVlenBytes: {
      Id mem_type(H5Tvlen_create(H5T_NATIVE_UCHAR));
      std::vector<hvl_t> buf(count);
      SATURATE_RETURN_IF_ERROR(read(mem_type.get(), buf.data()));
      for (uint64_t i = 0; i < count; ++i) {
        const auto* p = static_cast<const std::byte*>(buf[i].p);
        (*images)[i].assign(p, p + buf[i].len);
      }
      H5Dvlen_reclaim(mem_type.get(), mem_space.get(), H5P_DEFAULT, buf.data());
      break;
    }
    case Handles::Storage::kVlenString: {
      Id mem_type(H5Tcopy(H5T_C_S1));
      H5Tset_size(mem_type.get(), H5T_VARIABLE);
      std::vector<char*> buf(count, nullptr);
      SATURATE_RETURN_IF_ERROR(read(mem_type.get(), buf.data()));
      for (uint64_t i = 0; i < count; ++i) {
        const auto* p = reinterpret_cast<const std::byte*>(buf[i]);
        if (p != nullptr) (*images)[i].assign(p, p + std::strlen(buf[i]));
      }
      H5Dvlen_reclaim(mem_type.get(), mem_space.get(), H5P_DEFAULT, buf.data());
      break;
    }
    case Handles::Storage::kFixed: {
      // Fixed-size strings and opaque values of varying images are padded
      // with NULs to the longest; JPEG and PNG streams never end in one.
      std::vector<std::byte> all(h.fixed_size * count);
      SATURATE_RETURN_IF_ERROR(read(h.image_type.get(), all.data()));
      for (uint64_t i = 0; i < count; ++i) {
        const std::byte* p = all.data() + i * h.fixed_size;
        size_t n = h.fixed_size;
        while (n > 0 && p[n - 1] == std::byte{0}) --n;
        (*images)[i].assign(p, p + n);
      }
      break;
    }
  }
  return Status::OK();
}

}  // namespace saturate::formats

#else  // a build without libhdf5 (SATURATE_WITH_HDF5=OFF)

namespace saturate::formats {

struct Hdf5File::Handles {};
Hdf5File::~Hdf5File() = default;

Result<std::unique_ptr<Hdf5File>> Hdf5File::Open(const std::string& path, const Hdf5Options&) {
  return Status::Unavailable(path +
                             ": saturate was built without libhdf5 (SATURATE_WITH_HDF5=OFF); "
                             "rebuild with -DSATURATE_WITH_HDF5=ON to pack HDF5 files");
}

Status Hdf5File::ReadImages(uint64_t, uint64_t, std::vector<std::vector<std::byte>>*) const {
  return Status::Unavailable(path_ + ": saturate was built without libhdf5");
}

}  // namespace saturate::formats

#endif  // SATURATE_WITH_HDF5
