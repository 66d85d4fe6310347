#include "device/testing/fake_gpu.h"

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <thread>
#include <vector>

namespace saturate::testing {

// A stream: one thread running enqueued work in order.
class FakeGpu::FakeStream {
 public:
  FakeStream() : thread_([this] { Run(); }) {}
  ~FakeStream() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();  // runs what is queued first
  }

  void Enqueue(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      work_.push_back(std::move(fn));
      ++enqueued_;
    }
    cv_.notify_all();
  }

  void Drain() {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t target = enqueued_;
    cv_.wait(lock, [&] { return finished_ >= target; });
  }

 private:
  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stop_ || !work_.empty(); });
      if (work_.empty()) return;
      std::function<void()> fn = std::move(work_.front());
      work_.pop_front();
      lock.unlock();
      fn();
      fn = nullptr;  // what it captured may enqueue more work on release
      lock.lock();
      ++finished_;
      cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> work_;
  uint64_t enqueued_ = 0, finished_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

// An event passes generation g when the work recorded before its g-th
// Record() has run.
struct FakeGpu::FakeEvent {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t recorded = 0;
  uint64_t passed = 0;

  void WaitFor(uint64_t generation) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return passed >= generation; });
  }
};

FakeGpu::FakeGpu(std::chrono::microseconds copy_delay)
    : copy_delay_(copy_delay), default_stream_(std::make_unique<FakeStream>()) {}

FakeGpu::~FakeGpu() = default;

FakeGpu::FakeStream* FakeGpu::Get(Stream stream) {
  return stream == nullptr ? default_stream_.get() : static_cast<FakeStream*>(stream);
}

Result<void*> FakeGpu::Allocate(size_t bytes, std::unordered_set<void*>* live, uint64_t* count) {
  void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (p == nullptr)
    return Status::IOError("fake allocation of " + std::to_string(bytes) + " failed");
  std::lock_guard<std::mutex> lock(mu_);
  ++*count;
  live->insert(p);
  return p;
}

void FakeGpu::Release(void* ptr, std::unordered_set<void*>* live) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (live->erase(ptr) == 0) std::abort();  // not ours, or freed twice: a bug in the caller
  }
  std::free(ptr);
}

Result<void*> FakeGpu::AllocPinned(size_t bytes) {
  return Allocate(bytes, &pinned_, &counters_.pinned_allocs);
}

void FakeGpu::FreePinned(void* ptr) { Release(ptr, &pinned_); }

Status FakeGpu::RegisterHost(void* ptr, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  // CUDA refuses a range that overlaps one already registered.
  auto next = registered_.upper_bound(ptr);
  if (next != registered_.end() && static_cast<std::byte*>(ptr) + bytes > next->first) {
    return Status::Internal("cudaHostRegister: part or all of the range is already mapped");
  }
  if (next != registered_.begin()) {
    auto prev = std::prev(next);
    if (static_cast<std::byte*>(prev->first) + prev->second > ptr) {
      return Status::Internal("cudaHostRegister: part or all of the range is already mapped");
    }
  }
  registered_[ptr] = bytes;
  return Status::OK();
}

void FakeGpu::UnregisterHost(void* ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  if (registered_.erase(ptr) == 0) std::abort();  // never registered: a bug in the caller
}

std::map<void*, size_t> FakeGpu::registered() const {
  std::lock_guard<std::mutex> lock(mu_);
  return registered_;
}

Result<void*> FakeGpu::AllocDevice(size_t bytes) {
  return Allocate(bytes, &device_, &counters_.device_allocs);
}

void FakeGpu::FreeDevice(void* ptr) { Release(ptr, &device_); }

Result<Stream> FakeGpu::CreateStream() { return static_cast<Stream>(new FakeStream()); }

void FakeGpu::DestroyStream(Stream stream) { delete static_cast<FakeStream*>(stream); }

Result<Event> FakeGpu::CreateEvent() { return static_cast<Event>(new FakeEvent()); }

void FakeGpu::DestroyEvent(Event event) { delete static_cast<FakeEvent*>(event); }

Status FakeGpu::CopyToDevice(void* dst, const void* src, size_t bytes, Stream stream) {
  const auto delay = copy_delay_;
  Get(stream)->Enqueue([dst, src, bytes, delay] {
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    std::memcpy(dst, src, bytes);
  });
  return Status::OK();
}

Status FakeGpu::CopyOnDevice(void* dst, const void* src, size_t bytes, Stream stream) {
  Get(stream)->Enqueue([dst, src, bytes] { std::memcpy(dst, src, bytes); });
  return Status::OK();
}

Status FakeGpu::ConvertPixels(const PixelConvert& spec, const void* src, void* dst, Stream stream) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_.conversions;
  }
  Get(stream)->Enqueue([spec, src, dst] {
    const size_t in_bytes = size_t(spec.height) * spec.width * 3;
    const size_t out_bytes = in_bytes * image::PixelTypeSize(spec.type);
    for (int64_t b = 0; b < spec.batch; ++b) {
      image::ConvertPixels(static_cast<const uint8_t*>(src) + b * in_bytes, spec.height, spec.width,
                           spec.normalize ? spec.mean.data() : nullptr,
                           spec.normalize ? spec.std.data() : nullptr, spec.layout, spec.type,
                           static_cast<std::byte*>(dst) + b * out_bytes);
    }
  });
  return Status::OK();
}

Status FakeGpu::Record(Event event, Stream stream) {
  auto* e = static_cast<FakeEvent*>(event);
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    generation = ++e->recorded;
  }
  Get(stream)->Enqueue([e, generation] {
    std::lock_guard<std::mutex> lock(e->mu);
    e->passed = std::max(e->passed, generation);
    e->cv.notify_all();
  });
  return Status::OK();
}

Status FakeGpu::StreamWait(Stream stream, Event event) {
  auto* e = static_cast<FakeEvent*>(event);
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    generation = e->recorded;
  }
  Get(stream)->Enqueue([e, generation] { e->WaitFor(generation); });
  return Status::OK();
}

Result<bool> FakeGpu::Done(Event event) {
  auto* e = static_cast<FakeEvent*>(event);
  std::lock_guard<std::mutex> lock(e->mu);
  return e->passed >= e->recorded;
}

Status FakeGpu::Synchronize(Event event) {
  auto* e = static_cast<FakeEvent*>(event);
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    generation = e->recorded;
  }
  e->WaitFor(generation);
  return Status::OK();
}

namespace {

// DecodeCropResize on the stream's thread; a job that fails is reported as
// failed, as nvJPEG's would be.
class FakeJpegDecoder : public device::JpegDecoder {
 public:
  explicit FakeJpegDecoder(FakeGpu* gpu) : gpu_(gpu) {}
  std::string backend() const override { return "fake (CPU decode on the stream)"; }
  Status Decode(std::span<const device::JpegJob> jobs, int out_width, int out_height, Stream stream,
                std::vector<uint8_t>* failed) override {
    if (gpu_->jpeg_decode_hook()) gpu_->jpeg_decode_hook()();
    failed->assign(jobs.size(), 0);
    gpu_->CountJpegBytes(jobs);
    std::vector<device::JpegJob> copy(jobs.begin(), jobs.end());
    std::vector<uint8_t>* out = failed;
    gpu_->Enqueue(stream, [this, copy, out_width, out_height, out] {
      for (size_t k = 0; k < copy.size(); ++k) {
        const device::JpegJob& j = copy[k];
        Status s = image::DecodeCropResize(j.encoded, j.crop, out_width, out_height, j.hflip,
                                           static_cast<uint8_t*>(j.dst), &scratch_);
        if (!s.ok()) (*out)[k] = 1;
      }
    });
    gpu_->Drain(stream);
    return Status::OK();
  }

 private:
  FakeGpu* gpu_;
  image::DecodeScratch scratch_;
};

}  // namespace

Result<std::unique_ptr<device::JpegDecoder>> FakeGpu::OpenJpegDecoder() {
  if (!jpeg_decoder_) return Status::Unavailable("FakeGpu: no JPEG decoder (set_jpeg_decoder)");
  return std::unique_ptr<device::JpegDecoder>(std::make_unique<FakeJpegDecoder>(this));
}

void FakeGpu::Enqueue(Stream stream, std::function<void()> fn) {
  Get(stream)->Enqueue(std::move(fn));
}

void FakeGpu::Drain(Stream stream) { Get(stream)->Drain(); }

void FakeGpu::CountJpegBytes(std::span<const device::JpegJob> jobs) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const device::JpegJob& j : jobs) counters_.jpeg_bytes += j.encoded.size();
}

FakeGpu::Counters FakeGpu::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  Counters c = counters_;
  c.live_device_buffers = device_.size();
  c.live_pinned_buffers = pinned_.size();
  return c;
}

}  // namespace saturate::testing
