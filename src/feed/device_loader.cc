#include "saturate/feed/device_loader.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/thread_name.h"
#include "device/gpu.h"
#include "feed/decode_split.h"
#include "feed/image_deferral.h"
#include "feed/sample_plan.h"
#include "saturate/format/reader.h"
#include "saturate/trace/trace.h"

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
  bool read_by_device() const override { return true; }

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

// Its value is the "decode_mode" of the loader_decode record (docs/trace.md).
enum class DecodeMode { kCpu = 0, kGpu = 1, kAuto = 2 };

std::atomic<int64_t> next_decode_trace_id{0};

Result<DecodeMode> ParseDecode(const std::string& decode) {
  if (decode == "cpu") return DecodeMode::kCpu;
  if (decode == "gpu") return DecodeMode::kGpu;
  if (decode == "auto") return DecodeMode::kAuto;
  return Status::InvalidArgument("decode must be \"cpu\", \"gpu\" or \"auto\", not \"" + decode +
                                 "\"");
}

// A JPEG a worker handed over: its bytes (copied), crop and flip.
struct TakenImage {
  bool present = false;
  uint64_t record = 0;
  image::CropRect crop;  // in `bytes`' pixels
  bool hflip = false;
  bool cut = false;              // `bytes` is cut around the crop
  std::vector<std::byte> bytes;  // reused from batch to batch
};

// The workers' side of the GPU decode: which samples go to the GPU, and
// what they left for it, per batch buffer (keyed by the image field's slot
// 0) and slot. Workers write distinct slots; the consumer collects a batch
// only once its workers are done with it. The map's mutex guards only the
// lookup; an entry's slots are stable once made.
class GpuDeferral : public ImageDeferral {
 public:
  explicit GpuDeferral(uint64_t batch_size) : batch_size_(batch_size) {}

  void set_fraction(double f) { fraction_.store(std::clamp(f, 0.0, 1.0)); }
  double fraction() const { return fraction_.load(); }

  // Spreads the GPU's share evenly over the batch (Bresenham), so that every
  // worker's chunk holds some of each.
  bool Wants(uint64_t slot) override {
    const double f = fraction_.load();
    if (f >= 1) return true;
    if (f <= 0) return false;
    return std::floor((slot + 1) * f) > std::floor(slot * f);
  }

  void Take(const DeferredImage& image) override {
    TakenImage& t = Slot(image.slot0, image.slot);
    t.bytes.assign(image.encoded.begin(), image.encoded.end());
    t.record = image.record;
    t.crop = image.crop;
    t.hflip = image.hflip;
    t.cut = image.cut;
    t.present = true;
  }

  void Forget(const std::byte* slot0, uint64_t slot) override {
    std::vector<TakenImage>* entry = Find(slot0);
    if (entry != nullptr && slot < entry->size()) (*entry)[slot].present = false;
  }

  // The batch buffer's entries (nullptr if none was ever taken there).
  std::vector<TakenImage>* Find(const std::byte* slot0) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(slot0);
    return it == entries_.end() ? nullptr : it->second.get();
  }

 private:
  TakenImage& Slot(const std::byte* slot0, uint64_t slot) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& entry = entries_[slot0];
    if (entry == nullptr) entry = std::make_unique<std::vector<TakenImage>>(batch_size_);
    return (*entry)[slot];
  }

  const uint64_t batch_size_;
  std::atomic<double> fraction_{1.0};
  std::mutex mu_;
  std::map<const std::byte*, std::unique_ptr<std::vector<TakenImage>>> entries_;
};

}  // namespace

class DeviceLoader::Impl {
 public:
  Impl(std::shared_ptr<device::Gpu> gpu, int prefetch, DecodeMode mode)
      : gpu_(std::move(gpu)), prefetch_(prefetch), mode_(mode) {}

  ~Impl() {
    DropInFlight();
    StopIssueThread();
    // The last totals, as the host loader writes its last "loader" record.
    if (host_ != nullptr && !images_.empty() && trace::Enabled()) TraceDecode(/*force=*/true);
    host_.reset();  // the workers stop before the deferral and decoder go
    decoder_.reset();
    if (copy_stream_ != nullptr) gpu_->DestroyStream(copy_stream_);
  }

  Status Init(const LoaderOptions& options) {
    if (prefetch_ < 1) return Status::InvalidArgument("device prefetch must be at least 1");
    if (options.max_held_batches < 1) {
      return Status::InvalidArgument("max_held_batches must be at least 1");
    }
    // The schema says which fields are images; their conversion moves to the GPU.
    SATURATE_ASSIGN_OR_RETURN(auto dataset, Loader::OpenDataset(options));
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
    dataset_ = options.dataset;
    skip_bad_ = options.skip_bad;
    SATURATE_RETURN_IF_ERROR(OpenDecoder(options.batch_size, &host));
    host.allocator = std::make_shared<PinnedAllocator>(gpu_);
    // The stage holds `prefetch_` batches in flight and up to two whose copy may still run.
    host.max_held_batches = prefetch_ + 2;
    SATURATE_ASSIGN_OR_RETURN(host_, Loader::Open(host, std::move(dataset)));

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
    if (deferral_ != nullptr) {
      issue_thread_ = std::thread([this] {
        base::NameThisThread("h2d");
        IssueLoop();
      });
    }
    return Status::OK();
  }

  void set_stream(device::Stream stream) { stream_ = stream; }

  Result<std::optional<Batch>> Next() {
    const device::Stream stream = stream_;
    Retire(/*keep=*/1);
    TopUp();
    if (in_flight_.empty()) return std::optional<Batch>();  // the epoch's end
    WaitIssued(in_flight_.front(), std::chrono::nanoseconds::max());
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
    if (!in_flight_.empty()) return WaitIssued(in_flight_.front(), timeout);
    return host_->WaitForNext(timeout);
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
    std::lock_guard<std::mutex> lock(decode_mu_);
    s.decode = mode_ == DecodeMode::kGpu ? "gpu" : mode_ == DecodeMode::kAuto ? "auto" : "cpu";
    s.decode_backend = decode_backend_;
    s.gpu_decoded = gpu_decoded_;
    s.gpu_decode_ns = gpu_decode_ns_;
    s.gpu_decode_fallbacks = gpu_fallbacks_;
    s.gpu_decode_cut = gpu_cut_;
    s.skipped += gpu_skipped_;
    s.gpu_decode_fraction = deferral_ != nullptr ? deferral_->fraction() : 0.0;
    s.cpu_decode_images_per_s_per_thread = split_.cpu_images_per_s_per_thread();
    s.gpu_decode_images_per_s = split_.gpu_images_per_s();
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
    Batch batch;          // the device batch handed to the consumer
    bool issued = false;  // under issue_mu_: Issue() is done with it
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
        in_flight_.push_back(std::move(entry));
        SubmitIssue(&in_flight_.back());
        continue;
      }
      entry.issued = true;
      in_flight_.push_back(std::move(entry));
    }
  }

  // Issues `e` on the issue thread where there is one (GPU decode), else here.
  void SubmitIssue(InFlight* e) {
    if (!issue_thread_.joinable()) {
      IssueOrSettle(e);
      std::lock_guard<std::mutex> lock(issue_mu_);
      e->issued = true;
      return;
    }
    std::lock_guard<std::mutex> lock(issue_mu_);
    to_issue_.push_back(e);
    issue_cv_.notify_all();
  }

  // With GPU decode, Issue() waits for nvJPEG; on this thread it overlaps
  // the consumer's work on the batches before. Entries are issued in order;
  // in_flight_'s elements stay put while queued here (a deque's push_back
  // keeps references, and the consumer pops an entry only once issued).
  void IssueLoop() {
    std::unique_lock<std::mutex> lock(issue_mu_);
    while (true) {
      issue_cv_.wait(lock, [&] { return stop_issuing_ || !to_issue_.empty(); });
      if (to_issue_.empty()) return;  // stopping, and nothing is left
      InFlight* e = to_issue_.front();
      to_issue_.pop_front();
      lock.unlock();
      IssueOrSettle(e);
      lock.lock();
      e->issued = true;
      issued_cv_.notify_all();
    }
  }

  // Whether `e` was issued within `timeout`.
  bool WaitIssued(const InFlight& e, std::chrono::nanoseconds timeout) {
    std::unique_lock<std::mutex> lock(issue_mu_);
    if (timeout == std::chrono::nanoseconds::max()) {
      issued_cv_.wait(lock, [&] { return e.issued; });
      return true;
    }
    return issued_cv_.wait_for(lock, timeout, [&] { return e.issued; });
  }

  void StopIssueThread() {
    if (!issue_thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(issue_mu_);
      stop_issuing_ = true;
      issue_cv_.notify_all();
    }
    issue_thread_.join();
  }

  void IssueOrSettle(InFlight* e) {
    e->error = Issue(e);
    if (!e->error.ok() && e->held != nullptr) {
      // Copies already queued still read the pinned buffer: let them finish first.
      (void)gpu_->Record(e->held->buffer().ready, copy_stream_);
      (void)gpu_->Synchronize(e->held->buffer().ready);
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
    std::vector<uint64_t> unreadable;  // rows whose JPEG no decoder could read (skip_bad)
    for (const TensorView& t : e->host.tensors()) {
      TensorView d = t;
      d.cuda_device = gpu.index();
      d.data = base + offset;
      SATURATE_RETURN_IF_ERROR(gpu.CopyToDevice(d.data, t.data, t.bytes(), copy_stream_));
      offset += AlignUp(t.bytes());
      h2d_bytes_.fetch_add(t.bytes());
      if (deferral_ != nullptr && FindImage(t.name) != nullptr) {
        SATURATE_RETURN_IF_ERROR(DecodeOnGpu(*e, t, d.data, &unreadable));
      }
      tensors.push_back(std::move(d));
    }
    uint64_t size = e->host.size();
    if (!unreadable.empty()) SATURATE_RETURN_IF_ERROR(DropRows(unreadable, &tensors, &size));
    for (TensorView& d : tensors) {
      if (const ImageOnDevice* image = FindImage(d.name)) {
        const TensorView staged = d;
        SATURATE_RETURN_IF_ERROR(ConvertImage(*image, staged, base, &offset, &d));
      }
    }
    SATURATE_RETURN_IF_ERROR(gpu.Record(buffer.ready, copy_stream_));
    h2d_batches_.fetch_add(1);
    if (mode_ == DecodeMode::kAuto && deferral_ != nullptr) UpdateSplit();
    if (!images_.empty() && trace::Enabled()) TraceDecode(/*force=*/false);
    e->batch.epoch_ = e->host.epoch();
    e->batch.index_ = e->host.index();
    e->batch.size_ = size;
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

  // Opens the GPU decoder for "gpu"/"auto" and hands the host loader the
  // deferral through which its workers pass JPEGs on.
  Status OpenDecoder(uint64_t batch_size, LoaderOptions* host) {
    decode_backend_ = "libjpeg-turbo (cpu)";
    if (mode_ == DecodeMode::kCpu || images_.empty()) return Status::OK();
    auto decoder = gpu_->OpenJpegDecoder();
    if (!decoder.ok()) {
      if (mode_ == DecodeMode::kGpu) {
        return decoder.status().WithContext("decode=\"gpu\"");
      }
      decode_backend_ =
          "libjpeg-turbo (cpu); GPU decode unavailable: " + decoder.status().message();
      return Status::OK();
    }
    decoder_ = std::move(*decoder);
    decode_backend_ = decoder_->backend();
    deferral_ = std::make_shared<GpuDeferral>(batch_size);
    deferral_->set_fraction(mode_ == DecodeMode::kGpu ? 1.0 : split_.gpu_fraction());
    host->image_deferral = deferral_;
    return Status::OK();
  }

  // Decodes the JPEGs the workers left for the GPU in host image tensor `t`
  // into `dst` (its copy on the device, already enqueued on the copy
  // stream); those nvJPEG refuses are decoded on the CPU and copied. A JPEG
  // whose header read but whose data neither decoder can read is an error
  // naming its record, or with skip_bad its row goes to `unreadable`.
  Status DecodeOnGpu(const InFlight& e, const TensorView& t, void* dst,
                     std::vector<uint64_t>* unreadable) {
    std::vector<TakenImage>* taken = deferral_->Find(static_cast<const std::byte*>(t.data));
    if (taken == nullptr) return Status::OK();
    const int height = static_cast<int>(t.shape[1]);
    const int width = static_cast<int>(t.shape[2]);
    const size_t sample_bytes = size_t(height) * width * 3;
    const std::vector<uint32_t>& kept = e.host.source_slots_;
    const uint64_t size = e.host.size();
    jobs_.clear();
    job_rows_.clear();
    job_records_.clear();
    uint64_t cut = 0;
    for (uint64_t slot = 0; slot < taken->size(); ++slot) {
      TakenImage& img = (*taken)[slot];
      if (!img.present) continue;
      img.present = false;
      uint64_t row = slot;
      if (!kept.empty()) {  // samples were skipped: where this one moved to
        auto it = std::lower_bound(kept.begin(), kept.end(), slot);
        if (it == kept.end() || *it != slot) continue;
        row = static_cast<uint64_t>(it - kept.begin());
      }
      if (row >= size) continue;
      device::JpegJob job;
      job.encoded = img.bytes;
      job.crop = img.crop;
      job.hflip = img.hflip;
      job.dst = static_cast<std::byte*>(dst) + row * sample_bytes;
      jobs_.push_back(job);
      job_rows_.push_back(row);
      job_records_.push_back(img.record);
      cut += img.cut;
    }
    if (jobs_.empty()) return Status::OK();
    const auto t0 = std::chrono::steady_clock::now();
    SATURATE_RETURN_IF_ERROR(decoder_->Decode(jobs_, width, height, copy_stream_, &failed_));
    const uint64_t ns = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count());
    uint64_t fallbacks = 0, skipped = 0;
    for (size_t k = 0; k < jobs_.size(); ++k) {
      if (!failed_[k]) continue;
      // nvJPEG refused it: the CPU path's decode into the pinned slot, then its copy.
      ++fallbacks;
      auto* host_slot = static_cast<uint8_t*>(t.data) + job_rows_[k] * sample_bytes;
      Status s = image::DecodeCropResize(jobs_[k].encoded, jobs_[k].crop, width, height,
                                         jobs_[k].hflip, host_slot, &cpu_scratch_);
      if (!s.ok() && skip_bad_) {
        unreadable->push_back(job_rows_[k]);
        ++skipped;
        continue;
      }
      if (!s.ok()) {
        return s.WithContext("field '" + t.name + "': decode (GPU stage)")
            .WithContext(dataset_ + ": record " + std::to_string(job_records_[k]));
      }
      SATURATE_RETURN_IF_ERROR(
          gpu_->CopyToDevice(jobs_[k].dst, host_slot, sample_bytes, copy_stream_));
    }
    std::lock_guard<std::mutex> lock(decode_mu_);
    gpu_decoded_ += jobs_.size() - fallbacks;
    gpu_fallbacks_ += fallbacks - skipped;
    gpu_skipped_ += skipped;
    gpu_cut_ += cut;
    gpu_decode_ns_ += ns;
    return Status::OK();
  }

  // Removes `rows` (skip_bad's unreadable JPEGs) from every tensor of a batch
  // on the device, as the host loader compacts the samples it skips: each
  // later row moves up, one non-overlapping copy per row on the copy stream.
  Status DropRows(std::vector<uint64_t> rows, std::vector<TensorView>* tensors, uint64_t* size) {
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    for (TensorView& d : *tensors) {
      const size_t row_bytes = *size == 0 ? 0 : d.bytes() / *size;
      const bool rows_whole =
          d.strides.empty() || size_t(d.strides[0]) * format::DTypeSize(d.dtype) == row_bytes;
      if (d.shape.empty() || d.shape[0] != static_cast<int64_t>(*size) || !rows_whole) {
        return Status::Internal("field '" + d.name + "': cannot drop rows of a strided tensor");
      }
      auto* data = static_cast<std::byte*>(d.data);
      uint64_t to = 0;
      for (uint64_t from = 0, next_bad = 0; from < *size; ++from) {
        if (next_bad < rows.size() && rows[next_bad] == from) {
          ++next_bad;
          continue;
        }
        if (to != from) {
          SATURATE_RETURN_IF_ERROR(gpu_->CopyOnDevice(
              data + to * row_bytes, data + from * row_bytes, row_bytes, copy_stream_));
        }
        ++to;
      }
      d.shape[0] = static_cast<int64_t>(to);
    }
    *size -= rows.size();
    return Status::OK();
  }

  // Once a second while tracing (and once more when the loader closes): where
  // the images were decoded, for watch and doctor. A "loader_decode"
  // counters record beside the host loader's "loader" record; its keys are
  // docs/trace.md's, read by src/ranks (saturate_loader_* series) and by
  // doctor's features. Written for decode="cpu" too, so doctor can tell a
  // GPU-fed loader that decodes JPEG on the CPU.
  void TraceDecode(bool force) {
    const int64_t now = trace::NowNs();
    if (!force && now - last_trace_ns_ < 1'000'000'000) return;
    last_trace_ns_ = now;
    const uint64_t samples = host_->stats().samples;  // outside decode_mu_, as UpdateSplit
    std::lock_guard<std::mutex> lock(decode_mu_);
    auto i = [](uint64_t v) { return static_cast<int64_t>(v); };
    // Images the CPU decoded: every image field of every sample, less those
    // nvJPEG did (its refusals, decoded in the stage on the CPU, count here).
    const uint64_t images = samples * images_.size();
    const uint64_t cpu_decoded = images > gpu_decoded_ ? images - gpu_decoded_ : 0;
    const double fraction = deferral_ != nullptr ? deferral_->fraction() : 0.0;
    trace::RecordCounters(
        "loader_decode",
        {{"decoder_id", trace_id_},
         {"device", gpu_->index()},
         {"decode_mode", static_cast<int64_t>(mode_)},
         {"gpu_decoder", decoder_ != nullptr ? 1 : 0},
         {"cpu_decoded", i(cpu_decoded)},
         {"gpu_decoded", i(gpu_decoded_)},
         {"gpu_decode_ns", i(gpu_decode_ns_)},
         {"gpu_decode_fallbacks", i(gpu_fallbacks_)},
         {"gpu_decode_cut", i(gpu_cut_)},
         {"gpu_permille", static_cast<int64_t>(std::lround(fraction * 1000))},
         {"cpu_per_s_per_thread", static_cast<int64_t>(split_.cpu_images_per_s_per_thread())},
         {"gpu_per_s", static_cast<int64_t>(split_.gpu_images_per_s())}});
  }

  // decode="auto": feeds the last batch's rates to the split controller.
  void UpdateSplit() {
    const LoaderStats h = host_->stats();
    std::lock_guard<std::mutex> lock(decode_mu_);
    const uint64_t gpu_images = gpu_decoded_ - split_gpu_images_;
    const uint64_t all_images = h.samples - split_samples_;
    const uint64_t cpu_images = all_images > gpu_images ? all_images - gpu_images : 0;
    split_.Observe(cpu_images, h.decode_ns - split_decode_ns_, h.threads, gpu_images,
                   gpu_decode_ns_ - split_gpu_ns_);
    split_samples_ = h.samples;
    split_decode_ns_ = h.decode_ns;
    split_gpu_images_ = gpu_decoded_;
    split_gpu_ns_ = gpu_decode_ns_;
    deferral_->set_fraction(split_.gpu_fraction());
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
      WaitIssued(e, std::chrono::nanoseconds::max());
      if (e.held != nullptr) (void)gpu_->Synchronize(e.held->buffer().ready);
    }
    in_flight_.clear();
    Retire(/*keep=*/0);
  }

  std::shared_ptr<device::Gpu> gpu_;
  const int prefetch_;
  const DecodeMode mode_;
  std::vector<ImageOnDevice> images_;
  // GPU decode (null with decode="cpu" or where nvJPEG is unavailable).
  std::shared_ptr<GpuDeferral> deferral_;
  std::unique_ptr<device::JpegDecoder> decoder_;
  std::vector<device::JpegJob> jobs_;  // the issuing thread's, reused
  std::vector<uint64_t> job_rows_, job_records_;
  std::vector<uint8_t> failed_;
  image::DecodeScratch cpu_scratch_;  // for images nvJPEG refuses
  mutable std::mutex decode_mu_;      // guards the counters and split_ below
  std::string decode_backend_;
  DecodeSplit split_;
  uint64_t gpu_decoded_ = 0, gpu_decode_ns_ = 0, gpu_fallbacks_ = 0, gpu_skipped_ = 0, gpu_cut_ = 0;
  std::string dataset_;  // for errors naming a record
  bool skip_bad_ = false;
  uint64_t split_samples_ = 0, split_decode_ns_ = 0, split_gpu_images_ = 0, split_gpu_ns_ = 0;
  int64_t last_trace_ns_ = 0;  // the issuing thread's
  // Tells the "loader_decode" records of a process's device loaders apart.
  const int64_t trace_id_ = next_decode_trace_id.fetch_add(1);
  std::unique_ptr<Loader> host_;
  std::shared_ptr<DevicePool> pool_;
  device::Stream copy_stream_ = nullptr;
  device::Stream stream_ = nullptr;  // the consumer's
  std::deque<InFlight> in_flight_;
  // GPU decode: Issue() on issue_thread_ (see IssueLoop).
  std::thread issue_thread_;
  std::mutex issue_mu_;
  std::condition_variable issue_cv_;   // to_issue_ has work, or stop
  std::condition_variable issued_cv_;  // an entry was issued
  std::deque<InFlight*> to_issue_;
  bool stop_issuing_ = false;
  std::deque<Retiring> retiring_;
  std::atomic<uint64_t> epoch_{0};
  std::atomic<uint64_t> delivered_{0};
  std::atomic<uint64_t> h2d_bytes_{0};
  std::atomic<uint64_t> h2d_batches_{0};
};

Result<std::unique_ptr<DeviceLoader>> DeviceLoader::Open(const LoaderOptions& options,
                                                         const DeviceOptions& device) {
  SATURATE_ASSIGN_OR_RETURN(int index, device::ParseCudaDevice(device.device));
  SATURATE_RETURN_IF_ERROR(ParseDecode(device.decode).status());
  SATURATE_ASSIGN_OR_RETURN(std::shared_ptr<device::Gpu> gpu, device::OpenCudaGpu(index));
  return Open(options, device.prefetch, std::move(gpu), device.decode);
}

Result<std::unique_ptr<DeviceLoader>> DeviceLoader::Open(const LoaderOptions& options, int prefetch,
                                                         std::shared_ptr<device::Gpu> gpu,
                                                         const std::string& decode) {
  SATURATE_ASSIGN_OR_RETURN(DecodeMode mode, ParseDecode(decode));
  auto impl = std::make_unique<Impl>(std::move(gpu), prefetch, mode);
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
