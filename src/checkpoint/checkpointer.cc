#include "saturate/checkpoint/checkpointer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

#include "base/file.h"
#include "base/thread_name.h"
#include "checkpoint/buffer_pool.h"
#include "checkpoint/format.h"
#include "checkpoint/pinned_pool.h"
#include "saturate/remote/url.h"
#include "saturate/trace/trace.h"

namespace saturate::checkpoint {
namespace fs = std::filesystem;

struct PendingSave::Buffer {
  HostBuffer host;
  uint64_t data_bytes = 0;  // of tensors.bin
};

namespace {

// Writes go out in chunks: each is hashed while it is hot in cache, and every
// kWritebackBytes the kernel is told to start writing back, so the final
// fsync does not find the whole checkpoint still dirty in memory.
constexpr size_t kChunkBytes = size_t{8} << 20;
constexpr uint64_t kWritebackBytes = uint64_t{64} << 20;
// Below this a snapshot copy is not worth splitting across threads.
constexpr uint64_t kParallelCopyBytes = uint64_t{32} << 20;

int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Writes `data` to a new file at `path`, fsyncs it and returns its entry.
Result<FileEntry> WriteDurableFile(const std::string& path, std::span<const std::byte> data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::FromErrno("create " + path, errno);
  StreamingChecksum sum;
  Status status;
  uint64_t synced = 0;
  for (size_t at = 0; at < data.size() && status.ok(); at += kChunkBytes) {
    size_t n = std::min(kChunkBytes, data.size() - at);
    sum.Update(data.data() + at, n);
    status = WriteFully(fd, data.subspan(at, n), path);
    if (at + n - synced >= kWritebackBytes) {
      (void)::sync_file_range(fd, static_cast<off_t>(synced), static_cast<off_t>(at + n - synced),
                              SYNC_FILE_RANGE_WRITE);
      synced = at + n;
    }
  }
  if (status.ok() && ::fsync(fd) != 0) status = Status::FromErrno("fsync " + path, errno);
  if (::close(fd) != 0 && status.ok()) status = Status::FromErrno("close " + path, errno);
  SATURATE_RETURN_IF_ERROR(status);
  return FileEntry{fs::path(path).filename().string(), data.size(), sum.Digest()};
}

std::span<const std::byte> Bytes(std::string_view s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

// Moves `from` to `to`. A checkpoint of the same step already committed is
// swapped atomically (renameat2 RENAME_EXCHANGE) and then removed, so a crash
// at any point leaves one complete step-N.
Status Publish(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) == 0) return Status::OK();
  if (errno != ENOTEMPTY && errno != EEXIST) {
    return Status::FromErrno("rename " + from + " to " + to, errno);
  }
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) != 0) {
    return Status::FromErrno("exchange " + from + " with " + to, errno);
  }
  std::error_code ec;
  fs::remove_all(from, ec);  // now the replaced checkpoint
  if (ec) return Status::IOError("remove replaced " + from + ": " + ec.message());
  return Status::OK();
}

// Object names under a remote checkpoint location, grouped by step:
// "step-N/tensors.bin" -> steps[N] holds "step-N/tensors.bin". Other names
// are ignored.
std::map<uint64_t, std::vector<std::string>> GroupByStep(const std::vector<std::string>& names) {
  std::map<uint64_t, std::vector<std::string>> steps;
  for (const std::string& name : names) {
    const size_t slash = name.find('/');
    if (slash == std::string::npos) continue;
    uint64_t step;
    bool tmp;
    if (ParseStepDirName(std::string_view(name).substr(0, slash), &step, &tmp) && !tmp) {
      steps[step].push_back(name);
    }
  }
  return steps;
}

bool HasManifest(uint64_t step, const std::vector<std::string>& names) {
  const std::string want = StepDirName(step) + "/" + std::string(kManifestFile);
  return std::find(names.begin(), names.end(), want) != names.end();
}

// Splits the copies of `tensors` into `threads` similar byte ranges.
void CopyTensors(std::span<const TensorRef> tensors, std::span<const uint64_t> offsets,
                 std::byte* dst, int threads) {
  struct Piece {
    std::byte* to;
    const std::byte* from;
    size_t bytes;
  };
  std::vector<Piece> pieces;
  uint64_t total = 0;
  uint64_t end = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    // Padding is zeroed so a checkpoint's bytes never depend on the pool's history.
    std::memset(dst + end, 0, offsets[i] - end);
    end = offsets[i] + tensors[i].bytes;
    if (tensors[i].data == nullptr || tensors[i].bytes == 0) continue;
    pieces.push_back({dst + offsets[i], static_cast<const std::byte*>(tensors[i].data),
                      static_cast<size_t>(tensors[i].bytes)});
    total += tensors[i].bytes;
  }
  if (threads <= 1 || total < kParallelCopyBytes) {
    for (const Piece& p : pieces) std::memcpy(p.to, p.from, p.bytes);
    return;
  }
  // Cut the concatenated pieces into `threads` equal shares of bytes.
  uint64_t share = (total + threads - 1) / threads;
  std::vector<std::vector<Piece>> work(threads);
  int w = 0;
  uint64_t room = share;
  for (Piece p : pieces) {
    while (p.bytes > 0) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(p.bytes, room));
      work[w].push_back({p.to, p.from, n});
      p.to += n, p.from += n, p.bytes -= n, room -= n;
      if (room == 0 && w + 1 < threads) ++w, room = share;
    }
  }
  auto run = [](const std::vector<Piece>& ps) {
    for (const Piece& p : ps) std::memcpy(p.to, p.from, p.bytes);
  };
  std::vector<std::thread> helpers;
  for (int i = 1; i < threads; ++i) helpers.emplace_back(run, std::cref(work[i]));
  run(work[0]);
  for (std::thread& t : helpers) t.join();
}

}  // namespace

// ---- Impl ---------------------------------------------------------------------

struct Checkpointer::Impl {
  struct Job {
    uint64_t step = 0;
    std::unique_ptr<PendingSave::Buffer> buffer;
    std::vector<TensorRef> tensors;
    std::vector<uint64_t> offsets;
    std::string metadata;
  };

  Impl(std::string d, CheckpointOptions o)
      : dir(std::move(d)),
        options(std::move(o)),
        pool(options.allocator, static_cast<size_t>(options.max_in_flight)) {}

  void WriterLoop();
  Status Write(const Job& job, uint64_t* bytes);
  Status WriteRemote(const Job& job, uint64_t* bytes);
  Status Retain(uint64_t committed_step);
  Status RetainRemote(uint64_t committed_step);
  void ReleaseSlot(std::unique_ptr<PendingSave::Buffer> buffer);

  const std::string dir;
  const CheckpointOptions options;
  std::shared_ptr<remote::ObjectStore> store;  // s3:// locations; null for a directory

  mutable std::mutex mu;
  std::condition_variable cv;
  BufferPool pool;        // guarded by mu
  int slots_used = 0;     // snapshots begun and not yet written (<= max_in_flight)
  int outstanding = 0;    // committed by the caller, queued or being written
  std::deque<Job> queue;  // guarded by mu
  Status error;           // first background failure not yet reported
  bool stopping = false;  // the writer exits once the queue is empty
  bool closed = false;
  CheckpointStats stats;
  std::thread writer;
};

void Checkpointer::Impl::ReleaseSlot(std::unique_ptr<PendingSave::Buffer> buffer) {
  std::lock_guard lock(mu);
  if (buffer) pool.Release(buffer->host);
  --slots_used;
  cv.notify_all();
}

void Checkpointer::Impl::WriterLoop() {
  base::NameThisThread("ckpt");
  while (true) {
    Job job;
    {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return !queue.empty() || stopping; });
      if (queue.empty()) return;
      job = std::move(queue.front());
      queue.pop_front();
    }
    const int64_t start_ns = trace::NowNs();
    uint64_t bytes = 0;
    Status status = Write(job, &bytes);
    Status retained = status.ok() ? Retain(job.step) : Status::OK();
    const int64_t end_ns = trace::NowNs();
    trace::RecordSpan("checkpoint_write", start_ns, end_ns, trace::Category::kCheckpoint,
                      {{"step", static_cast<int64_t>(job.step)},
                       {"bytes", static_cast<int64_t>(bytes)},
                       {"ok", status.ok() ? 1 : 0}});
    std::lock_guard lock(mu);
    if (status.ok()) {
      ++stats.commits;
      stats.last_write_ns = end_ns - start_ns;
      stats.last_bytes = bytes;
      stats.bytes_written += bytes;
      stats.write_bytes_per_s = static_cast<double>(bytes) * 1e9 /
                                static_cast<double>(std::max<int64_t>(1, end_ns - start_ns));
      stats.last_committed_step = job.step;
      stats.has_committed = true;
    } else {
      ++stats.failed;
    }
    Status failure = status.ok() ? retained : status;
    if (!failure.ok() && error.ok()) error = failure;
    pool.Release(job.buffer->host);
    --slots_used;
    --outstanding;
    stats.pool_bytes = pool.held_bytes();
    cv.notify_all();
  }
}

// The commit protocol: files into step-N.tmp (each fsynced, the manifest
// last), fsync the directory, rename to step-N, fsync DIR.
Status Checkpointer::Impl::Write(const Job& job, uint64_t* bytes) {
  if (store) return WriteRemote(job, bytes);
  const std::string name = StepDirName(job.step);
  const std::string tmp = dir + "/" + name + std::string(kTmpSuffix);
  const std::string final_path = dir + "/" + name;
  std::error_code ec;
  fs::remove_all(tmp, ec);  // an earlier attempt at this step that failed or crashed
  if (!fs::create_directory(tmp, ec) || ec) {
    return Status::IOError("checkpoint step " + std::to_string(job.step) + ": create directory " +
                           tmp + ": " + (ec ? ec.message() : "already exists"));
  }
  auto write_files = [&]() -> Status {
    Manifest m;
    m.step = job.step;
    m.created_unix_ms = UnixMs();
    m.metadata_file = std::string(kMetadataFile);
    std::span<const std::byte> data(job.buffer->host.data, job.buffer->data_bytes);
    SATURATE_ASSIGN_OR_RETURN(FileEntry tensors,
                              WriteDurableFile(tmp + "/" + std::string(kTensorsFile), data));
    SATURATE_ASSIGN_OR_RETURN(
        FileEntry metadata,
        WriteDurableFile(tmp + "/" + std::string(kMetadataFile), Bytes(job.metadata)));
    m.files = {tensors, metadata};
    for (size_t i = 0; i < job.tensors.size(); ++i) {
      const TensorRef& t = job.tensors[i];
      m.tensors.push_back(
          {t.name, t.dtype, t.shape, t.device, std::string(kTensorsFile), job.offsets[i], t.bytes});
    }
    const std::string manifest = SerializeManifest(m);
    SATURATE_RETURN_IF_ERROR(
        WriteDurableFile(tmp + "/" + std::string(kManifestFile), Bytes(manifest)).status());
    SATURATE_RETURN_IF_ERROR(SyncDir(tmp));
    *bytes = tensors.bytes + metadata.bytes + manifest.size();
    return Status::OK();
  };
  Status status = write_files();
  if (status.ok()) status = Publish(tmp, final_path);
  if (!status.ok()) {
    fs::remove_all(tmp, ec);
    return status.WithContext("checkpoint step " + std::to_string(job.step));
  }
  return SyncDir(dir).WithContext("checkpoint step " + std::to_string(job.step));
}

// Keep-last-N: removes the oldest committed checkpoints, never the one just
// committed (it may have a smaller step than older ones after a resume).
Status Checkpointer::Impl::Retain(uint64_t committed_step) {
  if (store) return RetainRemote(committed_step);
  SATURATE_ASSIGN_OR_RETURN(std::vector<CheckpointDir> all, List(dir));
  int kept = 1;  // the one just committed
  for (const CheckpointDir& c : all) {
    if (c.step == committed_step) continue;
    if (kept < options.keep) {
      ++kept;
      continue;
    }
    std::error_code ec;
    fs::remove_all(c.path, ec);
    if (ec) return Status::IOError("remove old checkpoint " + c.path + ": " + ec.message());
  }
  return Status::OK();
}

// The commit protocol on object storage: a manifest already there for this
// step is deleted first (its data objects are about to be replaced), then
// tensors.bin is uploaded from the snapshot buffer (multipart when large),
// metadata.bin, and manifest.json last: a PUT is atomic, so the checkpoint
// appears whole or not at all.
Status Checkpointer::Impl::WriteRemote(const Job& job, uint64_t* bytes) {
  const std::string name = StepDirName(job.step);
  const std::string manifest_name = name + "/" + std::string(kManifestFile);
  auto upload = [&]() -> Status {
    SATURATE_RETURN_IF_ERROR(store->Delete(manifest_name));
    Manifest m;
    m.step = job.step;
    m.created_unix_ms = UnixMs();
    m.metadata_file = std::string(kMetadataFile);
    std::span<const std::byte> data(job.buffer->host.data, job.buffer->data_bytes);
    SATURATE_RETURN_IF_ERROR(store->Put(name + "/" + std::string(kTensorsFile), data));
    SATURATE_RETURN_IF_ERROR(
        store->Put(name + "/" + std::string(kMetadataFile), Bytes(job.metadata)));
    m.files = {{std::string(kTensorsFile), data.size(), Checksum(data)},
               {std::string(kMetadataFile), job.metadata.size(), Checksum(Bytes(job.metadata))}};
    for (size_t i = 0; i < job.tensors.size(); ++i) {
      const TensorRef& t = job.tensors[i];
      m.tensors.push_back(
          {t.name, t.dtype, t.shape, t.device, std::string(kTensorsFile), job.offsets[i], t.bytes});
    }
    const std::string manifest = SerializeManifest(m);
    SATURATE_RETURN_IF_ERROR(store->Put(manifest_name, Bytes(manifest)));
    *bytes = data.size() + job.metadata.size() + manifest.size();
    return Status::OK();
  };
  return upload().WithContext("checkpoint step " + std::to_string(job.step));
}

// Keep-last-N on object storage: each removed checkpoint loses its manifest
// first (so it is never seen half-deleted), then its data objects. Steps
// without a manifest that are older than the oldest kept one (saves that
// never committed) go too.
Status Checkpointer::Impl::RetainRemote(uint64_t committed_step) {
  if (options.keep == std::numeric_limits<int>::max()) return Status::OK();
  SATURATE_ASSIGN_OR_RETURN(std::vector<std::string> names, store->List());
  auto steps = GroupByStep(names);
  int kept = 1;  // the one just committed
  uint64_t oldest_kept = committed_step;
  std::vector<uint64_t> drop;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (it->first == committed_step || !HasManifest(it->first, it->second)) continue;
    if (kept < options.keep) {
      ++kept;
      oldest_kept = std::min(oldest_kept, it->first);
    } else {
      drop.push_back(it->first);
    }
  }
  for (const auto& [step, objects] : steps) {
    if (step < oldest_kept && !HasManifest(step, objects)) drop.push_back(step);
  }
  for (uint64_t step : drop) {
    const std::string manifest = StepDirName(step) + "/" + std::string(kManifestFile);
    SATURATE_RETURN_IF_ERROR(store->Delete(manifest));
    for (const std::string& object : steps[step]) {
      if (object != manifest) SATURATE_RETURN_IF_ERROR(store->Delete(object));
    }
  }
  return Status::OK();
}

// ---- PendingSave ----------------------------------------------------------------

PendingSave::~PendingSave() {
  if (owner_ != nullptr && !skipped_) owner_->impl_->ReleaseSlot(std::move(buffer_));
}

void* PendingSave::destination(size_t i) const { return buffer_->host.data + offsets_.at(i); }
void* PendingSave::buffer() const { return buffer_ ? buffer_->host.data : nullptr; }
uint64_t PendingSave::buffer_bytes() const { return buffer_ ? buffer_->host.capacity : 0; }

// ---- Checkpointer ---------------------------------------------------------------

Result<std::unique_ptr<Checkpointer>> Checkpointer::Open(const std::string& dir,
                                                         CheckpointOptions options) {
  if (dir.empty()) return Status::InvalidArgument("checkpoint directory is empty");
  if (options.keep < 1) {
    return Status::InvalidArgument("keep must be >= 1, got " + std::to_string(options.keep));
  }
  if (options.max_in_flight < 1) {
    return Status::InvalidArgument("max_in_flight must be >= 1, got " +
                                   std::to_string(options.max_in_flight));
  }
  if (options.copy_threads <= 0) {
    options.copy_threads =
        static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));
  }
  if (!options.allocator) options.allocator = std::make_shared<PinnableAllocator>(PageAllocator());
  std::shared_ptr<remote::ObjectStore> store = std::move(options.store);
  options.store.reset();
  if (remote::IsRemoteUrl(dir)) {
    SATURATE_ASSIGN_OR_RETURN(remote::ObjectUrl url, remote::ParseObjectUrl(dir));
    if (url.scheme != remote::Scheme::kS3) {
      return Status::InvalidArgument(dir + ": checkpoints are written to s3:// locations only");
    }
    if (!store) {
      SATURATE_ASSIGN_OR_RETURN(auto opened, remote::OpenObjectStore(url, options.remote));
      store = std::move(opened);
    }
    // Fails now, naming the bucket, rather than at the first background write.
    SATURATE_RETURN_IF_ERROR(store->List().status().WithContext("checkpoint location " + dir));
  }
  std::error_code ec;
  if (store) {
    std::vector<uint64_t> prepare = std::move(options.prepare_tensor_bytes);
    options.prepare_tensor_bytes.clear();
    auto impl = std::make_unique<Impl>(dir, std::move(options));
    impl->store = std::move(store);
    Impl* raw = impl.get();
    impl->writer = std::thread([raw] { raw->WriterLoop(); });
    auto ckpt = std::unique_ptr<Checkpointer>(new Checkpointer(std::move(impl)));
    if (!prepare.empty()) SATURATE_RETURN_IF_ERROR(ckpt->Prepare(prepare));
    return ckpt;
  }
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) {
    return Status::IOError("checkpoint directory " + dir + ": " +
                           (ec ? ec.message() : "exists and is not a directory"));
  }
  // Interrupted saves of an earlier run: never committed, never read.
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    uint64_t step;
    bool tmp;
    if (ParseStepDirName(entry.path().filename().string(), &step, &tmp) && tmp) {
      fs::remove_all(entry.path(), ec);
    }
  }
  std::vector<uint64_t> prepare = std::move(options.prepare_tensor_bytes);
  options.prepare_tensor_bytes.clear();
  auto impl = std::make_unique<Impl>(dir, std::move(options));
  Impl* raw = impl.get();
  impl->writer = std::thread([raw] { raw->WriterLoop(); });
  auto ckpt = std::unique_ptr<Checkpointer>(new Checkpointer(std::move(impl)));
  if (!prepare.empty()) SATURATE_RETURN_IF_ERROR(ckpt->Prepare(prepare));
  return ckpt;
}

Checkpointer::Checkpointer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Checkpointer::~Checkpointer() { (void)Close(); }

const std::string& Checkpointer::dir() const { return impl_->dir; }

Status Checkpointer::Prepare(std::span<const uint64_t> tensor_bytes) {
  Impl& s = *impl_;
  const int64_t start_ns = trace::NowNs();
  std::vector<TensorRef> refs(tensor_bytes.size());
  for (size_t i = 0; i < refs.size(); ++i) refs[i].bytes = tensor_bytes[i];
  uint64_t total = 0;
  (void)LayoutTensors(refs, &total);
  // Allocated under the lock (the allocator is only ever called under it),
  // faulted in outside it: the writer may release a buffer meanwhile.
  std::vector<HostBuffer> fresh;
  {
    std::lock_guard lock(s.mu);
    if (s.closed) return Status::InvalidArgument("checkpointer for " + s.dir + " is closed");
    s.pool.DropSmallerThan(total);
    const int have = s.slots_used + static_cast<int>(s.pool.FreeFitting(total));
    for (int i = have; i < s.options.max_in_flight; ++i) {
      auto host = s.pool.Allocate(total);
      if (!host.ok()) {
        for (const HostBuffer& b : fresh) s.pool.Release(b);
        s.stats.pool_bytes = s.pool.held_bytes();
        s.stats.pool_allocations = s.pool.allocations();
        return host.status().WithContext("checkpoint prepare");
      }
      fresh.push_back(*host);
    }
    s.stats.pool_bytes = s.pool.held_bytes();
    s.stats.pool_allocations = s.pool.allocations();
  }
  for (const HostBuffer& b : fresh) Prefault(b, s.options.copy_threads);
  {
    std::lock_guard lock(s.mu);
    for (const HostBuffer& b : fresh) s.pool.Release(b);
    s.stats.pool_bytes = s.pool.held_bytes();
  }
  trace::RecordSpan(
      "checkpoint_prepare", start_ns, trace::NowNs(), trace::Category::kCheckpoint,
      {{"bytes", static_cast<int64_t>(total)}, {"buffers", static_cast<int64_t>(fresh.size())}});
  return Status::OK();
}

Result<std::unique_ptr<PendingSave>> Checkpointer::Begin(uint64_t step,
                                                         std::span<const TensorRef> tensors) {
  Impl& s = *impl_;
  auto pending = std::unique_ptr<PendingSave>(new PendingSave());
  pending->start_ns_ = trace::NowNs();
  pending->step_ = step;
  {
    std::unique_lock lock(s.mu);
    if (s.closed) return Status::InvalidArgument("checkpointer for " + s.dir + " is closed");
    if (s.slots_used >= s.options.max_in_flight && s.options.on_busy == OnBusy::kSkip &&
        s.error.ok()) {
      ++s.stats.skipped;
      pending->skipped_ = true;
      return pending;
    }
    s.cv.wait(lock, [&] { return s.slots_used < s.options.max_in_flight || !s.error.ok(); });
    if (!s.error.ok()) return std::exchange(s.error, Status::OK());
    ++s.slots_used;
  }
  pending->owner_ = this;  // from here the destructor gives the slot back
  uint64_t total = 0;
  pending->offsets_ = LayoutTensors(tensors, &total);
  {
    std::lock_guard lock(s.mu);
    auto host = s.pool.Acquire(total);
    if (!host.ok()) return host.status();
    pending->buffer_ = std::make_unique<PendingSave::Buffer>();
    pending->buffer_->host = *host;
    pending->buffer_->data_bytes = total;
    s.stats.pool_bytes = s.pool.held_bytes();
    s.stats.pool_allocations = s.pool.allocations();
  }
  CopyTensors(tensors, pending->offsets_, pending->buffer_->host.data, s.options.copy_threads);
  pending->tensors_.assign(tensors.begin(), tensors.end());
  for (TensorRef& t : pending->tensors_) t.data = nullptr;
  return pending;
}

Status Checkpointer::Commit(std::unique_ptr<PendingSave> pending, std::string_view metadata) {
  Impl& s = *impl_;
  if (!pending || pending->skipped_) return Status::OK();
  if (pending->owner_ != this) {
    return Status::InvalidArgument("snapshot committed to another checkpointer");
  }
  Impl::Job job;
  job.step = pending->step_;
  job.buffer = std::move(pending->buffer_);
  job.tensors = std::move(pending->tensors_);
  job.offsets = std::move(pending->offsets_);
  job.metadata.assign(metadata);
  pending->owner_ = nullptr;  // the slot now travels with the job
  const int64_t end_ns = trace::NowNs();
  trace::RecordSpan("checkpoint_snapshot", pending->start_ns_, end_ns, trace::Category::kCheckpoint,
                    {{"step", static_cast<int64_t>(job.step)},
                     {"bytes", static_cast<int64_t>(job.buffer->data_bytes)}});
  std::lock_guard lock(s.mu);
  ++s.stats.saves;
  s.stats.last_blocking_ns = end_ns - pending->start_ns_;
  s.stats.total_blocking_ns += s.stats.last_blocking_ns;
  ++s.outstanding;
  s.queue.push_back(std::move(job));
  s.cv.notify_all();
  return Status::OK();
}

Status Checkpointer::PinForCuda(void* buffer, int cuda_device) {
  auto* pinnable = dynamic_cast<PinnableAllocator*>(impl_->options.allocator.get());
  if (pinnable == nullptr) {
    return Status::Unimplemented(
        "the checkpoint pool has a custom allocator, which cannot be page-locked");
  }
  return pinnable->Pin(buffer, cuda_device);
}

Result<bool> Checkpointer::Save(uint64_t step, std::span<const TensorRef> tensors,
                                std::string_view metadata) {
  for (const TensorRef& t : tensors) {
    if (t.data == nullptr && t.bytes > 0) {
      return Status::InvalidArgument("tensor " + t.name + ": no data (use Begin() to fill it)");
    }
  }
  SATURATE_ASSIGN_OR_RETURN(auto pending, Begin(step, tensors));
  if (pending->skipped()) return false;
  SATURATE_RETURN_IF_ERROR(Commit(std::move(pending), metadata));
  return true;
}

Status Checkpointer::Wait() {
  Impl& s = *impl_;
  std::unique_lock lock(s.mu);
  s.cv.wait(lock, [&] { return s.outstanding == 0; });
  return std::exchange(s.error, Status::OK());
}

bool Checkpointer::WaitFor(int64_t timeout_ns) {
  Impl& s = *impl_;
  std::unique_lock lock(s.mu);
  return s.cv.wait_for(lock, std::chrono::nanoseconds(timeout_ns),
                       [&] { return s.outstanding == 0; });
}

Status Checkpointer::Close() {
  Impl& s = *impl_;
  Status status = Wait();
  {
    std::lock_guard lock(s.mu);
    if (s.closed) return status;
    s.closed = true;
    s.stopping = true;
  }
  s.cv.notify_all();
  if (s.writer.joinable()) s.writer.join();
  return status;
}

CheckpointStats Checkpointer::stats() const {
  std::lock_guard lock(impl_->mu);
  return impl_->stats;
}

// ---- reading ----------------------------------------------------------------------

namespace {

Result<std::vector<CheckpointDir>> ListRemote(const std::string& dir) {
  SATURATE_ASSIGN_OR_RETURN(remote::ObjectUrl url, remote::ParseObjectUrl(dir));
  SATURATE_ASSIGN_OR_RETURN(auto store, remote::OpenObjectStore(url));
  SATURATE_ASSIGN_OR_RETURN(std::vector<std::string> names, store->List());
  std::vector<CheckpointDir> out;
  std::string base = dir;
  while (!base.empty() && base.back() == '/') base.pop_back();
  for (const auto& [step, objects] : GroupByStep(names)) {
    if (HasManifest(step, objects)) out.push_back({step, base + "/" + StepDirName(step)});
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.step > b.step; });
  return out;
}

}  // namespace

Result<std::vector<CheckpointDir>> List(const std::string& dir) {
  if (remote::IsRemoteUrl(dir)) return ListRemote(dir);
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) {
      return Status::NotFound(dir + ": no such checkpoint directory");
    }
    return Status::IOError("list " + dir + ": " + ec.message());
  }
  std::vector<CheckpointDir> out;
  for (const auto& entry : it) {
    uint64_t step;
    bool tmp;
    if (ParseStepDirName(entry.path().filename().string(), &step, &tmp) && !tmp &&
        entry.is_directory(ec)) {
      out.push_back({step, entry.path().string()});
    }
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.step > b.step; });
  return out;
}

namespace {

Status VerifyFile(const std::string& path, const FileEntry& entry) {
  SATURATE_ASSIGN_OR_RETURN(auto file, ReadOnlyFile::Open(path));
  if (file->size() != entry.bytes) {
    return Status::Corruption(path + ": " + std::to_string(file->size()) +
                              " bytes, manifest says " + std::to_string(entry.bytes));
  }
  StreamingChecksum sum;
  std::vector<std::byte> scratch;
  for (uint64_t at = 0; at < file->size(); at += kChunkBytes) {
    SATURATE_ASSIGN_OR_RETURN(
        auto bytes, file->Read(at, std::min<uint64_t>(kChunkBytes, file->size() - at), &scratch));
    sum.Update(bytes.data(), bytes.size());
  }
  if (sum.Digest() != entry.xxh3) {
    return Status::Corruption(path + ": checksum mismatch (xxh3 " + HexChecksum(sum.Digest()) +
                              ", manifest says " + HexChecksum(entry.xxh3) + ")");
  }
  return Status::OK();
}

}  // namespace

Result<Manifest> Verify(const std::string& path) {
  const std::string manifest_path = path + "/" + std::string(kManifestFile);
  auto text = ReadFileToString(manifest_path);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) {
      return Status::Corruption(manifest_path + ": missing (incomplete checkpoint)");
    }
    return text.status();
  }
  SATURATE_ASSIGN_OR_RETURN(Manifest m, ParseManifest(*text, manifest_path));
  for (const FileEntry& f : m.files) {
    auto status = VerifyFile(path + "/" + f.name, f);
    if (status.code() == StatusCode::kNotFound) {
      return Status::Corruption(path + "/" + f.name + ": missing (incomplete checkpoint)");
    }
    SATURATE_RETURN_IF_ERROR(status);
  }
  return m;
}

Result<LoadResult> LoadNewest(const std::string& dir) {
  SATURATE_ASSIGN_OR_RETURN(std::vector<CheckpointDir> all, List(dir));
  LoadResult result;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    uint64_t step;
    bool tmp;
    if (ParseStepDirName(entry.path().filename().string(), &step, &tmp) && tmp) {
      result.warnings.push_back(entry.path().string() +
                                ": incomplete (a save was interrupted before its commit); ignored");
    }
  }
  for (const CheckpointDir& c : all) {
    auto m = Verify(c.path);
    if (m.ok()) {
      result.found = true;
      result.path = c.path;
      result.manifest = std::move(*m);
      return result;
    }
    result.warnings.push_back(c.path + ": skipped: " + m.status().message());
  }
  if (all.empty()) return result;
  std::string why;
  for (const std::string& w : result.warnings) why += "\n  " + w;
  return Status::Corruption("no checkpoint in " + dir + " verifies:" + why);
}

double YoungIntervalSeconds(double cost_s, double mtbf_s) {
  if (!(cost_s > 0) || !(mtbf_s > 0)) return 0;
  return std::sqrt(2 * cost_s * mtbf_s);
}

}  // namespace saturate::checkpoint
