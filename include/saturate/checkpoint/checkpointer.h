// Checkpointer: crash-safe asynchronous checkpoints.
//
// Save() blocks only while the tensors are copied into a reusable pool of
// host buffers (the snapshot), then returns; one background thread writes
// the snapshot to `DIR/step-N.tmp/`, fsyncs every file and the directory,
// renames it to `DIR/step-N/` and fsyncs DIR (the commit), then removes the
// oldest checkpoints beyond `keep`. A job killed at any moment leaves the
// committed checkpoints untouched; Load*() picks the newest one whose
// manifest and per-file XXH3-64 checksums verify. Format: docs/checkpoint.md.
//
//   SATURATE_ASSIGN_OR_RETURN(auto ckpt, Checkpointer::Open("ckpt", {.keep = 3}));
//   SATURATE_RETURN_IF_ERROR(ckpt->Save(step, tensors, metadata).status());
//   ...
//   SATURATE_RETURN_IF_ERROR(ckpt->Close());
//
// The first Save() also allocates the pool (and page-faults it in during the
// copy): several times a later save's cost. Prepare(), or
// `CheckpointOptions::prepare_tensor_bytes` at Open(), pays that ahead:
//
//   SATURATE_RETURN_IF_ERROR(ckpt->Prepare(tensor_bytes));  // before the loop
//
// Back-pressure: at most `max_in_flight` snapshots exist at once (default 1).
// A Save() beyond that waits for a write to finish, or with OnBusy::kSkip
// returns at once without saving and counts the skip.
//
// Errors: a background write that fails removes its `.tmp` directory, leaves
// every committed checkpoint as it was, and is reported (naming the file) by
// the next Save(), Wait() or Close() -- that call saves nothing new.
//
// Object storage: Open("s3://bucket/prefix") writes the same layout as
// objects through the libcurl client (saturate/remote): the writer thread
// uploads `step-N/tensors.bin` straight from the snapshot buffer (multipart
// above StoreOptions::multipart_threshold_bytes, no local staging), then
// `step-N/metadata.bin`, then `step-N/manifest.json` last -- the commit. A
// manifest already there for step N is deleted before its data objects are
// replaced. List() reads such locations too; Verify() and LoadNewest() are
// local only (the Python layer downloads and verifies remote checkpoints).
//
// Ownership: Save() copies the tensor bytes before it returns; the caller may
// modify or free them right after. The Checkpointer owns its pool and its
// thread; destroying it is Close() with the status dropped. One Checkpointer
// (one process) writes a directory at a time.
//
// Thread-safety: Save()/Begin()/Commit()/Wait()/Close() are called from one
// thread (the training loop); stats() from any thread. One exception: the
// Commit() of a PendingSave may come from another thread (the one that filled
// it; Python's guarded saves do), concurrently with the training thread's
// calls, as long as it comes before Close(). The static functions are
// independent and thread-safe.
#ifndef SATURATE_CHECKPOINT_CHECKPOINTER_H_
#define SATURATE_CHECKPOINT_CHECKPOINTER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "saturate/base/status.h"
#include "saturate/remote/object_store.h"

namespace saturate::checkpoint {

// One tensor to save: a view of caller memory, copied during Save().
// `dtype` and `device` are recorded as given (the engine only moves bytes);
// `data` may be null in Begin() for tensors the caller fills itself.
struct TensorRef {
  std::string name;
  const void* data = nullptr;
  uint64_t bytes = 0;
  std::string dtype;  // "float32", "bfloat16", "uint8", ...
  std::vector<int64_t> shape;
  std::string device = "cpu";  // where it lived ("cuda:0"): restored by the caller
};

// Where snapshot buffers come from. The default is page-aligned anonymous
// memory (transparent huge pages when allowed) that PinForCuda() can
// page-lock later, so device->host copies run at full speed.
// Calls come from the training thread and the writer thread, never at once
// (the Checkpointer serializes them).
class HostAllocator {
 public:
  virtual ~HostAllocator() = default;
  virtual Result<void*> Allocate(size_t bytes) = 0;
  virtual void Free(void* ptr, size_t bytes) = 0;
};
std::shared_ptr<HostAllocator> PageAllocator();

enum class OnBusy : uint8_t {
  kWait,  // Save() waits until a snapshot slot is free (the default)
  kSkip,  // Save() returns at once without saving; stats().skipped counts it
};

struct CheckpointOptions {
  int keep = 3;           // committed checkpoints kept (>= 1); older ones are removed
  int max_in_flight = 1;  // snapshots taken but not yet committed (>= 1)
  OnBusy on_busy = OnBusy::kWait;
  int copy_threads = 0;  // threads for the snapshot copy; 0 = up to 4 by core count
  std::shared_ptr<HostAllocator> allocator;  // null = PageAllocator()
  // When not empty, Open() calls Prepare() with these sizes (and fails if it does).
  std::vector<uint64_t> prepare_tensor_bytes;
  // s3:// locations: how the store is opened (endpoint, retries, multipart sizes).
  remote::StoreOptions remote;
  // s3:// locations: this store instead of one opened from the URL (tests).
  std::shared_ptr<remote::ObjectStore> store;
};

struct CheckpointStats {
  uint64_t saves = 0;             // snapshots taken
  uint64_t commits = 0;           // checkpoints committed
  uint64_t skipped = 0;           // Save() calls that returned without saving (kSkip)
  uint64_t failed = 0;            // background writes that failed
  int64_t last_blocking_ns = 0;   // the caller's time in the last Save()
  int64_t total_blocking_ns = 0;  // summed over all saves
  int64_t last_write_ns = 0;      // the last background write, start to commit
  uint64_t last_bytes = 0;        // bytes of the last checkpoint (tensors + metadata)
  uint64_t bytes_written = 0;     // over all commits
  double write_bytes_per_s = 0;   // of the last commit
  uint64_t pool_bytes = 0;        // host memory held by the snapshot pool
  uint64_t pool_allocations = 0;  // buffers the pool allocated since Open(), by Prepare() too
  uint64_t last_committed_step = 0;
  bool has_committed = false;
};

class Checkpointer;

// A snapshot slot taken by Begin(): host buffers for every tensor, the ones
// with `data` already copied. The caller fills the others (e.g. with an
// asynchronous device->host copy) and hands it to Commit().
class PendingSave {
 public:
  ~PendingSave();
  PendingSave(const PendingSave&) = delete;
  PendingSave& operator=(const PendingSave&) = delete;

  // True when OnBusy::kSkip found no free slot: nothing to fill or commit.
  bool skipped() const { return skipped_; }
  uint64_t step() const { return step_; }
  size_t size() const { return offsets_.size(); }
  // Where tensor `i` goes in the snapshot (bytes as given to Begin()).
  void* destination(size_t i) const;
  // The whole host buffer (for pinning it with cudaHostRegister).
  void* buffer() const;
  uint64_t buffer_bytes() const;

 private:
  friend class Checkpointer;
  PendingSave() = default;

  Checkpointer* owner_ = nullptr;
  bool skipped_ = false;
  uint64_t step_ = 0;
  int64_t start_ns_ = 0;
  struct Buffer;
  std::unique_ptr<Buffer> buffer_;
  std::vector<TensorRef> tensors_;  // data pointers cleared
  std::vector<uint64_t> offsets_;
};

class Checkpointer {
 public:
  // Creates `dir` if missing and removes `step-*.tmp` left by a crash.
  static Result<std::unique_ptr<Checkpointer>> Open(const std::string& dir,
                                                    CheckpointOptions options = {});
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Snapshots `tensors` and `metadata` (opaque bytes, e.g. a pickled
  // structure) as checkpoint `step` and queues the write. Returns false when
  // skipped (OnBusy::kSkip and no free slot), true when queued.
  Result<bool> Save(uint64_t step, std::span<const TensorRef> tensors, std::string_view metadata);

  // Allocates and page-faults the snapshot pool for saves of tensors of these
  // sizes (TensorRef::bytes, in Save() order), so that the first Save() of
  // them blocks no longer than later ones: afterwards the pool holds
  // `max_in_flight` buffers that fit, counting ones it already had and the
  // ones of saves in flight. Free buffers too small for them are freed first
  // (the pool never holds an old and a new generation at once); a later
  // Save() of smaller tensors reuses a prepared buffer, one of larger tensors
  // replaces it, as an unprepared Save() would. Memory: one buffer of the
  // snapshot's size (rounded up to 2 MiB) per slot, what the pool holds once
  // `max_in_flight` saves have overlapped; pages are faulted in
  // (MADV_POPULATE_WRITE), never copied or held twice.
  //
  // Runs on the calling thread and returns when the pages are in: the
  // guarantee then holds for the very next Save(), whatever the writer thread
  // is doing, and the cost lands where the caller chose (before the loop;
  // its `checkpoint_prepare` span shows it). The writer thread could hide it
  // only by racing the first Save(). Fails like Save() when closed.
  Status Prepare(std::span<const uint64_t> tensor_bytes);

  // The two halves of Save() for tensors the engine cannot copy (device
  // memory): Begin() takes a slot and copies the tensors whose `data` is set;
  // Commit() queues the filled snapshot with its metadata.
  Result<std::unique_ptr<PendingSave>> Begin(uint64_t step, std::span<const TensorRef> tensors);
  Status Commit(std::unique_ptr<PendingSave> pending, std::string_view metadata);
  // Page-locks the pool buffer a Begin() handed out (PendingSave::buffer())
  // for CUDA device `cuda_device`, so device->host copies into it run as DMA;
  // the pool unregisters it before it frees it. A no-op when already done.
  // Unimplemented with a custom CheckpointOptions::allocator;
  // Unavailable without CUDA.
  Status PinForCuda(void* buffer, int cuda_device);

  // Waits until every queued write has committed or failed; returns the
  // first failure not yet reported.
  Status Wait();
  // Waits at most `timeout_ns`; true when nothing is left in flight.
  bool WaitFor(int64_t timeout_ns);
  // Wait(), then stops the thread. Idempotent; Save() afterwards fails.
  Status Close();

  CheckpointStats stats() const;
  const std::string& dir() const;

 private:
  friend class PendingSave;
  struct Impl;
  explicit Checkpointer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// ---- reading ----------------------------------------------------------------

struct FileEntry {
  std::string name;  // inside the checkpoint directory
  uint64_t bytes = 0;
  uint64_t xxh3 = 0;
};

struct TensorEntry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string device;
  std::string file;  // a FileEntry name
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

struct Manifest {
  uint64_t step = 0;
  int64_t created_unix_ms = 0;
  std::vector<FileEntry> files;
  std::vector<TensorEntry> tensors;
  std::string metadata_file;  // a FileEntry name
};

// A committed checkpoint directory found by List().
struct CheckpointDir {
  uint64_t step = 0;
  std::string path;  // DIR/step-N
};

// Committed checkpoints in `dir`, newest (largest step) first. Names that do
// not parse, and `.tmp` directories, are not listed. For an s3:// `dir`,
// the steps with a `step-N/manifest.json` object (path "s3://.../step-N").
Result<std::vector<CheckpointDir>> List(const std::string& dir);

// Reads `path`/manifest.json and checks its own checksum, every file's size
// and XXH3-64 and every tensor's bounds. Errors name the file.
Result<Manifest> Verify(const std::string& path);

struct LoadResult {
  bool found = false;  // false: no committed checkpoint at all (a fresh start)
  std::string path;    // the checkpoint chosen
  Manifest manifest;
  // One line per checkpoint skipped (corrupt, incomplete, interrupted),
  // naming it and why; the caller shows them (warnings.warn in Python).
  std::vector<std::string> warnings;
};

// The newest checkpoint in `dir` that verifies. Fails with Corruption only
// when committed checkpoints exist and none verifies; NotFound when `dir`
// does not exist.
Result<LoadResult> LoadNewest(const std::string& dir);

// Young's first-order optimum checkpoint interval, sqrt(2 * cost * MTBF), in
// seconds: the interval that minimizes (time lost to saving) + (expected work
// lost to a failure). `cost_s` is the time one save stops training.
double YoungIntervalSeconds(double cost_s, double mtbf_s);

}  // namespace saturate::checkpoint

#endif  // SATURATE_CHECKPOINT_CHECKPOINTER_H_
