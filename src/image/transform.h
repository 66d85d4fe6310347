// Per-sample image transforms of the data loader, with torchvision semantics:
// crop geometry (RandomResizedCrop, Resize + CenterCrop), a JPEG decode that
// is planned from the crop (DCT scaling, column cropping, row skipping), an
// antialiased bilinear resize, horizontal flip, and conversion to the
// training tensor's layout and type (ToTensor + Normalize).
//
// Allocation: everything a worker needs is kept in one DecodeScratch, which
// grows to the largest image it has seen and is then reused, so a worker
// running DecodeCropResize + ConvertPixels in a loop does no heap allocation
// of its own in the steady state. (libjpeg and libpng still allocate their
// per-image state internally; that is outside our control.)
//
// Errors: bytes that are not a JPEG/PNG or fail to decode give Corruption
// (libjpeg warnings count as errors, as in codec.h); bad arguments give
// InvalidArgument. Nothing here prints.
//
// Ownership: inputs are borrowed for the duration of a call; outputs go to
// caller-owned buffers. Thread-safety: the free functions are reentrant; a
// DecodeScratch must be used by one thread at a time (one per worker).
//
// The implementation, one idea per file (each header says its contract):
// crop_params.cc (torchvision crop rectangles), crop_plan.h (DCT scale and
// region to decode), decode_crop.cc (DecodeCropResize: the steps in order),
// jpeg_cut.h (restart-marker cut), jpeg_planes.h (YCbCr component path),
// resample.h (taps and passes) with resample_kernels.h (4-lane) and
// resample_avx2.h (8-lane), color.h (YCbCr/CMYK to RGB), convert.h
// (ConvertPixels: layout and type into batch slots), scratch.h
// (DecodeScratch's state).
#ifndef SATURATE_IMAGE_TRANSFORM_H_
#define SATURATE_IMAGE_TRANSFORM_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "saturate/base/status.h"

namespace saturate::image {

// A rectangle in source-image pixel coordinates: columns [x, x + width),
// rows [y, y + height).
struct CropRect {
  int x = 0;
  int y = 0;
  int width = 0;
  int height = 0;
  friend bool operator==(const CropRect&, const CropRect&) = default;
};

// Source of uniform random numbers, supplied by the loader (seeded per
// sample for reproducibility). Implementations need not be thread-safe.
class UniformSource {
 public:
  virtual ~UniformSource() = default;
  // Returns a value in [0, 1).
  virtual double Uniform() = 0;
};

// torchvision.transforms.RandomResizedCrop.get_params for a width x height
// image: up to 10 attempts at a crop with area fraction in
// [scale_min, scale_max) and log-uniform aspect ratio (w/h) in
// [ratio_min, ratio_max); then a central crop with the image's aspect ratio
// clamped to [ratio_min, ratio_max]. Rounding is Python's (half to even).
// Each attempt draws 2 values, a successful one 2 more (row, then column).
CropRect RandomResizedCropParams(int width, int height, double scale_min, double scale_max,
                                 double ratio_min, double ratio_max, UniformSource& rng);

// torchvision CenterCrop((crop_height, crop_width)) on a width x height
// image. A crop larger than the image is clamped to it (torchvision would
// zero-pad instead).
CropRect CenterCropRect(int width, int height, int crop_width, int crop_height);

// The source rectangle selected by torchvision Resize(resize_shorter) (the
// shorter side becomes resize_shorter, the longer one is truncated to int)
// followed by CenterCrop((crop_height, crop_width)), mapped back to source
// pixels and rounded to whole pixels. Decode it with
// DecodeCropResize(..., crop_width, crop_height, ...).
CropRect ResizeThenCenterCropRect(int width, int height, int resize_shorter, int crop_width,
                                  int crop_height);

// Reusable buffers (and a long-lived libjpeg decompressor) for
// DecodeCropResize and CropResizeRgb. Buffers only ever grow. Not copyable;
// one per thread. A moved-from scratch may only be destroyed or assigned.
class DecodeScratch {
 public:
  DecodeScratch();
  ~DecodeScratch();
  DecodeScratch(const DecodeScratch&) = delete;
  DecodeScratch& operator=(const DecodeScratch&) = delete;
  DecodeScratch(DecodeScratch&&) noexcept;
  DecodeScratch& operator=(DecodeScratch&&) noexcept;

  // Bytes currently reserved by the buffers (grows to a high-water mark).
  size_t CapacityBytes() const;

  // JPEG DCT scales considered by DecodeCropResize. By default only 1/8 to
  // 4/8 and 8/8: libjpeg-turbo's 5/8-7/8 are slower than a full-size decode,
  // so a crop that would need one is decoded at 8/8. false allows all s/8.
  void set_only_fast_dct_scales(bool only_fast);

  // false: a restart-indexed JPEG is decoded whole instead of cut down to
  // the MCUs around the crop (same bytes, slower; for tests and benchmarks),
  // and an entry table (IndexJpegEntries) is ignored.
  void set_cut_restart_index(bool cut);

  // About the last successful DecodeCropResize, for tests and statistics:
  // the JPEG DCT scale used, in eighths (8 = full size; 8 for PNG), and the
  // size of the region actually decoded (after DCT scaling and widening of
  // the crop to iMCU boundaries).
  int last_dct_scale_eighths() const;
  int last_decoded_width() const;
  int last_decoded_height() const;
  // Whether it was a restart-indexed JPEG (AddJpegRestartMarkers), or one
  // with an entry table, of which only the MCUs around the crop were
  // entropy-decoded.
  bool last_used_restart_index() const;
  // Whether its components were resized as stored (a restart-indexed YCbCr
  // JPEG, or one with an entry table), then converted to RGB.
  bool last_decoded_ycc_planes() const;

  struct Impl;  // Defined in scratch.h; impl() is for src/image only.
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// Pixel layout of an image: interleaved RGB rows (HWC), or three planes
// R, G and B of height x width each (CHW).
enum class Layout { kHWC, kCHW };

// Decodes the `crop` of a JPEG or PNG (source pixel coordinates; must lie
// inside the image) and resizes it to out_width x out_height with
// CropResizeRgb's filter, mirrored left-right if `hflip`, into `out`
// (RGB8 in `layout`, out_width * out_height * 3 bytes).
//
// For JPEG the decode is planned from the crop: the smallest DCT scale s/8
// at which the crop still has at least out_width x out_height pixels (see
// DecodeScratch::set_only_fast_dct_scales); only the crop's columns
// (widened to iMCU boundaries) and rows are reconstructed, and rows below
// the crop are not decoded at all, so damage there goes unnoticed. A JPEG
// with a restart marker after every MCU (AddJpegRestartMarkers) is first cut
// down to the MCUs around the crop, so those beside and above it are not
// entropy-decoded either (the output bytes are those of decoding it whole);
// one with a marker after every N MCU rows is cut to the intervals that
// hold the crop's rows, and gives the same bytes as the every-MCU file.
// If it is YCbCr, its components are then resized as stored (chroma at its
// own resolution, not upsampled) and only the output pixels are converted
// to RGB, with libjpeg's arithmetic: the bytes differ from the RGB path's by
// rounding (40+ dB PSNR). Gray and CMYK JPEGs become RGB; PNG alpha is
// composited onto black (as DecodeRgb). PNG is decoded in full, then
// cropped.
Status DecodeCropResize(std::span<const std::byte> encoded, const CropRect& crop, int out_width,
                        int out_height, bool hflip, uint8_t* out, DecodeScratch* scratch,
                        Layout layout = Layout::kHWC);

// For a decoder that decodes whole images (nvJPEG): a restart-marked JPEG
// (AddJpegRestartMarkers) cut to the MCUs around `crop` (jpeg_cut.h), so that
// the MCUs above and beside it are neither sent nor entropy-decoded, with
// the crop moved into the cut's pixels. The cut keeps a margin of 8 pixels
// (one pixel at DCT scale 1/8, the widest any scale needs), so decoding it
// whole gives the crop's pixels of the whole file's decode, and
// DecodeCropResize of the cut at the moved crop gives its bytes up to the
// resampler's rounding (taps computed in the cut's coordinates). nullopt
// for anything else: what PlanJpegForDecoder (below) refuses or does not
// cut, such as no usable restart markers or nothing to skip; decode the
// bytes as they are. The cut lives in `scratch` until its next use.
struct JpegCut {
  std::span<const std::byte> jpeg;
  CropRect crop;
};
std::optional<JpegCut> CutJpegAroundCrop(std::span<const std::byte> encoded, const CropRect& crop,
                                         DecodeScratch* scratch);

// Chooses the crop (and flip) once the image size is known, so a random
// crop needs only the one header read that the decode does anyway.
class CropPlanner {
 public:
  virtual ~CropPlanner() = default;
  // Called once per decode with the stored size; returns a crop inside it.
  virtual CropRect Plan(int width, int height, bool* hflip) = 0;
};

// What a loader worker hands a decoder of whole images: a gray or YCbCr
// JPEG's header read once (the worker's decompressor), its crop and flip
// drawn by `planner`, and the file cut around the crop where
// CutJpegAroundCrop can, or on its entry table (`entries`, see
// DecodeCropResize). nullopt, with the planner perhaps called, for
// anything the CPU path must decode (and report): not a JPEG, a header
// that does not read (warnings count, as in DecodeCropResize), other than
// 1 or 3 components, a size out of range, a scan with no EOI after it (a
// file cut short, which some hardware decoders return as if whole), a crop
// outside the image.
struct PlannedJpeg {
  std::span<const std::byte> jpeg;  // `encoded`, or its cut (in `scratch`).
  CropRect crop;                    // In jpeg's pixels.
  bool hflip = false;
  bool cut = false;
};
std::optional<PlannedJpeg> PlanJpegForDecoder(std::span<const std::byte> encoded,
                                              CropPlanner& planner, DecodeScratch* scratch,
                                              std::span<const std::byte> entries = {});

// As above, with the crop and flip decided by `planner` after the header.
// `entries`: the JPEG's entry table (IndexJpegEntries), if it has one: a
// JPEG without restart markers is then cut around the crop as a
// restart-marked one is, and gives the bytes of the restart-marked copy.
// A table that does not fit the JPEG is ignored (the file decoded as is).
Status DecodeCropResize(std::span<const std::byte> encoded, CropPlanner& planner, int out_width,
                        int out_height, uint8_t* out, DecodeScratch* scratch,
                        Layout layout = Layout::kHWC, std::span<const std::byte> entries = {});

// Appends to `out` the entry table of a baseline JPEG without restart
// markers (jpeg_entries.h: where the bits of 8 places in each MCU row start;
// 2-6% of the file), for DecodeCropResize to cut it around crops without
// rewriting it. Making it costs about one Huffman decode of the file. False,
// appending nothing, for anything else (PNG, progressive or restart-marked
// JPEG, a stream that does not parse).
bool IndexJpegEntries(std::span<const std::byte> encoded, DecodeScratch* scratch,
                      std::vector<std::byte>* out);

// Resizes the `crop` of interleaved RGB8 pixels (width x height) to
// out_width x out_height with an antialiased bilinear (triangle) filter whose
// support widens with the reduction factor: PIL's Image.resize(BILINEAR)
// and torchvision's resize(antialias=True), computed in float. Taps never
// reach outside the crop. Mirrored left-right if `hflip`. Writes RGB8 in
// `layout` to `out`. Out-of-range arguments are clamped/ignored as a no-op:
// callers validate.
void CropResizeRgb(const uint8_t* rgb, int width, int height, const CropRect& crop, int out_width,
                   int out_height, bool hflip, uint8_t* out, DecodeScratch* scratch,
                   Layout layout = Layout::kHWC);

// Tests only: when true, the resampler uses its SSE2 loops even on an AVX2
// CPU, so tests can check that both give the same bytes. Not thread-safe
// against concurrent resizing.
void DisableAvx2ResizeForTesting(bool disable);

enum class PixelType { kUInt8, kFloat32, kFloat16, kBFloat16 };
inline size_t PixelTypeSize(PixelType type) {
  return type == PixelType::kUInt8 ? 1 : type == PixelType::kFloat32 ? 4 : 2;
}

// Converts interleaved RGB8 (height x width x 3) to `out` in `layout`:
// kUInt8 copies (uint8_t); kFloat32 and kFloat16 compute
// (x / 255 - mean[c]) / std[c] (torchvision ToTensor + Normalize; without
// mean/std just x / 255), as float or IEEE half bits (uint16_t, rounded to
// nearest even; kBFloat16 likewise), computed as x * (1 / (255 std)) + (-mean / std), within
// about 1 ulp of the two-step form. mean and std are 3 floats or nullptr
// (mean 0, std 1); ignored for
// kUInt8. `out` must hold height * width * 3 elements and not overlap `hwc`.
void ConvertPixels(const uint8_t* hwc, int height, int width, const float* mean, const float* std,
                   Layout layout, PixelType type, void* out);

// IEEE 754 binary16 bits of `value`, rounded to nearest even (overflow gives
// infinity, NaN stays NaN). Exposed for tests and other converters.
uint16_t FloatToHalfBits(float value);
// bfloat16 bits of `value` (the top half of the float), rounded to nearest
// even; NaN stays a quiet NaN.
uint16_t FloatToBFloat16Bits(float value);

// The per-channel affine form of (x / 255 - mean) / std used by
// ConvertPixels: x * scale[c] + bias[c], computed in float without a fused
// multiply-add. Other converters (the GPU kernels) use these same constants
// so that their output is bit-identical.
void PixelAffine(const float* mean, const float* std, float scale[3], float bias[3]);

}  // namespace saturate::image

#endif  // SATURATE_IMAGE_TRANSFORM_H_
