#include "data/jpeg_mosaic.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "data/internal/jpeg_segments.h"
#include "data/jpeg_cut.h"

namespace trainer {
namespace {

using jpeg_segments::be16;

struct Code {
  uint32_t bits = 0;
  int len = 0;  // 0: the table has no code for the symbol
};

// The headers a mosaic copies and the codes its fillers need.
struct Header {
  std::vector<uint8_t> bytes;  // SOI and the kept segments up to and including the scan header
  size_t size_at = 0;          // offset of the frame's height (then its width) in `bytes`
  std::string key;
  Code dc_zero[4], eob[4];     // by table id: DC category 0, and AC end-of-block
  struct Component {
    int id = 0, blocks = 1, dc = 0, ac = 0;  // blocks per MCU, the scan's table ids
  };
  std::vector<Component> scan;
  int interval = 0;
};

// The canonical codes of one DHT table (JPEG Annex C) for symbol `want`.
Code code_of(const uint8_t* counts, const uint8_t* values, int want) {
  uint32_t code = 0;
  int k = 0;
  for (int len = 1; len <= 16; ++len) {
    for (int i = 0; i < counts[len - 1]; ++i, ++k, ++code)
      if (values[k] == want) return Code{code, len};
    code <<= 1;
  }
  return Code{};
}

bool read_tables(const uint8_t* s, size_t n, Header& h) {
  for (size_t q = 0; q < n;) {
    if (q + 17 > n) return false;
    const int cls = s[q] >> 4, id = s[q] & 15;
    const uint8_t* counts = s + q + 1;
    const size_t total = std::accumulate(counts, counts + 16, size_t(0));
    if (cls > 1 || id > 3 || q + 17 + total > n) return false;
    const uint8_t* values = s + q + 17;
    if (cls == 0) h.dc_zero[id] = code_of(counts, values, 0);
    else h.eob[id] = code_of(counts, values, 0);
    q += 17 + total;
  }
  return true;
}

bool read_header(const uint8_t* d, size_t n, Header& h) {
  h = Header{};
  h.bytes = {0xFF, 0xD8};
  std::vector<std::pair<int, int>> sampling;  // per frame component: id, h x v blocks
  bool ok = true, scan = false;
  const auto keep = [&](const uint8_t* s, size_t len) { h.bytes.insert(h.bytes.end(), s - 4, s + len - 2); };
  jpeg_segments::walk(d, n, [&](int m, const uint8_t* s, size_t len, size_t) {
    const size_t body = len - 2;
    if (m == 0xC0 || m == 0xC1) {  // baseline / extended sequential, Huffman
      if (body < 6 || s[0] != 8 || body < 6 + 3 * size_t(s[5]) || !sampling.empty()) return ok = false;
      for (int c = 0; c < s[5]; ++c) sampling.push_back({s[6 + 3 * c], (s[7 + 3 * c] >> 4) * (s[7 + 3 * c] & 15)});
      h.size_at = h.bytes.size() + 5;
      keep(s, len);
      h.key += static_cast<char>(m);
      h.key.append(reinterpret_cast<const char*>(s - 2), 2 + 1);  // the length and precision, then no size
      h.key.append(reinterpret_cast<const char*>(s + 5), body - 5);
      return true;
    }
    if (m == 0xC4 || m == 0xDB || m == 0xDD || m == 0xEE) {  // Huffman, quantisation, restart interval, Adobe
      if (m == 0xC4 && !read_tables(s, body, h)) return ok = false;
      if (m == 0xDD && body >= 2) h.interval = be16(s);
      keep(s, len);
      h.key += static_cast<char>(m);
      h.key.append(reinterpret_cast<const char*>(s), body);
      return true;
    }
    if (m == 0xE0 && body >= 5 && std::memcmp(s, "JFIF", 5) == 0) {  // YCbCr declared; its density does not matter
      keep(s, len);
      h.key += "JFIF";
      return true;
    }
    if ((m >= 0xE1 && m <= 0xEF) || m == 0xFE) return true;  // other APPn, COM: not copied
    if (m == 0xDA) {
      if (body < 1 || s[0] != sampling.size() || body < 1 + 2 * size_t(s[0])) return ok = false;
      for (int c = 0; c < s[0]; ++c) {
        const int id = s[1 + 2 * c], dc = s[2 + 2 * c] >> 4, ac = s[2 + 2 * c] & 15;
        const auto it = std::find_if(sampling.begin(), sampling.end(), [&](auto& f) { return f.first == id; });
        if (it == sampling.end() || dc > 3 || ac > 3) return ok = false;
        // a scan of one component has MCUs of one block whatever its sampling factors
        h.scan.push_back({id, sampling.size() == 1 ? 1 : it->second, dc, ac});
      }
      keep(s, len);
      h.key += '\xDA';
      h.key.append(reinterpret_cast<const char*>(s), body);
      scan = true;
      return false;
    }
    return ok = false;  // progressive, lossless, arithmetic-coded, hierarchical, DNL, or a marker out of place
  });
  return ok && scan && h.size_at > 0 && h.interval == 1;
}

// One MCU of zeros (DC difference 0, then end-of-block, in every block), padded with 1 bits to a byte and
// byte-stuffed; empty where a table lacks either code.
std::vector<uint8_t> filler_mcu(const Header& h) {
  std::vector<uint8_t> out;
  uint64_t acc = 0;
  int have = 0;
  const auto put = [&](Code c) {
    acc = (acc << c.len) | c.bits;
    have += c.len;
    while (have >= 8) {
      const uint8_t b = static_cast<uint8_t>(acc >> (have - 8));
      out.push_back(b);
      if (b == 0xFF) out.push_back(0x00);
      have -= 8;
    }
  };
  for (const auto& c : h.scan) {
    const Code dc = h.dc_zero[c.dc], eob = h.eob[c.ac];
    if (dc.len == 0 || eob.len == 0) return {};
    for (int b = 0; b < c.blocks; ++b) {
      put(dc);
      put(eob);
    }
  }
  if (have > 0) put(Code{(1u << (8 - have)) - 1, 8 - have});
  return out;
}

// The tile of a window, in MCUs of its source: a margin of one MCU on each side where the window's first or last
// pixel lies on that MCU edge and the chroma is subsampled across it (its upsampling reads one sample over).
struct Span {
  RestartIndex idx;
  int c0 = 0, r0 = 0, cols = 0, rows = 0;  // first MCU column and row, MCUs across and down
};

bool tile_of(const MosaicPiece& piece, Span& t) {
  if (!read_restart_headers(piece.data, piece.size, t.idx) || t.idx.interval != 1) return false;
  const RestartIndex& x = t.idx;
  const int mw = x.mcu_w, mh = x.mcu_h;
  const int x0 = std::clamp(piece.window.x, 0, x.width - 1), y0 = std::clamp(piece.window.y, 0, x.height - 1);
  const int x1 = std::clamp(piece.window.x + piece.window.w, x0 + 1, x.width);
  const int y1 = std::clamp(piece.window.y + piece.window.h, y0 + 1, x.height);
  int c0 = x0 / mw, c1 = (x1 + mw - 1) / mw, r0 = y0 / mh, r1 = (y1 + mh - 1) / mh;
  if (mw > 8 && x0 % mw == 0 && c0 > 0) --c0;
  if (mw > 8 && x1 % mw == 0 && c1 < x.mcu_cols) ++c1;
  if (mh > 8 && y0 % mh == 0 && r0 > 0) --r0;
  if (mh > 8 && y1 % mh == 0 && r1 < x.mcu_rows) ++r1;
  t.c0 = c0;
  t.r0 = r0;
  t.cols = c1 - c0;
  t.rows = r1 - r0;
  // the intervals up to the tile's last MCU
  return scan_restart_intervals(piece.data, piece.size, t.idx, int64_t(r1 - 1) * x.mcu_cols + c1 - 1);
}

// Shelves of width W (MCUs): the tiles in `order` (tallest first) left to right, a new shelf where the next does not
// fit. Each tile's MCU column and row in `at`; returns the height.
int shelve(const std::vector<Span>& spans, const std::vector<size_t>& order, int W,
           std::vector<std::pair<int, int>>& at) {
  int x = 0, shelf_y = 0, shelf_h = 0;
  for (size_t i : order) {
    if (x + spans[i].cols > W) {
      shelf_y += shelf_h;
      x = 0;
      shelf_h = 0;
    }
    at[i] = {x, shelf_y};
    x += spans[i].cols;
    shelf_h = std::max(shelf_h, spans[i].rows);
  }
  return shelf_y + shelf_h;
}

}  // namespace

std::string mosaic_key(const uint8_t* data, size_t size) {
  Header h;
  return read_header(data, size, h) ? h.key : std::string();
}

bool build_jpeg_mosaic(const std::vector<MosaicPiece>& pieces, JpegMosaic& out) {
  out = JpegMosaic{};
  Header h;
  if (pieces.empty() || !read_header(pieces[0].data, pieces[0].size, h)) return false;
  std::vector<Span> spans(pieces.size());
  int64_t area = 0;
  int widest = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (i > 0 && (pieces[i].key ? *pieces[i].key : mosaic_key(pieces[i].data, pieces[i].size)) != h.key) return false;
    if (!tile_of(pieces[i], spans[i])) return false;
    area += int64_t(spans[i].cols) * spans[i].rows;
    widest = std::max(widest, spans[i].cols);
  }
  const int mw = spans[0].idx.mcu_w, mh = spans[0].idx.mcu_h;
  // shelves, the tallest tiles first, at the width between 3/4 and 3/2 of the square's side whose frame has the
  // fewest MCUs (the fillers are decoded and converted like the tiles); a tie goes to the squarer frame
  std::vector<size_t> order(pieces.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return spans[a].rows > spans[b].rows; });
  std::vector<std::pair<int, int>> at(pieces.size()), trial(pieces.size());  // MCU column and row of each tile
  const double side = std::sqrt(double(area));
  int W = 0, H = 0;
  for (int w = std::max(widest, static_cast<int>(0.75 * side)); w <= std::max(widest, int(std::ceil(1.5 * side)));
       ++w) {
    const int h = shelve(spans, order, w, trial);
    const int64_t cells = int64_t(w) * h, best = int64_t(W) * H;
    if (W == 0 || cells < best || (cells == best && std::abs(w - h) < std::abs(W - H))) {
      W = w;
      H = h;
      at.swap(trial);
    }
  }
  if (int64_t(W) * mw > 65535 || int64_t(H) * mh > 65535) return false;
  out.tiles.resize(pieces.size());
  // which piece's interval fills each MCU of the mosaic (-1: a filler)
  std::vector<int32_t> owner(size_t(W) * H, -1);
  std::vector<uint32_t> interval(size_t(W) * H, 0);
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Span& t = spans[i];
    for (int r = 0; r < t.rows; ++r)
      for (int c = 0; c < t.cols; ++c) {
        const size_t cell = size_t(at[i].second + r) * W + at[i].first + c;
        owner[cell] = static_cast<int32_t>(i);
        interval[cell] = static_cast<uint32_t>(int64_t(t.r0 + r) * t.idx.mcu_cols + t.c0 + c);
      }
    MosaicTile& tile = out.tiles[i];
    tile.at = Rect{t.c0 * mw, t.r0 * mh, t.cols * mw, t.rows * mh};
    tile.x = at[i].first * mw;
    tile.y = at[i].second * mh;
    const Rect& w = pieces[i].window;
    tile.window = Rect{w.x - tile.at.x + tile.x, w.y - tile.at.y + tile.y, w.w, w.h};
  }
  std::vector<uint8_t> filler = filler_mcu(h);
  if (filler.empty()) {  // a table without the zero codes: a copy of the first tile's first MCU fills instead
    const RestartIndex& x0 = spans[0].idx;
    const size_t first = size_t(int64_t(spans[0].r0) * x0.mcu_cols + spans[0].c0);
    filler.assign(pieces[0].data + x0.starts[first], pieces[0].data + x0.end_of(first));
  }
  std::vector<uint8_t>& b = out.bytes;
  b = h.bytes;
  const int fw = W * mw, fh = H * mh;
  b[h.size_at] = static_cast<uint8_t>(fh >> 8);
  b[h.size_at + 1] = static_cast<uint8_t>(fh & 255);
  b[h.size_at + 2] = static_cast<uint8_t>(fw >> 8);
  b[h.size_at + 3] = static_cast<uint8_t>(fw & 255);
  size_t reserve = b.size() + 2 * owner.size() + filler.size() * owner.size();
  for (const Span& t : spans) reserve += t.idx.scanned_end - t.idx.starts.front();
  b.reserve(reserve);
  for (size_t k = 0; k < owner.size();) {
    if (k > 0) {  // markers count 0..7 from the mosaic's first interval
      b.push_back(0xFF);
      b.push_back(static_cast<uint8_t>(0xD0 + ((k - 1) & 7)));
    }
    if (owner[k] < 0) {
      b.insert(b.end(), filler.begin(), filler.end());
      ++out.filler_mcus;
      ++k;
      continue;
    }
    // a run of the same source's consecutive intervals (a tile's row) is one span of its bytes, markers and all:
    // copied at once, then its markers renumbered in place
    const MosaicPiece& p = pieces[static_cast<size_t>(owner[k])];
    const RestartIndex& x = spans[static_cast<size_t>(owner[k])].idx;
    size_t run = 1;
    while (k + run < owner.size() && owner[k + run] == owner[k] && interval[k + run] == interval[k] + run) ++run;
    const uint32_t first = x.starts[interval[k]];
    const size_t base = b.size();
    b.insert(b.end(), p.data + first, p.data + x.end_of(interval[k] + run - 1));
    for (size_t j = 1; j < run; ++j)
      b[base + (x.starts[interval[k] + j] - first) - 1] = static_cast<uint8_t>(0xD0 + ((k + j - 1) & 7));
    out.tile_mcus += static_cast<int64_t>(run);
    k += run;
  }
  b.push_back(0xFF);
  b.push_back(0xD9);
  out.width = fw;
  out.height = fh;
  return true;
}

}  // namespace trainer
