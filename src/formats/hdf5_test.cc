#include "formats/hdf5.h"

#include <hdf5.h>

#include <string>

#include "base/testing.h"
#include "formats/test_util.h"

namespace saturate::formats {
namespace {

using ::saturate::testing::HasError;
using ::saturate::testing::TempDir;

// An HDF5 file written with libhdf5, as h5py writes one.
class H5Writer {
 public:
  explicit H5Writer(const std::string& path)
      : file_(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT)) {
    EXPECT_GE(file_, 0);
  }
  ~H5Writer() { H5Fclose(file_); }

  // A dataset `name` (groups on the way are created) of `type` and `dims`.
  void Write(const std::string& name, hid_t type, const std::vector<hsize_t>& dims,
             const void* data) {
    hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t d = H5Dcreate2(file_, name.c_str(), type, space, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(d, 0) << name;
    EXPECT_GE(H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), 0);
    H5Dclose(d);
    H5Pclose(lcpl);
    H5Sclose(space);
  }
  void WriteVlen(const std::string& name, const std::vector<std::string>& items) {
    std::vector<hvl_t> vl;
    for (const std::string& s : items) vl.push_back({s.size(), const_cast<char*>(s.data())});
    hid_t type = H5Tvlen_create(H5T_NATIVE_UCHAR);
    Write(name, type, {items.size()}, vl.data());
    H5Tclose(type);
  }
  template <typename T>
  void WriteInts(const std::string& name, hid_t type, const std::vector<T>& v,
                 std::vector<hsize_t> dims = {}) {
    if (dims.empty()) dims = {v.size()};
    Write(name, type, dims, v.data());
  }

 private:
  hid_t file_;
};

std::vector<std::string> Strs(const std::vector<std::vector<std::byte>>& v) {
  std::vector<std::string> out;
  for (const auto& b : v) out.push_back(Str(b));
  return out;
}

TEST(Hdf5, VlenBytesAndLabels) {
  TempDir dir;
  const std::string path = dir.Join("a.h5");
  const std::vector<std::string> images = {std::string("\xff\xd8jpeg\0one", 11), "", "png two"};
  {
    H5Writer w(path);
    w.WriteVlen("images", images);
    w.WriteInts<int32_t>("labels", H5T_NATIVE_INT32, {7, -1, 3});
  }
  SATURATE_ASSERT_OK_AND_ASSIGN(auto f, Hdf5File::Open(path, {}));
  EXPECT_EQ(f->size(), 3u);
  EXPECT_EQ(f->image_kind(), Hdf5File::ImageKind::kEncoded);
  ASSERT_TRUE(f->has_labels());
  EXPECT_EQ(f->labels(), (std::vector<int64_t>{7, -1, 3}));
  std::vector<std::vector<std::byte>> got;
  SATURATE_ASSERT_OK(f->ReadImages(0, 3, &got));
  EXPECT_EQ(Strs(got), images);
  SATURATE_ASSERT_OK(f->ReadImages(2, 1, &got));
  EXPECT_EQ(Strs(got), std::vector<std::string>{"png two"});
  EXPECT_FALSE(f->ReadImages(2, 2, &got).ok());
}

TEST(Hdf5, RawPixelsInAGroupWithoutLabels) {
  TempDir dir;
  const std::string path = dir.Join("p.h5");
  std::vector<uint8_t> pixels(2 * 3 * 4 * 3);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i);
  H5Writer(path).Write("train/x", H5T_NATIVE_UINT8, {2, 3, 4, 3}, pixels.data());
  SATURATE_ASSERT_OK_AND_ASSIGN(auto f, Hdf5File::Open(path, {"train/x", ""}));
  EXPECT_EQ(f->image_kind(), Hdf5File::ImageKind::kPixels);
  EXPECT_EQ(f->pixel_shape(), (std::vector<int64_t>{3, 4, 3}));
  EXPECT_FALSE(f->has_labels());
  std::vector<std::vector<std::byte>> got;
  SATURATE_ASSERT_OK(f->ReadImages(1, 1, &got));
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].size(), 36u);
  EXPECT_EQ(static_cast<int>(got[0][0]), 36);
  EXPECT_EQ(static_cast<int>(got[0][35]), 71);
}

TEST(Hdf5, FixedStringsAndOpaqueDropTheirPadding) {
  TempDir dir;
  const std::string path = dir.Join("s.h5");
  {
    H5Writer w(path);
    hid_t s = H5Tcopy(H5T_C_S1);
    H5Tset_size(s, 6);
    H5Tset_strpad(s, H5T_STR_NULLPAD);
    const char strings[] = "ab\0\0\0\0abcdef";
    w.Write("images", s, {2}, strings);
    H5Tclose(s);
    hid_t o = H5Tcreate(H5T_OPAQUE, 4);
    const char opaque[] = "x\0y\0zzzz";
    w.Write("opaque", o, {2}, opaque);
    H5Tclose(o);
  }
  std::vector<std::vector<std::byte>> got;
  SATURATE_ASSERT_OK_AND_ASSIGN(auto f, Hdf5File::Open(path, {"images", ""}));
  SATURATE_ASSERT_OK(f->ReadImages(0, 2, &got));
  EXPECT_EQ(Strs(got), (std::vector<std::string>{"ab", "abcdef"}));
  SATURATE_ASSERT_OK_AND_ASSIGN(auto o, Hdf5File::Open(path, {"opaque", ""}));
  SATURATE_ASSERT_OK(o->ReadImages(0, 2, &got));
  EXPECT_EQ(Strs(got), (std::vector<std::string>{std::string("x\0y", 3), "zzzz"}));
}

TEST(Hdf5, BadShapesTypesAndCountsNameFileAndDataset) {
  TempDir dir;
  const std::string path = dir.Join("bad.h5");
  {
    H5Writer w(path);
    std::vector<uint8_t> flat(4 * 10);
    w.Write("flat", H5T_NATIVE_UINT8, {4, 10}, flat.data());
    std::vector<float> reals(4 * 2 * 2);
    w.Write("reals", H5T_NATIVE_FLOAT, {4, 2, 2}, reals.data());
    w.WriteVlen("images", {"a", "b", "c"});
    w.WriteInts<int64_t>("labels", H5T_NATIVE_INT64, {1, 2});
    w.WriteInts<double>("float_labels", H5T_NATIVE_DOUBLE, {1, 2, 3});
    w.WriteInts<int64_t>("wide_labels", H5T_NATIVE_INT64, {1, 2, 3, 4, 5, 6}, {3, 2});
  }
  EXPECT_TRUE(HasError(Hdf5File::Open(path, {"flat", ""}).status(), StatusCode::kCorruption,
                       {"bad.h5", "dataset 'flat'", "(4, 10)", "uint8", "(N, H, W)"}));
  EXPECT_TRUE(HasError(Hdf5File::Open(path, {"reals", ""}).status(), StatusCode::kCorruption,
                       {"dataset 'reals'", "(4, 2, 2)", "float32"}));
  EXPECT_TRUE(HasError(Hdf5File::Open(path, {}).status(), StatusCode::kCorruption,
                       {"dataset 'labels'", "2 labels for 3 images"}));
  EXPECT_TRUE(HasError(Hdf5File::Open(path, {"images", "float_labels"}).status(),
                       StatusCode::kCorruption, {"'float_labels'", "float64", "integer labels"}));
  EXPECT_TRUE(HasError(Hdf5File::Open(path, {"images", "wide_labels"}).status(),
                       StatusCode::kCorruption, {"'wide_labels'", "(3, 2)"}));
  EXPECT_TRUE(HasError(Hdf5File::Open(path, {"pixels", ""}).status(), StatusCode::kNotFound,
                       {"bad.h5", "no dataset 'pixels'", "--image-key", "'images' (3,) vlen uint8",
                        "'flat' (4, 10) uint8"}));
  EXPECT_TRUE(HasError(Hdf5File::Open(path, {"images", "y/z"}).status(), StatusCode::kNotFound,
                       {"no dataset 'y/z'", "--label-key"}));
}

TEST(Hdf5, NotAnHdf5File) {
  TempDir dir;
  WriteFile(dir.Join("x.h5"), "not hdf5 at all");
  EXPECT_TRUE(HasError(Hdf5File::Open(dir.Join("x.h5"), {}).status(), StatusCode::kCorruption,
                       {"x.h5", "not an HDF5 file"}));
  EXPECT_TRUE(HasError(Hdf5File::Open(dir.Join("missing.h5"), {}).status(), StatusCode::kNotFound,
                       {"missing.h5"}));
}

}  // namespace
}  // namespace saturate::formats
