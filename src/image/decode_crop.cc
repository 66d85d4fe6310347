// DecodeCropResize (transform.h): a JPEG or PNG decoded as the crop plans
// it (crop_plan), cut to the MCUs around the crop when restart-marked
// (jpeg_cut), through the component path (jpeg_planes) or the RGB path
// below, then resized (resample). This file holds the order of those
// steps and the libjpeg calls of the RGB path; each step is in its own file.
// Also PlanJpegForDecoder (and CutJpegAroundCrop), the same header read,
// crop and cut made for a decoder of whole images.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "image/buffer.h"
#include "image/codec.h"
#include "image/codec_internal.h"
#include "image/color.h"
#include "image/crop_plan.h"
#include "image/jpeg_cut.h"
#include "image/jpeg_entries.h"
#include "image/jpeg_planes.h"
#include "image/resample.h"
#include "image/scratch.h"
#include "image/transform.h"

namespace saturate::image {
namespace {

// The worker's decompressor, created on first use and kept.
bool CreateJpeg(DecodeScratch::Impl& s) {
  if (!s.jpeg_created) {
    if (!Guarded(s.err, [&] { jpeg_create_decompress(&s.cinfo); })) return false;
    s.jpeg_created = true;
  }
  return true;
}

// Points the decompressor at a JPEG in memory and reads its header.
bool ReadJpegHeader(const unsigned char* data, size_t size, DecodeScratch::Impl& s) {
  return Guarded(s.err, [&] {
    jpeg_mem_src(&s.cinfo, data, size);
    jpeg_read_header(&s.cinfo, TRUE);
  });
}

// Whatever happens after it, leaves the decompressor ready for the next image.
struct AbortOnExit {
  jpeg_decompress_struct* c;
  ~AbortOnExit() { jpeg_abort_decompress(c); }
};

// A planner whose crop and flip are given.
class FixedCrop : public CropPlanner {
 public:
  FixedCrop(const CropRect& crop, bool hflip) : crop_(crop), hflip_(hflip) {}
  CropRect Plan(int, int, bool* hflip) override {
    *hflip = hflip_;
    return crop_;
  }

 private:
  CropRect crop_;
  bool hflip_;
};

// How a JPEG whose header s.cinfo has read is cut around a crop: on its
// restart markers (jpeg_cut) or on its entry table (jpeg_entries).
class Cutter {
 public:
  // nullopt when it can be neither (or the scratch says not to cut).
  static std::optional<Cutter> For(std::span<const std::byte> encoded,
                                   std::span<const std::byte> entries, DecodeScratch::Impl& s) {
    const jpeg_decompress_struct& c = s.cinfo;
    Cutter k;
    k.data_ = reinterpret_cast<const uint8_t*>(encoded.data());
    k.size_ = encoded.size();
    k.start_ = encoded.size() - c.src->bytes_in_buffer;  // after SOS
    if (auto grid = RestartGrid(c)) {
      k.grid_ = *grid;
      return k;
    }
    if (entries.empty() || !s.cut_restart_index) return std::nullopt;
    k.table_ = ParseEntries({reinterpret_cast<const uint8_t*>(entries.data()), entries.size()},
                            k.data_, k.size_, c, k.start_);
    if (!k.table_) return std::nullopt;
    k.grid_ = k.table_->grid;
    return k;
  }

  const McuGrid& grid() const { return grid_; }

  // The MCUs to cut to for the crop [fx0, fx1) x [fy0, fy1) (RangeAround).
  McuRange Range(int width, int height, int scale, int margin, double fx0, double fx1, double fy0,
                 double fy1) const {
    const McuRange r = RangeAround(grid_, width, height, scale, margin, fx0, fx1, fy0, fy1);
    return table_ ? table_->Align(r, width, height) : r;
  }

  bool Skips(const McuRange& r) const {
    return table_ ? table_->CutSkipsData(r) : CutSkipsData(grid_, r);
  }

  // Writes the cut into s.roi_jpeg; its size, or 0 if the data does not allow it.
  size_t Cut(int width, int height, const McuRange& r, DecodeScratch::Impl& s) const {
    if (table_) {
      return SpliceMcus(data_, size_, s.cinfo, *table_, width, height, r, &s.splice_bits,
                        &s.roi_jpeg);
    }
    if (!IndexSegments(data_, size_, start_, SegmentsThrough(grid_, r), &s.mcu_starts)) return 0;
    return CutMcus(data_, s.mcu_starts, grid_, width, height, r, &s.roi_jpeg);
  }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0, start_ = 0;
  McuGrid grid_;
  std::optional<JpegEntries> table_;
};

// Decodes the crop's region of a JPEG at a planned DCT scale into s.pixels
// and resizes it into out; cut around the crop first if it has restart
// markers or an entry table (`entries`).
Status DecodeJpegCrop(std::span<const std::byte> encoded, std::span<const std::byte> entries,
                      CropPlanner& planner, int out_w, int out_h, uint8_t* out, bool planar,
                      DecodeScratch::Impl& s) {
  jpeg_decompress_struct& c = s.cinfo;
  const auto* data = reinterpret_cast<const unsigned char*>(encoded.data());
  if (!CreateJpeg(s)) return s.JpegError();
  AbortOnExit abort_on_exit{&c};
  if (!ReadJpegHeader(data, encoded.size(), s)) return s.JpegError();
  const int width = static_cast<int>(c.image_width);
  const int height = static_cast<int>(c.image_height);
  SATURATE_RETURN_IF_ERROR(CheckSize(width, height));
  bool hflip = false;
  const CropRect crop = planner.Plan(width, height, &hflip);
  SATURATE_RETURN_IF_ERROR(CheckCrop(crop, width, height));

  const int scale = PlanDctScale(crop, out_w, out_h, s.only_fast_dct_scales);
  // The crop in scaled pixels (fractional), in the source image; a cut
  // stream starts at MCU column mcu_x0, row mcu_y0.
  const double f = scale / 8.0;
  const ScaledCrop scaled = ScaleCrop(crop, scale);
  double fx0 = scaled.x0, fx1 = scaled.x1, fy0 = scaled.y0, fy1 = scaled.y1;
  int mcu_x0 = 0, mcu_y0 = 0;
  double dx = 0, dy = 0;  // Where the cut starts, in scaled pixels (whole ones).
  const auto cutter = Cutter::For(encoded, entries, s);
  bool indexed = cutter.has_value();  // No rows or columns to skip: it is cut, or whole.
  if (cutter) {
    const McuGrid& grid = cutter->grid();
    const int margin = HasYccPlanes(c) ? 0 : 1;
    const McuRange r = cutter->Range(width, height, scale, margin, fx0, fx1, fy0, fy1);
    // Cut, unless that skips nothing (or told not to): then it is decoded
    // whole, and still indexed. A failed cut falls back to RGB.
    if (cutter->Skips(r) && s.cut_restart_index) {
      const size_t cut_bytes = cutter->Cut(width, height, r, s);
      indexed = cut_bytes > 0;
      if (cut_bytes > 0) {
        jpeg_abort_decompress(&c);
        if (!ReadJpegHeader(s.roi_jpeg.data(), cut_bytes, s)) return s.JpegError();
        mcu_x0 = r.c0, mcu_y0 = r.r0;
        dx = r.c0 * grid.mcu_w * f, dy = r.r0 * grid.mcu_h * f;
        s.last_used_restart_index = true;
      }
    }
  }
  if (indexed && HasYccPlanes(c)) {
    return DecodeJpegPlanes(c, scale, fx0, fx1, fy0, fy1, mcu_x0, mcu_y0, hflip, out_w, out_h, out,
                            planar, s);
  }
  // The RGB path works in the decoded stream's pixels. Its box is relative
  // to the decoded region, which starts at an iMCU boundary as a cut does,
  // so it is the whole image's box (dyadic values, exact), and so are its taps.
  fx0 -= dx, fx1 -= dx, fy0 -= dy, fy1 -= dy;
  const bool cmyk = c.jpeg_color_space == JCS_CMYK || c.jpeg_color_space == JCS_YCCK;
  c.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  c.scale_num = static_cast<unsigned>(scale);
  c.scale_denom = 8;
  JDIMENSION col0 = 0, cols = 0;
  int row0 = 0, row1 = 0, channels = 0;
  if (!Guarded(s.err, [&] {
        jpeg_start_decompress(&c);
        const PixelWindow w = CoveringPixels(fx0, fx1, fy0, fy1, static_cast<int>(c.output_width),
                                             static_cast<int>(c.output_height));
        col0 = static_cast<JDIMENSION>(w.col0);
        cols = static_cast<JDIMENSION>(w.cols);
        row0 = w.row0;
        row1 = w.row1;
        // Moves col0 left to an iMCU boundary and widens cols to match.
        if (cols < c.output_width) jpeg_crop_scanline(&c, &col0, &cols);
        channels = c.output_components;
      })) {
    return s.JpegError();
  }
  const size_t row_bytes = size_t(cols) * channels;
  const size_t rgb_row = size_t(cols) * 3;
  uint8_t* px = Grow(s.pixels, row_bytes * (row1 - row0));
  if (!Guarded(s.err, [&] {
        if (row0 > 0) jpeg_skip_scanlines(&c, static_cast<JDIMENSION>(row0));
        while (c.output_scanline < static_cast<JDIMENSION>(row1)) {
          // Rows sit at the RGB stride. A CMYK row (4 bytes/px) spills into
          // the next row's space, which is still unwritten, and is then
          // converted in place; the buffer has room for the last one.
          uint8_t* dst = px + rgb_row * (c.output_scanline - row0);
          JSAMPROW row = dst;
          if (jpeg_read_scanlines(&c, &row, 1) != 1) ERREXIT(&c, JERR_INPUT_EOF);
          if (cmyk) CmykRowToRgb(dst, static_cast<int>(cols), c.saw_Adobe_marker, dst);
        }
      })) {
    return s.JpegError();
  }
  // abort_on_exit ends the decode: rows below the crop are never decoded.

  s.last_dct_scale_eighths = scale;
  s.last_decoded_width = static_cast<int>(cols);
  s.last_decoded_height = row1 - row0;
  const int cw = static_cast<int>(cols), ch = row1 - row0;
  // Box relative to the decoded region; taps stay within the whole scaled
  // pixels the crop touches.
  const double bx0 = fx0 - col0, by0 = fy0 - row0;
  const int cx0 = static_cast<int>(std::floor(bx0)), cy0 = static_cast<int>(std::floor(by0));
  const int cx1 = std::min(cw, static_cast<int>(std::ceil(fx1 - col0)));
  const int cy1 = std::min(ch, static_cast<int>(std::ceil(fy1 - row0)));
  ResampleBox(px, rgb_row, {bx0, fx1 - fx0, by0, fy1 - fy0, cx0, cx1, cy0, cy1}, out_w, out_h,
              hflip, out, planar, s.resample);
  return Status::OK();
}

Status DecodePngCrop(std::span<const std::byte> encoded, CropPlanner& planner, int out_w, int out_h,
                     uint8_t* out, bool planar, DecodeScratch::Impl& s) {
  PngReader r;
  if (!png_image_begin_read_from_memory(&r.image, encoded.data(), encoded.size())) {
    return r.Error();
  }
  const int width = static_cast<int>(r.image.width);
  const int height = static_cast<int>(r.image.height);
  SATURATE_RETURN_IF_ERROR(CheckSize(width, height));
  bool hflip = false;
  const CropRect crop = planner.Plan(width, height, &hflip);
  SATURATE_RETURN_IF_ERROR(CheckCrop(crop, width, height));
  r.image.format = PNG_FORMAT_RGB;
  const size_t bytes = PNG_IMAGE_SIZE(r.image);
  uint8_t* px = Grow(s.pixels, bytes);
  std::memset(px, 0, bytes);  // Alpha composites onto the buffer: black.
  if (!png_image_finish_read(&r.image, /*background=*/nullptr, px, /*row_stride=*/0,
                             /*colormap=*/nullptr)) {
    return r.Error();
  }
  s.last_dct_scale_eighths = 8;
  s.last_decoded_width = width;
  s.last_decoded_height = height;
  ResampleBox(px, size_t(width) * 3, SourceBox::Of(crop), out_w, out_h, hflip, out, planar,
              s.resample);
  return Status::OK();
}

// Whether an EOI marker (FF D9) follows the scan that starts at `scan`. A
// JPEG cut short has none: libjpeg reports it (the CPU path's error), while a
// hardware decoder may return whatever it made of the part it got. Stuffed
// scan data never holds FF D9, so the last one found from the end is the EOI
// (or that of data appended after the image, which is then whole too).
bool HasEoiAfter(std::span<const std::byte> encoded, size_t scan) {
  for (size_t i = encoded.size(); i >= scan + 2; --i) {
    if (encoded[i - 1] == std::byte{0xD9} && encoded[i - 2] == std::byte{0xFF}) return true;
  }
  return false;
}

}  // namespace

Status DecodeCropResize(std::span<const std::byte> encoded, CropPlanner& planner, int out_width,
                        int out_height, uint8_t* out, DecodeScratch* scratch, Layout layout,
                        std::span<const std::byte> entries) {
  if (out_width <= 0 || out_height <= 0 || out == nullptr || scratch == nullptr) {
    return Status::InvalidArgument("DecodeCropResize: bad output " + std::to_string(out_width) +
                                   "x" + std::to_string(out_height));
  }
  SATURATE_RETURN_IF_ERROR(CheckSize(out_width, out_height));
  DecodeScratch::Impl& s = scratch->impl();
  s.last_used_restart_index = false;  // Set by the paths that take them.
  s.last_decoded_ycc_planes = false;
  const bool planar = layout == Layout::kCHW;
  switch (SniffFormat(encoded)) {
    case ImageFormat::kJpeg:
      return DecodeJpegCrop(encoded, entries, planner, out_width, out_height, out, planar, s);
    case ImageFormat::kPng:
      return DecodePngCrop(encoded, planner, out_width, out_height, out, planar, s);
    case ImageFormat::kUnknown:
      break;
  }
  // ProbeImage words the "not a JPEG or PNG" message.
  return ProbeImage(encoded).status();
}

std::optional<PlannedJpeg> PlanJpegForDecoder(std::span<const std::byte> encoded,
                                              CropPlanner& planner, DecodeScratch* scratch,
                                              std::span<const std::byte> entries) {
  DecodeScratch::Impl& s = scratch->impl();
  if (SniffFormat(encoded) != ImageFormat::kJpeg || !CreateJpeg(s)) return std::nullopt;
  jpeg_decompress_struct& c = s.cinfo;
  AbortOnExit abort_on_exit{&c};
  const auto* data = reinterpret_cast<const unsigned char*>(encoded.data());
  if (!ReadJpegHeader(data, encoded.size(), s)) return std::nullopt;
  const int width = static_cast<int>(c.image_width);
  const int height = static_cast<int>(c.image_height);
  if ((c.num_components != 1 && c.num_components != 3) || !CheckSize(width, height).ok() ||
      !HasEoiAfter(encoded, encoded.size() - c.src->bytes_in_buffer)) {
    return std::nullopt;
  }
  PlannedJpeg p{encoded};
  p.crop = planner.Plan(width, height, &p.hflip);
  if (!CropInside(p.crop, width, height)) return std::nullopt;
  const auto cutter = Cutter::For(encoded, entries, s);
  if (!cutter || !s.cut_restart_index) return p;
  // One pixel at scale 1/8 is 8 at full size: wider than any scale's margin.
  const ScaledCrop f = ScaleCrop(p.crop, 1);
  const McuRange r =
      cutter->Range(width, height, /*scale=*/1, /*margin=*/1, f.x0, f.x1, f.y0, f.y1);
  if (!cutter->Skips(r)) return p;
  const size_t bytes = cutter->Cut(width, height, r, s);
  if (bytes == 0) return p;
  p.jpeg = std::as_bytes(std::span(s.roi_jpeg.data(), bytes));
  p.crop.x -= r.c0 * cutter->grid().mcu_w;
  p.crop.y -= r.r0 * cutter->grid().mcu_h;
  p.cut = true;
  return p;
}

bool IndexJpegEntries(std::span<const std::byte> encoded, DecodeScratch* scratch,
                      std::vector<std::byte>* out) {
  DecodeScratch::Impl& s = scratch->impl();
  if (SniffFormat(encoded) != ImageFormat::kJpeg || !CreateJpeg(s)) return false;
  AbortOnExit abort_on_exit{&s.cinfo};
  const auto* data = reinterpret_cast<const unsigned char*>(encoded.data());
  if (!ReadJpegHeader(data, encoded.size(), s) ||
      !CheckSize(static_cast<int>(s.cinfo.image_width), static_cast<int>(s.cinfo.image_height))
           .ok()) {
    return false;
  }
  const size_t start = encoded.size() - s.cinfo.src->bytes_in_buffer;  // after SOS
  std::vector<uint8_t> table;
  if (!ScanEntries(data, encoded.size(), s.cinfo, start, /*every=*/0, &table)) return false;
  const auto* p = reinterpret_cast<const std::byte*>(table.data());
  out->insert(out->end(), p, p + table.size());
  return true;
}

std::optional<JpegCut> CutJpegAroundCrop(std::span<const std::byte> encoded, const CropRect& crop,
                                         DecodeScratch* scratch) {
  FixedCrop fixed(crop, false);
  const auto p = PlanJpegForDecoder(encoded, fixed, scratch);
  if (!p || !p->cut) return std::nullopt;
  return JpegCut{p->jpeg, p->crop};
}

Status DecodeCropResize(std::span<const std::byte> encoded, const CropRect& crop, int out_width,
                        int out_height, bool hflip, uint8_t* out, DecodeScratch* scratch,
                        Layout layout) {
  FixedCrop fixed(crop, hflip);
  return DecodeCropResize(encoded, fixed, out_width, out_height, out, scratch, layout);
}

}  // namespace saturate::image
