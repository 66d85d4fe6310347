// convert: the last step into a batch slot. ConvertPixels (transform.h)
// turns the resized RGB8 into the training tensor's layout (HWC or CHW)
// and type (uint8, or ToTensor + Normalize as float32, float16 or
// bfloat16); RgbToPlanes is its layout split, also used by the resampler
// to write CHW rows. The public functions are declared in transform.h.
// Thread-safety: pure functions.
#ifndef SATURATE_IMAGE_CONVERT_H_
#define SATURATE_IMAGE_CONVERT_H_

#include <cstddef>
#include <cstdint>

namespace saturate::image {

// Splits interleaved RGB bytes into three planes.
void RgbToPlanes(const uint8_t* rgb, size_t pixels, uint8_t* r, uint8_t* g, uint8_t* b);

}  // namespace saturate::image

#endif  // SATURATE_IMAGE_CONVERT_H_
