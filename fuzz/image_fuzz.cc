// libFuzzer target: arbitrary bytes through the image probe, validation and
// decode that pack and inspect run on untrusted files.
#include <cstddef>
#include <cstdint>
#include <span>

#include "image/codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto bytes = std::as_bytes(std::span(data, size));
  auto probe = saturate::image::ProbeImage(bytes);
  if (!probe.ok() || int64_t{probe->width} * probe->height > (1 << 22)) return 0;
  auto valid = saturate::image::ValidateImage(bytes);
  saturate::image::ImageInfo info;
  auto rgb = saturate::image::DecodeRgb(bytes, &info);
  if (rgb.ok() && rgb->size() != size_t(info.width) * info.height * 3) __builtin_trap();
  return 0;
}
