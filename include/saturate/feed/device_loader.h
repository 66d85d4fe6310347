// DeviceLoader: a Loader whose batches arrive in GPU memory, ready to use.
//
//   Loader threads: decode + crop into pinned batch buffers (uint8 HWC)
//     -> copy stream: cudaMemcpyAsync into a pooled device buffer, then the
//        conversion kernels (to float32/float16/bfloat16, normalize, CHW or
//        channels_last) -> event
//     -> Next(): the consumer's stream waits on the event; the batch is returned
//
// The PCIe bus carries uint8 pixels and the CPU only decodes and crops.
//
// GPU JPEG decode (decode="gpu" or "auto", docs/gpu.md): workers still read
// records and draw each crop and flip on the CPU (the same draws as the CPU
// path, so samples, labels and crops are identical), but hand a JPEG's bytes
// to the device stage instead of decoding it; the stage decodes them with
// nvJPEG (the hardware engine where present) and a crop-resize-flip kernel
// writes each into its device batch slot before the conversion kernels run.
// "gpu" sends every JPEG there; "auto" a fraction chosen from the measured
// CPU and GPU decode rates (DecodeSplit), shown in stats(). An image nvJPEG
// refuses is decoded on the CPU instead; PNGs and CMYK JPEGs always are.
// The stage's work for a batch (copy, decode, kernels) is then issued on a
// thread of its own, since a decode waits for the GPU: it overlaps the
// consumer's work on the batches before it.
// Copies of `prefetch` batches are issued ahead of the consumer, so they
// overlap its compute; the consumer's CPU thread never waits for a copy
// unless the pipeline is empty.
//
// Memory: host batch buffers are page-locked once (cudaHostAlloc) through
// the Loader's BatchAllocator, so workers decode straight into memory the
// GPU can read. Device buffers (prefetch + max_held_batches of them) are
// allocated on first use and reused; nothing is allocated per batch.
//
// Stream safety: Next() makes the consumer's stream (set_stream()) wait
// until the batch is on the device. When the last copy of a Batch is
// released, an event is recorded on that same stream, and the buffer is not written again until the
// event passes, so kernels queued on `stream` may still read it after release (PyTorch's caching
// allocator gives the same guarantee for one stream). Work on other streams must be ordered by the
// caller, as with any tensor.
//
// Errors and order are the Loader's: a failing sample reaches Next() as a
// Status in its batch's place. state() counts batches delivered to the
// consumer, not those copied ahead, so Restore() resumes exactly.
//
// Thread-safety: one consumer thread calls set_stream()/Next()/WaitForNext()/
// SetEpoch()/Restore(); stats() and state() may be called from any thread. Batches may
// be released from any thread and may outlive the DeviceLoader.
#ifndef SATURATE_FEED_DEVICE_LOADER_H_
#define SATURATE_FEED_DEVICE_LOADER_H_

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "saturate/base/status.h"
#include "saturate/feed/loader.h"

namespace saturate::device {
class Gpu;
}

namespace saturate::feed {

struct DeviceOptions {
  std::string device = "cuda";  // "cuda" or "cuda:N"
  int prefetch = 2;             // batches copied to the device ahead of the consumer
  // Where JPEGs are decoded: "cpu" (the loader's threads), "gpu" (nvJPEG;
  // Unavailable, naming the library, where it cannot be loaded) or "auto"
  // (split by measured rates; the CPU alone where nvJPEG is unavailable).
  std::string decode = "cpu";
};

class DeviceLoader : public BatchSource {
 public:
  // Unavailable (naming the reason) when the device cannot be used: no GPU,
  // no driver, or a build without CUDA.
  static Result<std::unique_ptr<DeviceLoader>> Open(const LoaderOptions& options,
                                                    const DeviceOptions& device);
  // The same on a given Gpu (tests pass a FakeGpu).
  static Result<std::unique_ptr<DeviceLoader>> Open(const LoaderOptions& options, int prefetch,
                                                    std::shared_ptr<device::Gpu> gpu,
                                                    const std::string& decode = "cpu");
  ~DeviceLoader() override;  // waits for copies in flight; never hangs
  DeviceLoader(const DeviceLoader&) = delete;
  DeviceLoader& operator=(const DeviceLoader&) = delete;

  // The consumer's stream (a cudaStream_t; nullptr, the default, is the
  // device's default stream): batches from Next() are ready for work
  // enqueued on it.
  void set_stream(void* stream);

  uint64_t batches_per_epoch() const override;
  // The next batch, its tensors in device memory (TensorView::cuda_device
  // set), ready on the consumer's stream; nullopt at the epoch's end.
  Result<std::optional<Batch>> Next() override;
  bool WaitForNext(std::chrono::nanoseconds timeout) override;
  Status SetEpoch(uint64_t epoch) override;
  LoaderState state() const override;
  Status Restore(const LoaderState& state) override;
  // The host loader's counters plus h2d_bytes, h2d_batches, device_buffers
  // and the GPU decode's (decode, gpu_decoded, gpu_decode_fraction, ...).
  LoaderStats stats() const override;

  // The host-side loader (batches_per_epoch, rank, schema, ...).
  const Loader& host() const;
  int device_index() const;

 private:
  class Impl;
  explicit DeviceLoader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace saturate::feed

#endif  // SATURATE_FEED_DEVICE_LOADER_H_
