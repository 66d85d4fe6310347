// Entry points into an unmarked JPEG's entropy-coded data, and the cut
// spliced on them: see jpeg_entries.h. The Huffman decoding here only
// finds where codes end (the block loop is libjpeg's, so a stream is read
// the way libjpeg reads it); libjpeg decodes the pixels.
#include "image/jpeg_entries.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

#include "image/buffer.h"

namespace saturate::image {
namespace {

constexpr char kMagic[4] = {'S', 'J', 'E', '1'};
constexpr size_t kHeaderBytes = 4 + 2 * 4 + 4 + 4 + 8;
constexpr int kMaxComponents = 4;
constexpr int kEntriesPerRow = 8;  // The default `every`: about this many per MCU row.
// What a reader may read past the end of its data (a run's, the scan's)
// before it checks: one block (a DC and 63 AC codes of up to 16 + 15 bits)
// from a bit at most the end, and Load64's 9 bytes.
constexpr size_t kSplicePad = 64 * 31 / 8 + 16;

size_t EntryBytes(int components) { return 4 + 2 * size_t(components); }

void Put16(std::vector<uint8_t>* out, uint32_t v) {
  out->push_back(static_cast<uint8_t>(v));
  out->push_back(static_cast<uint8_t>(v >> 8));
}
void Put32(std::vector<uint8_t>* out, uint32_t v) {
  Put16(out, v & 0xFFFF);
  Put16(out, v >> 16);
}
uint32_t Get16(const uint8_t* p) { return uint32_t{p[0]} | uint32_t{p[1]} << 8; }
uint32_t Get32(const uint8_t* p) { return Get16(p) | Get16(p + 2) << 16; }

// The 64 bits of unstuffed data u from bit `bit` on, most significant
// first (u readable 8 bytes past them).
inline uint64_t Load64(const uint8_t* u, uint64_t bit) {
  uint64_t x;
  std::memcpy(&x, u + bit / 8, 8);
  x = __builtin_bswap64(x);
  const int t = static_cast<int>(bit % 8);
  return x << t | static_cast<uint64_t>(u[bit / 8 + 8] >> (8 - t));  // t = 0: >> 8 is 0
}

// Reads bits of data already unstuffed (readable 8 bytes past its end).
struct UnstuffedReader {
  const uint8_t* u;
  uint64_t bit;
  uint32_t Peek(int n) const { return static_cast<uint32_t>(Load64(u, bit) >> (64 - n)); }
  void Skip(int n) { bit += static_cast<uint64_t>(n); }
  uint32_t Get(int n) {
    if (n == 0) return 0;
    const uint32_t v = Peek(n);
    bit += static_cast<uint64_t>(n);
    return v;
  }
};

// Writes bits, stuffing a 0x00 after each 0xFF byte, into a buffer the
// caller has sized.
class BitWriter {
 public:
  explicit BitWriter(uint8_t* dst) : d_(dst) {}
  void Put(uint32_t v, int n) {  // n <= 32
    if (n == 0) return;
    acc_ = acc_ << n | (v & (n == 32 ? 0xFFFFFFFFu : (1u << n) - 1));
    count_ += n;
    while (count_ >= 8) {
      count_ -= 8;
      const uint8_t b = static_cast<uint8_t>(acc_ >> count_);
      *d_++ = b;
      if (b == 0xFF) *d_++ = 0;
    }
  }
  // Appends bits [bit, bit + n) of unstuffed data `u` (readable 8 bytes
  // past them): aligns to a byte, then 64 bits at a time.
  void PutBits(const uint8_t* u, uint64_t bit, uint64_t n) {
    if (count_ > 0 && n > 0) {
      const int k = static_cast<int>(std::min<uint64_t>(n, 8 - count_));
      Put(static_cast<uint32_t>(Load64(u, bit) >> (64 - k)), k);
      bit += static_cast<uint64_t>(k);
      n -= static_cast<uint64_t>(k);
    }
    for (; n >= 64; bit += 64, n -= 64) Put64(Load64(u, bit));
    for (; n > 0;) {
      const int k = static_cast<int>(std::min<uint64_t>(n, 32));
      Put(static_cast<uint32_t>(Load64(u, bit) >> (64 - k)), k);
      bit += static_cast<uint64_t>(k);
      n -= static_cast<uint64_t>(k);
    }
  }

  // Pads the last byte with 1 bits, as encoders do.
  uint8_t* Finish() {
    if (count_ > 0) Put((1u << (8 - count_)) - 1, 8 - count_);
    return d_;
  }

 private:
  // 8 bytes, when byte-aligned: stored as they are unless one is 0xFF.
  void Put64(uint64_t x) {
    const uint64_t y = ~x;  // a zero byte where x has 0xFF
    if (((y - 0x0101010101010101ull) & ~y & 0x8080808080808080ull) == 0) {
      const uint64_t be = __builtin_bswap64(x);
      std::memcpy(d_, &be, 8);
      d_ += 8;
      return;
    }
    Put(static_cast<uint32_t>(x >> 32), 32);
    Put(static_cast<uint32_t>(x), 32);
  }

  uint8_t* d_;
  uint64_t acc_ = 0;
  int count_ = 0;
};

// Copies the scan data p[pos, size) into dst without its stuffed zero
// bytes, until `want` bytes are out or a marker (or the end) comes; returns
// how many are out.
size_t Unstuff(const uint8_t* p, size_t size, size_t pos, size_t want, uint8_t* dst) {
  size_t n = 0;
  while (n < want && pos < size) {
    const size_t ff = std::min(NextFF(p, pos, size), pos + (want - n));
    std::memcpy(dst + n, p + pos, ff - pos);
    n += ff - pos;
    pos = ff;
    if (n == want || pos >= size) break;
    if (pos + 1 >= size || p[pos + 1] != 0) break;  // a marker: the data ends
    dst[n++] = 0xFF;
    pos += 2;
  }
  return n;
}

// One Huffman table, for finding where codes end and for re-encoding DC
// differences (canonical codes, as libjpeg's jdhuff.c builds them).
class HuffTable {
 public:
  bool Build(const JHUFF_TBL* t) {
    if (t == nullptr) return false;
    std::memset(fast_, 0, sizeof(fast_));
    std::memset(size_, 0, sizeof(size_));
    uint32_t code = 0;
    int k = 0;
    for (int len = 1; len <= 16; ++len) {
      valoffset_[len] = k - static_cast<int>(code);
      for (int i = 0; i < t->bits[len]; ++i, ++k, ++code) {
        // Before fast_ is filled from it: more codes than the length holds.
        if (k >= 256 || code >= (1u << len)) return false;
        const uint8_t sym = t->huffval[k];
        huffval_[k] = sym;
        if (size_[sym] == 0) {
          code_[sym] = static_cast<uint16_t>(code);
          size_[sym] = static_cast<uint8_t>(len);
        }
        if (len <= kFastBits) {
          const uint32_t first = code << (kFastBits - len);
          for (uint32_t j = 0; j < (1u << (kFastBits - len)); ++j) {
            fast_[first | j] = static_cast<uint16_t>(len << 8 | sym);
          }
        }
      }
      maxcode_[len] = t->bits[len] ? static_cast<int>(code) - 1 : -1;
      if (code >= (1u << len)) return false;  // As libjpeg: no all-ones code.
      code <<= 1;
    }
    return true;
  }

  // The next symbol, or -1 if no code matches.
  template <typename Reader>
  int Decode(Reader& br) const {
    const uint32_t look = br.Peek(16);
    if (const uint16_t f = fast_[look >> (16 - kFastBits)]; f != 0) {
      br.Skip(f >> 8);
      return f & 0xFF;
    }
    for (int l = kFastBits + 1; l <= 16; ++l) {
      const int c = static_cast<int>(look >> (16 - l));
      if (c <= maxcode_[l]) {
        br.Skip(l);
        return huffval_[c + valoffset_[l]];
      }
    }
    return -1;
  }

  // Writes a DC difference: its size category's code, then its bits.
  bool PutDc(int diff, BitWriter& w) const {
    const int mag = diff < 0 ? -diff : diff;
    const int s = mag == 0 ? 0 : 32 - __builtin_clz(static_cast<unsigned>(mag));
    if (s > 15 || size_[s] == 0) return false;  // The table has no code for it.
    w.Put(code_[s], size_[s]);
    w.Put(static_cast<uint32_t>(diff < 0 ? diff - 1 : diff), s);
    return true;
  }

 private:
  static constexpr int kFastBits = 9;
  uint16_t fast_[1 << kFastBits];  // (length << 8) | symbol; 0: a longer code
  int maxcode_[17] = {};
  int valoffset_[17] = {};
  uint8_t huffval_[256] = {};
  uint16_t code_[256] = {};
  uint8_t size_[256] = {};
};

// libjpeg's sign extension of an s-bit DC difference.
int Extend(uint32_t v, int s) {
  return s == 0 ? 0
                : (v < (1u << (s - 1)) ? static_cast<int>(v) - (1 << s) + 1 : static_cast<int>(v));
}

// What the scan's blocks need: the tables and block count of each component.
struct ScanTables {
  int components = 0;
  int blocks[kMaxComponents] = {};
  HuffTable dc[kMaxComponents], ac[kMaxComponents];

  bool Build(const jpeg_decompress_struct& c) {
    if (c.data_precision != 8 || c.comps_in_scan < 1 || c.comps_in_scan > kMaxComponents) {
      return false;
    }
    components = c.comps_in_scan;
    for (int i = 0; i < components; ++i) {
      const jpeg_component_info* comp = c.cur_comp_info[i];
      if (comp == nullptr || comp->dc_tbl_no < 0 || comp->dc_tbl_no >= NUM_HUFF_TBLS ||
          comp->ac_tbl_no < 0 || comp->ac_tbl_no >= NUM_HUFF_TBLS ||
          !dc[i].Build(c.dc_huff_tbl_ptrs[comp->dc_tbl_no]) ||
          !ac[i].Build(c.ac_huff_tbl_ptrs[comp->ac_tbl_no])) {
        return false;
      }
      blocks[i] = components == 1 ? 1 : comp->h_samp_factor * comp->v_samp_factor;
    }
    return true;
  }
};

constexpr int kBadDc = INT32_MIN;

// A block's DC difference (kBadDc if no code matches), read as libjpeg's
// decode_mcu reads it.
template <typename Reader>
int ReadDc(Reader& br, const HuffTable& dc) {
  const int s = dc.Decode(br);
  if (s < 0 || s > 15) return kBadDc;
  return Extend(br.Get(s), s);
}

// Passes over a block's AC codes as decode_mcu does (a run past the 64th
// coefficient included: libjpeg reads on, so the stream means the same).
template <typename Reader>
bool SkipAc(Reader& br, const HuffTable& ac) {
  for (int k = 1; k < 64; ++k) {
    const int rs = ac.Decode(br);
    if (rs < 0) return false;
    const int r = rs >> 4, size = rs & 15;
    if (size != 0) {
      k += r;
      br.Skip(size);
    } else {
      if (r != 15) break;
      k += 15;
    }
  }
  return true;
}

// Takes back what ScanEntries appended.
bool Refuse(std::vector<uint8_t>* out, size_t old_size) {
  out->resize(old_size);
  return false;
}

void PutEntry(std::vector<uint8_t>* out, uint64_t bit, const int* pred, int components) {
  Put32(out, static_cast<uint32_t>(bit));
  for (int i = 0; i < components; ++i) Put16(out, static_cast<uint16_t>(pred[i]));
}

}  // namespace

McuRange JpegEntries::Align(const McuRange& r, int width, int height) const {
  McuRange a = r;
  a.c0 = r.c0 / every * every;
  a.c1 = std::min(grid.mcus_x, (r.c1 + every - 1) / every * every);
  a.width = std::min(width, a.c1 * grid.mcu_w) - a.c0 * grid.mcu_w;
  a.height = std::min(height, a.r1 * grid.mcu_h) - a.r0 * grid.mcu_h;
  return a;
}

bool JpegEntries::CutSkipsData(const McuRange& r) const {
  return r.r0 > 0 || r.c0 > 0 || r.c1 < grid.mcus_x;
}

bool ScanEntries(const uint8_t* p, size_t size, const jpeg_decompress_struct& c, size_t scan_start,
                 int every, std::vector<uint8_t>* out) {
  const auto grid = ScanGrid(c);
  ScanTables t;
  // Entries count bits in a u32: files up to 512 MiB.
  if (!grid || c.restart_interval != 0 || size >= UINT32_MAX / 8 || scan_start > size ||
      !t.Build(c)) {
    return false;
  }
  if (every <= 0) every = std::max(1, (grid->mcus_x + kEntriesPerRow - 1) / kEntriesPerRow);
  if (every > 0xFFFF || grid->mcus_x > 0xFFFF || grid->mcus_y > 0xFFFF) return false;
  const size_t old_size = out->size();
  out->insert(out->end(), kMagic, kMagic + 4);
  Put16(out, static_cast<uint32_t>(every));
  Put16(out, static_cast<uint32_t>(t.components));
  Put16(out, static_cast<uint32_t>(grid->mcus_x));
  Put16(out, static_cast<uint32_t>(grid->mcus_y));
  Put32(out, static_cast<uint32_t>(scan_start));
  Put32(out, static_cast<uint32_t>(size));
  const uint64_t hash = XXH3_64bits(p, size);
  Put32(out, static_cast<uint32_t>(hash));
  Put32(out, static_cast<uint32_t>(hash >> 32));
  // The scan, unstuffed (it ends at the first marker), then read as libjpeg
  // reads it; each block is checked against the data's end, and the
  // padding holds what one block reads past it.
  std::vector<uint8_t> u(size - scan_start + kSplicePad);
  const uint64_t end_bit = 8 * Unstuff(p, size, scan_start, size - scan_start, u.data());
  UnstuffedReader br{u.data(), 0};
  int pred[kMaxComponents] = {};
  for (int r = 0; r < grid->mcus_y; ++r) {
    for (int x = 0; x < grid->mcus_x; ++x) {
      if (x % every == 0) PutEntry(out, br.bit, pred, t.components);
      for (int i = 0; i < t.components; ++i) {
        for (int b = 0; b < t.blocks[i]; ++b) {
          const int diff = ReadDc(br, t.dc[i]);
          if (diff == kBadDc) return Refuse(out, old_size);
          pred[i] += diff;
          if (pred[i] < INT16_MIN || pred[i] > INT16_MAX || !SkipAc(br, t.ac[i]) ||
              br.bit > end_bit) {
            return Refuse(out, old_size);
          }
        }
      }
    }
  }
  PutEntry(out, br.bit, pred, t.components);
  return true;
}

std::optional<JpegEntries> ParseEntries(std::span<const uint8_t> table, const uint8_t* p,
                                        size_t size, const jpeg_decompress_struct& c,
                                        size_t scan_start) {
  const auto grid = ScanGrid(c);
  if (!grid || c.restart_interval != 0 || table.size() < kHeaderBytes ||
      std::memcmp(table.data(), kMagic, 4) != 0) {
    return std::nullopt;
  }
  const uint8_t* h = table.data() + 4;
  JpegEntries e;
  e.grid = *grid;
  e.every = static_cast<int>(Get16(h));
  e.components = static_cast<int>(Get16(h + 2));
  e.scan_start = Get32(h + 8);
  if (e.every < 1 || e.components != c.comps_in_scan || e.components > kMaxComponents ||
      static_cast<int>(Get16(h + 4)) != grid->mcus_x ||
      static_cast<int>(Get16(h + 6)) != grid->mcus_y || e.scan_start != scan_start ||
      Get32(h + 12) != size) {
    return std::nullopt;
  }
  // The table is this file's: its bytes, not only its size.
  const uint64_t hash = Get32(h + 16) | uint64_t{Get32(h + 20)} << 32;
  if (hash != XXH3_64bits(p, size)) return std::nullopt;
  const size_t count = size_t(grid->mcus_y) * e.PerRow() + 1;
  e.table = table.subspan(kHeaderBytes);
  if (e.table.size() != count * EntryBytes(e.components)) return std::nullopt;
  return e;
}

size_t SpliceMcus(const uint8_t* p, size_t size, const jpeg_decompress_struct& c,
                  const JpegEntries& e, int width, int height, const McuRange& range,
                  std::vector<uint8_t>* bits, std::vector<uint8_t>* out) {
  ScanTables t;
  const int per_row = e.PerRow();
  if (!t.Build(c) || range.c0 % e.every != 0 ||
      (range.c1 % e.every != 0 && range.c1 != e.grid.mcus_x) || range.r0 >= range.r1 ||
      range.c0 >= range.c1) {
    return 0;
  }
  const size_t entry_bytes = EntryBytes(e.components);
  // The entry at MCU column `col` of row r: a multiple of `every`, or the
  // row's end (the next row's first entry; the last one after the last row).
  auto entry = [&](int r, int col) {
    const size_t i =
        col == e.grid.mcus_x ? size_t(r + 1) * per_row : size_t(r) * per_row + col / e.every;
    return e.table.data() + i * entry_bytes;
  };
  // The scan, unstuffed down to the range's last bit. Stuffing may then
  // grow each run's bytes to at most twice.
  uint64_t last_bit = 0;
  size_t bound = e.scan_start + 2 + 16;
  for (int r = range.r0; r < range.r1; ++r) {
    const uint32_t a = Get32(entry(r, range.c0)), b = Get32(entry(r, range.c1));
    if (a > b || a < last_bit) return 0;  // runs in the file's order: the cut <= the data
    last_bit = b;
    bound += 2 * size_t((b - a) / 8 + 16);  // + the re-encoded DCs
  }
  const size_t want = static_cast<size_t>((last_bit + 7) / 8);
  if (e.scan_start > size || want > size - e.scan_start) return 0;  // before allocating it
  uint8_t* u = Grow(*bits, want + kSplicePad);
  if (Unstuff(p, size, e.scan_start, want, u) != want) return 0;
  std::memset(u + want, 0, kSplicePad);
  uint8_t* d = StartCut(p, e.scan_start, width, height, range, bound, out);
  if (d == nullptr) return 0;
  uint8_t* const start = out->data();
  BitWriter w(d);
  int pred[kMaxComponents] = {};  // the cut's DC predictors
  for (int r = range.r0; r < range.r1; ++r) {
    const uint8_t* a = entry(r, range.c0);
    const uint8_t* b = entry(r, range.c1);
    const uint64_t end = Get32(b);
    // Each component's first DC difference in the run's first MCU is
    // re-encoded against the cut's predictor; the bits between are copied.
    UnstuffedReader br{u, Get32(a)};
    uint64_t copied = br.bit;
    for (int i = 0; i < t.components; ++i) {
      w.PutBits(u, copied, br.bit - copied);
      const int diff = ReadDc(br, t.dc[i]);
      if (diff == kBadDc) return 0;
      const int value = static_cast<int16_t>(Get16(a + 4 + 2 * i)) + diff;
      if (!t.dc[i].PutDc(value - pred[i], w)) return 0;
      copied = br.bit;
      if (i + 1 == t.components) break;
      // Checked block by block: the padding holds one block's reads.
      bool ok = SkipAc(br, t.ac[i]) && br.bit <= end;
      for (int blk = 1; blk < t.blocks[i] && ok; ++blk) {
        ok = ReadDc(br, t.dc[i]) != kBadDc && SkipAc(br, t.ac[i]) && br.bit <= end;
      }
      if (!ok) return 0;
    }
    if (br.bit > end) return 0;
    w.PutBits(u, copied, end - copied);
    for (int i = 0; i < t.components; ++i) pred[i] = static_cast<int16_t>(Get16(b + 4 + 2 * i));
  }
  d = w.Finish();
  *d++ = 0xFF;
  *d++ = 0xD9;  // EOI
  return static_cast<size_t>(d - start);
}

}  // namespace saturate::image
