// libFuzzer target: arbitrary bytes through the image probe, validation and
// decode that pack and inspect run on untrusted files, and through the
// loader's crop decode. The input's restart-marked copy
// (AddJpegRestartMarkers) must give the same bytes cut to the crop's MCUs
// (as the loader does) as decoded whole, with and without the AVX2 loops,
// and in CHW layout the same bytes split into planes. The cut a GPU decoder
// is given (CutJpegAroundCrop) must hold the crop inside it and, decoded
// whole, the crop's pixels of the whole file's decode.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "image/codec.h"
#include "image/transform.h"

namespace {

using saturate::image::CropRect;
using saturate::image::DecodeCropResize;
using saturate::image::DecodeScratch;
using saturate::image::Layout;

// A crop chosen from the input's last bytes, always inside the image.
CropRect CropFor(const uint8_t* data, size_t size, int w, int h) {
  auto byte = [&](size_t k) { return size > k ? data[size - 1 - k] : uint8_t{0}; };
  const int cw = 1 + byte(0) * (w - 1) / 255, ch = 1 + byte(1) * (h - 1) / 255;
  return CropRect{byte(2) * (w - cw) / 255, byte(3) * (h - ch) / 255, cw, ch};
}

// The restart-marked `jpeg`'s cut around `crop`, if it makes one: the moved
// crop lies inside it, and where both decode whole, its pixels are the file's.
void CheckGpuCut(std::span<const std::byte> jpeg, const CropRect& crop, DecodeScratch* scratch) {
  const auto cut = saturate::image::CutJpegAroundCrop(jpeg, crop, scratch);
  if (!cut) return;
  const std::vector<std::byte> part_jpeg(cut->jpeg.begin(), cut->jpeg.end());
  saturate::image::ImageInfo part_info, info;
  auto part = saturate::image::DecodeRgb(part_jpeg, &part_info);
  auto whole = saturate::image::DecodeRgb(jpeg, &info);
  if (!part.ok() || !whole.ok()) return;
  const CropRect m = cut->crop;
  if (m.width != crop.width || m.height != crop.height || m.x < 0 || m.y < 0 ||
      m.x + m.width > part_info.width || m.y + m.height > part_info.height) {
    __builtin_trap();
  }
  for (int y = 0; y < crop.height; ++y) {
    const uint8_t* want = whole->data() + (size_t(crop.y + y) * info.width + crop.x) * 3;
    const uint8_t* got = part->data() + (size_t(m.y + y) * part_info.width + m.x) * 3;
    if (!std::equal(got, got + size_t(crop.width) * 3, want)) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto bytes = std::as_bytes(std::span(data, size));
  auto probe = saturate::image::ProbeImage(bytes);
  if (!probe.ok() || int64_t{probe->width} * probe->height > (1 << 22)) return 0;
  auto valid = saturate::image::ValidateImage(bytes);
  saturate::image::ImageInfo info;
  auto rgb = saturate::image::DecodeRgb(bytes, &info);
  if (rgb.ok() && rgb->size() != size_t(info.width) * info.height * 3) __builtin_trap();

  const CropRect crop = CropFor(data, size, probe->width, probe->height);
  const int shrink = 1 + (size > 4 ? data[size - 5] % 4 : 0);  // DCT scales 8/8 to 2/8
  const int out_w = std::max(1, crop.width / shrink), out_h = std::max(1, crop.height / shrink);
  std::vector<uint8_t> direct(size_t(out_w) * out_h * 3), cut(direct.size()), whole(direct.size()),
      portable(direct.size());
  DecodeScratch scratch, whole_scratch;
  whole_scratch.set_cut_restart_index(false);
  const bool direct_ok =
      DecodeCropResize(bytes, crop, out_w, out_h, false, direct.data(), &scratch).ok();
  auto copy = saturate::image::AddJpegRestartMarkers(bytes);
  if (!copy.ok() || !direct_ok) return 0;
  const bool cut_ok = DecodeCropResize(*copy, crop, out_w, out_h, false, cut.data(), &scratch).ok();
  const bool whole_ok =
      DecodeCropResize(*copy, crop, out_w, out_h, false, whole.data(), &whole_scratch).ok();
  saturate::image::DisableAvx2ResizeForTesting(true);
  const bool portable_ok =
      DecodeCropResize(*copy, crop, out_w, out_h, false, portable.data(), &scratch).ok();
  saturate::image::DisableAvx2ResizeForTesting(false);
  if (!cut_ok || !whole_ok || !portable_ok || cut != whole || portable != cut) __builtin_trap();
  std::vector<uint8_t> planes(cut.size()), want(cut.size());
  saturate::image::ConvertPixels(cut.data(), out_h, out_w, nullptr, nullptr, Layout::kCHW,
                                 saturate::image::PixelType::kUInt8, want.data());
  if (!DecodeCropResize(*copy, crop, out_w, out_h, false, planes.data(), &scratch, Layout::kCHW)
           .ok() ||
      planes != want) {
    __builtin_trap();
  }
  CheckGpuCut(*copy, crop, &scratch);
  return 0;
}
