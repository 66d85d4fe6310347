#include "device/cuda/nvjpeg_decoder.h"

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "device/cuda/cuda_util.h"
#include "device/cuda/jpeg_resize.h"

namespace saturate::device::cuda {
namespace {

// The few nvJPEG declarations used (nvjpeg.h, CUDA 13's nvidia-nvjpeg),
// with the library's own names and values.
using nvjpegStatus_t = int;
constexpr nvjpegStatus_t kNvjpegSuccess = 0;
using nvjpegHandle_t = struct nvjpegHandle*;
using nvjpegJpegState_t = struct nvjpegJpegState*;
using nvjpegJpegStream_t = struct nvjpegJpegStream*;
enum nvjpegBackend_t : int {
  NVJPEG_BACKEND_DEFAULT = 0,
  NVJPEG_BACKEND_GPU_HYBRID = 2,
  NVJPEG_BACKEND_HARDWARE = 3,
};
enum nvjpegOutputFormat_t : int { NVJPEG_OUTPUT_RGBI = 5 };
using nvjpegChromaSubsampling_t = int;
constexpr int kMaxComponent = 4;  // NVJPEG_MAX_COMPONENT
struct nvjpegImage_t {
  unsigned char* channel[kMaxComponent];
  size_t pitch[kMaxComponent];
};

struct NvJpegApi {
  nvjpegStatus_t (*CreateEx)(nvjpegBackend_t, void*, void*, unsigned, nvjpegHandle_t*) = nullptr;
  nvjpegStatus_t (*Destroy)(nvjpegHandle_t) = nullptr;
  nvjpegStatus_t (*JpegStateCreate)(nvjpegHandle_t, nvjpegJpegState_t*) = nullptr;
  nvjpegStatus_t (*JpegStateDestroy)(nvjpegJpegState_t) = nullptr;
  nvjpegStatus_t (*GetImageInfo)(nvjpegHandle_t, const unsigned char*, size_t, int*,
                                 nvjpegChromaSubsampling_t*, int*, int*) = nullptr;
  nvjpegStatus_t (*Decode)(nvjpegHandle_t, nvjpegJpegState_t, const unsigned char*, size_t,
                           nvjpegOutputFormat_t, nvjpegImage_t*, cudaStream_t) = nullptr;
  nvjpegStatus_t (*DecodeBatchedInitialize)(nvjpegHandle_t, nvjpegJpegState_t, int, int,
                                            nvjpegOutputFormat_t) = nullptr;
  nvjpegStatus_t (*DecodeBatched)(nvjpegHandle_t, nvjpegJpegState_t, const unsigned char* const*,
                                  const size_t*, nvjpegImage_t*, cudaStream_t) = nullptr;
  nvjpegStatus_t (*JpegStreamCreate)(nvjpegHandle_t, nvjpegJpegStream_t*) = nullptr;
  nvjpegStatus_t (*JpegStreamDestroy)(nvjpegJpegStream_t) = nullptr;
  nvjpegStatus_t (*JpegStreamParse)(nvjpegHandle_t, const unsigned char*, size_t, int, int,
                                    nvjpegJpegStream_t) = nullptr;
  nvjpegStatus_t (*DecodeBatchedSupported)(nvjpegHandle_t, nvjpegJpegStream_t, int*) = nullptr;
};

// Loads the library once per process; the error names it.
Result<const NvJpegApi*> LoadNvJpeg() {
  static std::once_flag once;
  static NvJpegApi api;
  static Status status;
  std::call_once(once, [] {
    void* lib = nullptr;
    std::string tried;
    for (const char* name : {"libnvjpeg.so.13", "libnvjpeg.so"}) {
      lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (lib != nullptr) break;
      const char* err = dlerror();
      tried += std::string(tried.empty() ? "" : "; ") + (err != nullptr ? err : name);
    }
    if (lib == nullptr) {
      status = Status::Unavailable("nvJPEG not found (libnvjpeg.so.13, libnvjpeg.so): " + tried +
                                   "; install nvidia-nvjpeg (CUDA 13) or add it to "
                                   "LD_LIBRARY_PATH");
      return;
    }
    std::string missing;
    auto bind = [&](auto* fn, const char* name) {
      void* sym = dlsym(lib, name);
      if (sym == nullptr) missing += std::string(missing.empty() ? "" : ", ") + name;
      *fn = reinterpret_cast<std::remove_reference_t<decltype(*fn)>>(sym);
    };
    bind(&api.CreateEx, "nvjpegCreateEx");
    bind(&api.Destroy, "nvjpegDestroy");
    bind(&api.JpegStateCreate, "nvjpegJpegStateCreate");
    bind(&api.JpegStateDestroy, "nvjpegJpegStateDestroy");
    bind(&api.GetImageInfo, "nvjpegGetImageInfo");
    bind(&api.Decode, "nvjpegDecode");
    bind(&api.DecodeBatchedInitialize, "nvjpegDecodeBatchedInitialize");
    bind(&api.DecodeBatched, "nvjpegDecodeBatched");
    bind(&api.JpegStreamCreate, "nvjpegJpegStreamCreate");
    bind(&api.JpegStreamDestroy, "nvjpegJpegStreamDestroy");
    bind(&api.JpegStreamParse, "nvjpegJpegStreamParse");
    bind(&api.DecodeBatchedSupported, "nvjpegDecodeBatchedSupported");
    if (!missing.empty()) {
      status = Status::Unavailable("libnvjpeg lacks " + missing);
      dlclose(lib);
    }
  });
  if (!status.ok()) return status;
  return &api;
}

constexpr size_t kScratchAlign = 256;
constexpr size_t kMaxScratchBytes = size_t{1} << 30;  // decoded images held at once

class NvJpegDecoder : public JpegDecoder {
 public:
  NvJpegDecoder(const NvJpegApi* api, int index) : api_(api), index_(index) {}

  ~NvJpegDecoder() override {
    DeviceScope scope(index_);
    if (scratch_ != nullptr) cudaFree(scratch_);
    if (parsed_ != nullptr) api_->JpegStreamDestroy(parsed_);
    if (batched_state_ != nullptr) api_->JpegStateDestroy(batched_state_);
    if (single_state_ != nullptr) api_->JpegStateDestroy(single_state_);
    if (batched_ != nullptr) api_->Destroy(batched_);
    if (single_ != nullptr) api_->Destroy(single_);
  }

  Status Init() {
    DeviceScope scope(index_);
    SATURATE_RETURN_IF_ERROR(scope.status());
    if (nvjpegStatus_t s = api_->CreateEx(NVJPEG_BACKEND_DEFAULT, nullptr, nullptr, 0, &single_);
        s != kNvjpegSuccess) {
      single_ = nullptr;
      return Status::Unavailable("nvjpegCreateEx(default) failed: status " + std::to_string(s));
    }
    if (nvjpegStatus_t s = api_->JpegStateCreate(single_, &single_state_); s != kNvjpegSuccess) {
      return Status::Unavailable("nvjpegJpegStateCreate failed: status " + std::to_string(s));
    }
    // The hardware engine where the GPU has one, else the batched GPU-assisted decode.
    for (nvjpegBackend_t b : {NVJPEG_BACKEND_HARDWARE, NVJPEG_BACKEND_GPU_HYBRID}) {
      nvjpegHandle_t h = nullptr;
      if (api_->CreateEx(b, nullptr, nullptr, 0, &h) != kNvjpegSuccess) continue;
      nvjpegJpegState_t st = nullptr;
      if (api_->JpegStateCreate(h, &st) != kNvjpegSuccess) {
        api_->Destroy(h);
        continue;
      }
      batched_ = h;
      batched_state_ = st;
      hardware_ = b == NVJPEG_BACKEND_HARDWARE;
      break;
    }
    if (hardware_ && api_->JpegStreamCreate(batched_, &parsed_) != kNvjpegSuccess) {
      parsed_ = nullptr;
    }
    return Status::OK();
  }

  std::string backend() const override {
    if (batched_ == nullptr) return "nvjpeg default";
    return hardware_ ? "nvjpeg hardware" : "nvjpeg gpu_hybrid";
  }

  Status Decode(std::span<const JpegJob> jobs, int out_width, int out_height, Stream stream,
                std::vector<uint8_t>* failed) override {
    DeviceScope scope(index_);
    SATURATE_RETURN_IF_ERROR(scope.status());
    failed->assign(jobs.size(), 0);
    auto* cu_stream = static_cast<cudaStream_t>(stream);
    // Sizes first, then groups whose decoded images fit the scratch.
    std::vector<Image> images(jobs.size());
    for (size_t k = 0; k < jobs.size(); ++k) {
      const JpegJob& job = jobs[k];
      int n = 0;
      nvjpegChromaSubsampling_t sub = 0;
      int w[kMaxComponent] = {}, h[kMaxComponent] = {};
      const auto* data = reinterpret_cast<const unsigned char*>(job.encoded.data());
      if (api_->GetImageInfo(single_, data, job.encoded.size(), &n, &sub, w, h) != kNvjpegSuccess ||
          (n != 1 && n != 3) || w[0] <= 0 || h[0] <= 0 || job.crop.x < 0 || job.crop.y < 0 ||
          job.crop.width <= 0 || job.crop.height <= 0 || job.crop.x + job.crop.width > w[0] ||
          job.crop.y + job.crop.height > h[0] ||
          size_t(w[0]) * h[0] * 3 + kScratchAlign > kMaxScratchBytes) {
        (*failed)[k] = 1;
        continue;
      }
      images[k].width = w[0];
      images[k].height = h[0];
      images[k].bytes =
          (size_t(w[0]) * h[0] * 3 + kScratchAlign - 1) / kScratchAlign * kScratchAlign;
    }
    size_t k = 0;
    while (k < jobs.size()) {
      size_t end = k, total = 0;
      while (end < jobs.size() && total + images[end].bytes <= kMaxScratchBytes) {
        total += images[end].bytes;
        ++end;
      }
      SATURATE_RETURN_IF_ERROR(
          DecodeGroup(jobs, k, end, total, &images, out_width, out_height, cu_stream, failed));
      k = end;
    }
    // Returns once the batch is decoded: the caller measures the rate, and a
    // failure inside a kernel surfaces here rather than on a later call.
    return CudaCheck(cudaStreamSynchronize(cu_stream), "cudaStreamSynchronize after nvJPEG",
                     index_);
  }

 private:
  struct Image {
    int width = 0, height = 0;
    size_t bytes = 0;  // in the scratch; 0 for a job already failed
    unsigned char* data = nullptr;
  };

  Status GrowScratch(size_t bytes, cudaStream_t stream) {
    if (bytes <= scratch_bytes_) return Status::OK();
    if (scratch_ != nullptr) {
      SATURATE_RETURN_IF_ERROR(
          CudaCheck(cudaStreamSynchronize(stream), "cudaStreamSynchronize", index_));
      cudaFree(scratch_);
      scratch_ = nullptr;
      scratch_bytes_ = 0;
    }
    SATURATE_RETURN_IF_ERROR(
        CudaCheck(cudaMalloc(&scratch_, bytes), "cudaMalloc(nvJPEG scratch)", index_));
    scratch_bytes_ = bytes;
    return Status::OK();
  }

  Status DecodeGroup(std::span<const JpegJob> jobs, size_t begin, size_t end, size_t total,
                     std::vector<Image>* images, int out_w, int out_h, cudaStream_t stream,
                     std::vector<uint8_t>* failed) {
    SATURATE_RETURN_IF_ERROR(GrowScratch(total, stream));
    size_t offset = 0;
    std::vector<size_t> batch, single;
    for (size_t k = begin; k < end; ++k) {
      Image& im = (*images)[k];
      if ((*failed)[k]) continue;
      im.data = static_cast<unsigned char*>(scratch_) + offset;
      offset += im.bytes;
      if (batched_ == nullptr) {
        single.push_back(k);
      } else if (hardware_) {
        int unsupported = 1;
        const auto* data = reinterpret_cast<const unsigned char*>(jobs[k].encoded.data());
        if (parsed_ != nullptr &&
            api_->JpegStreamParse(batched_, data, jobs[k].encoded.size(), 0, 0, parsed_) ==
                kNvjpegSuccess &&
            api_->DecodeBatchedSupported(batched_, parsed_, &unsupported) == kNvjpegSuccess &&
            unsupported == 0) {
          batch.push_back(k);
        } else {
          single.push_back(k);
        }
      } else {
        batch.push_back(k);
      }
    }
    if (!batch.empty()) {
      std::vector<const unsigned char*> data;
      std::vector<size_t> lengths;
      std::vector<nvjpegImage_t> dest;
      for (size_t k : batch) {
        data.push_back(reinterpret_cast<const unsigned char*>(jobs[k].encoded.data()));
        lengths.push_back(jobs[k].encoded.size());
        nvjpegImage_t d{};
        d.channel[0] = (*images)[k].data;
        d.pitch[0] = size_t((*images)[k].width) * 3;
        dest.push_back(d);
      }
      const int n = static_cast<int>(batch.size());
      if (api_->DecodeBatchedInitialize(batched_, batched_state_, n, 1, NVJPEG_OUTPUT_RGBI) !=
              kNvjpegSuccess ||
          api_->DecodeBatched(batched_, batched_state_, data.data(), lengths.data(), dest.data(),
                              stream) != kNvjpegSuccess) {
        // The whole batch goes one by one instead (one bad image fails a batch).
        single.insert(single.end(), batch.begin(), batch.end());
        batch.clear();
      }
    }
    for (size_t k : single) {
      nvjpegImage_t d{};
      d.channel[0] = (*images)[k].data;
      d.pitch[0] = size_t((*images)[k].width) * 3;
      const auto* data = reinterpret_cast<const unsigned char*>(jobs[k].encoded.data());
      if (api_->Decode(single_, single_state_, data, jobs[k].encoded.size(), NVJPEG_OUTPUT_RGBI, &d,
                       stream) != kNvjpegSuccess) {
        (*failed)[k] = 1;
      }
    }
    for (size_t k = begin; k < end; ++k) {
      if ((*failed)[k]) continue;
      const Image& im = (*images)[k];
      CropResizeArgs a;
      a.src = im.data;
      a.src_pitch = int64_t(im.width) * 3;
      a.crop_x = jobs[k].crop.x;
      a.crop_y = jobs[k].crop.y;
      a.crop_w = jobs[k].crop.width;
      a.crop_h = jobs[k].crop.height;
      a.dst = static_cast<uint8_t*>(jobs[k].dst);
      a.out_w = out_w;
      a.out_h = out_h;
      a.hflip = jobs[k].hflip;
      SATURATE_RETURN_IF_ERROR(CudaCheck(static_cast<cudaError_t>(LaunchCropResize(a, stream)),
                                         "crop-resize kernel", index_));
    }
    return Status::OK();
  }

  const NvJpegApi* api_;
  const int index_;
  nvjpegHandle_t single_ = nullptr;  // nvjpegDecode, default backend
  nvjpegJpegState_t single_state_ = nullptr;
  nvjpegHandle_t batched_ = nullptr;  // nvjpegDecodeBatched: hardware or GPU_HYBRID
  nvjpegJpegState_t batched_state_ = nullptr;
  nvjpegJpegStream_t parsed_ = nullptr;  // for nvjpegDecodeBatchedSupported
  bool hardware_ = false;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
};

}  // namespace

Result<std::unique_ptr<JpegDecoder>> OpenNvJpegDecoder(int index) {
  SATURATE_ASSIGN_OR_RETURN(const NvJpegApi* api, LoadNvJpeg());
  auto decoder = std::make_unique<NvJpegDecoder>(api, index);
  SATURATE_RETURN_IF_ERROR(decoder->Init());
  return std::unique_ptr<JpegDecoder>(std::move(decoder));
}

}  // namespace saturate::device::cuda
