// The GPU JPEG decoder behind device::JpegDecoder: nvJPEG, loaded at run
// time with dlopen (libnvjpeg.so.13, then libnvjpeg.so), like NVML, so the
// binary runs where it is absent and the GPU decode reports Unavailable.
//
// A batch is decoded by the hardware JPEG engine (NVJPEG_BACKEND_HARDWARE,
// nvjpegDecodeBatched, A100/H100) for the images nvjpegDecodeBatchedSupported
// accepts, else by the batched GPU-assisted backend (GPU_HYBRID); images
// either refuses go through nvjpegDecode (default backend) one at a time.
// Each image is decoded whole to RGB interleaved in a device scratch, then
// jpeg_resize.cu crops, resizes and mirrors it into its batch slot.
//
// Ownership: the decoder owns its nvJPEG handles, states and scratch; the
// library stays loaded for the process. Thread-safety: one thread at a time.
#ifndef SATURATE_DEVICE_CUDA_NVJPEG_DECODER_H_
#define SATURATE_DEVICE_CUDA_NVJPEG_DECODER_H_

#include <memory>

#include "device/gpu.h"

namespace saturate::device::cuda {

// A decoder on CUDA device `index` (made current for each call), or
// Unavailable naming the library that could not be loaded or set up.
Result<std::unique_ptr<JpegDecoder>> OpenNvJpegDecoder(int index);

}  // namespace saturate::device::cuda

#endif  // SATURATE_DEVICE_CUDA_NVJPEG_DECODER_H_
