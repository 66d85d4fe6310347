// Launchers for the pixel-conversion kernels (pixel_kernels.cu). Plain
// types only, so that the CUDA translation unit needs none of the library's
// headers. Thread-safety: launches may come from any thread.
#ifndef SATURATE_DEVICE_CUDA_PIXEL_KERNELS_H_
#define SATURATE_DEVICE_CUDA_PIXEL_KERNELS_H_

#include <cstdint>

namespace saturate::device::cuda {

enum class PixelOut : int { kUInt8, kFloat32, kFloat16, kBFloat16 };

// uint8 [batch, height, width, 3] -> out[c] = x * scale[c] + bias[c] (no FMA,
// so the result is bit-identical to the CPU path), as `out` in HWC or, when
// `planar`, CHW per image. For kUInt8 the pixels are copied (or split into
// planes) and scale/bias are ignored.
struct PixelKernelArgs {
  const uint8_t* src = nullptr;
  void* dst = nullptr;
  int64_t batch = 0;
  int height = 0;
  int width = 0;
  PixelOut out = PixelOut::kFloat32;
  bool planar = true;
  float scale[3] = {1, 1, 1};
  float bias[3] = {0, 0, 0};
};

// Enqueues the conversion on `stream` (a cudaStream_t); returns the
// cudaError_t of the launch.
int LaunchConvertPixels(const PixelKernelArgs& args, void* stream);

}  // namespace saturate::device::cuda

#endif  // SATURATE_DEVICE_CUDA_PIXEL_KERNELS_H_
