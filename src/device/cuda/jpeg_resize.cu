#include <cuda_runtime.h>

#include "device/cuda/jpeg_resize.h"
#include "device/cuda/jpeg_resize_math.h"

namespace saturate::device::cuda {
namespace {

__global__ void CropResizeKernel(CropResizeArgs a) {
  const int ox = blockIdx.x * blockDim.x + threadIdx.x;
  const int oy = blockIdx.y * blockDim.y + threadIdx.y;
  if (ox >= a.out_w || oy >= a.out_h) return;
  CropResizePixel(a, ox, oy);
}

}  // namespace

int LaunchCropResize(const CropResizeArgs& args, void* stream) {
  if (args.out_w <= 0 || args.out_h <= 0) return cudaSuccess;
  const dim3 block(32, 8);
  const dim3 grid((args.out_w + block.x - 1) / block.x, (args.out_h + block.y - 1) / block.y);
  CropResizeKernel<<<grid, block, 0, static_cast<cudaStream_t>(stream)>>>(args);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace saturate::device::cuda
