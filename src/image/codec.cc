#include "image/codec.h"

#include <jerror.h>
#include <jpeglib.h>
#include <png.h>

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdio>  // jpeglib.h needs FILE and size_t first.
#include <cstring>
#include <string>
#include <utility>

#include "image/codec_internal.h"

namespace saturate::image {
namespace {

constexpr uint8_t kJpegMagic[] = {0xFF, 0xD8, 0xFF};
constexpr uint8_t kPngMagic[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};

// Decoded pixels. Interleaved RGB8 unless a validation-only decode left the
// stored layout in place.
struct Pixels {
  std::vector<uint8_t> data;
  int width = 0;
  int height = 0;
};

bool StartsWith(std::span<const std::byte> bytes, std::span<const uint8_t> magic) {
  return bytes.size() >= magic.size() && std::memcmp(bytes.data(), magic.data(), magic.size()) == 0;
}

Status UnknownFormat(std::span<const std::byte> bytes) {
  if (bytes.empty()) return Status::Corruption("not a JPEG or PNG image: no bytes");
  std::string head;
  for (size_t i = 0; i < std::min<size_t>(bytes.size(), 8); ++i) {
    char hex[4];
    std::snprintf(hex, sizeof hex, " %02x", static_cast<unsigned>(bytes[i]));
    head += hex;
  }
  return Status::Corruption("not a JPEG or PNG image (starts with" + head + ")");
}

// Refuses sizes that would make a decode allocate absurd amounts.
Status CheckPixelCount(const ImageInfo& info) {
  if (int64_t{info.width} * info.height <= kMaxImagePixels) return Status::OK();
  return Status::InvalidArgument("image too large: " + std::to_string(info.width) + "x" +
                                 std::to_string(info.height) + " exceeds " +
                                 std::to_string(kMaxImagePixels) + " pixels");
}

// Owns a decompressor; destruction releases libjpeg's memory on every path
// (jpeg_destroy_* is a no-op if jpeg_create_* never ran or failed).
struct JpegDecompressor {
  explicit JpegDecompressor(bool strict) { cinfo.err = InitJpegErrors(&err, strict); }
  ~JpegDecompressor() { jpeg_destroy_decompress(&cinfo); }
  JpegDecompressor(const JpegDecompressor&) = delete;
  JpegDecompressor& operator=(const JpegDecompressor&) = delete;
  Status Error() const { return Status::Corruption(std::string("JPEG: ") + err.message); }

  JpegErrorMgr err;
  jpeg_decompress_struct cinfo{};
};

struct JpegCompressor {
  JpegCompressor() { cinfo.err = InitJpegErrors(&err, /*warnings_are_errors=*/true); }
  ~JpegCompressor() { jpeg_destroy_compress(&cinfo); }
  JpegCompressor(const JpegCompressor&) = delete;
  JpegCompressor& operator=(const JpegCompressor&) = delete;

  JpegErrorMgr err;
  jpeg_compress_struct cinfo{};
};

// Creates the decompressor over `bytes` and reads the header.
Status OpenJpeg(JpegDecompressor& d, std::span<const std::byte> bytes, ImageInfo* info) {
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  if (!Guarded(d.err, [&] {
        jpeg_create_decompress(&d.cinfo);
        jpeg_mem_src(&d.cinfo, data, bytes.size());
        jpeg_read_header(&d.cinfo, TRUE);
      })) {
    return d.Error();
  }
  *info = {static_cast<int>(d.cinfo.image_width), static_cast<int>(d.cinfo.image_height),
           d.cinfo.num_components, ImageFormat::kJpeg};
  return Status::OK();
}

// libjpeg cannot convert CMYK to RGB, so we do. Files with an Adobe marker
// (Photoshop, libjpeg itself) store CMYK inverted.
void CmykToRgbInPlace(std::vector<uint8_t>* px, bool inverted) {
  const size_t n = px->size() / 4;
  uint8_t* p = px->data();
  for (size_t i = 0; i < n; ++i) {  // Writes trail reads: in place is safe.
    int c = p[4 * i], m = p[4 * i + 1], y = p[4 * i + 2], k = p[4 * i + 3];
    if (!inverted) c = 255 - c, m = 255 - m, y = 255 - y, k = 255 - k;
    p[3 * i] = static_cast<uint8_t>((c * k + 127) / 255);
    p[3 * i + 1] = static_cast<uint8_t>((m * k + 127) / 255);
    p[3 * i + 2] = static_cast<uint8_t>((y * k + 127) / 255);
  }
  px->resize(3 * n);
}

// Decodes at 1/scale_denom size (DCT scaling). Without keep_pixels every row
// lands in one scratch row: a full decode that only proves validity.
Result<Pixels> DecodeJpeg(std::span<const std::byte> bytes, int scale_denom, bool keep_pixels,
                          ImageInfo* info) {
  JpegDecompressor d(/*strict=*/true);
  SATURATE_RETURN_IF_ERROR(OpenJpeg(d, bytes, info));
  SATURATE_RETURN_IF_ERROR(CheckPixelCount(*info));
  jpeg_decompress_struct& c = d.cinfo;
  const bool cmyk = c.jpeg_color_space == JCS_CMYK || c.jpeg_color_space == JCS_YCCK;
  c.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  c.scale_num = 1;
  c.scale_denom = static_cast<unsigned>(scale_denom);
  if (!Guarded(d.err, [&] { jpeg_start_decompress(&c); })) return d.Error();

  const size_t row_bytes = size_t{c.output_width} * c.output_components;
  Pixels px{.width = static_cast<int>(c.output_width), .height = static_cast<int>(c.output_height)};
  px.data.resize(row_bytes * (keep_pixels ? c.output_height : 1));
  uint8_t* base = px.data.data();
  if (!Guarded(d.err, [&] {
        while (c.output_scanline < c.output_height) {
          JSAMPROW row = base + (keep_pixels ? row_bytes * c.output_scanline : 0);
          jpeg_read_scanlines(&c, &row, 1);
        }
        jpeg_finish_decompress(&c);
      })) {
    return d.Error();
  }
  if (cmyk && keep_pixels) CmykToRgbInPlace(&px.data, c.saw_Adobe_marker);
  return px;
}

// A jpeg_destination_mgr that writes straight into a vector. (jpeg_mem_dest
// would leak its regrown buffer if compression failed part way.)
struct VectorDest {
  jpeg_destination_mgr pub;  // First member: libjpeg only sees this part.
  std::vector<std::byte>* out;
};

void VectorDestInit(j_compress_ptr cinfo) {
  auto* dest = reinterpret_cast<VectorDest*>(cinfo->dest);
  dest->pub.next_output_byte = reinterpret_cast<JOCTET*>(dest->out->data());
  dest->pub.free_in_buffer = dest->out->size();
}

// Called when the buffer is full: double it. Out of memory becomes a libjpeg
// error, since an exception must not unwind through C frames.
boolean VectorDestGrow(j_compress_ptr cinfo) {
  auto* dest = reinterpret_cast<VectorDest*>(cinfo->dest);
  const size_t used = dest->out->size();
  bool grown = true;
  try {
    dest->out->resize(2 * used);
  } catch (...) {
    grown = false;
  }
  if (!grown) ERREXIT1(cinfo, JERR_OUT_OF_MEMORY, 0);
  dest->pub.next_output_byte = reinterpret_cast<JOCTET*>(dest->out->data() + used);
  dest->pub.free_in_buffer = used;
  return TRUE;
}

void VectorDestTerm(j_compress_ptr cinfo) {
  auto* dest = reinterpret_cast<VectorDest*>(cinfo->dest);
  dest->out->resize(dest->out->size() - dest->pub.free_in_buffer);
}

// A destination over `out`, whose size is the first guess of the output's.
VectorDest MakeVectorDest(std::vector<std::byte>* out) {
  VectorDest dest{{}, out};
  dest.pub.init_destination = VectorDestInit;
  dest.pub.empty_output_buffer = VectorDestGrow;
  dest.pub.term_destination = VectorDestTerm;
  return dest;
}

// Whether a progressive JPEG's scans sent every coefficient to full
// precision (libjpeg's coef_bits: -1 not sent, > 0 bits still to come).
bool AllCoefficientsSent(const jpeg_decompress_struct& c) {
  for (int ci = 0; ci < c.num_components; ++ci) {
    for (int k = 0; k < DCTSIZE2; ++k) {
      if (c.coef_bits[ci][k] != 0) return false;
    }
  }
  return true;
}

// ---- libpng (simplified API) --------------------------------------------------

Status OpenPng(PngReader& r, std::span<const std::byte> bytes, ImageInfo* info) {
  if (!png_image_begin_read_from_memory(&r.image, bytes.data(), bytes.size())) return r.Error();
  *info = {static_cast<int>(r.image.width), static_cast<int>(r.image.height),
           static_cast<int>(PNG_IMAGE_SAMPLE_CHANNELS(r.image.format)), ImageFormat::kPng};
  return Status::OK();
}

// Without to_rgb the stored layout is kept (less work when only validating);
// the colormap flag is dropped so palette images expand without a colormap.
Result<Pixels> DecodePng(std::span<const std::byte> bytes, bool to_rgb, ImageInfo* info) {
  PngReader r;
  SATURATE_RETURN_IF_ERROR(OpenPng(r, bytes, info));
  SATURATE_RETURN_IF_ERROR(CheckPixelCount(*info));
  r.image.format = to_rgb ? PNG_FORMAT_RGB : (r.image.format & ~PNG_FORMAT_FLAG_COLORMAP);
  Pixels px{.width = info->width, .height = info->height};
  px.data.resize(PNG_IMAGE_SIZE(r.image));  // Zeroed: alpha composites onto black.
  if (!png_image_finish_read(&r.image, /*background=*/nullptr, px.data.data(), /*row_stride=*/0,
                             /*colormap=*/nullptr)) {
    return r.Error();
  }
  return px;
}

Result<Pixels> Decode(std::span<const std::byte> bytes, int scale_denom, bool keep_pixels,
                      ImageInfo* info) {
  ImageInfo unused;
  if (info == nullptr) info = &unused;
  switch (SniffFormat(bytes)) {
    case ImageFormat::kJpeg:
      return DecodeJpeg(bytes, scale_denom, keep_pixels, info);
    case ImageFormat::kPng:
      return DecodePng(bytes, keep_pixels, info);
    case ImageFormat::kUnknown:
      break;
  }
  return UnknownFormat(bytes);
}

// ---- resizing -----------------------------------------------------------------

// Source pixels feeding one output pixel along one axis, with normalized weights.
struct Taps {
  int first = 0;
  std::vector<float> weights;
};

// Output pixel i covers the source span [i*s, (i+1)*s), s = in/out; each
// source pixel is weighted by how much of it the span covers.
std::vector<Taps> BoxTaps(int in, int out) {
  const double scale = static_cast<double>(in) / out;
  std::vector<Taps> taps(out);
  for (int i = 0; i < out; ++i) {
    const double lo = i * scale;
    const double hi = std::min<double>(in, (i + 1) * scale);
    const int first = static_cast<int>(lo);
    const int last = std::min(in - 1, static_cast<int>(std::ceil(hi)) - 1);
    taps[i].first = first;
    for (int s = first; s <= last; ++s) {
      const double cover = std::min(hi, s + 1.0) - std::max(lo, static_cast<double>(s));
      taps[i].weights.push_back(static_cast<float>(cover / (hi - lo)));
    }
  }
  return taps;
}

std::pair<int, int> TargetSize(int width, int height, int max_side) {
  const int longer = std::max(width, height);
  if (max_side <= 0 || longer <= max_side) return {width, height};
  auto shorter = [&](int side) {
    return std::max(1,
                    static_cast<int>(std::lround(static_cast<double>(side) * max_side / longer)));
  };
  return width >= height ? std::pair(max_side, shorter(height))
                         : std::pair(shorter(width), max_side);
}

// The strongest DCT reduction (1/8, 1/4, 1/2) that keeps both sides at or
// above the target, so the final area resize still has pixels to average.
int DctScaleDenom(int width, int height, int target_width, int target_height) {
  for (int d : {8, 4, 2}) {
    if ((width + d - 1) / d >= target_width && (height + d - 1) / d >= target_height) return d;
  }
  return 1;
}

}  // namespace

ImageFormat SniffFormat(std::span<const std::byte> bytes) {
  if (StartsWith(bytes, kJpegMagic)) return ImageFormat::kJpeg;
  if (StartsWith(bytes, kPngMagic)) return ImageFormat::kPng;
  return ImageFormat::kUnknown;
}

Result<ImageInfo> ProbeImage(std::span<const std::byte> bytes) {
  ImageInfo info;
  switch (SniffFormat(bytes)) {
    case ImageFormat::kJpeg: {
      JpegDecompressor d(/*strict=*/false);  // Header warnings do not hide pixels.
      SATURATE_RETURN_IF_ERROR(OpenJpeg(d, bytes, &info));
      return info;
    }
    case ImageFormat::kPng: {
      PngReader r;
      SATURATE_RETURN_IF_ERROR(OpenPng(r, bytes, &info));
      return info;
    }
    case ImageFormat::kUnknown:
      break;
  }
  return UnknownFormat(bytes);
}

Result<ImageInfo> ValidateImage(std::span<const std::byte> bytes) {
  // Corruption shows up while parsing markers and entropy-decoding, both of
  // which run in full at any DCT scale; 1/8 skips most IDCT work.
  ImageInfo info;
  SATURATE_RETURN_IF_ERROR(Decode(bytes, /*scale_denom=*/8, /*keep_pixels=*/false, &info).status());
  return info;
}

Result<std::vector<uint8_t>> DecodeRgb(std::span<const std::byte> bytes, ImageInfo* info) {
  SATURATE_ASSIGN_OR_RETURN(Pixels px, Decode(bytes, 1, /*keep_pixels=*/true, info));
  return std::move(px.data);
}

Result<std::vector<std::byte>> EncodeJpeg(const uint8_t* rgb, int width, int height, int quality) {
  if (rgb == nullptr || width <= 0 || height <= 0 || width > JPEG_MAX_DIMENSION ||
      height > JPEG_MAX_DIMENSION) {
    return Status::InvalidArgument("EncodeJpeg: bad image " + std::to_string(width) + "x" +
                                   std::to_string(height));
  }
  if (quality < 1 || quality > 100) {
    return Status::InvalidArgument("EncodeJpeg: quality " + std::to_string(quality) +
                                   " not in 1..100");
  }
  std::vector<std::byte> out(size_t{4096} + size_t(width) * height / 2);  // ~4 bits/px
  VectorDest dest = MakeVectorDest(&out);
  JpegCompressor comp;
  jpeg_compress_struct& c = comp.cinfo;
  const size_t row_bytes = size_t(width) * 3;
  if (!Guarded(comp.err, [&] {
        jpeg_create_compress(&c);
        c.dest = &dest.pub;
        c.image_width = static_cast<JDIMENSION>(width);
        c.image_height = static_cast<JDIMENSION>(height);
        c.input_components = 3;
        c.in_color_space = JCS_RGB;
        jpeg_set_defaults(&c);
        jpeg_set_quality(&c, quality, /*force_baseline=*/TRUE);
        c.comp_info[0].h_samp_factor = c.comp_info[0].v_samp_factor = 2;  // 4:2:0
        for (int i = 1; i < 3; ++i) c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;
        c.optimize_coding = FALSE;
        jpeg_start_compress(&c, TRUE);
        while (c.next_scanline < c.image_height) {
          // libjpeg's row type is non-const but it only reads input rows.
          JSAMPROW row = const_cast<uint8_t*>(rgb + row_bytes * c.next_scanline);
          jpeg_write_scanlines(&c, &row, 1);
        }
        jpeg_finish_compress(&c);
      })) {
    return Status::Internal(std::string("EncodeJpeg: ") + comp.err.message);
  }
  return out;
}

Result<std::vector<std::byte>> AddJpegRestartMarkers(std::span<const std::byte> jpeg,
                                                     int restart_rows) {
  if (restart_rows < kRestartEveryMcu) {
    return Status::InvalidArgument("restart_rows " + std::to_string(restart_rows) +
                                   ": want -1 (every MCU), 0 (none) or a number of MCU rows");
  }
  if (SniffFormat(jpeg) != ImageFormat::kJpeg) return UnknownFormat(jpeg);
  JpegDecompressor in(/*strict=*/true);
  const auto* data = reinterpret_cast<const unsigned char*>(jpeg.data());
  if (!Guarded(in.err, [&] {
        jpeg_create_decompress(&in.cinfo);
        jpeg_mem_src(&in.cinfo, data, jpeg.size());
        jpeg_save_markers(&in.cinfo, JPEG_COM, 0xFFFF);
        for (int m = 0; m < 16; ++m) jpeg_save_markers(&in.cinfo, JPEG_APP0 + m, 0xFFFF);
        jpeg_read_header(&in.cinfo, TRUE);
      })) {
    return in.Error();
  }
  SATURATE_RETURN_IF_ERROR(CheckPixelCount({static_cast<int>(in.cinfo.image_width),
                                            static_cast<int>(in.cinfo.image_height),
                                            in.cinfo.num_components, ImageFormat::kJpeg}));
  jvirt_barray_ptr* coefficients = nullptr;
  if (!Guarded(in.err, [&] { coefficients = jpeg_read_coefficients(&in.cinfo); })) {
    return in.Error();
  }
  if (in.cinfo.progressive_mode && !AllCoefficientsSent(in.cinfo)) {
    return Status::Unimplemented(
        "progressive JPEG without its refinement scans: libjpeg smooths the missing "
        "coefficients, which a baseline copy cannot reproduce");
  }
  std::vector<std::byte> bytes(jpeg.size() + jpeg.size() / 8 + 4096);
  VectorDest dest = MakeVectorDest(&bytes);
  JpegCompressor out;
  jpeg_compress_struct& c = out.cinfo;
  if (!Guarded(out.err, [&] {
        jpeg_create_compress(&c);
        c.dest = &dest.pub;
        jpeg_copy_critical_parameters(&in.cinfo, &c);
        if (restart_rows == kRestartEveryMcu) {
          c.restart_interval = 1;  // one MCU per restart interval
        } else {
          c.restart_in_rows = restart_rows;  // 0: none (libjpeg caps it at 65535 MCUs)
        }
        c.optimize_coding = TRUE;
        // The source's JFIF/Adobe markers are copied below with the others.
        c.write_JFIF_header = FALSE;
        c.write_Adobe_marker = FALSE;
        jpeg_write_coefficients(&c, coefficients);
        for (jpeg_saved_marker_ptr m = in.cinfo.marker_list; m != nullptr; m = m->next) {
          jpeg_write_marker(&c, m->marker, m->data, m->data_length);
        }
        jpeg_finish_compress(&c);
      })) {
    return Status::Internal(std::string("JPEG restart markers: ") + out.err.message);
  }
  return bytes;
}

std::vector<uint8_t> ResizeRgb(const uint8_t* rgb, int width, int height, int out_width,
                               int out_height) {
  if (out_width == width && out_height == height) {
    return std::vector<uint8_t>(rgb, rgb + size_t(width) * height * 3);
  }
  const std::vector<Taps> x_taps = BoxTaps(width, out_width);
  const std::vector<Taps> y_taps = BoxTaps(height, out_height);
  // Horizontal pass into floats (one rounding at the end), then vertical.
  const size_t mid_row = size_t(out_width) * 3;
  std::vector<float> mid(mid_row * height);
  for (int y = 0; y < height; ++y) {
    const uint8_t* src = rgb + size_t(y) * width * 3;
    float* dst = mid.data() + mid_row * y;
    for (int x = 0; x < out_width; ++x) {
      const Taps& t = x_taps[x];
      for (size_t k = 0; k < t.weights.size(); ++k) {
        const uint8_t* p = src + size_t(t.first + k) * 3;
        for (int ch = 0; ch < 3; ++ch) dst[3 * x + ch] += t.weights[k] * p[ch];
      }
    }
  }
  std::vector<uint8_t> out(mid_row * out_height);
  std::vector<float> acc(mid_row);
  for (int y = 0; y < out_height; ++y) {
    const Taps& t = y_taps[y];
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (size_t k = 0; k < t.weights.size(); ++k) {
      const float* src = mid.data() + mid_row * (t.first + k);
      for (size_t i = 0; i < mid_row; ++i) acc[i] += t.weights[k] * src[i];
    }
    for (size_t i = 0; i < mid_row; ++i) {
      out[mid_row * y + i] = static_cast<uint8_t>(std::clamp(std::lround(acc[i]), 0L, 255L));
    }
  }
  return out;
}

Result<std::vector<std::byte>> ReencodeJpeg(std::span<const std::byte> bytes, int max_side,
                                            int quality) {
  if (quality < 1 || quality > 100) {
    return Status::InvalidArgument("ReencodeJpeg: quality " + std::to_string(quality) +
                                   " not in 1..100");
  }
  SATURATE_ASSIGN_OR_RETURN(ImageInfo info, ProbeImage(bytes));
  const auto [width, height] = TargetSize(info.width, info.height, max_side);
  const int denom =
      info.format == ImageFormat::kJpeg ? DctScaleDenom(info.width, info.height, width, height) : 1;
  SATURATE_ASSIGN_OR_RETURN(Pixels px, Decode(bytes, denom, /*keep_pixels=*/true, nullptr));
  if (px.width != width || px.height != height) {
    px.data = ResizeRgb(px.data.data(), px.width, px.height, width, height);
  }
  return EncodeJpeg(px.data.data(), width, height, quality);
}

}  // namespace saturate::image
