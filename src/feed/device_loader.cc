#include "saturate/feed/device_loader.h"

#include <atomic>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "device/gpu.h"
#include "feed/sample_plan.h"
#include "saturate/format/reader.h"

namespace saturate::feed {
namespace {

constexpr size_t kAlign = 256;  // device regions start at this alignment (as cudaMalloc's)

size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Page-locked host memory for the Loader's batch pool.
class PinnedAllocator : public BatchAllocator {
 public:
  explicit PinnedAllocator(std::shared_ptr<device::Gpu> gpu) : gpu_(std::move(gpu)) {}
  Result<void*> Allocate(size_t bytes) override { return gpu_->AllocPinned(bytes); }
  void Free(void* ptr, size_t) override { gpu_->FreePinned(ptr); }

 private:
  std::shared_ptr<device::Gpu> gpu_;
};

// A device buffer and its two events: `ready` passes when the batch written
// into it is complete; `released` when the consumer's stream is done with it.
struct DeviceBuffer {
  void* data = nullptr;
  device::Event ready = nullptr;
  device::Event released = nullptr;
  bool released_recorded = false;
};

// The pool of device buffers, shared with every outstanding batch so that
// batches may outlive the loader. Guarded by `mu`.
class DevicePool {
 public:
  DevicePool(std::shared_ptr<device::Gpu> gpu, size_t buffer_bytes, size_t capacity)
      : gpu_(std::move(gpu)), buffer_bytes_(buffer_bytes), capacity_(capacity) {}

  ~DevicePool() {
    for (DeviceBuffer& b : free_) {
      if (b.released_recorded) (void)gpu_->Synchronize(b.released);
      (void)gpu_->Synchronize(b.ready);
      gpu_->FreeDevice(b.data);
      gpu_->DestroyEvent(b.ready);
      gpu_->DestroyEvent(b.released);
    }
  }

  // A free buffer, allocating one while under capacity; an error when the
  // consumer holds them all.
  Result<DeviceBuffer> Acquire() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_.empty()) {
      DeviceBuffer b = free_.back();
      free_.pop_back();
      return b;
    }
    if (allocated_ >= capacity_) {
      return Status::InvalidArgument("the consumer holds all " + std::to_string(capacity_) +
                                     " device batch buffers; release some or raise "
                                     "max_held_batches");
    }
    DeviceBuffer b;
    SATURATE_ASSIGN_OR_RETURN(b.data, gpu_->AllocDevice(buffer_bytes_));
    auto ready = gpu_->CreateEvent();
    auto released = gpu_->CreateEvent();
    if (!ready.ok() || !released.ok()) {
      gpu_->FreeDevice(b.data);
      if (ready.ok()) gpu_->DestroyEvent(*ready);
      if (released.ok()) gpu_->DestroyEvent(*released);
      return ready.ok() ? released.status() : ready.status();
    }
    b.ready = *ready;
    b.released = *released;
    ++allocated_;
    return b;
  }

  // Returns `b`; with a consumer stream, the buffer is reused only after
  // the work queued on that stream so far has run.
  void Release(DeviceBuffer b, std::optional<device::Stream> consumer) {
    b.released_recorded = consumer.has_value() && gpu_->Record(b.released, *consumer).ok();
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(b);
  }

  size_t allocated() const {
    std::lock_guard<std::mutex> lock(mu_);
    return allocated_;
  }
  device::Gpu& gpu() { return *gpu_; }

 private:
  std::shared_ptr<device::Gpu> gpu_;
  const size_t buffer_bytes_;
  const size_t capacity_;
  mutable std::mutex mu_;
  size_t allocated_ = 0;
  std::vector<DeviceBuffer> free_;
};

// Owns a DeviceBuffer while batches view it: the Batch's owner.
class HeldBuffer {
 public:
  HeldBuffer(std::shared_ptr<DevicePool> pool, DeviceBuffer buffer)
      : pool_(std::move(pool)), buffer_(buffer) {}
  ~HeldBuffer() { pool_->Release(buffer_, consumer_); }
  const DeviceBuffer& buffer() const { return buffer_; }
  void set_consumer(device::Stream stream) { consumer_ = stream; }

 private:
  std::shared_ptr<DevicePool> pool_;
  DeviceBuffer buffer_;
  std::optional<device::Stream> consumer_;  // unset while the batch is still in flight
};

// How an image field goes from the host's uint8 HWC to what was asked for.
struct ImageOnDevice {
  std::string field;
  ImageTransform requested;
  bool convert = false;  // false: uint8 HWC or channels_last, the host bytes as they are
};

bool NeedsKernel(const ImageTransform& t) {
  return t.dtype != DType::kUInt8 || t.layout == Layout::kCHW;
}

}  // namespace

class DeviceLoader::Impl {
 public:
  Impl(std::shared_ptr<device::Gpu> gpu, int prefetch)
      : gpu_(std::move(gpu)), prefetch_(prefetch) {}

  ~Impl() {
    DropInFlight();
    if (copy_stream_ != nullptr) gpu_->DestroyStream(copy_stream_);
  }

  Status Init(const LoaderOptions& options) {
    if (prefetch_ < 1) return Status::InvalidArgument("device prefetch must be at least 1");
    if (options.max_held_batches < 1) {
      return Status::InvalidArgument("max_held_batches must be at least 1");
    }
    // The schema says which fields are images; their conversion moves to the GPU.
    format::ReaderOptions reader;
    reader.remote = options.remote;
    SATURATE_ASSIGN_OR_RETURN(auto dataset, format::Dataset::Open(options.dataset, reader));
    LoaderOptions host = options;
    for (const format::FieldSpec& spec : dataset->schema().fields) {
      if (spec.kind != format::FieldKind::kImage) continue;
      const FieldOptions* given = FindOptions(options.fields, spec.name);
      FieldOptions f = given != nullptr ? *given : FieldOptions{spec.name};
      images_.push_back({spec.name, f.image, NeedsKernel(f.image)});
      f.image.dtype = DType::kUInt8;
      f.image.normalize = false;
      f.image.layout = Layout::kHWC;
      std::erase_if(host.fields, [&](const FieldOptions& o) { return o.field == spec.name; });
      host.fields.push_back(f);
    }
    dataset.reset();
    host.allocator = std::make_shared<PinnedAllocator>(gpu_);
    // The stage holds `prefetch_` batches in flight and up to two whose copy may still run.
    host.max_held_batches = prefetch_ + 2;
    SATURATE_ASSIGN_OR_RETURN(host_, Loader::Open(host));

    // A device buffer holds every host tensor plus each converted image.
    size_t bytes = host_->batch_bytes() + kAlign * 3 * (host_->schema().fields.size() + 1);
    for (const ImageOnDevice& image : images_) {
      if (!image.convert) continue;
      const ImageTransform& t = image.requested;
      bytes += AlignUp(options.batch_size * t.height * t.width * 3 * format::DTypeSize(t.dtype));
    }
    pool_ = std::make_shared<DevicePool>(gpu_, bytes,
                                         static_cast<size_t>(prefetch_ + options.max_held_batches));
    SATURATE_ASSIGN_OR_RETURN(copy_stream_, gpu_->CreateStream());
    return Status::OK();
  }

  void set_stream(device::Stream stream) { stream_ = stream; }

  Result<std::optional<Batch>> Next() {
    const device::Stream stream = stream_;
    Retire(/*keep=*/1);
    TopUp();
    if (in_flight_.empty()) return std::optional<Batch>();  // the epoch's end
    InFlight entry = std::move(in_flight_.front());
    in_flight_.pop_front();
    if (!entry.error.ok()) {
      delivered_.fetch_add(1);
      return entry.error;
    }
    if (Status s = gpu_->StreamWait(stream, entry.held->buffer().ready); !s.ok()) {
      (void)gpu_->Synchronize(entry.held->buffer().ready);  // before the pinned buffer goes
      return s;
    }
    entry.held->set_consumer(stream);
    retiring_.push_back({std::move(entry.host), entry.held->buffer().ready});
    delivered_.fetch_add(1);
    return std::optional<Batch>(std::move(entry.batch));
  }

  bool WaitForNext(std::chrono::nanoseconds timeout) {
    return !in_flight_.empty() || host_->WaitForNext(timeout);
  }

  Status SetEpoch(uint64_t epoch) {
    DropInFlight();
    SATURATE_RETURN_IF_ERROR(host_->SetEpoch(epoch));
    epoch_.store(epoch);
    delivered_.store(0);
    return Status::OK();
  }

  LoaderState state() const {
    LoaderState s = host_->state();
    s.epoch = epoch_.load();
    s.batches_done = delivered_.load();
    return s;
  }

  Status Restore(const LoaderState& state) {
    DropInFlight();
    SATURATE_RETURN_IF_ERROR(host_->Restore(state));
    epoch_.store(state.epoch);
    delivered_.store(state.batches_done);
    return Status::OK();
  }

  LoaderStats stats() const {
    LoaderStats s = host_->stats();
    s.h2d_bytes = h2d_bytes_.load();
    s.h2d_batches = h2d_batches_.load();
    s.device_buffers = pool_->allocated();
    return s;
  }

  const Loader& host() const { return *host_; }
  int device_index() const { return gpu_->index(); }

 private:
  // A batch whose copy has been issued (or an error in its place).
  struct InFlight {
    Status error;
    Batch host;  // keeps the pinned buffer until the copy has run
    std::shared_ptr<HeldBuffer> held;
    Batch batch;  // the device batch handed to the consumer
  };
  struct Retiring {
    Batch host;
    device::Event ready;
  };

  // Issues copies until `prefetch_` batches are in flight, blocking only
  // while none is.
  void TopUp() {
    while (static_cast<int>(in_flight_.size()) < prefetch_) {
      if (!in_flight_.empty() && !host_->WaitForNext(std::chrono::nanoseconds(0))) return;
      auto next = host_->Next();
      InFlight entry;
      if (!next.ok()) {
        entry.error = next.status();
      } else if (!next->has_value()) {
        return;  // the epoch's end: deliver what is in flight, then nullopt
      } else {
        entry.host = std::move(**next);
        entry.error = Issue(&entry);
        if (!entry.error.ok() && entry.held != nullptr) {
          // Copies already queued still read the pinned buffer: let them finish first.
          (void)gpu_->Record(entry.held->buffer().ready, copy_stream_);
          (void)gpu_->Synchronize(entry.held->buffer().ready);
        }
      }
      in_flight_.push_back(std::move(entry));
    }
  }

  // Copies `e->host` into a device buffer on the copy stream, converts its
  // images and records the buffer's `ready` event.
  Status Issue(InFlight* e) {
    SATURATE_ASSIGN_OR_RETURN(DeviceBuffer buffer, pool_->Acquire());
    e->held = std::make_shared<HeldBuffer>(pool_, buffer);
    device::Gpu& gpu = *gpu_;
    if (buffer.released_recorded) {
      SATURATE_RETURN_IF_ERROR(gpu.StreamWait(copy_stream_, buffer.released));
    }
    auto* base = static_cast<std::byte*>(buffer.data);
    size_t offset = 0;
    std::vector<TensorView> tensors;
    for (const TensorView& t : e->host.tensors()) {
      TensorView d = t;
      d.cuda_device = gpu.index();
      d.data = base + offset;
      SATURATE_RETURN_IF_ERROR(gpu.CopyToDevice(d.data, t.data, t.bytes(), copy_stream_));
      offset += AlignUp(t.bytes());
      h2d_bytes_.fetch_add(t.bytes());
      if (const ImageOnDevice* image = FindImage(t.name)) {
        SATURATE_RETURN_IF_ERROR(ConvertImage(*image, t, base, &offset, &d));
      }
      tensors.push_back(std::move(d));
    }
    SATURATE_RETURN_IF_ERROR(gpu.Record(buffer.ready, copy_stream_));
    h2d_batches_.fetch_add(1);
    e->batch.epoch_ = e->host.epoch();
    e->batch.index_ = e->host.index();
    e->batch.size_ = e->host.size();
    e->batch.tensors_ = std::move(tensors);
    e->batch.owner_ = e->held;
    return Status::OK();
  }

  // `d` views the staged uint8 HWC pixels of `t`; makes it the requested
  // tensor, converting on the copy stream into the next region if needed.
  Status ConvertImage(const ImageOnDevice& image, const TensorView& t, std::byte* base,
                      size_t* offset, TensorView* d) {
    const ImageTransform& want = image.requested;
    const int64_t batch = t.shape[0];
    d->dtype = want.dtype;
    d->shape = want.layout == Layout::kHWC
                   ? std::vector<int64_t>{batch, want.height, want.width, 3}
                   : std::vector<int64_t>{batch, 3, want.height, want.width};
    d->strides = ImageStrides(want.layout, want.height, want.width);
    if (!image.convert) return Status::OK();
    device::PixelConvert spec;
    spec.batch = batch;
    spec.height = want.height;
    spec.width = want.width;
    spec.type = PixelTypeOf(want.dtype);
    spec.layout = ImageLayout(want.layout);
    spec.normalize = want.normalize;
    spec.mean = want.mean;
    spec.std = want.std;
    void* staged = d->data;
    d->data = base + *offset;
    *offset += AlignUp(d->bytes());
    return gpu_->ConvertPixels(spec, staged, d->data, copy_stream_);
  }

  const ImageOnDevice* FindImage(const std::string& name) const {
    for (const ImageOnDevice& image : images_) {
      if (image.field == name) return &image;
    }
    return nullptr;
  }

  // Frees host buffers whose copy has run, keeping at most `keep` whose copy
  // may still be running (waiting for the oldest beyond that).
  void Retire(size_t keep) {
    while (!retiring_.empty()) {
      Retiring& r = retiring_.front();
      auto done = gpu_->Done(r.ready);
      if (!(done.ok() && *done)) {
        if (retiring_.size() <= keep) return;
        (void)gpu_->Synchronize(r.ready);
      }
      retiring_.pop_front();
    }
  }

  // Discards batches copied ahead (SetEpoch, Restore, destruction).
  void DropInFlight() {
    for (InFlight& e : in_flight_) {
      if (e.held != nullptr) (void)gpu_->Synchronize(e.held->buffer().ready);
    }
    in_flight_.clear();
    Retire(/*keep=*/0);
  }

  std::shared_ptr<device::Gpu> gpu_;
  const int prefetch_;
  std::vector<ImageOnDevice> images_;
  std::unique_ptr<Loader> host_;
  std::shared_ptr<DevicePool> pool_;
  device::Stream copy_stream_ = nullptr;
  device::Stream stream_ = nullptr;  // the consumer's
  std::deque<InFlight> in_flight_;
  std::deque<Retiring> retiring_;
  std::atomic<uint64_t> epoch_{0};
  std::atomic<uint64_t> delivered_{0};
  std::atomic<uint64_t> h2d_bytes_{0};
  std::atomic<uint64_t> h2d_batches_{0};
};

Result<std::unique_ptr<DeviceLoader>> DeviceLoader::Open(const LoaderOptions& options,
                                                         const DeviceOptions& device) {
  SATURATE_ASSIGN_OR_RETURN(int index, device::ParseCudaDevice(device.device));
  SATURATE_ASSIGN_OR_RETURN(std::shared_ptr<device::Gpu> gpu, device::OpenCudaGpu(index));
  return Open(options, device.prefetch, std::move(gpu));
}

Result<std::unique_ptr<DeviceLoader>> DeviceLoader::Open(const LoaderOptions& options, int prefetch,
                                                         std::shared_ptr<device::Gpu> gpu) {
  auto impl = std::make_unique<Impl>(std::move(gpu), prefetch);
  SATURATE_RETURN_IF_ERROR(impl->Init(options));
  return std::unique_ptr<DeviceLoader>(new DeviceLoader(std::move(impl)));
}

DeviceLoader::DeviceLoader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DeviceLoader::~DeviceLoader() = default;

void DeviceLoader::set_stream(void* stream) { impl_->set_stream(stream); }
uint64_t DeviceLoader::batches_per_epoch() const { return impl_->host().batches_per_epoch(); }
Result<std::optional<Batch>> DeviceLoader::Next() { return impl_->Next(); }
bool DeviceLoader::WaitForNext(std::chrono::nanoseconds timeout) {
  return impl_->WaitForNext(timeout);
}
Status DeviceLoader::SetEpoch(uint64_t epoch) { return impl_->SetEpoch(epoch); }
LoaderState DeviceLoader::state() const { return impl_->state(); }
Status DeviceLoader::Restore(const LoaderState& state) { return impl_->Restore(state); }
LoaderStats DeviceLoader::stats() const { return impl_->stats(); }
const Loader& DeviceLoader::host() const { return impl_->host(); }
int DeviceLoader::device_index() const { return impl_->device_index(); }

}  // namespace saturate::feed
