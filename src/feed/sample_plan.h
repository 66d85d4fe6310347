// SamplePlan: how the fields of one record become slots of a batch buffer.
//
// Built once per loader from the schema and the per-field options. It fixes
// each output tensor's dtype, per-sample shape and offset in the buffer, so
// a worker can write sample `slot` of a batch without allocating. Finish()
// turns a filled buffer into tensor views, dropping skipped slots and
// padding variable-length arrays to the batch maximum.
//
// Thread-safety: immutable after Create(); WriteSample() may run on many
// threads at once, each with its own SampleScratch and distinct slots.
#ifndef SATURATE_FEED_SAMPLE_PLAN_H_
#define SATURATE_FEED_SAMPLE_PLAN_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "feed/array_convert.h"
#include "feed/image_deferral.h"
#include "image/transform.h"
#include "saturate/feed/loader.h"
#include "saturate/format/reader.h"

namespace saturate::feed {

// Per-thread reusable state for WriteSample().
struct SampleScratch {
  image::DecodeScratch decode;
  std::vector<uint8_t> pixels;          // decoded HWC uint8 before conversion
  std::vector<format::Record> records;  // a chunk's, for WriteFixedSamples
  std::vector<uint8_t> records_ok;
};

// Nanoseconds spent per stage, accumulated by WriteSample(). A stage's
// time runs from the previous Lap() (or the construction) to its own, so
// timing n stages costs n clock reads, not 2n; at a few million samples/s
// those reads are a sixth of the work.
struct StageTimes {
  uint64_t read_ns = 0;  // filled by the loader around Dataset::Get
  uint64_t decode_ns = 0;
  uint64_t transform_ns = 0;
  std::chrono::steady_clock::time_point mark = std::chrono::steady_clock::now();

  // Adds the time since the last lap to *stage_ns.
  void Lap(uint64_t* stage_ns) {
    const auto now = std::chrono::steady_clock::now();
    *stage_ns += static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(now - mark).count());
    mark = now;
  }
};

// The options given for field `name`, or nullptr.
const FieldOptions* FindOptions(const std::vector<FieldOptions>& options, const std::string& name);

// The image library's pixel type and memory layout for an output dtype and
// layout; channels_last images are HWC in memory.
image::PixelType PixelTypeOf(DType dtype);
image::Layout ImageLayout(Layout layout);
// Element strides of a [B, 3, H, W] channels_last batch; empty (contiguous)
// for the other layouts.
std::vector<int64_t> ImageStrides(Layout layout, int64_t height, int64_t width);

class SamplePlan {
 public:
  enum class Kind : uint8_t { kImage, kArray, kScalar, kVarArray, kLengths };
  struct Output {
    Kind kind;
    std::string name;
    size_t field = 0;                 // index in the schema (the var array's, for kLengths)
    DType dtype = DType::kUInt8;      // as output
    DType src_dtype = DType::kUInt8;  // as stored (arrays)
    std::vector<int64_t> sample_shape;
    uint64_t sample_bytes = 0;
    uint64_t offset = 0;  // of slot 0 in the batch buffer
    FieldOptions options;
  };

  static Result<SamplePlan> Create(const format::Schema& schema,
                                   const std::vector<FieldOptions>& options, uint64_t batch_size);

  // JPEG images the deferral wants are handed to it instead of decoded.
  void set_image_deferral(std::shared_ptr<ImageDeferral> deferral) {
    deferral_ = std::move(deferral);
  }
  // How arrays converted to float are stored (kStreaming for buffers a
  // device reads: BatchAllocator::read_by_device). With kStreaming the
  // writer calls StreamingFence() before handing the samples over.
  void set_array_stores(Stores stores) { array_stores_ = stores; }
  Stores array_stores() const { return array_stores_; }

  uint64_t batch_bytes() const { return batch_bytes_; }
  // Every output is a fixed-size array or a scalar: no decode, no padding,
  // so a chunk of records can be written by WriteFixedSamples.
  bool fixed_size() const { return fixed_size_; }
  const std::vector<Output>& outputs() const { return outputs_; }

  // Writes `record` (dataset record `record_index`) into slot `slot` of
  // `buffer`. Augmentation randomness is keyed on (seed, epoch, record_index).
  Status WriteSample(const format::Record& record, uint64_t record_index, uint64_t seed,
                     uint64_t epoch, uint64_t slot, std::byte* buffer, SampleScratch* scratch,
                     StageTimes* times) const;

  // Writes records[k] into slot first_slot + k for every k with ok[k];
  // fixed_size() plans only. Cannot fail: the plan checked the fields.
  void WriteFixedSamples(std::span<const format::Record> records, std::span<const uint8_t> ok,
                         uint64_t first_slot, std::byte* buffer) const;

  // Compacts the `valid` slots of a batch of `count` samples to the front,
  // pads variable-length arrays to the longest, and returns the tensor views.
  std::vector<TensorView> Finish(std::byte* buffer, const std::vector<uint8_t>& valid,
                                 uint64_t count, uint64_t* kept) const;

 private:
  Status WriteImage(const Output& out, std::span<const std::byte> bytes,
                    std::span<const std::byte> entries, uint64_t record_index, uint64_t seed,
                    uint64_t epoch, uint64_t slot, std::byte* dst, SampleScratch* scratch,
                    StageTimes* times) const;

  void WriteArray(const Output& out, std::span<const std::byte> src, std::byte* dst) const;

  std::vector<Output> outputs_;
  uint64_t batch_size_ = 0;
  uint64_t batch_bytes_ = 0;
  bool fixed_size_ = false;
  std::shared_ptr<ImageDeferral> deferral_;
  Stores array_stores_ = Stores::kCached;
};

}  // namespace saturate::feed

#endif  // SATURATE_FEED_SAMPLE_PLAN_H_
