#include "device/cuda/cuda_gpu.h"

#include <cuda_runtime.h>

#include <string>

#include "device/cuda/nvjpeg_decoder.h"
#include "device/cuda/pixel_kernels.h"
#include "saturate/device/device.h"

namespace saturate::device::cuda {
namespace {

Status Check(cudaError_t err, const char* what, int index) {
  if (err == cudaSuccess) return Status::OK();
  cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  return Status::Internal(std::string(what) + " on cuda:" + std::to_string(index) + ": " +
                          cudaGetErrorString(err));
}

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

// Makes `index` the calling thread's current device for one call and puts
// the caller's back afterwards: the consumer thread belongs to the training
// framework, whose idea of the current device must not change under it.
class DeviceScope {
 public:
  explicit DeviceScope(int index) : index_(index) {
    cudaGetDevice(&previous_);
    status_ =
        previous_ == index ? Status::OK() : Check(cudaSetDevice(index), "cudaSetDevice", index);
  }
  ~DeviceScope() {
    if (previous_ >= 0 && previous_ != index_ && status_.ok()) cudaSetDevice(previous_);
  }
  const Status& status() const { return status_; }

 private:
  int index_;
  int previous_ = -1;
  Status status_;
};

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
        Check(cudaHostAlloc(&p, bytes, cudaHostAllocPortable), "cudaHostAlloc", index_));
    return p;
  }
  void FreePinned(void* ptr) override { cudaFreeHost(ptr); }

  Result<void*> AllocDevice(size_t bytes) override {
    DeviceScope scope(index_);
    SATURATE_RETURN_IF_ERROR(scope.status());
    void* p = nullptr;
    SATURATE_RETURN_IF_ERROR(Check(cudaMalloc(&p, bytes), "cudaMalloc", index_));
    return p;
  }
  void FreeDevice(void* ptr) override {
    if (DeviceScope scope(index_); scope.status().ok()) cudaFree(ptr);
  }

  Result<Stream> CreateStream() override {
    DeviceScope scope(index_);
    SATURATE_RETURN_IF_ERROR(scope.status());
    cudaStream_t s = nullptr;
    SATURATE_RETURN_IF_ERROR(
        Check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate", index_));
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
        Check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate", index_));
    return static_cast<Event>(e);
  }
  void DestroyEvent(Event event) override {
    if (DeviceScope scope(index_); scope.status().ok())
      cudaEventDestroy(static_cast<cudaEvent_t>(event));
  }

  Status CopyToDevice(void* dst, const void* src, size_t bytes, Stream stream) override {
    DeviceScope scope(index_);
    SATURATE_RETURN_IF_ERROR(scope.status());
    return Check(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream)),
        "cudaMemcpyAsync", index_);
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
    return Check(static_cast<cudaError_t>(LaunchConvertPixels(a, stream)), "pixel kernel", index_);
  }

  Status Record(Event event, Stream stream) override {
    DeviceScope scope(index_);
    SATURATE_RETURN_IF_ERROR(scope.status());
    return Check(
        cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)),
        "cudaEventRecord", index_);
  }

  Status StreamWait(Stream stream, Event event) override {
    DeviceScope scope(index_);
    SATURATE_RETURN_IF_ERROR(scope.status());
    return Check(
        cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0),
        "cudaStreamWaitEvent", index_);
  }

  Result<bool> Done(Event event) override {
    cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (err == cudaErrorNotReady) return false;
    SATURATE_RETURN_IF_ERROR(Check(err, "cudaEventQuery", index_));
    return true;
  }

  Result<std::unique_ptr<JpegDecoder>> OpenJpegDecoder() override {
    return OpenNvJpegDecoder(index_);
  }

  Status Synchronize(Event event) override {
    return Check(cudaEventSynchronize(static_cast<cudaEvent_t>(event)), "cudaEventSynchronize",
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
