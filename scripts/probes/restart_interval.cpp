// CPU decode time of RandomResizedCrop windows from the same JPEGs as they are and rewritten losslessly with a
// restart marker every r MCUs (r = 1, as trainer pack writes them, and larger divisors of the MCU row, and one
// interval a row), through the decoder the CPU loader uses (crop window, DCT scaling, the cut out of restart
// intervals, jpeg_cut.h). The same windows for every variant; one thread; the bytes per image too.
//
//   T=.venv/lib/python3.11/site-packages/torch
//   g++ -O2 -std=c++17 -Ilib/core -Ilib/data -I$T/include -I$T/include/torch/csrc/api/include \
//     scripts/probes/restart_interval.cpp build/lib/data/libtrainer_data.a build/lib/runtime/libtrainer_runtime.a \
//     build/lib/core/libtrainer_core.a -L$T/lib -ltorch -ltorch_cpu -lc10 -lspdlog -lfmt -ljpeg -lpng \
//     -lopencv_imgproc -lopencv_core -Wl,-rpath,$T/lib -lpthread -o /tmp/restart_interval
//   /tmp/restart_interval DIR [FILES] [REPEATS]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/random.h"
#include "data/image_folder.h"
#include "data/image_ops.h"
#include "data/jpeg_cut.h"
#include "data/jpeg_decoder.h"
#include "data/jpeg_encoder.h"
#include "data/sample_read.h"

using namespace trainer;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [FILES] [REPEATS]\n", argv[0]);
    return 2;
  }
  const auto list = scan_image_folder(argv[1]).samples;
  const size_t files = std::min(list.size(), static_cast<size_t>(argc > 2 ? std::atoi(argv[2]) : 200));
  const int repeats = argc > 3 ? std::atoi(argv[3]) : 3;
  // variants: 0 = the file as it is; r > 0 = restart every r MCUs; -1 = one interval a row
  const std::vector<int> variants = {0, 1, 2, 3, 4, 6, 8, -1};
  std::vector<std::vector<std::vector<uint8_t>>> bytes(variants.size(), std::vector<std::vector<uint8_t>>(files));
  std::vector<Rect> window(files);
  std::vector<int> used(variants.size(), 0);  // files the variant really applies to
  JpegDecoder jpeg;
  for (size_t f = 0; f < files; ++f) {
    read_sample_bytes(list[f], bytes[0][f]);
    std::vector<uint8_t> one;
    RestartIndex idx;
    if (!transcode_with_restarts(bytes[0][f].data(), bytes[0][f].size(), one, list[f].path, 1) ||
        !index_restart_intervals(one.data(), one.size(), idx, 0))
      continue;
    SampleRng rng(7, 0, f);  // the loader's RandomResizedCrop draw for sample f in epoch 0
    window[f] = draw_rrc(rng, idx.width, idx.height, 0.08, 1.0, 3.0 / 4, 4.0 / 3);
    for (size_t v = 1; v < variants.size(); ++v) {
      const int r = variants[v] < 0 ? idx.mcu_cols : variants[v];
      if (idx.mcu_cols % r != 0) {  // not a divisor of this image's row: it keeps r = 1 (not counted)
        bytes[v][f] = one;
        continue;
      }
      transcode_with_restarts(bytes[0][f].data(), bytes[0][f].size(), bytes[v][f], list[f].path, r);
      ++used[v];
    }
  }
  for (size_t f = 0; f < files; ++f)
    if (window[f].w == 0) window[f] = Rect{0, 0, 1, 1};  // not transcodable: skipped below
  std::printf("%zu files, RandomResizedCrop windows, crop + DCT-scaled decode to >= 224 px, one thread\n", files);
  for (int rep = 0; rep < repeats; ++rep) {
    for (size_t v = 0; v < variants.size(); ++v) {
      double ms = 0, kb = 0;
      int n = 0, cut = 0;
      for (size_t f = 0; f < files; ++f) {
        if (window[f].w <= 1) continue;
        JpegDecodeOptions o;
        o.crop = true;
        o.cut = true;
        o.window = window[f];
        o.scale_denom = pick_scale_denom(window[f].w, window[f].h, 224, 224);
        RgbImage img;
        const auto t = Clock::now();
        jpeg.decode(bytes[v][f].data(), bytes[v][f].size(), o, img, list[f].path);
        ms += std::chrono::duration<double, std::milli>(Clock::now() - t).count();
        cut += jpeg.last_decode_was_cut();
        kb += bytes[v][f].size() / 1024.0;
        ++n;
      }
      const std::string name = variants[v] == 0 ? "as is" : variants[v] < 0 ? "a row" : std::to_string(variants[v]);
      std::printf("pass %d  restart %-6s  %.3f ms/image  %.1f KB  cut %3.0f%%  (%d files with this interval)\n", rep,
                  name.c_str(), ms / n, kb / n, 100.0 * cut / n, v == 0 ? n : used[v]);
    }
  }
}
