// Cutting a restart-marked JPEG down to the MCUs around a crop: see jpeg_cut.h.
#include "image/jpeg_cut.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "image/buffer.h"

namespace saturate::image {
namespace {

// The offset of the SOF0/SOF1 marker in the header bytes [0, end), or 0
// unless it is there and gives the size libjpeg read (height, width).
size_t FindBaselineSof(const uint8_t* p, size_t end, int width, int height) {
  size_t i = 2;  // after SOI
  while (i + 4 <= end && p[i] == 0xFF) {
    const uint8_t marker = p[i + 1];
    if (marker == 0xFF) {  // fill byte
      ++i;
      continue;
    }
    if (marker == 0xC0 || marker == 0xC1) {
      const bool same = i + 9 <= end && (p[i + 5] << 8 | p[i + 6]) == height &&
                        (p[i + 7] << 8 | p[i + 8]) == width;
      return same ? i : 0;
    }
    i += 2 + (size_t{p[i + 2]} << 8 | p[i + 3]);
  }
  return 0;
}

}  // namespace

std::optional<McuGrid> ScanGrid(const jpeg_decompress_struct& c) {
  if (c.progressive_mode || c.arith_code || c.comps_in_scan != c.num_components) {
    return std::nullopt;
  }
  McuGrid g;
  int max_h = 1, max_v = 1;
  for (int i = 0; i < c.num_components; ++i) {
    max_h = std::max(max_h, c.comp_info[i].h_samp_factor);
    max_v = std::max(max_v, c.comp_info[i].v_samp_factor);
  }
  // A single-component scan is not interleaved: its MCU is one 8x8 block.
  g.mcu_w = c.comps_in_scan == 1 ? 8 : 8 * max_h;
  g.mcu_h = c.comps_in_scan == 1 ? 8 : 8 * max_v;
  g.mcus_x = static_cast<int>((c.image_width + g.mcu_w - 1) / g.mcu_w);
  g.mcus_y = static_cast<int>((c.image_height + g.mcu_h - 1) / g.mcu_h);
  return g;
}

std::optional<McuGrid> RestartGrid(const jpeg_decompress_struct& c) {
  auto g = ScanGrid(c);
  if (!g || c.restart_interval == 0) return std::nullopt;
  if (c.restart_interval == 1) return g;  // One MCU per segment.
  if (c.restart_interval % static_cast<unsigned>(g->mcus_x) != 0) return std::nullopt;
  g->rows_per_segment = static_cast<int>(c.restart_interval / static_cast<unsigned>(g->mcus_x));
  return g;
}

uint8_t* StartCut(const uint8_t* jpeg, size_t header, int width, int height, const McuRange& range,
                  size_t bytes, std::vector<uint8_t>* out) {
  const size_t sof = FindBaselineSof(jpeg, header, width, height);
  if (sof == 0) return nullptr;
  uint8_t* dst = Grow(*out, bytes);
  std::memcpy(dst, jpeg, header);
  dst[sof + 5] = static_cast<uint8_t>(range.height >> 8);
  dst[sof + 6] = static_cast<uint8_t>(range.height);
  dst[sof + 7] = static_cast<uint8_t>(range.width >> 8);
  dst[sof + 8] = static_cast<uint8_t>(range.width);
  return dst + header;
}

bool IndexSegments(const uint8_t* p, size_t size, size_t start, size_t count,
                   std::vector<uint32_t>* starts) {
  if (size > UINT32_MAX - 2) return false;
  starts->clear();
  starts->push_back(static_cast<uint32_t>(start));
  size_t i = start;
  while (starts->size() <= count) {
    const size_t j = NextFF(p, i, size);
    if (j + 1 >= size) return false;
    const uint8_t marker = p[j + 1];
    if (marker == 0x00) {  // a stuffed 0xFF data byte
      i = j + 2;
      continue;
    }
    const bool rst = marker >= 0xD0 && marker <= 0xD7;
    if (rst && marker != 0xD0 + (starts->size() - 1) % 8) return false;
    if (!rst && starts->size() != count) return false;  // ends early (or fill bytes)
    starts->push_back(static_cast<uint32_t>(j + 2));
    i = j + 2;
  }
  return true;
}

size_t CutMcus(const uint8_t* jpeg, const std::vector<uint32_t>& starts, const McuGrid& g,
               int width, int height, const McuRange& range, std::vector<uint8_t>* out) {
  const size_t header = starts[0];
  // The segments of a row of segments are adjacent in the source, each
  // followed by its marker: one copy per row, then the markers renumbered
  // from RST0; the last one becomes the EOI. With row segments, a row of
  // segments is one segment, and the range's rows are whole segments.
  const int cols = g.SegmentCols(), height_in_rows = g.SegmentRows();
  const bool rows = g.rows_per_segment > 0;
  const int c0 = rows ? 0 : range.c0, c1 = rows ? 1 : range.c1;
  const int r0 = range.r0 / height_in_rows;
  const int r1 = (range.r1 + height_in_rows - 1) / height_in_rows;
  auto first = [&](int r) { return size_t(r) * cols + c0; };
  auto end = [&](int r) { return size_t(r) * cols + c1; };
  size_t bytes = header;
  for (int r = r0; r < r1; ++r) bytes += starts[end(r)] - starts[first(r)];
  uint8_t* d = StartCut(jpeg, header, width, height, range, bytes, out);
  if (d == nullptr) return 0;
  int n = 0;
  for (int r = r0; r < r1; ++r) {
    const size_t base = starts[first(r)];
    std::memcpy(d, jpeg + base, starts[end(r)] - base);
    for (size_t k = first(r); k < end(r); ++k, ++n) {
      d[starts[k + 1] - 1 - base] = static_cast<uint8_t>(0xD0 + n % 8);
    }
    d += starts[end(r)] - base;
  }
  d[-1] = 0xD9;  // FF D9: EOI
  return bytes;
}

McuRange RangeAround(const McuGrid& g, int width, int height, int scale, int margin, double fx0,
                     double fx1, double fy0, double fy1) {
  const int sw = g.mcu_w * scale / 8, sh = g.mcu_h * scale / 8;  // MCU in scaled pixels
  McuRange r;
  r.c0 = std::max(0, (static_cast<int>(std::floor(fx0)) - margin) / sw);
  r.c1 = std::min(g.mcus_x, (static_cast<int>(std::ceil(fx1)) - 1 + margin) / sw + 1);
  r.r0 = std::max(0, (static_cast<int>(std::floor(fy0)) - margin) / sh);
  r.r1 = std::min(g.mcus_y, (static_cast<int>(std::ceil(fy1)) - 1 + margin) / sh + 1);
  if (g.rows_per_segment > 0) {
    const int k = g.rows_per_segment;
    r.c0 = 0, r.c1 = g.mcus_x;
    r.r0 = r.r0 / k * k;
    r.r1 = std::min(g.mcus_y, (r.r1 + k - 1) / k * k);
  }
  r.width = std::min(width, r.c1 * g.mcu_w) - r.c0 * g.mcu_w;
  r.height = std::min(height, r.r1 * g.mcu_h) - r.r0 * g.mcu_h;
  return r;
}

size_t SegmentsThrough(const McuGrid& g, const McuRange& r) {
  if (g.rows_per_segment == 0) return size_t(r.r1 - 1) * g.mcus_x + r.c1;
  return size_t(r.r1 + g.rows_per_segment - 1) / g.rows_per_segment;
}

bool CutSkipsData(const McuGrid& g, const McuRange& r) {
  if (g.rows_per_segment > 0) return r.r0 > 0;
  return !(r.c0 == 0 && r.r0 == 0 && r.c1 == g.mcus_x && r.r1 == g.mcus_y);
}

}  // namespace saturate::image
