#include "data/jpeg_cut.h"

#include <algorithm>
#include <cstring>

#include "data/internal/jpeg_segments.h"

namespace trainer {
namespace {

using jpeg_segments::be16;
using jpeg_segments::walk;

// Headers up to the first scan: frame size, sampling, restart interval. False for anything we do not cut.
bool read_headers(const uint8_t* d, size_t n, RestartIndex& idx) {
  int components = 0, hmax = 1, vmax = 1;
  bool have_frame = false, ok = true;
  const bool walked = walk(d, n, [&](int m, const uint8_t* s, size_t len, size_t p) {
    if (m == 0xC0 || m == 0xC1) {  // baseline / extended sequential, Huffman
      if (len < 8 || s[0] != 8) return ok = false;
      idx.height = be16(s + 1);
      idx.width = be16(s + 3);
      components = s[5];
      if (idx.height == 0 || idx.width == 0 || components < 1 || len < 8 + 3 * static_cast<size_t>(components))
        return ok = false;
      for (int c = 0; c < components; ++c) {
        const int f = s[6 + 3 * c + 1];
        hmax = std::max(hmax, f >> 4);
        vmax = std::max(vmax, f & 15);
      }
      idx.sof_at = p;
      have_frame = true;
    } else if ((m >= 0xC2 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) || m == 0xDC) {
      return ok = false;  // progressive, lossless, arithmetic-coded, hierarchical, DNL
    } else if (m == 0xDD) {
      if (len < 4) return ok = false;
      idx.interval = be16(s);
    } else if (m == 0xDA) {
      if (!have_frame || idx.interval <= 0 || s[0] != components) return ok = false;  // one scan, every component
      idx.scan_at = p + 2 + len;
      return false;
    } else if (m == 0xD9 || (m >= 0xD0 && m <= 0xD8) || m == 0x01) {
      return ok = false;
    }
    return true;
  });
  if (!walked || !ok) return false;
  if (idx.scan_at == 0) return false;
  // a scan of one component has MCUs of one block whatever its sampling factors
  idx.mcu_w = components == 1 ? 8 : 8 * hmax;
  idx.mcu_h = components == 1 ? 8 : 8 * vmax;
  idx.mcu_cols = (idx.width + idx.mcu_w - 1) / idx.mcu_w;
  idx.mcu_rows = (idx.height + idx.mcu_h - 1) / idx.mcu_h;
  const int r = idx.interval, cols = idx.mcu_cols;
  return cols % r == 0 || r % cols == 0;  // intervals tile rectangles: a part of a row, or whole rows
}

// After read_headers: the interval boundaries up to interval `upto` (-1: all, and the count must match).
bool scan_intervals(const uint8_t* d, size_t n, RestartIndex& idx, int64_t upto) {
  const int64_t mcus = int64_t(idx.mcu_cols) * idx.mcu_rows;
  const int64_t total = (mcus + idx.interval - 1) / idx.interval;
  if (upto >= total || n > UINT32_MAX) return false;
  idx.starts.reserve(static_cast<size_t>(upto >= 0 ? upto + 2 : total + 1));
  idx.starts.push_back(static_cast<uint32_t>(idx.scan_at));
  size_t q = idx.scan_at;
  while (true) {
    const void* hit = q < n ? std::memchr(d + q, 0xFF, n - q) : nullptr;
    if (!hit || static_cast<const uint8_t*>(hit) + 1 >= d + n) return false;  // truncated
    const size_t f = static_cast<size_t>(static_cast<const uint8_t*>(hit) - d);
    const int m = d[f + 1];
    if (m == 0x00) {  // a stuffed 0xFF data byte
      q = f + 2;
    } else if (m == 0xFF) {  // fill before a marker
      q = f + 1;
    } else if (m >= 0xD0 && m <= 0xD7) {
      const int64_t k = static_cast<int64_t>(idx.starts.size());  // this marker ends interval k - 1
      if ((m - 0xD0) != ((k - 1) & 7) || k >= total) return false;
      if (upto >= 0 && k - 1 == upto) {
        idx.scanned_end = f;
        return true;
      }
      idx.starts.push_back(static_cast<uint32_t>(f + 2));
      q = f + 2;
    } else if (m == 0xD9) {
      idx.scanned_end = f;
      return static_cast<int64_t>(idx.starts.size()) == total;
    } else {
      return false;  // another scan, DNL, or garbage: not ours to cut
    }
  }
}

}  // namespace

bool read_jpeg_frame(const uint8_t* d, size_t n, JpegFrame& frame) {
  frame = JpegFrame{};
  bool found = false;
  walk(d, n, [&](int m, const uint8_t* s, size_t len, size_t) {
    if (m == 0xDA || m == 0xD9) return false;  // a scan or the end before a frame
    if (m < 0xC0 || m > 0xCF || m == 0xC4 || m == 0xC8 || m == 0xCC) return true;
    if (len >= 7) {  // SOFn: precision, height, width
      frame.height = be16(s + 1);
      frame.width = be16(s + 3);
      found = frame.width > 0 && frame.height > 0;
    }
    frame.progressive = m == 0xC2 || m == 0xC6 || m == 0xCA || m == 0xCE;
    return false;
  });
  if (!found) return false;
  RestartIndex idx;
  frame.cuttable = read_headers(d, n, idx);
  return true;
}

bool index_restart_intervals(const uint8_t* d, size_t n, RestartIndex& idx, int64_t upto) {
  return read_restart_headers(d, n, idx) && scan_intervals(d, n, idx, upto);
}

bool read_restart_headers(const uint8_t* d, size_t n, RestartIndex& idx) {
  idx = RestartIndex{};
  return read_headers(d, n, idx);
}

bool scan_restart_intervals(const uint8_t* d, size_t n, RestartIndex& idx, int64_t upto) {
  idx.starts.clear();
  idx.scanned_end = 0;
  return idx.scan_at > 0 && scan_intervals(d, n, idx, upto);
}

bool cut_jpeg_window(const uint8_t* d, size_t n, Rect w, int scale_denom, std::vector<uint8_t>& out,
                     Rect* at) {
  RestartIndex idx;
  if (!read_headers(d, n, idx)) return false;
  const int mw = idx.mcu_w, mh = idx.mcu_h, cols = idx.mcu_cols, rows = idx.mcu_rows, r = idx.interval;
  const int x0 = std::clamp(w.x, 0, idx.width - 1), y0 = std::clamp(w.y, 0, idx.height - 1);
  const int x1 = std::clamp(w.x + w.w, x0 + 1, idx.width), y1 = std::clamp(w.y + w.h, y0 + 1, idx.height);
  // The window's MCUs. Vertically subsampled chroma is upsampled with one chroma row of context above and below,
  // which lies in the neighbouring MCU row only for the first and the last output row of an MCU row: a margin
  // of one MCU row is kept above (below) only where the window's first (last) row at 1/d is such a row. Across,
  // no margin: plain crop decoding (jpeg_crop_scanline) already treats the window's first and last MCU columns
  // as the image's edges, and the cut image has its edges at the same columns.
  const int sd = std::clamp(scale_denom, 1, 8), per_row = std::max(1, mh / sd);  // output rows per MCU row
  const bool above = (y0 / sd) % per_row == 0, below = ((y1 + sd - 1) / sd) % per_row == 0;
  int c0 = x0 / mw, c1 = (x1 + mw - 1) / mw;
  // libjpeg picks the chroma upsampler by the frame's width (fancy upsampling only where the subsampled width at
  // the decode scale exceeds 2): a cut at least two MCUs wide gets the one the whole image gets
  if (c1 - c0 < 2) {
    if (c1 < cols) ++c1;
    else if (c0 > 0) --c0;
  }
  int r0 = std::max(0, y0 / mh - above), r1 = std::min(rows, (y1 + mh - 1) / mh + below);
  if (cols % r == 0) {  // intervals are parts of a row: widen to whole intervals
    c0 = c0 / r * r;
    c1 = std::min(cols, (c1 + r - 1) / r * r);
  } else {  // intervals are whole rows
    const int k = r / cols;
    c0 = 0;
    c1 = cols;
    r0 = r0 / k * k;
    r1 = std::min(rows, (r1 + k - 1) / k * k);
  }
  // plain crop decoding stops after the window's last row anyway: from the top at full width nothing is saved
  if (r0 == 0 && c0 == 0 && c1 == cols) return false;
  const int64_t last = (int64_t(r1 - 1) * cols + c1 - 1) / r;
  if (!scan_intervals(d, n, idx, last)) return false;
  const int vw = c1 == cols ? idx.width - c0 * mw : (c1 - c0) * mw;
  const int vh = r1 == rows ? idx.height - r0 * mh : (r1 - r0) * mh;
  out.resize(idx.scan_at);
  std::memcpy(out.data(), d, idx.scan_at);
  uint8_t* sof = out.data() + idx.sof_at;
  sof[5] = static_cast<uint8_t>(vh >> 8);
  sof[6] = static_cast<uint8_t>(vh & 255);
  sof[7] = static_cast<uint8_t>(vw >> 8);
  sof[8] = static_cast<uint8_t>(vw & 255);
  // the kept intervals are inside the scanned span: one reservation (the buffer is the decoder's, reused)
  out.reserve(out.size() + (idx.scanned_end - idx.scan_at) + 2);
  int64_t written = 0, prev = -1;  // with whole-row intervals a row's interval can be the previous row's
  for (int y = r0; y < r1; ++y)
    for (int64_t i = std::max((int64_t(y) * cols + c0) / r, prev + 1); i <= (int64_t(y) * cols + c1 - 1) / r; ++i) {
      if (written > 0) {  // markers count 0..7 from the cut's own first interval
        out.push_back(0xFF);
        out.push_back(static_cast<uint8_t>(0xD0 + ((written - 1) & 7)));
      }
      out.insert(out.end(), d + idx.starts[static_cast<size_t>(i)], d + idx.end_of(static_cast<size_t>(i)));
      ++written;
      prev = i;
    }
  out.push_back(0xFF);
  out.push_back(0xD9);
  *at = Rect{c0 * mw, r0 * mh, vw, vh};
  return true;
}

}  // namespace trainer
