// Tests of the entry tables of unmarked JPEGs (jpeg_entries.cc): a cut
// spliced on them holds the whole file's coefficients block for block, and
// DecodeCropResize with a table gives the bytes of the restart-marked copy.
#include "image/jpeg_entries.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/testing.h"
#include "image/codec.h"
#include "image/crop_plan.h"
#include "image/test_images.h"
#include "image/transform.h"

namespace saturate::image {
namespace {

using test_images::DecodeCropResizeTest;
using test_images::EncodeJpegRaw;
using test_images::EncodePng;
using test_images::MtSource;
using test_images::PhotoLike;
using test_images::Rrc;

using Bytes = std::vector<std::byte>;

struct Fixed : CropPlanner {
  Fixed(const CropRect& c, bool f) : crop(c), flip(f) {}
  CropRect Plan(int, int, bool* hflip) override {
    *hflip = flip;
    return crop;
  }
  CropRect crop;
  bool flip;
};

// Every component's quantized DCT blocks, as libjpeg reads them.
struct Coefficients {
  int width = 0, height = 0;
  std::vector<int> blocks_w, blocks_h;
  std::vector<std::vector<JCOEF>> blocks;  // per component, row-major blocks of 64
};

Coefficients ReadCoefficients(const uint8_t* p, size_t size) {
  jpeg_decompress_struct c{};
  jpeg_error_mgr err{};
  c.err = jpeg_std_error(&err);
  jpeg_create_decompress(&c);
  jpeg_mem_src(&c, p, size);
  jpeg_read_header(&c, TRUE);
  jvirt_barray_ptr* arrays = jpeg_read_coefficients(&c);
  Coefficients k;
  k.width = static_cast<int>(c.image_width);
  k.height = static_cast<int>(c.image_height);
  for (int i = 0; i < c.num_components; ++i) {
    const jpeg_component_info& comp = c.comp_info[i];
    const int bw = static_cast<int>(comp.width_in_blocks);
    const int bh = static_cast<int>(comp.height_in_blocks);
    k.blocks_w.push_back(bw);
    k.blocks_h.push_back(bh);
    std::vector<JCOEF> all(size_t(bw) * bh * 64);
    for (int y = 0; y < bh; ++y) {
      JBLOCKARRAY row = (*c.mem->access_virt_barray)(reinterpret_cast<j_common_ptr>(&c), arrays[i],
                                                     static_cast<JDIMENSION>(y), 1, FALSE);
      std::memcpy(&all[size_t(y) * bw * 64], row[0], size_t(bw) * 64 * sizeof(JCOEF));
    }
    k.blocks.push_back(std::move(all));
  }
  jpeg_finish_decompress(&c);
  jpeg_destroy_decompress(&c);
  return k;
}

// A decompressor that has read `jpeg`'s header, and where its scan starts.
struct Header {
  explicit Header(const Bytes& jpeg) {
    c.err = jpeg_std_error(&err);
    jpeg_create_decompress(&c);
    jpeg_mem_src(&c, reinterpret_cast<const uint8_t*>(jpeg.data()), jpeg.size());
    jpeg_read_header(&c, TRUE);
    scan_start = jpeg.size() - c.src->bytes_in_buffer;
  }
  ~Header() { jpeg_destroy_decompress(&c); }
  jpeg_decompress_struct c{};
  jpeg_error_mgr err{};
  size_t scan_start = 0;
};

const uint8_t* U8(const Bytes& b) { return reinterpret_cast<const uint8_t*>(b.data()); }

// Spliced cuts, an entry every 1, 3 or default MCUs: each of the cut's
// blocks is the whole file's block at the same place, in every component.
TEST(JpegEntries, SplicedCutHoldsTheWholeFilesBlocks) {
  constexpr int kW = 333, kH = 251;  // partial MCUs at the right and bottom
  const std::vector<uint8_t> rgb = PhotoLike(kW, kH);
  std::vector<uint8_t> gray(size_t(kW) * kH);
  for (size_t i = 0; i < gray.size(); ++i) gray[i] = rgb[3 * i + 1];
  const struct {
    const char* name;
    Bytes jpeg;
  } files[] = {
      {"420", EncodeJpegRaw(rgb.data(), kW, kH, 3, JCS_RGB)},
      {"422", EncodeJpegRaw(rgb.data(), kW, kH, 3, JCS_RGB, false, 2, 1)},
      {"444", EncodeJpegRaw(rgb.data(), kW, kH, 3, JCS_RGB, false, 1, 1)},
      {"gray", EncodeJpegRaw(gray.data(), kW, kH, 1, JCS_GRAYSCALE)},
  };
  MtSource rng(3);
  for (const auto& f : files) {
    SCOPED_TRACE(f.name);
    const Coefficients whole = ReadCoefficients(U8(f.jpeg), f.jpeg.size());
    for (int every : {1, 3, 0}) {
      Header h(f.jpeg);
      std::vector<uint8_t> table;
      ASSERT_TRUE(ScanEntries(U8(f.jpeg), f.jpeg.size(), h.c, h.scan_start, every, &table));
      const auto e = ParseEntries(table, U8(f.jpeg), f.jpeg.size(), h.c, h.scan_start);
      ASSERT_TRUE(e.has_value());
      for (int i = 0; i < 12; ++i) {
        const CropRect crop = Rrc(kW, kH, rng);
        const McuRange r = e->Align(RangeAround(e->grid, kW, kH, 8, 1, crop.x, crop.x + crop.width,
                                                crop.y, crop.y + crop.height),
                                    kW, kH);
        std::vector<uint8_t> cut, bits;
        const size_t n = SpliceMcus(U8(f.jpeg), f.jpeg.size(), h.c, *e, kW, kH, r, &bits, &cut);
        ASSERT_GT(n, 0u);
        const Coefficients part = ReadCoefficients(cut.data(), n);
        ASSERT_EQ(part.width, r.width);
        ASSERT_EQ(part.height, r.height);
        for (size_t comp = 0; comp < whole.blocks.size(); ++comp) {
          // Blocks per MCU of this component (the MCU is one block when gray).
          const int hs = whole.blocks.size() == 1 ? 1 : h.c.comp_info[comp].h_samp_factor;
          const int vs = whole.blocks.size() == 1 ? 1 : h.c.comp_info[comp].v_samp_factor;
          for (int y = 0; y < part.blocks_h[comp]; ++y) {
            for (int x = 0; x < part.blocks_w[comp]; ++x) {
              const JCOEF* got = &part.blocks[comp][(size_t(y) * part.blocks_w[comp] + x) * 64];
              const JCOEF* want =
                  &whole
                       .blocks[comp]
                              [(size_t(r.r0 * vs + y) * whole.blocks_w[comp] + r.c0 * hs + x) * 64];
              ASSERT_EQ(std::memcmp(got, want, 64 * sizeof(JCOEF)), 0)
                  << "every " << every << " component " << comp << " block " << x << "," << y
                  << " of cut " << r.c0 << "-" << r.c1 << " x " << r.r0 << "-" << r.r1;
            }
          }
        }
      }
    }
  }
}

// Through DecodeCropResize: a plain JPEG with its entry table gives the
// bytes of its restart-marked copy (the same coefficients, cut the same
// way), and is cut whenever the crop leaves MCUs out.
TEST_F(DecodeCropResizeTest, EntryTableCutGivesTheRestartMarkedBytes) {
  std::vector<uint8_t> gray(size_t(kW) * kH);
  for (size_t i = 0; i < gray.size(); ++i) gray[i] = rgb_[3 * i + 1];
  const Bytes files[] = {jpeg_, EncodeJpegRaw(gray.data(), kW, kH, 1, JCS_GRAYSCALE)};
  MtSource rng(11);
  for (const Bytes& jpeg : files) {
    DecodeScratch plain, marked;
    Bytes table;
    ASSERT_TRUE(IndexJpegEntries(jpeg, &plain, &table));
    // A 28-byte header, then 10 bytes (3 components) or 6 (gray) for each
    // of 8 places in each MCU row and the end.
    const bool one = &jpeg != &files[0];
    const size_t rows = one ? kH / 8 : kH / 16;
    EXPECT_EQ(table.size(), 28 + (rows * 8 + 1) * (one ? 6 : 10));
    SATURATE_ASSERT_OK_AND_ASSIGN(Bytes restart, AddJpegRestartMarkers(jpeg));
    int cuts = 0;
    for (int i = 0; i < 40; ++i) {
      const CropRect crop = i == 0 ? CropRect{0, 0, kW, kH} : Rrc(kW, kH, rng);
      const int out = i % 2 == 0 ? 224 : 64;
      std::vector<uint8_t> want(size_t(out) * out * 3), got(want.size());
      Fixed a(crop, i % 3 == 0), b(crop, i % 3 == 0);
      SATURATE_ASSERT_OK(DecodeCropResize(restart, a, out, out, want.data(), &marked));
      SATURATE_ASSERT_OK(
          DecodeCropResize(jpeg, b, out, out, got.data(), &plain, Layout::kHWC, table));
      ASSERT_EQ(got, want) << "crop " << crop.width << "x" << crop.height << "+" << crop.x << "+"
                           << crop.y;
      EXPECT_EQ(plain.last_decoded_ycc_planes(), marked.last_decoded_ycc_planes());
      if (i == 0) {
        EXPECT_FALSE(plain.last_used_restart_index());  // nothing to cut away
      }
      cuts += plain.last_used_restart_index();
    }
    EXPECT_GE(cuts, 30);
  }
}

// For a decoder of whole images (nvJPEG): PlanJpegForDecoder cuts a plain
// JPEG on its table, and the cut holds the crop's pixels of the whole file.
TEST_F(DecodeCropResizeTest, PlanForDecoderCutsOnTheEntryTable) {
  DecodeScratch s;
  Bytes table;
  ASSERT_TRUE(IndexJpegEntries(jpeg_, &s, &table));
  SATURATE_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> whole, DecodeRgb(jpeg_));
  MtSource rng(5);
  int cuts = 0;
  for (int i = 0; i < 30; ++i) {
    Fixed planner(Rrc(kW, kH, rng), false);
    const CropRect crop = planner.crop;
    const auto p = PlanJpegForDecoder(jpeg_, planner, &s, table);
    ASSERT_TRUE(p.has_value());
    EXPECT_FALSE(PlanJpegForDecoder(jpeg_, planner, &s)->cut);  // no markers, no table
    if (!p->cut) continue;
    ++cuts;
    const Bytes cut(p->jpeg.begin(), p->jpeg.end());
    ImageInfo info;
    SATURATE_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> part, DecodeRgb(cut, &info));
    EXPECT_LT(cut.size(), jpeg_.size());
    ASSERT_TRUE(CropInside(p->crop, info.width, info.height));
    for (int y = 0; y < crop.height; ++y) {
      const uint8_t* want = &whole[(size_t(crop.y + y) * kW + crop.x) * 3];
      const uint8_t* got = &part[(size_t(p->crop.y + y) * info.width + p->crop.x) * 3];
      ASSERT_TRUE(std::equal(got, got + crop.width * 3, want)) << "row " << y;
    }
  }
  EXPECT_GE(cuts, 20);
}

// What has no table, and a table that is not this file's.
TEST_F(DecodeCropResizeTest, EntryTablesOnlyForFilesTheyFit) {
  DecodeScratch s;
  Bytes table;
  const Bytes progressive = EncodeJpegRaw(rgb_.data(), kW, kH, 3, JCS_RGB, /*progressive=*/true);
  SATURATE_ASSERT_OK_AND_ASSIGN(const Bytes restart, AddJpegRestartMarkers(jpeg_));
  const Bytes png = EncodePng(rgb_.data(), kW, kH, PNG_FORMAT_RGB);
  const Bytes truncated(jpeg_.begin(), jpeg_.begin() + jpeg_.size() / 2);
  for (const Bytes* no : {&progressive, &restart, &png, &truncated}) {
    EXPECT_FALSE(IndexJpegEntries(*no, &s, &table));
    EXPECT_TRUE(table.empty());
  }
  // Another image's table is refused: the decode is the file's own, uncut.
  std::vector<uint8_t> other_px = PhotoLike(kW, kH);
  for (auto& v : other_px) v = static_cast<uint8_t>(255 - v);
  const Bytes other = EncodeJpegRaw(other_px.data(), kW, kH, 3, JCS_RGB);
  ASSERT_TRUE(IndexJpegEntries(other, &s, &table));
  const CropRect crop{300, 200, 200, 150};
  std::vector<uint8_t> want(64 * 64 * 3), got(want.size());
  Fixed a(crop, false), b(crop, false);
  SATURATE_ASSERT_OK(DecodeCropResize(jpeg_, a, 64, 64, want.data(), &s));
  SATURATE_ASSERT_OK(DecodeCropResize(jpeg_, b, 64, 64, got.data(), &s, Layout::kHWC, table));
  EXPECT_FALSE(s.last_used_restart_index());
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace saturate::image
