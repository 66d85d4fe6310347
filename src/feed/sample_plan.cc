#include "feed/sample_plan.h"

#include <algorithm>
#include <cstring>

#include "feed/array_convert.h"
#include "feed/random.h"
#include "image/codec.h"
#include "image/crop_plan.h"

namespace saturate::feed {
namespace {

using format::FieldKind;
constexpr uint64_t kSlotAlign = 64;

uint64_t AlignUp(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

uint64_t Product(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

// Adapts the counter-based sample stream to the image transforms' interface.
class RngSource : public image::UniformSource {
 public:
  explicit RngSource(SampleRng* rng) : rng_(rng) {}
  double Uniform() override { return rng_->Uniform(); }

 private:
  SampleRng* rng_;
};

}  // namespace

const FieldOptions* FindOptions(const std::vector<FieldOptions>& options, const std::string& name) {
  for (const FieldOptions& o : options) {
    if (o.field == name) return &o;
  }
  return nullptr;
}

image::PixelType PixelTypeOf(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return image::PixelType::kFloat32;
    case DType::kFloat16:
      return image::PixelType::kFloat16;
    case DType::kBFloat16:
      return image::PixelType::kBFloat16;
    default:
      return image::PixelType::kUInt8;
  }
}

image::Layout ImageLayout(Layout layout) {
  return layout == Layout::kCHW ? image::Layout::kCHW : image::Layout::kHWC;
}

std::vector<int64_t> ImageStrides(Layout layout, int64_t height, int64_t width) {
  if (layout != Layout::kChannelsLast) return {};
  return {height * width * 3, 1, width * 3, 3};
}

namespace {

Status CheckImageOptions(const std::string& name, const ImageTransform& t) {
  auto bad = [&](const std::string& what) {
    return Status::InvalidArgument("field '" + name + "': " + what);
  };
  if (t.height <= 0 || t.width <= 0) return bad("image size must be positive");
  if (t.dtype != DType::kUInt8 && t.dtype != DType::kFloat32 && t.dtype != DType::kFloat16 &&
      t.dtype != DType::kBFloat16) {
    return bad("image dtype must be uint8, float32, float16 or bfloat16");
  }
  if (t.normalize && t.dtype == DType::kUInt8) return bad("normalize needs a float dtype");
  if (!(t.scale_min > 0 && t.scale_min <= t.scale_max && t.scale_max <= 1)) {
    return bad("scale must satisfy 0 < min <= max <= 1");
  }
  if (!(t.ratio_min > 0 && t.ratio_min <= t.ratio_max))
    return bad("ratio must satisfy 0 < min <= max");
  if (t.crop == ImageTransform::Crop::kCenter && t.resize_shorter <= 0) {
    return bad("resize_shorter must be positive");
  }
  for (float s : t.std) {
    if (t.normalize && s == 0) return bad("std must not be 0");
  }
  return Status::OK();
}

}  // namespace

Result<SamplePlan> SamplePlan::Create(const format::Schema& schema,
                                      const std::vector<FieldOptions>& options,
                                      uint64_t batch_size) {
  if (batch_size == 0) return Status::InvalidArgument("batch_size must be positive");
  for (const FieldOptions& o : options) {
    SATURATE_RETURN_IF_ERROR(schema.FieldIndex(o.field).status());
  }
  SamplePlan plan;
  plan.batch_size_ = batch_size;
  for (size_t i = 0; i < schema.fields.size(); ++i) {
    const format::FieldSpec& spec = schema.fields[i];
    const FieldOptions* found = FindOptions(options, spec.name);
    Output out{Kind::kScalar, spec.name, i};
    if (found != nullptr) out.options = *found;
    switch (spec.kind) {
      case FieldKind::kBytes:
        continue;  // not a tensor
      case FieldKind::kInt64:
        out.dtype = DType::kInt64;
        break;
      case FieldKind::kFloat32:
        out.dtype = DType::kFloat32;
        break;
      case FieldKind::kImage: {
        const ImageTransform& t = out.options.image;
        SATURATE_RETURN_IF_ERROR(CheckImageOptions(spec.name, t));
        out.kind = Kind::kImage;
        out.dtype = t.dtype;
        // channels_last is [3, H, W] in HWC memory (strides set in Finish), as PyTorch has it.
        out.sample_shape = t.layout == Layout::kHWC ? std::vector<int64_t>{t.height, t.width, 3}
                                                    : std::vector<int64_t>{3, t.height, t.width};
        break;
      }
      case FieldKind::kArray:
        out.kind = Kind::kArray;
        out.src_dtype = spec.dtype;
        out.dtype = out.options.array.to_float ? out.options.array.dtype : spec.dtype;
        if (out.options.array.to_float && out.dtype != DType::kFloat32) {
          return Status::InvalidArgument("field '" + spec.name + "': to_float supports float32");
        }
        if (out.options.array.to_float && !CanScaleToFloat(spec.dtype)) {
          return Status::Unimplemented("field '" + spec.name + "': to_float from " +
                                       std::string(format::DTypeName(spec.dtype)));
        }
        out.sample_shape = spec.shape;
        break;
      case FieldKind::kVarArray: {
        const VarArrayTransform& t = out.options.var_array;
        if (t.max_length == 0) {
          return Status::InvalidArgument("field '" + spec.name +
                                         "': variable-length arrays need max_length");
        }
        out.kind = Kind::kVarArray;
        out.dtype = spec.dtype;
        out.sample_shape = {static_cast<int64_t>(t.max_length)};
        break;
      }
    }
    out.sample_bytes = Product(out.sample_shape) * format::DTypeSize(out.dtype);
    plan.outputs_.push_back(out);
    if (out.kind == Kind::kVarArray) {
      Output lengths{Kind::kLengths, spec.name + "_lengths", i, DType::kInt64};
      lengths.sample_bytes = 8;
      plan.outputs_.push_back(lengths);
    }
  }
  if (plan.outputs_.empty()) return Status::InvalidArgument("the dataset has no tensor fields");
  plan.fixed_size_ = std::all_of(plan.outputs_.begin(), plan.outputs_.end(), [](const Output& o) {
    return o.kind == Kind::kArray || o.kind == Kind::kScalar;
  });
  for (Output& out : plan.outputs_) {
    out.offset = plan.batch_bytes_;
    plan.batch_bytes_ = AlignUp(plan.batch_bytes_ + out.sample_bytes * batch_size, kSlotAlign);
  }
  return plan;
}

Status SamplePlan::WriteImage(const Output& out, std::span<const std::byte> bytes,
                              std::span<const std::byte> entries, uint64_t record_index,
                              uint64_t seed, uint64_t epoch, uint64_t slot, std::byte* dst,
                              SampleScratch* scratch, StageTimes* times) const {
  const ImageTransform& t = out.options.image;
  // The crop is drawn once the decoder has read the image size: one stream
  // per (sample, field), crop first, then flip, as torchvision draws them.
  struct Planner : image::CropPlanner {
    Planner(const ImageTransform* transform, SampleRng stream) : t(transform), rng(stream) {}
    const ImageTransform* t;
    SampleRng rng;
    image::CropRect Plan(int width, int height, bool* hflip) override {
      if (t->crop == ImageTransform::Crop::kCenter) {
        return image::ResizeThenCenterCropRect(width, height, t->resize_shorter, t->width,
                                               t->height);
      }
      RngSource source(&rng);
      image::CropRect crop = image::RandomResizedCropParams(
          width, height, t->scale_min, t->scale_max, t->ratio_min, t->ratio_max, source);
      *hflip = t->flip_prob > 0 && rng.Uniform() < t->flip_prob;
      return crop;
    }
  };
  const SampleRng stream(seed ^ (out.field * 0x9E3779B97F4A7C15ull), epoch, record_index);
  Planner planner(&t, stream);
  // The GPU decode stage: same header read and crop draws as the decode's.
  if (deferral_ != nullptr && image::SniffFormat(bytes) == image::ImageFormat::kJpeg &&
      deferral_->Wants(slot)) {
    if (auto planned = image::PlanJpegForDecoder(bytes, planner, &scratch->decode, entries)) {
      DeferredImage d;
      d.slot0 = dst - slot * out.sample_bytes;
      d.slot = slot;
      d.record = record_index;
      d.encoded = planned->jpeg;
      d.crop = planned->crop;
      d.hflip = planned->hflip;
      d.cut = planned->cut;
      deferral_->Take(d);
      times->Lap(&times->decode_ns);
      return Status::OK();
    }
    planner.rng = stream;  // The CPU decodes (and reports) it, drawing from the start.
  }
  if (deferral_ != nullptr) deferral_->Forget(dst - slot * out.sample_bytes, slot);
  // uint8 output (either layout) is written by the resampler in place.
  const bool direct = t.dtype == DType::kUInt8;
  const size_t pixel_bytes = static_cast<size_t>(t.width) * t.height * 3;
  if (!direct && scratch->pixels.size() < pixel_bytes) scratch->pixels.resize(pixel_bytes);
  uint8_t* rgb = direct ? reinterpret_cast<uint8_t*>(dst) : scratch->pixels.data();
  SATURATE_RETURN_IF_ERROR(
      image::DecodeCropResize(bytes, planner, t.width, t.height, rgb, &scratch->decode,
                              direct ? ImageLayout(t.layout) : image::Layout::kHWC, entries));
  times->Lap(&times->decode_ns);
  if (!direct) {
    image::ConvertPixels(rgb, t.height, t.width, t.normalize ? t.mean.data() : nullptr,
                         t.normalize ? t.std.data() : nullptr, ImageLayout(t.layout),
                         PixelTypeOf(t.dtype), dst);
    times->Lap(&times->transform_ns);
  }
  return Status::OK();
}

Status SamplePlan::WriteSample(const format::Record& record, uint64_t record_index, uint64_t seed,
                               uint64_t epoch, uint64_t slot, std::byte* buffer,
                               SampleScratch* scratch, StageTimes* times) const {
  for (const Output& out : outputs_) {
    std::byte* dst = buffer + out.offset + slot * out.sample_bytes;
    std::span<const std::byte> src = record.field(out.field);
    switch (out.kind) {
      case Kind::kImage: {
        Status s = WriteImage(out, src, record.jpeg_entries(out.field), record_index, seed, epoch,
                              slot, dst, scratch, times);
        if (!s.ok()) return s.WithContext("field '" + out.name + "': decode");
        break;
      }
      case Kind::kScalar:
        std::memcpy(dst, src.data(), out.sample_bytes);
        break;
      case Kind::kArray:
        WriteArray(out, src, dst);
        times->Lap(&times->transform_ns);
        break;
      case Kind::kVarArray: {
        const VarArrayTransform& t = out.options.var_array;
        const uint64_t elem = format::DTypeSize(out.dtype);
        uint64_t n = src.size() / elem;
        if (n > t.max_length) {
          if (!t.truncate) {
            return Status::InvalidArgument("field '" + out.name + "': " + std::to_string(n) +
                                           " elements exceed max_length " +
                                           std::to_string(t.max_length));
          }
          n = t.max_length;
        }
        std::memcpy(dst, src.data(), n * elem);
        // The lengths output follows this one in outputs_.
        const Output& len = *(&out + 1);
        int64_t n64 = static_cast<int64_t>(n);
        std::memcpy(buffer + len.offset + slot * 8, &n64, 8);
        break;
      }
      case Kind::kLengths:
        break;  // written with its array
    }
  }
  return Status::OK();
}

void SamplePlan::WriteArray(const Output& out, std::span<const std::byte> src,
                            std::byte* dst) const {
  const ArrayTransform& t = out.options.array;
  if (!t.to_float) {
    std::memcpy(dst, src.data(), out.sample_bytes);
    return;
  }
  ScaleToFloat(out.src_dtype, src.data(), out.sample_bytes / sizeof(float), t.scale / t.std,
               -t.mean / t.std, reinterpret_cast<float*>(dst), array_stores_);
}

void SamplePlan::WriteFixedSamples(std::span<const format::Record> records,
                                   std::span<const uint8_t> ok, uint64_t first_slot,
                                   std::byte* buffer) const {
  // Output by output, so the kind is dispatched once per chunk, not per sample.
  for (const Output& out : outputs_) {
    std::byte* dst = buffer + out.offset + first_slot * out.sample_bytes;
    for (size_t k = 0; k < records.size(); ++k, dst += out.sample_bytes) {
      if (!ok[k]) continue;
      const std::span<const std::byte> src = records[k].field(out.field);
      if (out.kind == Kind::kScalar) {
        std::memcpy(dst, src.data(), out.sample_bytes);
      } else {
        WriteArray(out, src, dst);
      }
    }
  }
}

std::vector<TensorView> SamplePlan::Finish(std::byte* buffer, const std::vector<uint8_t>& valid,
                                           uint64_t count, uint64_t* kept) const {
  // Compact: move valid slots down over skipped ones, in every output.
  uint64_t k = 0;
  for (uint64_t s = 0; s < count; ++s) {
    if (!valid[s]) continue;
    if (k != s) {
      for (const Output& out : outputs_) {
        std::memmove(buffer + out.offset + k * out.sample_bytes,
                     buffer + out.offset + s * out.sample_bytes, out.sample_bytes);
      }
    }
    ++k;
  }
  *kept = k;
  std::vector<TensorView> views;
  views.reserve(outputs_.size());
  for (size_t o = 0; o < outputs_.size(); ++o) {
    const Output& out = outputs_[o];
    TensorView v{out.name, out.dtype, {static_cast<int64_t>(k)}, {}, buffer + out.offset};
    if (out.kind == Kind::kVarArray) {
      // Re-stride rows from max_length to the longest in this batch, padding the tail.
      const auto* lengths = reinterpret_cast<const int64_t*>(buffer + outputs_[o + 1].offset);
      int64_t longest = 0;
      for (uint64_t s = 0; s < k; ++s) longest = std::max(longest, lengths[s]);
      const uint64_t elem = format::DTypeSize(out.dtype);
      const int64_t pad = out.options.var_array.pad_value;
      for (uint64_t s = 0; s < k; ++s) {
        std::byte* row = buffer + out.offset + s * longest * elem;
        std::memmove(row, buffer + out.offset + s * out.sample_bytes, lengths[s] * elem);
        for (int64_t e = lengths[s]; e < longest; ++e) {
          std::memcpy(row + e * elem, &pad, elem);  // little-endian: low bytes of the pad value
        }
      }
      v.shape.push_back(longest);
    } else {
      v.shape.insert(v.shape.end(), out.sample_shape.begin(), out.sample_shape.end());
    }
    if (out.kind == Kind::kImage) {
      const ImageTransform& t = out.options.image;
      v.strides = ImageStrides(t.layout, t.height, t.width);
    }
    views.push_back(std::move(v));
  }
  return views;
}

}  // namespace saturate::feed
