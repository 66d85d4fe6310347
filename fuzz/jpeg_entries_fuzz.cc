// libFuzzer target: the entry tables of unmarked JPEGs (image/jpeg_entries.h),
// untrusted two ways; the first byte says which.
//  - 0xFF (as every JPEG starts): the input is a JPEG. Once libjpeg has read
//    its header, ScanEntries either refuses it or makes a table that
//    ParseEntries accepts, and a cut spliced on that table (a range chosen
//    by the input's last bytes) holds, where it and the file both decode
//    cleanly, the file's DCT coefficients block for block.
//  - anything else: the input mutates the real table of a valid JPEG
//    (made at first use: a small gradient, standard or optimized Huffman
//    tables, an entry every 1, 2, 3 or the default MCUs), keeping the
//    table's header or not. SpliceMcus must read and write only within its
//    buffers (ASan) and return 0 or a size within `out`; an unmutated table
//    must cut; a cut must not crash libjpeg.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "image/codec.h"
#include "image/codec_internal.h"
#include "image/jpeg_cut.h"
#include "image/jpeg_entries.h"

namespace {

using saturate::image::Guarded;
using saturate::image::InitJpegErrors;
using saturate::image::JpegEntries;
using saturate::image::JpegErrorMgr;
using saturate::image::McuRange;

// Larger images only slow the fuzzer down (ScanEntries reads every MCU a
// header declares, data or not).
constexpr int64_t kMaxPixels = int64_t{1} << 20;
constexpr size_t kTableHeaderBytes = 4 + 2 * 4 + 4 + 4 + 8;  // as jpeg_entries.h lays it out

// A decompressor (warnings are errors; nothing is printed) that has read a
// JPEG's header, and where its scan's data starts.
struct Header {
  Header() { c.err = InitJpegErrors(&err, /*warnings_are_errors=*/true); }
  ~Header() { jpeg_destroy_decompress(&c); }
  Header(const Header&) = delete;
  Header& operator=(const Header&) = delete;

  bool Read(const uint8_t* p, size_t size) {
    if (!Guarded(err, [&] {
          jpeg_create_decompress(&c);
          jpeg_mem_src(&c, p, size);
          jpeg_read_header(&c, TRUE);
        })) {
      return false;
    }
    scan_start = size - c.src->bytes_in_buffer;
    return true;
  }
  int width() const { return static_cast<int>(c.image_width); }
  int height() const { return static_cast<int>(c.image_height); }

  jpeg_decompress_struct c{};
  JpegErrorMgr err;
  size_t scan_start = 0;
};

// Every component's quantized DCT blocks, as libjpeg reads them.
struct Coefficients {
  int width = 0, height = 0;
  std::vector<int> blocks_w, blocks_h, h_samp, v_samp;
  std::vector<std::vector<JCOEF>> blocks;  // per component, row-major blocks of 64
};

// False if libjpeg raises an error or a warning reading them.
bool ReadCoefficients(const uint8_t* p, size_t size, Coefficients* k) {
  Header h;
  if (!h.Read(p, size)) return false;
  jpeg_decompress_struct& c = h.c;
  jvirt_barray_ptr* arrays = nullptr;
  if (!Guarded(h.err, [&] { arrays = jpeg_read_coefficients(&c); }) || arrays == nullptr) {
    return false;
  }
  k->width = h.width();
  k->height = h.height();
  for (int i = 0; i < c.num_components; ++i) {
    const jpeg_component_info& comp = c.comp_info[i];
    const int bw = static_cast<int>(comp.width_in_blocks);
    const int bh = static_cast<int>(comp.height_in_blocks);
    k->blocks_w.push_back(bw);
    k->blocks_h.push_back(bh);
    k->h_samp.push_back(comp.h_samp_factor);
    k->v_samp.push_back(comp.v_samp_factor);
    k->blocks.emplace_back(size_t(bw) * bh * 64);
    JCOEF* dst = k->blocks.back().data();
    if (!Guarded(h.err, [&] {
          for (int y = 0; y < bh; ++y) {
            JBLOCKARRAY row =
                (*c.mem->access_virt_barray)(reinterpret_cast<j_common_ptr>(&c), arrays[i],
                                             static_cast<JDIMENSION>(y), 1, FALSE);
            std::memcpy(dst + size_t(y) * bw * 64, row[0], size_t(bw) * 64 * sizeof(JCOEF));
          }
        })) {
      return false;
    }
  }
  return true;
}

// Decodes a cut to pixels, as a caller would: errors are fine, crashes are not.
void DecodeCut(const uint8_t* p, size_t size) {
  Header h;
  if (!h.Read(p, size)) return;
  jpeg_decompress_struct& c = h.c;
  Guarded(h.err, [&] {
    jpeg_start_decompress(&c);
    JSAMPARRAY row = (*c.mem->alloc_sarray)(reinterpret_cast<j_common_ptr>(&c), JPOOL_IMAGE,
                                            c.output_width * c.output_components, 1);
    while (c.output_scanline < c.output_height) jpeg_read_scanlines(&c, row, 1);
    jpeg_finish_decompress(&c);
  });
}

// The MCUs around a crop chosen by four bytes, aligned to the table's entries
// (as decode_crop.cc picks them).
McuRange RangeFor(const JpegEntries& e, int w, int h, const uint8_t b[4]) {
  const int cw = 1 + b[0] * (w - 1) / 255, ch = 1 + b[1] * (h - 1) / 255;
  const int x = b[2] * (w - cw) / 255, y = b[3] * (h - ch) / 255;
  const int margin = b[0] & 1;
  return e.Align(
      saturate::image::RangeAround(e.grid, w, h, /*scale=*/8, margin, x, x + cw, y, y + ch), w, h);
}

// Splices `r` in fresh buffers (so that ASan sees any byte read or written
// past them); traps on a size beyond `out`. Returns the cut's size.
size_t Splice(const uint8_t* p, size_t size, const Header& h, const JpegEntries& e,
              const McuRange& r, std::vector<uint8_t>* out) {
  std::vector<uint8_t> bits;
  const size_t n =
      saturate::image::SpliceMcus(p, size, h.c, e, h.width(), h.height(), r, &bits, out);
  if (n > out->size()) __builtin_trap();
  return n;
}

// The cut of `r` holds the file's coefficients, where both decode cleanly.
void CheckCutBlocks(const uint8_t* p, size_t size, const McuRange& r, const uint8_t* cut,
                    size_t n) {
  Coefficients part, whole;
  if (!ReadCoefficients(cut, n, &part) || !ReadCoefficients(p, size, &whole)) return;
  if (part.width != r.width || part.height != r.height ||
      part.blocks.size() != whole.blocks.size()) {
    __builtin_trap();
  }
  const bool gray = whole.blocks.size() == 1;  // one block per MCU
  for (size_t comp = 0; comp < whole.blocks.size(); ++comp) {
    const int hs = gray ? 1 : whole.h_samp[comp], vs = gray ? 1 : whole.v_samp[comp];
    for (int y = 0; y < part.blocks_h[comp]; ++y) {
      for (int x = 0; x < part.blocks_w[comp]; ++x) {
        const int wx = r.c0 * hs + x, wy = r.r0 * vs + y;
        if (wx >= whole.blocks_w[comp] || wy >= whole.blocks_h[comp]) __builtin_trap();
        const JCOEF* got = &part.blocks[comp][(size_t(y) * part.blocks_w[comp] + x) * 64];
        const JCOEF* want = &whole.blocks[comp][(size_t(wy) * whole.blocks_w[comp] + wx) * 64];
        if (std::memcmp(got, want, 64 * sizeof(JCOEF)) != 0) __builtin_trap();
      }
    }
  }
}

// Mode 1: the input is the JPEG.
void FuzzJpeg(const uint8_t* data, size_t size) {
  Header h;
  if (!h.Read(data, size) || int64_t{h.width()} * h.height() > kMaxPixels) return;
  uint8_t tail[6] = {};  // the range and `every`, from the input's last bytes
  for (size_t k = 0; k < 6 && k < size; ++k) tail[k] = data[size - 1 - k];
  std::vector<uint8_t> table;
  if (!saturate::image::ScanEntries(data, size, h.c, h.scan_start, /*every=*/tail[4] % 4, &table)) {
    if (!table.empty()) __builtin_trap();  // A refusal appends nothing.
    return;
  }
  const auto e = saturate::image::ParseEntries(table, data, size, h.c, h.scan_start);
  if (!e) __builtin_trap();  // The table ScanEntries made is the file's.
  const McuRange r = RangeFor(*e, h.width(), h.height(), tail);
  std::vector<uint8_t> cut;
  const size_t n = Splice(data, size, h, *e, r, &cut);
  if (n == 0) return;
  DecodeCut(cut.data(), n);
  CheckCutBlocks(data, size, r, cut.data(), n);
}

// A valid JPEG, the header libjpeg read and its real tables.
struct Valid {
  std::vector<std::byte> jpeg;
  Header header;
  std::vector<uint8_t> tables[4];  // an entry every 1, 2, 3 and the default MCUs
  bool standard_tables = false;    // the Huffman tables hold every DC size a cut needs

  const uint8_t* data() const { return reinterpret_cast<const uint8_t*>(jpeg.data()); }
};

// A gradient with some texture, so that blocks have AC coefficients.
std::vector<std::byte> MakeJpeg(bool optimized) {
  constexpr int kW = 70, kH = 46;  // 5 x 3 MCUs (4:2:0), the last ones partial
  std::vector<uint8_t> rgb(size_t(kW) * kH * 3);
  for (int y = 0; y < kH; ++y) {
    for (int x = 0; x < kW; ++x) {
      uint8_t* px = &rgb[(size_t(y) * kW + x) * 3];
      px[0] = static_cast<uint8_t>(x * 255 / kW);
      px[1] = static_cast<uint8_t>(y * 255 / kH);
      px[2] = static_cast<uint8_t>((x * y) ^ (x * 7));
    }
  }
  auto jpeg = saturate::image::EncodeJpeg(rgb.data(), kW, kH, 90);
  if (!jpeg.ok()) __builtin_trap();
  if (!optimized) return std::move(jpeg).value();
  auto copy = saturate::image::AddJpegRestartMarkers(*jpeg, /*restart_rows=*/0);
  if (!copy.ok()) __builtin_trap();
  return std::move(copy).value();
}

const Valid& ValidJpeg(int which) {
  static Valid* const valid = [] {
    auto* v = new Valid[2];
    for (int i = 0; i < 2; ++i) {
      v[i].jpeg = MakeJpeg(/*optimized=*/i == 1);
      v[i].standard_tables = i == 0;
      if (!v[i].header.Read(v[i].data(), v[i].jpeg.size())) __builtin_trap();
      const int every[4] = {1, 2, 3, 0};
      for (int k = 0; k < 4; ++k) {
        if (!saturate::image::ScanEntries(v[i].data(), v[i].jpeg.size(), v[i].header.c,
                                          v[i].header.scan_start, every[k], &v[i].tables[k])) {
          __builtin_trap();
        }
      }
    }
    return v;
  }();
  return valid[which];
}

uint32_t Le32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

// Mode 2: data[0] picks the JPEG (bit 0), `every` (bits 1-2) and how the rest
// mutates its table (bits 3-5); data[1..4] the range.
void FuzzTable(const uint8_t* data, size_t size) {
  if (size < 5) return;
  const Valid& v = ValidJpeg(data[0] & 1);
  const std::vector<uint8_t>& real = v.tables[(data[0] >> 1) & 3];
  const int kind = (data[0] >> 3) % 6;
  const uint8_t* m = data + 5;
  const size_t ms = size - 5;
  const int components = v.header.c.comps_in_scan;
  const size_t entry_bytes = 4 + 2 * size_t(components);
  const size_t entries = (real.size() - kTableHeaderBytes) / entry_bytes;
  std::vector<uint8_t> table = real;
  switch (kind) {
    case 0:  // XOR the entries with the input
      for (size_t i = 0; i < ms && kTableHeaderBytes + i < table.size(); ++i) {
        table[kTableHeaderBytes + i] ^= m[i];
      }
      break;
    case 1:  // (offset, value) byte patches of the entries
      for (size_t i = 0; i + 2 < ms; i += 3) {
        const size_t off = (m[i] | size_t{m[i + 1]} << 8) % (table.size() - kTableHeaderBytes);
        table[kTableHeaderBytes + off] = m[i + 2];
      }
      break;
    case 2:  // (offset, xor) byte patches anywhere, the header included
      for (size_t i = 0; i + 2 < ms; i += 3) {
        table[(m[i] | size_t{m[i + 1]} << 8) % table.size()] ^= m[i + 2];
      }
      break;
    case 3:  // (entry, field, 4 bytes): a field set, or a bit offset moved a little
      for (size_t i = 0; i + 5 < ms; i += 6) {
        uint8_t* en = &table[kTableHeaderBytes + m[i] % entries * entry_bytes];
        const uint32_t value = Le32(m + i + 2);
        const int field = m[i + 1] % (2 * (components + 1));
        if (field == 0) {  // the bit offset
          std::memcpy(en, m + i + 2, 4);
        } else if (field <= components) {  // a DC predictor
          std::memcpy(en + 4 + 2 * (field - 1), m + i + 2, 2);
        } else {  // the bit offset moved by -128..127, or a predictor by a little
          const int f = field - components - 1;
          const uint32_t bit = Le32(en) + static_cast<uint32_t>(static_cast<int8_t>(value));
          const uint8_t le[4] = {static_cast<uint8_t>(bit), static_cast<uint8_t>(bit >> 8),
                                 static_cast<uint8_t>(bit >> 16), static_cast<uint8_t>(bit >> 24)};
          if (f == 0) {
            std::memcpy(en, le, 4);
          } else {
            uint8_t* pred = en + 4 + 2 * (f - 1);
            const uint16_t p = static_cast<uint16_t>(pred[0] | pred[1] << 8) +
                               static_cast<uint16_t>(static_cast<int8_t>(value >> 8));
            pred[0] = static_cast<uint8_t>(p);
            pred[1] = static_cast<uint8_t>(p >> 8);
          }
        }
      }
      break;
    case 4:  // the real header, the input's entries (any length)
      table.resize(kTableHeaderBytes);
      table.insert(table.end(), m, m + ms);
      break;
    default:  // the input is the table
      table.assign(m, m + ms);
      break;
  }
  const auto e = saturate::image::ParseEntries(table, v.data(), v.jpeg.size(), v.header.c,
                                               v.header.scan_start);
  if (!e) {
    if (table == real) __builtin_trap();
    return;
  }
  const McuRange r = RangeFor(*e, v.header.width(), v.header.height(), data + 1);
  std::vector<uint8_t> cut;
  const size_t n = Splice(v.data(), v.jpeg.size(), v.header, *e, r, &cut);
  if (n == 0) {
    if (table == real && v.standard_tables) __builtin_trap();  // A real table cuts.
    return;
  }
  DecodeCut(cut.data(), n);
  if (table == real) CheckCutBlocks(v.data(), v.jpeg.size(), r, cut.data(), n);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] == 0xFF) {
    FuzzJpeg(data, size);
  } else {
    FuzzTable(data, size);
  }
  return 0;
}
