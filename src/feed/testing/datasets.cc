#include "feed/testing/datasets.h"

#include <algorithm>
#include <span>
#include <vector>

#include "image/codec.h"
#include "saturate/format/writer.h"

namespace saturate::testing {

using format::FieldKind;
using format::FieldSpec;

namespace {

// The JPEG up to 16 bytes into its entropy-coded data.
Result<std::vector<std::byte>> CutAfterScanHeader(std::vector<std::byte> jpeg) {
  for (size_t i = 2; i + 3 < jpeg.size(); ++i) {
    if (jpeg[i] == std::byte{0xFF} && jpeg[i + 1] == std::byte{0xDA}) {
      const size_t length = (size_t(jpeg[i + 2]) << 8) | size_t(jpeg[i + 3]);
      jpeg.resize(std::min(jpeg.size(), i + 2 + length + 16));
      return jpeg;
    }
  }
  return Status::Internal("CutAfterScanHeader: no SOS marker");
}

}  // namespace

Status WriteImageDataset(const std::string& dir, uint64_t n, uint64_t cut) {
  format::Schema schema{
      {FieldSpec{"image", FieldKind::kImage}, FieldSpec{"label", FieldKind::kInt64}}};
  SATURATE_ASSIGN_OR_RETURN(auto w, format::DatasetWriter::Create(dir, schema));
  for (uint64_t i = 0; i < n; ++i) {
    const int width = 64 + static_cast<int>(i % 7) * 8, height = 48 + static_cast<int>(i % 5) * 8;
    std::vector<uint8_t> rgb(static_cast<size_t>(width) * height * 3);
    for (size_t p = 0; p < rgb.size(); ++p) rgb[p] = static_cast<uint8_t>((p * (i + 3)) % 256);
    SATURATE_ASSIGN_OR_RETURN(auto jpeg, image::EncodeJpeg(rgb.data(), width, height, 85));
    if (i == cut) {
      SATURATE_ASSIGN_OR_RETURN(jpeg, CutAfterScanHeader(std::move(jpeg)));
    }
    int64_t label = static_cast<int64_t>(i);
    std::vector<std::span<const std::byte>> f{jpeg, format::AsBytes(label)};
    SATURATE_RETURN_IF_ERROR(w->Append(f));
  }
  return w->Finish();
}

feed::LoaderOptions SmallImageLoaderOptions(const std::string& dir, uint64_t seed, int height,
                                            int width) {
  feed::LoaderOptions options;
  options.dataset = dir;
  options.batch_size = 8;
  options.seed = seed;
  options.threads = 2;
  options.prefetch = 2;
  options.rank = 0;
  options.world_size = 1;
  feed::FieldOptions f{.field = "image"};
  f.image.height = height;
  f.image.width = width;
  f.image.dtype = format::DType::kUInt8;
  f.image.layout = feed::Layout::kHWC;
  options.fields = {f};
  return options;
}

}  // namespace saturate::testing
