// FakeGpu: a Gpu whose "device" is host memory and whose streams are host
// threads, for testing the device stage without a GPU.
//
// It keeps CUDA's ordering semantics, not its speed: each stream runs its
// work in order on its own thread, events pass when the work recorded before
// them has run, and StreamWait() holds a stream until an event passes. With
// `copy_delay` every copy sleeps first, so a consumer that reads a batch
// before its copy has finished sees stale bytes and a test catches it.
// Conversions run image::ConvertPixels, the CPU path's own code. With
// set_jpeg_decoder(true), OpenJpegDecoder() gives a decoder that runs the
// CPU path's DecodeCropResize on the stream (same bytes as the CPU path), so
// the GPU decode stage's bookkeeping is tested without a GPU.
//
// Thread-safety: as Gpu; counters() may be read from any thread.
#ifndef SATURATE_DEVICE_TESTING_FAKE_GPU_H_
#define SATURATE_DEVICE_TESTING_FAKE_GPU_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_set>

#include "device/gpu.h"

namespace saturate::testing {

using device::Event;
using device::PixelConvert;
using device::Stream;

class FakeGpu : public device::Gpu {
 public:
  struct Counters {
    uint64_t pinned_allocs = 0;
    uint64_t device_allocs = 0;
    uint64_t conversions = 0;
    uint64_t jpeg_bytes = 0;  // encoded bytes given to the JPEG decoder
    uint64_t live_device_buffers = 0;
    uint64_t live_pinned_buffers = 0;
  };

  explicit FakeGpu(std::chrono::microseconds copy_delay = std::chrono::microseconds(0));
  ~FakeGpu() override;

  int index() const override { return 0; }
  Result<void*> AllocPinned(size_t bytes) override;
  void FreePinned(void* ptr) override;
  Status RegisterHost(void* ptr, size_t bytes) override;
  void UnregisterHost(void* ptr) override;
  // Host ranges registered now: start -> bytes.
  std::map<void*, size_t> registered() const;
  Result<void*> AllocDevice(size_t bytes) override;
  void FreeDevice(void* ptr) override;
  Result<Stream> CreateStream() override;
  void DestroyStream(Stream stream) override;
  Result<Event> CreateEvent() override;
  void DestroyEvent(Event event) override;
  Status CopyToDevice(void* dst, const void* src, size_t bytes, Stream stream) override;
  Status CopyOnDevice(void* dst, const void* src, size_t bytes, Stream stream) override;
  Status ConvertPixels(const PixelConvert& spec, const void* src, void* dst,
                       Stream stream) override;
  Status Record(Event event, Stream stream) override;
  Status StreamWait(Stream stream, Event event) override;
  Result<bool> Done(Event event) override;
  Status Synchronize(Event event) override;
  Result<std::unique_ptr<device::JpegDecoder>> OpenJpegDecoder() override;

  // Whether OpenJpegDecoder() gives a decoder (else Unavailable, as without nvJPEG).
  void set_jpeg_decoder(bool enabled) { jpeg_decoder_ = enabled; }
  // Called on the caller's thread at the start of each decoder Decode() (set
  // before the decoder opens): lets a test hold a decode, or see its thread.
  void set_jpeg_decode_hook(std::function<void()> hook) { jpeg_decode_hook_ = std::move(hook); }
  const std::function<void()>& jpeg_decode_hook() const { return jpeg_decode_hook_; }
  // The decoder's: adds the jobs' encoded bytes to counters().jpeg_bytes.
  void CountJpegBytes(std::span<const device::JpegJob> jobs);

  // Enqueues `fn` on `stream`, as a kernel of the consumer's would be.
  void Enqueue(Stream stream, std::function<void()> fn);
  // Blocks until everything enqueued on `stream` so far has run.
  void Drain(Stream stream);
  Counters counters() const;

 private:
  class FakeStream;
  struct FakeEvent;
  FakeStream* Get(Stream stream);
  Result<void*> Allocate(size_t bytes, std::unordered_set<void*>* live, uint64_t* count);
  void Release(void* ptr, std::unordered_set<void*>* live);

  const std::chrono::microseconds copy_delay_;
  bool jpeg_decoder_ = false;
  std::function<void()> jpeg_decode_hook_;
  std::unique_ptr<FakeStream> default_stream_;
  mutable std::mutex mu_;
  Counters counters_;
  std::unordered_set<void*> device_, pinned_;
  std::map<void*, size_t> registered_;
};

}  // namespace saturate::testing

#endif  // SATURATE_DEVICE_TESTING_FAKE_GPU_H_
