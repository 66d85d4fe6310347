// Launcher for the crop-resize-flip kernel of the GPU JPEG decode
// (jpeg_resize.cu): interleaved RGB8 (a decoded image in device memory) ->
// the crop resized to out_w x out_h, optionally mirrored, as uint8 HWC.
// The filter is image::CropResizeRgb's (antialiased bilinear, PIL's taps,
// summed in float, rounded as ToByte), computed in one 2-D pass per pixel
// instead of two separable passes, so bytes differ by float rounding only.
// Plain types only (no library headers in the CUDA translation unit).
// Thread-safety: launches may come from any thread.
#ifndef SATURATE_DEVICE_CUDA_JPEG_RESIZE_H_
#define SATURATE_DEVICE_CUDA_JPEG_RESIZE_H_

#include <cstdint>

namespace saturate::device::cuda {

struct CropResizeArgs {
  const uint8_t* src = nullptr;  // device, RGB8 rows src_pitch bytes apart
  int64_t src_pitch = 0;
  int crop_x = 0, crop_y = 0, crop_w = 0, crop_h = 0;  // inside the source image
  uint8_t* dst = nullptr;                              // device, out_h x out_w x 3
  int out_w = 0, out_h = 0;
  bool hflip = false;
};

// Enqueues the resize on `stream` (a cudaStream_t); returns the launch's
// cudaError_t.
int LaunchCropResize(const CropResizeArgs& args, void* stream);

}  // namespace saturate::device::cuda

#endif  // SATURATE_DEVICE_CUDA_JPEG_RESIZE_H_
