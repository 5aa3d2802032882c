// Mosaics of JPEG windows (data/jpeg_mosaic.h): a mosaic decodes (libjpeg, no warnings: the markers are in order)
// to its pieces' windows, equal to the sources' full decodes away from the images' edges; only files that share
// their coding tables go together; a piece that cannot be tiled is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/check.h"
#include "data/jpeg_cut.h"
#include "data/jpeg_decoder.h"
#include "data/jpeg_encoder.h"
#include "data/jpeg_mosaic.h"

namespace trainer {
namespace {

// smooth colour gradients with grain, like a photograph's texture
RgbImage photo_like(int w, int h, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<double> grain(0.0, 10.0);
  RgbImage img;
  img.width = w;
  img.height = h;
  img.pixels.resize(size_t(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) {
        const double v = 128 + 100 * std::sin(x / (11.0 + seed) + c) * std::cos(y / 17.0 - c) + grain(g);
        img.pixels[(size_t(y) * w + x) * 3 + c] = static_cast<uint8_t>(std::clamp(v, 0.0, 255.0));
      }
  return img;
}

// a JPEG at `quality` rewritten with a restart marker after every MCU and the given Huffman tables
std::vector<uint8_t> tileable(const RgbImage& img, int quality, HuffmanTables tables = HuffmanTables::standard) {
  std::vector<uint8_t> jpg, out;
  encode_jpeg(img, quality, jpg, "src.jpg");
  TRAINER_CHECK(transcode_with_restarts(jpg.data(), jpg.size(), out, "src.jpg", 1, tables), "rewrite failed");
  return out;
}

RgbImage decode(const std::vector<uint8_t>& jpg) {
  JpegDecoder dec;
  RgbImage img;
  dec.decode(jpg.data(), jpg.size(), {}, img, "mosaic.jpg");  // throws on any libjpeg warning
  return img;
}

struct Source {
  std::vector<uint8_t> jpg;
  RgbImage full;  // its whole decode
};

// How far a pixel on an edge of its image may be off in these synthetic pictures: its chroma is upsampled from the
// neighbouring tile's or filler's (which the layout picks) where libjpeg repeats the edge's.
constexpr int kEdgeMax = 48;

// Every piece's window in the decoded mosaic against its source's full decode: pixels off the image's edges
// equal; pixels on an edge the window reaches within `edge_max`. Returns the number of edge pixels that differ.
int expect_windows_match(const std::vector<Source>& src, const std::vector<size_t>& of,
                         const std::vector<MosaicPiece>& pieces, const JpegMosaic& m, int edge_max) {
  const RgbImage mosaic = decode(m.bytes);
  EXPECT_EQ(mosaic.width, m.width);
  EXPECT_EQ(mosaic.height, m.height);
  int edge_diffs = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const RgbImage& full = src[of[i]].full;
    const Rect& w = pieces[i].window;
    const Rect& mw = m.tiles[i].window;
    EXPECT_EQ(mw.w, w.w);
    EXPECT_EQ(mw.h, w.h);
    int interior = 0;
    for (int y = 0; y < w.h; ++y)
      for (int x = 0; x < w.w; ++x) {
        const int sx = w.x + x, sy = w.y + y;
        const bool edge = sx == 0 || sy == 0 || sx == full.width - 1 || sy == full.height - 1;
        for (int c = 0; c < 3; ++c) {
          const int a = full.pixels[(size_t(sy) * full.width + sx) * 3 + c];
          const int b = mosaic.pixels[(size_t(mw.y + y) * mosaic.width + mw.x + x) * 3 + c];
          if (edge) {
            edge_diffs += a != b;
            EXPECT_LE(std::abs(a - b), edge_max) << "piece " << i << " edge pixel " << sx << "," << sy;
          } else if (a != b && interior++ < 3) {
            ADD_FAILURE() << "piece " << i << " (" << w.x << "," << w.y << " " << w.w << "x" << w.h << ") pixel "
                          << sx << "," << sy << " channel " << c << ": " << b << " in the mosaic, " << a
                          << " in the source";
          }
        }
      }
  }
  return edge_diffs;
}

// Windows of three images (4:2:0, sizes with and without partial MCUs): on MCU edges (where the tile keeps a
// margin), off them, on the images' edges, whole images and single pixels, several from one image.
TEST(JpegMosaic, TilesDecodeToTheirSourcesWindows) {
  std::vector<Source> src;
  for (auto [w, h, seed] : {std::tuple{320, 240, 1u}, std::tuple{203, 141, 2u}, std::tuple{64, 48, 3u}}) {
    Source s;
    s.jpg = tileable(photo_like(w, h, seed), 90);
    s.full = decode(s.jpg);
    src.push_back(std::move(s));
  }
  const std::vector<std::pair<size_t, Rect>> windows = {
      {0, {32, 48, 64, 32}},    // every edge on an MCU edge
      {0, {33, 47, 63, 35}},    // none
      {0, {0, 0, 320, 240}},    // the whole image
      {1, {16, 16, 187, 125}},  // to the image's right and bottom edges (partial MCUs)
      {1, {5, 9, 1, 1}},        // one pixel
      {1, {0, 70, 40, 71}},     // from the left edge
      {2, {0, 0, 64, 48}},      // a whole image of whole MCUs
      {2, {17, 15, 30, 17}},
      {0, {200, 100, 120, 140}}};
  std::vector<MosaicPiece> pieces;
  std::vector<size_t> of;
  for (const auto& [s, w] : windows) {
    pieces.push_back({src[s].jpg.data(), src[s].jpg.size(), w});
    of.push_back(s);
  }
  JpegMosaic m;
  ASSERT_TRUE(build_jpeg_mosaic(pieces, m));
  ASSERT_EQ(m.tiles.size(), pieces.size());
  EXPECT_EQ(m.tile_mcus + m.filler_mcus, int64_t(m.width / 16) * (m.height / 16));
  EXPECT_GT(m.filler_mcus, 0) << "shelves of unequal tiles leave gaps";
  // the tiles: whole MCUs of their sources, the window inside, no two overlapping
  for (size_t i = 0; i < m.tiles.size(); ++i) {
    const MosaicTile& t = m.tiles[i];
    EXPECT_EQ(t.at.x % 16, 0);
    EXPECT_EQ(t.at.y % 16, 0);
    EXPECT_EQ(t.x % 16, 0);
    EXPECT_LE(t.at.x, pieces[i].window.x);
    EXPECT_GE(t.at.x + t.at.w, pieces[i].window.x + pieces[i].window.w);
    EXPECT_LE(t.x + t.at.w, m.width);
    EXPECT_LE(t.y + t.at.h, m.height);
    for (size_t j = 0; j < i; ++j) {
      const MosaicTile& u = m.tiles[j];
      const bool apart = t.x + t.at.w <= u.x || u.x + u.at.w <= t.x || t.y + t.at.h <= u.y || u.y + u.at.h <= t.y;
      EXPECT_TRUE(apart) << "tiles " << j << " and " << i << " overlap";
    }
  }
  // the first piece keeps a margin on all four sides (its window lies on MCU edges), the second none
  EXPECT_EQ(m.tiles[0].at.x, 16);
  EXPECT_EQ(m.tiles[0].at.w, 96);
  EXPECT_EQ(m.tiles[0].at.y, 32);
  EXPECT_EQ(m.tiles[0].at.h, 64);
  EXPECT_EQ(m.tiles[1].at.x, 32);
  EXPECT_EQ(m.tiles[1].at.w, 80);
  const int edge_diffs = expect_windows_match(src, of, pieces, m, kEdgeMax);
  std::printf("edge pixels that differ from the full decode: %d\n", edge_diffs);
  // a filler decodes to mid grey
  const RgbImage mosaic = decode(m.bytes);
  std::vector<char> covered(size_t(m.width / 16) * (m.height / 16), 0);
  for (const MosaicTile& t : m.tiles)
    for (int y = t.y / 16; y < (t.y + t.at.h) / 16; ++y)
      for (int x = t.x / 16; x < (t.x + t.at.w) / 16; ++x) covered[size_t(y) * (m.width / 16) + x] = 1;
  const auto gap = std::find(covered.begin(), covered.end(), 0);
  ASSERT_NE(gap, covered.end());
  const int cell = static_cast<int>(gap - covered.begin());
  const int gx = cell % (m.width / 16) * 16 + 8, gy = cell / (m.width / 16) * 16 + 8;
  for (int c = 0; c < 3; ++c) EXPECT_NEAR(mosaic.pixels[(size_t(gy) * m.width + gx) * 3 + c], 128, 1);
}

// Many random RandomResizedCrop-like windows of a few images in mosaics of 16: every window matches its source.
TEST(JpegMosaic, RandomWindowsOfABatchMatchTheirSources) {
  std::vector<Source> src;
  for (uint32_t seed = 0; seed < 4; ++seed) {
    Source s;
    s.jpg = tileable(photo_like(150 + 37 * seed, 110 + 29 * seed, 10 + seed), 90);
    s.full = decode(s.jpg);
    src.push_back(std::move(s));
  }
  std::mt19937 g(7);
  for (int round = 0; round < 6; ++round) {
    std::vector<MosaicPiece> pieces;
    std::vector<size_t> of;
    for (int i = 0; i < 16; ++i) {
      const size_t s = g() % src.size();
      const int W = src[s].full.width, H = src[s].full.height;
      const int w = std::uniform_int_distribution<int>(1, W)(g), h = std::uniform_int_distribution<int>(1, H)(g);
      const Rect r{std::uniform_int_distribution<int>(0, W - w)(g), std::uniform_int_distribution<int>(0, H - h)(g),
                   w, h};
      pieces.push_back({src[s].jpg.data(), src[s].jpg.size(), r});
      of.push_back(s);
    }
    JpegMosaic m;
    ASSERT_TRUE(build_jpeg_mosaic(pieces, m));
    SCOPED_TRACE("round " + std::to_string(round));
    expect_windows_match(src, of, pieces, m, kEdgeMax);
  }
}

// The shelves' width is the one with the fewest fillers: four tiles of 3 x 1 MCUs fill a frame of 3 x 4 MCUs, where
// the square's width (4) would leave a filler beside each.
TEST(JpegMosaic, ShelvesLeaveTheFewestFillers) {
  const auto a = tileable(photo_like(96, 64, 1), 90);
  const std::vector<MosaicPiece> pieces(4, MosaicPiece{a.data(), a.size(), Rect{1, 1, 46, 14}});
  JpegMosaic m;
  ASSERT_TRUE(build_jpeg_mosaic(pieces, m));
  EXPECT_EQ(m.filler_mcus, 0);
  EXPECT_EQ(m.tile_mcus, 12);
  EXPECT_EQ(m.width, 48);
  EXPECT_EQ(m.height, 64);
}

// A key the caller read for a piece is compared, not read again: a wrong one refuses the piece.
TEST(JpegMosaic, AKeyGivenByTheCallerIsCompared) {
  const auto a = tileable(photo_like(96, 64, 1), 90), b = tileable(photo_like(80, 80, 2), 90);
  const auto b85 = tileable(photo_like(80, 80, 2), 85);
  const std::string ka = mosaic_key(a.data(), a.size()), kb = mosaic_key(b.data(), b.size());
  const std::string k85 = mosaic_key(b85.data(), b85.size());
  const Rect w{8, 8, 40, 40};
  JpegMosaic with, without;
  ASSERT_TRUE(build_jpeg_mosaic({{a.data(), a.size(), w, &ka}, {b.data(), b.size(), w, &kb}}, with));
  ASSERT_TRUE(build_jpeg_mosaic({{a.data(), a.size(), w}, {b.data(), b.size(), w}}, without));
  EXPECT_EQ(with.bytes, without.bytes);
  EXPECT_FALSE(build_jpeg_mosaic({{a.data(), a.size(), w, &ka}, {b.data(), b.size(), w, &k85}}, with));
}

// Files go together only with equal coding tables: the same quality and the standard Huffman tables. Fitted
// tables, another quality, no restart markers, or a marker out of sequence in a tile's span: refused.
TEST(JpegMosaic, OnlyFilesThatShareTheirTablesGoTogether) {
  const RgbImage a = photo_like(96, 64, 1), b = photo_like(80, 80, 2);
  const auto a90 = tileable(a, 90), b90 = tileable(b, 90), b85 = tileable(b, 85);
  const auto a_fit = tileable(a, 90, HuffmanTables::fitted), b_fit = tileable(b, 90, HuffmanTables::fitted);
  EXPECT_FALSE(mosaic_key(a90.data(), a90.size()).empty());
  EXPECT_EQ(mosaic_key(a90.data(), a90.size()), mosaic_key(b90.data(), b90.size())) << "the size is not in the key";
  EXPECT_NE(mosaic_key(a90.data(), a90.size()), mosaic_key(b85.data(), b85.size()));
  EXPECT_NE(mosaic_key(a_fit.data(), a_fit.size()), mosaic_key(b_fit.data(), b_fit.size()));
  JpegMosaic m;
  const Rect w{8, 8, 40, 40};
  EXPECT_TRUE(build_jpeg_mosaic({{a90.data(), a90.size(), w}, {b90.data(), b90.size(), w}}, m));
  EXPECT_FALSE(build_jpeg_mosaic({{a90.data(), a90.size(), w}, {b85.data(), b85.size(), w}}, m));
  EXPECT_FALSE(build_jpeg_mosaic({{a_fit.data(), a_fit.size(), w}, {b_fit.data(), b_fit.size(), w}}, m));
  std::vector<uint8_t> plain;
  encode_jpeg(a, 90, plain, "plain.jpg");
  EXPECT_TRUE(mosaic_key(plain.data(), plain.size()).empty()) << "no restart markers";
  EXPECT_FALSE(build_jpeg_mosaic({{plain.data(), plain.size(), w}}, m));
  // one MCU every two: restart intervals of 2 cannot be laid out MCU by MCU
  std::vector<uint8_t> two;
  encode_jpeg(a, 90, two, "two.jpg", 2);
  EXPECT_TRUE(mosaic_key(two.data(), two.size()).empty());
  // a marker renumbered inside the window's span
  RestartIndex idx;
  ASSERT_TRUE(index_restart_intervals(a90.data(), a90.size(), idx));
  auto bad = a90;
  const size_t at = idx.starts[idx.mcu_cols + 2] - 1;  // the marker's second byte, row 1
  bad[at] = static_cast<uint8_t>(0xD0 + ((bad[at] - 0xD0 + 3) & 7));
  EXPECT_FALSE(build_jpeg_mosaic({{bad.data(), bad.size(), w}}, m));
  EXPECT_TRUE(build_jpeg_mosaic({{bad.data(), bad.size(), Rect{0, 0, 8, 8}}}, m)) << "the span before it is sound";
  EXPECT_FALSE(build_jpeg_mosaic({}, m));
}

}  // namespace
}  // namespace trainer
