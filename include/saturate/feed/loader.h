// Loader: the training input pipeline. Reads records of a saturate dataset,
// decodes and augments them on a pool of threads that write each sample
// straight into its slot of a batch buffer, and hands out whole batches in
// order, `prefetch` batches ahead of the consumer. Near an epoch's end the
// workers go on into the next epoch (epoch + 1, from its first batch), so
// that SetEpoch(epoch + 1) after the end finds its first batches ready, as
// the middle of an epoch does; any other SetEpoch() or Restore() discards them.
//
//   sampler (seed, epoch, rank) -> record reads (mmap) -> decode + augment
//   (threads, into the batch slot) -> ordered batches -> consumer
//
// Determinism: the order of samples depends only on (seed, epoch, rank,
// world_size); the random augmentation of a sample only on (seed, epoch,
// record index). Output bytes are therefore identical for any thread count,
// and state() / Restore() resume exactly where a run stopped.
//
// Memory: batch buffers come from a bounded pool of `prefetch +
// max_held_batches` buffers of batch_bytes() each, allocated once through a
// BatchAllocator (pinned memory later); nothing is allocated per sample in
// the steady state. A consumer that keeps more than `max_held_batches`
// batches alive gets an error from Next() instead of a deadlock.
//
// Errors: a sample that fails (corrupt record or image) reaches the consumer
// as a Status from Next() naming the dataset, shard, record and stage; with
// `skip_bad` it is dropped from its batch and counted instead.
//
// Ownership: a Batch holds its buffer until it (and every copy) is destroyed.
// Batches may outlive the Loader. Thread-safety: one consumer thread calls
// Next()/WaitForNext()/SetEpoch()/Restore(); stats() and state() may be called from any
// thread.
#ifndef SATURATE_FEED_LOADER_H_
#define SATURATE_FEED_LOADER_H_

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "saturate/base/status.h"
#include "saturate/format/schema.h"
#include "saturate/remote/range_reader.h"

namespace saturate::format {
class Dataset;
}  // namespace saturate::format

namespace saturate::feed {

using format::DType;

class ImageDeferral;  // src/feed/image_deferral.h: the GPU decode stage's hook

// Where batch buffers come from. The default is 64-byte-aligned host memory;
// the CUDA path hands in pinned memory.
class BatchAllocator {
 public:
  virtual ~BatchAllocator() = default;
  virtual Result<void*> Allocate(size_t bytes) = 0;
  virtual void Free(void* ptr, size_t bytes) = 0;
  // Whether the buffers are read by a device's DMA engine rather than by
  // CPU code: workers then write converted arrays past the caches.
  virtual bool read_by_device() const { return false; }
};
std::shared_ptr<BatchAllocator> HostAllocator();

// kChannelsLast: shape [3, H, W] per sample, HWC in memory (PyTorch's
// torch.channels_last); the batch tensor carries strides.
enum class Layout : uint8_t { kCHW, kHWC, kChannelsLast };

// How an image field becomes a [B, C, H, W] (or [B, H, W, C]) tensor, with
// torchvision semantics.
struct ImageTransform {
  enum class Crop : uint8_t {
    kRandomResized,  // RandomResizedCrop(size, scale, ratio): training
    kCenter,         // Resize(shorter side = resize_shorter) + CenterCrop(size): evaluation
  };
  Crop crop = Crop::kRandomResized;
  int height = 224;
  int width = 224;
  double scale_min = 0.08, scale_max = 1.0;
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;
  int resize_shorter = 256;
  double flip_prob = 0.5;  // RandomHorizontalFlip(p); 0 disables
  bool normalize = false;  // (x / 255 - mean) / std; floats only
  std::array<float, 3> mean = {0.485f, 0.456f, 0.406f};
  std::array<float, 3> std = {0.229f, 0.224f, 0.225f};
  Layout layout = Layout::kCHW;
  DType dtype = DType::kUInt8;  // kUInt8, kFloat32, kFloat16 or kBFloat16; float means x / 255
};

// Fixed-shape arrays: copied as stored, or converted to float as
// (x * scale - mean) / std (e.g. Fashion-MNIST: scale 1/255).
struct ArrayTransform {
  bool to_float = false;
  DType dtype = DType::kFloat32;  // when to_float: kFloat32 or kFloat16
  float scale = 1.0f / 255.0f;
  float mean = 0.0f;
  float std = 1.0f;
};

// Variable-length arrays: padded with `pad_value` to the longest in the
// batch, plus an int64 "<name>_lengths" tensor. Each sample may hold at most
// `max_length` elements (the buffer is sized for it); longer ones are an
// error unless `truncate`.
struct VarArrayTransform {
  uint64_t max_length = 0;
  bool truncate = false;
  int64_t pad_value = 0;
};

// Per-field options; a field's kind in the schema picks which part applies.
// Scalars (int64, float32) need none. Fields of kind bytes are not output.
struct FieldOptions {
  std::string field;
  ImageTransform image;
  ArrayTransform array;
  VarArrayTransform var_array;
};

// Parses a per-field transform written as "FIELD:OPTION,OPTION,...", the form
// the CLI (--transform) and the Python package accept. Options:
//   images:  crop=random|center  size=N|HxW  resize=N (shorter side, center crop)
//            area=MIN..MAX  ratio=MIN..MAX  flip=P  dtype=uint8|float32|float16|bfloat16
//            normalize (ImageNet mean/std)  mean=R/G/B  std=R/G/B
//            layout=chw|hwc|channels_last
//   arrays:  to-float  scale=S  mean=M  std=S  (as (x * scale - mean) / std)
//   var arrays: max-length=N  truncate  pad=V
// Errors name the option. Example: "image:crop=random,size=224,flip=0.5,dtype=float32,normalize".
Result<FieldOptions> ParseFieldOptions(std::string_view spec);

struct LoaderOptions {
  std::string dataset;
  uint64_t batch_size = 32;
  bool shuffle = true;
  // With shuffle: shuffle blocks of about 4 MiB of consecutive records, then
  // records within windows of 16 blocks, instead of the whole dataset, so a
  // remote dataset is read in runs of neighbouring records (docs/remote.md).
  // The order stays a pure function of (seed, epoch, dataset): resume is exact.
  bool block_shuffle = false;
  uint64_t seed = 0;
  bool drop_last = false;  // drop the epoch's last, incomplete batch
  // Sharding for data-parallel training. Unset: from RANK/WORLD_SIZE
  // (torchrun) or SLURM_PROCID/SLURM_STEP_NUM_TASKS (inside srun), else a single rank.
  std::optional<uint32_t> rank;
  std::optional<uint32_t> world_size;
  bool drop_uneven = false;    // ranks: drop the tail (true) or pad by repeating (false)
  int threads = 0;             // 0: auto (autotuned, see docs/loader.md)
  int prefetch = 0;            // batches in flight ahead of the consumer; 0: auto
  uint64_t ram_cap_bytes = 0;  // autotuning keeps the batch pool under this; 0: RAM / 10
  int max_held_batches = 2;    // batches the consumer may keep alive at once
  bool skip_bad = false;       // drop failing samples (counted) instead of failing
  std::vector<FieldOptions> fields;
  std::shared_ptr<BatchAllocator> allocator;  // default HostAllocator()
  // s3:// and http(s):// datasets: endpoint, cache directory and budget,
  // read-ahead window and concurrent requests (docs/remote.md).
  remote::RemoteOptions remote;
  // Files read where they lie: called while their first open makes the JPEG
  // tables (samples done, samples to do), from the indexing threads, one
  // call at a time (format::ReaderOptions::open_progress).
  std::function<void(uint64_t done, uint64_t total)> open_progress;
  // Internal (DeviceLoader's GPU decode): JPEG samples it wants are handed to
  // it, crop and flip drawn, instead of being decoded by the workers.
  std::shared_ptr<ImageDeferral> image_deferral;
};

// A view of one output tensor inside a batch buffer.
struct TensorView {
  std::string name;
  DType dtype = DType::kUInt8;
  std::vector<int64_t> shape;    // shape[0] is the batch size
  std::vector<int64_t> strides;  // in elements; empty: C-contiguous
  void* data = nullptr;
  int cuda_device = -1;  // -1: host memory, else the CUDA device that holds `data`
  size_t bytes() const;  // of the elements (strides only permute them)
};

class Batch {
 public:
  uint64_t epoch() const { return epoch_; }
  uint64_t index() const { return index_; }  // batch number within the epoch
  uint64_t size() const { return size_; }    // samples (fewer if some were skipped)
  const std::vector<TensorView>& tensors() const { return tensors_; }
  // The tensor called `name`, or nullptr.
  const TensorView* Find(std::string_view name) const;

 private:
  friend class Loader;
  friend class DeviceLoader;
  uint64_t epoch_ = 0, index_ = 0, size_ = 0;
  // When samples were skipped: the slot each kept sample was written in
  // (empty when none was; for DeviceLoader's GPU decode).
  std::vector<uint32_t> source_slots_;
  std::vector<TensorView> tensors_;
  std::shared_ptr<void> owner_;  // the pooled buffer; back to its pool when the last copy dies
};

// Where a loader stands in its stream of batches. Restore() checks that the
// options it depends on match (seed, dataset size). A state saved with
// another world size or batch size resumes elastically: the epoch's global
// order (which does not depend on either) goes on from the first position
// no rank had read, split across this run's ranks (Sampler::EpochIndicesFrom);
// that epoch is then shorter, and the next ones are whole.
struct LoaderState {
  uint64_t epoch = 0;
  uint64_t batches_done = 0;  // batches of `epoch` already delivered
  uint64_t seed = 0;
  uint64_t dataset_size = 0;
  uint64_t batch_size = 0;
  uint32_t rank = 0;
  uint32_t world_size = 1;
  // Elastic resume: positions of the epoch's global order read before its
  // first batch by a run with another world size or batch size (0 normally).
  uint64_t epoch_start_sample = 0;
  std::string ToJson() const;
  static Result<LoaderState> FromJson(std::string_view json);
};

// Counters since Open(). Times are summed over threads.
struct LoaderStats {
  uint64_t samples = 0;
  uint64_t skipped = 0;
  uint64_t read_ns = 0;
  uint64_t decode_ns = 0;
  uint64_t transform_ns = 0;
  uint64_t batches_ready = 0;
  uint64_t batches_delivered = 0;
  uint64_t wait_ns = 0;  // consumer time blocked in Next()
  // DeviceLoader only: bytes and batches copied host -> device, and device
  // buffers allocated (constant in the steady state).
  uint64_t h2d_bytes = 0;
  uint64_t h2d_batches = 0;
  uint64_t device_buffers = 0;
  // DeviceLoader's JPEG decode: the mode in use ("cpu", "gpu", "auto") and
  // nvJPEG's backend (or why it is unavailable); images decoded on the GPU,
  // the wall time of those decodes, images it refused (decoded on the CPU
  // instead), images sent to it cut to the MCUs around their crop
  // (restart-marked JPEGs, as `saturate pack` writes them), and the fraction
  // of JPEGs sent to the GPU now (auto: the split controller's; 1 for "gpu",
  // 0 for "cpu") with the rates it was chosen from.
  std::string decode;
  std::string decode_backend;
  uint64_t gpu_decoded = 0;
  uint64_t gpu_decode_ns = 0;
  uint64_t gpu_decode_fallbacks = 0;
  uint64_t gpu_decode_cut = 0;
  double gpu_decode_fraction = 0;
  double cpu_decode_images_per_s_per_thread = 0;
  double gpu_decode_images_per_s = 0;
  int threads = 0;  // current values (the autotuner may change them)
  int prefetch = 0;
  std::string autotune_reason;  // why the autotuner last changed them, if it did
  // Remote datasets: requests, bytes fetched, retries, latency, in-flight
  // requests and cache counters (all zero for a local dataset).
  remote::RemoteStats remote;
};

// What a training loop pulls batches from: a Loader (host memory) or a
// DeviceLoader (GPU memory, device_loader.h). One consumer thread.
class BatchSource {
 public:
  virtual ~BatchSource() = default;

  virtual uint64_t batches_per_epoch() const = 0;
  // The next batch of the current epoch, or nullopt at its end.
  virtual Result<std::optional<Batch>> Next() = 0;
  // Waits up to `timeout` until Next() would return without blocking (a
  // batch, an error or the epoch's end is ready); returns whether it would.
  // Lets a caller block in short slices, e.g. to notice Ctrl-C in Python.
  // The time waited counts in stats().wait_ns like Next()'s.
  virtual bool WaitForNext(std::chrono::nanoseconds timeout) = 0;
  // Starts epoch `epoch` from its first batch. Batches made ahead are kept
  // when `epoch` follows the one just finished, else discarded.
  virtual Status SetEpoch(uint64_t epoch) = 0;

  virtual LoaderState state() const = 0;
  virtual Status Restore(const LoaderState& state) = 0;
  virtual LoaderStats stats() const = 0;
};

class Loader : public BatchSource {
 public:
  static Result<std::unique_ptr<Loader>> Open(const LoaderOptions& options);
  // The dataset options.dataset names, opened as Open(options) opens it.
  static Result<std::unique_ptr<format::Dataset>> OpenDataset(const LoaderOptions& options);
  // Open() on a dataset from OpenDataset(options): a caller that reads the
  // schema first does not open (or index) the dataset twice.
  static Result<std::unique_ptr<Loader>> Open(const LoaderOptions& options,
                                              std::unique_ptr<format::Dataset> dataset);
  ~Loader() override;  // stops the workers; never hangs, even mid-epoch
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  uint64_t batches_per_epoch() const override;
  uint64_t batch_bytes() const;  // bytes of one batch buffer
  uint32_t rank() const;
  uint32_t world_size() const;
  const format::Schema& schema() const;
  const std::vector<std::string>& class_names() const;  // the manifest's; label i is [i]

  Result<std::optional<Batch>> Next() override;
  bool WaitForNext(std::chrono::nanoseconds timeout) override;
  Status SetEpoch(uint64_t epoch) override;
  LoaderState state() const override;
  Status Restore(const LoaderState& state) override;
  LoaderStats stats() const override;

 private:
  class Impl;
  explicit Loader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace saturate::feed

#endif  // SATURATE_FEED_LOADER_H_
