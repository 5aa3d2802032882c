// Cutting a window out of a JPEG without entropy-decoding the rest. In a sequential JPEG with restart markers
// every restart interval is coded on its own: the DC predictors restart at zero and the interval ends on a byte
// boundary. The intervals that cover a rectangle of MCUs, laid end to end behind the same headers with the frame
// size changed and the markers renumbered, are therefore a smaller valid JPEG, and its pixels inside the window
// equal those plain crop decoding gives (IDCT is per block; the chroma upsampling's context rows come from a
// one-MCU margin above or below where the window's edge rows need them). Decoding a RandomResizedCrop window
// this way reads only the window's share of the Huffman-coded data, where plain crop decoding
// (jpeg_skip_scanlines / jpeg_crop_scanline) must still decode every row above the window and every column
// beside it. `trainer pack` writes a restart marker after every MCU (a lossless transcode: same coefficients,
// same pixels) so that its shards can be cut anywhere.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "data/jpeg_decoder.h"

namespace trainer {

// Where the restart intervals of one JPEG lie. Only a single-scan, 8-bit, Huffman-coded sequential JPEG
// (SOF0/SOF1) whose interval is a divisor of the MCU row or a whole number of rows qualifies.
struct RestartIndex {
  int width = 0, height = 0;       // the frame's size in pixels
  int mcu_w = 0, mcu_h = 0;        // one MCU in pixels (8 x the largest sampling factors)
  int mcu_cols = 0, mcu_rows = 0;  // MCUs across and down
  int interval = 0;                // MCUs per restart interval
  size_t sof_at = 0;               // offset of the SOF marker (its height and width are at +5 and +7)
  size_t scan_at = 0;              // first byte of entropy-coded data
  // offset of the first byte of each interval, as far as it was scanned, and one past the last scanned
  // interval's data (its RST marker or EOI)
  std::vector<uint32_t> starts;
  size_t scanned_end = 0;
  // one past interval i's coded data (where its RST marker or EOI begins), for a scanned interval i
  size_t end_of(size_t i) const { return i + 1 < starts.size() ? starts[i + 1] - 2 : scanned_end; }
};

// Reads the headers and finds the interval boundaries up to (and including) interval `upto` (-1: all of them,
// and then the count must be exactly the frame's). False when the file does not qualify or the markers are not
// where they must be (the caller then decodes the ordinary way, which reports any corruption).
bool index_restart_intervals(const uint8_t* data, size_t size, RestartIndex& idx, int64_t upto = -1);
// The same in two steps, for a caller that picks `upto` from the frame: the headers alone (the frame's geometry and
// interval; `starts` empty), then the boundaries on an index that read_restart_headers filled.
bool read_restart_headers(const uint8_t* data, size_t size, RestartIndex& idx);
bool scan_restart_intervals(const uint8_t* data, size_t size, RestartIndex& idx, int64_t upto = -1);

// A JPEG's frame from its headers alone (a walk over the markers to the first frame header, no tables read): its
// size, whether it is progressive (a crop decode reads all of it), and whether cut_jpeg_window can cut it (its
// restart intervals qualify). False where no frame header is found.
struct JpegFrame {
  int width = 0, height = 0;
  bool progressive = false;
  bool cuttable = false;
};
bool read_jpeg_frame(const uint8_t* data, size_t size, JpegFrame& frame);

// The window `w` (full-resolution pixels) of `data`, to be decoded at 1/`scale_denom`, as a smaller JPEG in
// `out`: its MCUs (at least two across), with a margin of one MCU row above (below) where the window's first
// (last) row at that scale is the first (last) of its MCU row and the image has one there. `*at` gets the cut
// image's origin in the full image (a multiple of the MCU size, so also of every DCT scale). False when the file
// cannot be cut or cutting would save little (`out` is then unspecified).
bool cut_jpeg_window(const uint8_t* data, size_t size, Rect w, int scale_denom, std::vector<uint8_t>& out,
                     Rect* at);

}  // namespace trainer
