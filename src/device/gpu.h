// Gpu: the narrow interface through which the loader's device stage reaches
// an accelerator: pinned host memory, device memory, streams, events, async
// host-to-device copies and the pixel-conversion kernels.
//
// Two implementations: the CUDA runtime (OpenCudaGpu, in builds with the
// toolkit) and FakeGpu (device/testing/fake_gpu.h), which runs streams as
// host threads so that the stage's ordering logic is tested on machines
// without a GPU. The CPU path never goes through this interface.
//
// Handles are opaque pointers. For CUDA a Stream is a cudaStream_t (nullptr
// is the legacy default stream), so a framework's stream, e.g.
// torch.cuda.current_stream().cuda_stream, can be passed in; an Event is a
// cudaEvent_t. Streams and events made by Create*() are owned by the caller
// and released with Destroy*().
//
// Thread-safety: every method may be called from any thread.
#ifndef SATURATE_DEVICE_GPU_H_
#define SATURATE_DEVICE_GPU_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "image/transform.h"
#include "saturate/base/status.h"

namespace saturate::device {

using Stream = void*;
using Event = void*;

// uint8 pixels [batch, height, width, 3] -> `type` in `layout` per image
// (kHWC also serves channels_last), computed exactly as
// image::ConvertPixels computes one image, so the bytes match the CPU path.
struct PixelConvert {
  int64_t batch = 0;
  int height = 0;
  int width = 0;
  image::PixelType type = image::PixelType::kFloat32;
  image::Layout layout = image::Layout::kCHW;
  bool normalize = false;
  std::array<float, 3> mean = {0, 0, 0};
  std::array<float, 3> std = {1, 1, 1};

  uint64_t pixels() const { return static_cast<uint64_t>(batch) * height * width; }
};

// One JPEG for JpegDecoder::Decode: decode, take `crop` (stored pixels,
// inside the image), resize it to the decoder's output size with
// image::CropResizeRgb's filter (antialiased bilinear, in float), mirror if
// `hflip`, and write uint8 RGB HWC to `dst` (device memory).
struct JpegJob {
  std::span<const std::byte> encoded;  // host memory, borrowed for the call
  image::CropRect crop;
  bool hflip = false;
  void* dst = nullptr;
};

// A JPEG decoder on the device (nvJPEG in CUDA builds). Owned by its
// caller; one thread at a time.
class JpegDecoder {
 public:
  virtual ~JpegDecoder() = default;
  // E.g. "nvjpeg hardware+gpu"; for stats and errors.
  virtual std::string backend() const = 0;
  // Enqueues every job on `stream`, each writing out_width x out_height x 3
  // bytes at its dst. (*failed)[k] is set for a job the decoder could not
  // decode (its dst is left as it was; the caller decodes it on the CPU).
  // Returns once the jobs have run (so its wall time is the decode's).
  // An error return means the stream's state is unknown: nothing written.
  virtual Status Decode(std::span<const JpegJob> jobs, int out_width, int out_height, Stream stream,
                        std::vector<uint8_t>* failed) = 0;
};

class Gpu {
 public:
  virtual ~Gpu() = default;

  virtual int index() const = 0;  // the device number ("cuda:N")

  virtual Result<void*> AllocPinned(size_t bytes) = 0;  // page-locked host memory
  virtual void FreePinned(void* ptr) = 0;
  // Page-locks host memory the caller allocated (cudaHostRegister, portable),
  // so copies into it are DMA. It must be unregistered before it is unmapped:
  // a stale registration keeps the old pages, and later memory at that
  // address would receive copies meant for it.
  virtual Status RegisterHost(void* ptr, size_t bytes) = 0;
  virtual void UnregisterHost(void* ptr) = 0;
  virtual Result<void*> AllocDevice(size_t bytes) = 0;
  virtual void FreeDevice(void* ptr) = 0;

  virtual Result<Stream> CreateStream() = 0;  // does not synchronize with the default stream
  virtual void DestroyStream(Stream stream) = 0;
  virtual Result<Event> CreateEvent() = 0;
  virtual void DestroyEvent(Event event) = 0;

  // Enqueued on `stream`; `src` must be pinned for the copy to be asynchronous.
  virtual Status CopyToDevice(void* dst, const void* src, size_t bytes, Stream stream) = 0;
  // Enqueued on `stream`; `src` and `dst` are device memory and do not overlap.
  virtual Status CopyOnDevice(void* dst, const void* src, size_t bytes, Stream stream) = 0;
  // Enqueued on `stream`; `src` and `dst` are device memory.
  virtual Status ConvertPixels(const PixelConvert& spec, const void* src, void* dst,
                               Stream stream) = 0;
  virtual Status Record(Event event, Stream stream) = 0;
  // Work enqueued on `stream` later waits until `event` has passed.
  virtual Status StreamWait(Stream stream, Event event) = 0;
  // Whether everything before the last Record(event) has finished.
  virtual Result<bool> Done(Event event) = 0;
  virtual Status Synchronize(Event event) = 0;  // blocks the caller until Done
  // A JPEG decoder on this device, or Unavailable naming why not (e.g.
  // libnvjpeg not found). The default has none.
  virtual Result<std::unique_ptr<JpegDecoder>> OpenJpegDecoder() {
    return Status::Unavailable("no GPU JPEG decoder on this device");
  }
};

// "cuda" -> 0, "cuda:N" -> N; anything else is InvalidArgument naming it.
Result<int> ParseCudaDevice(std::string_view device);

// CUDA device `index`, or Unavailable saying why not (no GPU or driver, a
// build without CUDA, an index out of range).
Result<std::shared_ptr<Gpu>> OpenCudaGpu(int index);

}  // namespace saturate::device

#endif  // SATURATE_DEVICE_GPU_H_
