#include "device/cuda/cuda_gpu.h"

#include <cuda_runtime.h>

#include <string>

#include "device/cuda/cuda_util.h"
#include "device/cuda/nvjpeg_decoder.h"
#include "device/cuda/pixel_kernels.h"
#include "saturate/device/device.h"

namespace saturate::device::cuda {
namespace {

PixelOut ToPixelOut(image::PixelType type) {
  switch (type) {
    case image::PixelType::kUInt8:
      return PixelOut::kUInt8;
    case image::PixelType::kFloat32:
      return PixelOut::kFloat32;
    case image::PixelType::kFloat16:
      return PixelOut::kFloat16;
    case image::PixelType::kBFloat16:
      return PixelOut::kBFloat16;
  }
  return PixelOut::kFloat32;
}

class CudaGpu : public Gpu {
 public:
  explicit CudaGpu(int index) : index_(index) {}

  int index() const override { return index_; }

  Result<void*> AllocPinned(size_t bytes) override {
    DeviceScope scope(index_);
    SATURATE_RETURN_IF_ERROR(scope.status());
    void* p = nullptr;
    // Portable: pinned for every context, since the consumer may use another device too.
    SATURATE_RETURN_IF_ERROR(
        CudaCheck(cudaHostAlloc(&p, bytes, cudaHostAllocPortable), "cudaHostAlloc", index_));
    return p;
  }
  void FreePinned(void* ptr) override { cudaFreeHost(ptr); }
  Status RegisterHost(void* ptr, size_t bytes) override {
    DeviceScope scope(index_);
    SATURATE_RETURN_IF_ERROR(scope.status());
    return CudaCheck(cudaHostRegister(ptr, bytes, cudaHostRegisterPortable), "cudaHostRegister",
                     index_);
  }
  void UnregisterHost(void* ptr) override {
    if (DeviceScope scope(index_); scope.status().ok()) {
      (void)CudaCheck(cudaHostUnregister(ptr), "cudaHostUnregister", index_);
    }
  }

  Result<void*> AllocDevice(size_t bytes) override {
    DeviceScope scope(index_);
    SATURATE_RETURN_IF_ERROR(scope.status());
    void* p = nullptr;
    SATURATE_RETURN_IF_ERROR(CudaCheck(cudaMalloc(&p, bytes), "cudaMalloc", index_));
    return p;
  }
  void FreeDevice(void* ptr) override {
    if (DeviceScope scope(index_); scope.status().ok()) cudaFree(ptr);
  }

  Result<Stream> CreateStream() override {
    DeviceScope scope(index_);
    SATURATE_RETURN_IF_ERROR(scope.status());
    cudaStream_t s = nullptr;
    SATURATE_RETURN_IF_ERROR(CudaCheck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                                       "cudaStreamCreate", index_));
    return static_cast<Stream>(s);
  }
  void DestroyStream(Stream stream) override {
    if (DeviceScope scope(index_); scope.status().ok())
      cudaStreamDestroy(static_cast<cudaStream_t>(stream));
  }

  Result<Event> CreateEvent() override {
    DeviceScope scope(index_);
    SATURATE_RETURN_IF_ERROR(scope.status());
    cudaEvent_t e = nullptr;
    // Timing off: these events only order work, and timing makes them slower.
    SATURATE_RETURN_IF_ERROR(
        CudaCheck(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate", index_));
    return static_cast<Event>(e);
  }
  void DestroyEvent(Event event) override {
    if (DeviceScope scope(index_); scope.status().ok())
      cudaEventDestroy(static_cast<cudaEvent_t>(event));
  }

  Status CopyToDevice(void* dst, const void* src, size_t bytes, Stream stream) override {
    DeviceScope scope(index_);
    SATURATE_RETURN_IF_ERROR(scope.status());
    return CudaCheck(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream)),
        "cudaMemcpyAsync", index_);
  }

  Status CopyOnDevice(void* dst, const void* src, size_t bytes, Stream stream) override {
    DeviceScope scope(index_);
    SATURATE_RETURN_IF_ERROR(scope.status());
    return CudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                     static_cast<cudaStream_t>(stream)),
                     "cudaMemcpyAsync (device to device)", index_);
  }

  Status ConvertPixels(const PixelConvert& spec, const void* src, void* dst,
                       Stream stream) override {
    DeviceScope scope(index_);
    SATURATE_RETURN_IF_ERROR(scope.status());
    PixelKernelArgs a;
    a.src = static_cast<const uint8_t*>(src);
    a.dst = dst;
    a.batch = spec.batch;
    a.height = spec.height;
    a.width = spec.width;
    a.out = ToPixelOut(spec.type);
    a.planar = spec.layout == image::Layout::kCHW;
    // The CPU path's own constants, so both give the same bits.
    image::PixelAffine(spec.normalize ? spec.mean.data() : nullptr,
                       spec.normalize ? spec.std.data() : nullptr, a.scale, a.bias);
    return CudaCheck(static_cast<cudaError_t>(LaunchConvertPixels(a, stream)), "pixel kernel",
                     index_);
  }

  Status Record(Event event, Stream stream) override {
    DeviceScope scope(index_);
    SATURATE_RETURN_IF_ERROR(scope.status());
    return CudaCheck(
        cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)),
        "cudaEventRecord", index_);
  }

  Status StreamWait(Stream stream, Event event) override {
    DeviceScope scope(index_);
    SATURATE_RETURN_IF_ERROR(scope.status());
    return CudaCheck(
        cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0),
        "cudaStreamWaitEvent", index_);
  }

  Result<bool> Done(Event event) override {
    cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (err == cudaErrorNotReady) return false;
    SATURATE_RETURN_IF_ERROR(CudaCheck(err, "cudaEventQuery", index_));
    return true;
  }

  Result<std::unique_ptr<JpegDecoder>> OpenJpegDecoder() override {
    return OpenNvJpegDecoder(index_);
  }

  Status Synchronize(Event event) override {
    return CudaCheck(cudaEventSynchronize(static_cast<cudaEvent_t>(event)), "cudaEventSynchronize",
                     index_);
  }

 private:
  const int index_;
};

}  // namespace

Result<std::shared_ptr<Gpu>> OpenCudaGpu(int index) {
  DeviceReport report = ProbeDevices();
  const std::string name = "cuda:" + std::to_string(index);
  if (report.gpus.empty()) return Status::Unavailable(name + ": " + report.no_gpu_reason);
  if (index >= static_cast<int>(report.gpus.size())) {
    return Status::Unavailable(name + ": this machine has " + std::to_string(report.gpus.size()) +
                               " GPU(s)");
  }
  return std::shared_ptr<Gpu>(std::make_shared<CudaGpu>(index));
}

}  // namespace saturate::device::cuda
