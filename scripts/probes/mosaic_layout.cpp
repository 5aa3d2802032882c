// What mosaics of a batch's windows (data/jpeg_mosaic.h) cost on the host and hold, before any GPU sees them: DIR's
// JPEGs rewritten as trainer pack does (a restart marker after every MCU) with the standard Huffman tables and with
// tables fitted to each file (sizes, rewrite time); then batches of 256 RandomResizedCrop windows (the loader's
// draw) laid out k to a mosaic: JPEGs a batch, layout time on one thread, the mosaics' MCUs (tiles, margins,
// fillers) against the windows' own, bytes; each mosaic decoded with libjpeg and every window compared with its
// source's full decode (pixels off the image's edges must be equal), and the decode time of the mosaics against
// the CPU loader's crop decode of the same windows one by one.
//
//   T=.venv/lib/python3.11/site-packages/torch B=build
//   g++ -O2 -std=c++17 -Ilib/core -Ilib/data -I$T/include -I$T/include/torch/csrc/api/include \
//     scripts/probes/mosaic_layout.cpp $B/lib/data/libtrainer_data.a $B/lib/runtime/libtrainer_runtime.a \
//     $B/lib/core/libtrainer_core.a -L$T/lib -ltorch -ltorch_cpu -lc10 -lspdlog -lfmt -ljpeg -lpng \
//     -lopencv_imgproc -lopencv_core -Wl,-rpath,$T/lib -lpthread -o /tmp/mosaic_layout
//   /tmp/mosaic_layout DIR [FILES, default 800] [BATCHES, default 4]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "core/random.h"
#include "data/image_folder.h"
#include "data/image_ops.h"
#include "data/jpeg_decoder.h"
#include "data/jpeg_encoder.h"
#include "data/jpeg_mosaic.h"
#include "data/sample_read.h"

using namespace trainer;
using Clock = std::chrono::steady_clock;

static double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

struct File {
  std::vector<uint8_t> jpg;  // rewritten, standard tables
  RgbImage full;             // its whole decode
};

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [FILES] [BATCHES]\n", argv[0]);
    return 2;
  }
  const size_t want = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 800;
  const int batches = argc > 3 ? std::atoi(argv[3]) : 4;
  std::vector<ImageSample> samples = scan_image_folder(argv[1]).samples;
  if (samples.size() > want) samples.resize(want);
  std::vector<File> files;
  double orig = 0, fitted = 0, standard = 0, t_rewrite = 0;
  std::map<std::string, int> keys;
  JpegDecoder dec;
  for (const ImageSample& s : samples) {
    std::vector<uint8_t> raw, fit, std_tables;
    read_sample_bytes(s, raw);
    if (!transcode_with_restarts(raw.data(), raw.size(), fit, s.path)) continue;  // CMYK
    const auto t0 = Clock::now();
    transcode_with_restarts(raw.data(), raw.size(), std_tables, s.path, 1, HuffmanTables::standard);
    t_rewrite += ms_since(t0);
    orig += raw.size(), fitted += fit.size(), standard += std_tables.size();
    keys[mosaic_key(std_tables.data(), std_tables.size())]++;
    File f;
    f.jpg = std::move(std_tables);
    dec.decode(f.jpg.data(), f.jpg.size(), {}, f.full, s.path);
    files.push_back(std::move(f));
  }
  const double n = static_cast<double>(files.size());
  std::printf("%zu files: %.1f KB as they are, rewritten %.1f KB (fitted tables) / %.1f KB (standard, +%.1f%%), "
              "%.2f ms a rewrite; %zu table sets (largest %d files)\n",
              files.size(), orig / n / 1024, fitted / n / 1024, standard / n / 1024, (standard / fitted - 1) * 100,
              t_rewrite / n, keys.size(), std::max_element(keys.begin(), keys.end(), [](auto& a, auto& b) {
                return a.second < b.second;
              })->second);
  if (keys.size() != 1) std::printf("more than one table set: mosaics below take the files of the first only\n");
  for (int k : {8, 16, 32}) {
    double layout = 0, mosaic_decode = 0, crop_decode = 0, bytes = 0, window_px = 0, mosaic_px = 0, tile_px = 0;
    long jpegs = 0, interior_bad = 0, edge_bad = 0;
    int edge_max = 0, widest = 0, tallest = 0;
    for (int b = 0; b < batches; ++b) {
      std::vector<MosaicPiece> pieces;
      std::vector<size_t> of;
      for (int i = 0; i < 256; ++i) {
        const size_t f = (size_t(b) * 256 + i) * 7919 % files.size();
        SampleRng rng(1, uint64_t(k), uint64_t(b) * 256 + i);
        const Rect w = draw_rrc(rng, files[f].full.width, files[f].full.height, 0.08, 1.0, 3.0 / 4, 4.0 / 3);
        pieces.push_back({files[f].jpg.data(), files[f].jpg.size(), w});
        of.push_back(f);
        window_px += double(w.w) * w.h;
      }
      for (size_t first = 0; first < pieces.size(); first += k) {
        const std::vector<MosaicPiece> group(pieces.begin() + first,
                                             pieces.begin() + std::min(pieces.size(), first + k));
        JpegMosaic m;
        auto t0 = Clock::now();
        if (!build_jpeg_mosaic(group, m)) {
          std::fprintf(stderr, "batch %d: the windows from %zu cannot be laid out together\n", b, first);
          return 1;
        }
        layout += ms_since(t0);
        ++jpegs;
        bytes += m.bytes.size();
        mosaic_px += double(m.width) * m.height;
        widest = std::max(widest, m.width), tallest = std::max(tallest, m.height);
        for (const MosaicTile& t : m.tiles) tile_px += double(t.at.w) * t.at.h;
        RgbImage img;
        t0 = Clock::now();
        dec.decode(m.bytes.data(), m.bytes.size(), {}, img, "mosaic.jpg");
        mosaic_decode += ms_since(t0);
        for (size_t i = 0; i < group.size(); ++i) {
          const RgbImage& full = files[of[first + i]].full;
          const Rect& w = group[i].window;
          const Rect& mw = m.tiles[i].window;
          for (int y = 0; y < w.h; ++y)
            for (int x = 0; x < w.w * 3; ++x) {
              const int sx = w.x + x / 3, sy = w.y + y;
              const int a = full.pixels[(size_t(sy) * full.width) * 3 + size_t(w.x) * 3 + x];
              const int c = img.pixels[(size_t(mw.y + y) * img.width + mw.x) * 3 + x];
              if (a == c) continue;
              const bool edge = sx == 0 || sy == 0 || sx == full.width - 1 || sy == full.height - 1;
              (edge ? edge_bad : interior_bad)++;
              if (edge) edge_max = std::max(edge_max, std::abs(a - c));
            }
          JpegDecodeOptions o;  // the CPU loader's way: the window alone (cut out), full scale as the mosaic
          o.crop = true;
          o.window = w;
          RgbImage one;
          t0 = Clock::now();
          dec.decode(group[i].data, group[i].size, o, one, "window.jpg");
          crop_decode += ms_since(t0);
        }
      }
    }
    const double per = static_cast<double>(batches);
    std::printf("k %2d: %5.1f JPEGs a batch of 256 (largest %dx%d), layout %.2f ms a batch (one thread), "
                "%.0f KB a batch; MCU pixels: tiles %.2fx the windows', mosaics %.2fx (fillers %.1f%%); "
                "libjpeg: mosaics %.1f ms a batch against %.1f ms for the windows one by one; window pixels "
                "unequal to the full decode: %ld off the edges, %ld on them (max %d)\n",
                k, jpegs / per, widest, tallest, layout / per, bytes / per / 1024, tile_px / window_px,
                mosaic_px / window_px, (1 - tile_px / mosaic_px) * 100, mosaic_decode / per, crop_decode / per,
                interior_bad, edge_bad, edge_max);
  }
  return 0;
}
