// Which images the hybrid share should take: crop decode times of RandomResizedCrop windows (one thread, the CPU
// loader's decoder: crop window, DCT scaling, restart cuts), each file as it is and rewritten with restart markers;
// a least-squares fit of the time on the window's bottom and area shares; and, over batches of 256 drawn from the
// timed images, the mean time of k images taken as the batch's last k (the share until 2026-12-05) against the k
// cheapest by host_decode_cost (decode_split.h), the rule the GPU loader uses.
//
//   T=.venv/lib/python3.11/site-packages/torch
//   g++ -O2 -std=c++17 -Ilib/core -Ilib/data -I$T/include -I$T/include/torch/csrc/api/include \
//     scripts/probes/share_cost.cpp build/lib/data/libtrainer_data.a build/lib/runtime/libtrainer_runtime.a \
//     build/lib/core/libtrainer_core.a -L$T/lib -ltorch -ltorch_cpu -lc10 -lspdlog -lfmt -ljpeg -lpng \
//     -lopencv_imgproc -lopencv_core -Wl,-rpath,$T/lib -lpthread -o /tmp/share_cost
//   /tmp/share_cost DIR [DRAWS]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "data/decode_split.h"
#include "core/random.h"
#include "data/image_folder.h"
#include "data/image_ops.h"
#include "data/jpeg_cut.h"
#include "data/jpeg_decoder.h"
#include "data/jpeg_encoder.h"
#include "data/sample_read.h"

using namespace trainer;
using Clock = std::chrono::steady_clock;

struct Timed {
  double ms, bottom, area, cost;
};

// t = a + b * bottom + c * area by the normal equations
static void fit(const std::vector<Timed>& v) {
  double m[3][4] = {{0}};
  for (const Timed& e : v) {
    const double x[3] = {1, e.bottom, e.area};
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j) m[i][j] += x[i] * x[j];
      m[i][3] += x[i] * e.ms;
    }
  }
  for (int i = 0; i < 3; ++i)
    for (int r = 0; r < 3; ++r)
      if (r != i) {
        const double f = m[r][i] / m[i][i];
        for (int c = 0; c < 4; ++c) m[r][c] -= f * m[i][c];
      }
  std::printf("  fit: ms = %.3f + %.3f x bottom + %.3f x area\n", m[0][3] / m[0][0], m[1][3] / m[1][1],
              m[2][3] / m[2][2]);
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [DRAWS]\n", argv[0]);
    return 2;
  }
  const auto list = scan_image_folder(argv[1]).samples;
  const int draws = argc > 2 ? std::atoi(argv[2]) : 4;
  for (const bool restart : {false, true}) {
    std::mt19937 g(3);
    JpegDecoder jpeg;
    std::vector<Timed> v;
    for (int rep = 0; rep < draws; ++rep)
      for (size_t i = 0; i < list.size(); ++i) {
        const ImageSample& s = list[i];
        std::vector<uint8_t> b, o;
        read_sample_bytes(s, b);
        if (restart && transcode_with_restarts(b.data(), b.size(), o, s.path)) b.swap(o);
        JpegFrame f;
        if (!read_jpeg_frame(b.data(), b.size(), f)) continue;
        SampleRng rng(3, static_cast<uint64_t>(rep), i);  // the loader's draw for sample i in epoch `rep`
        const Rect w = draw_rrc(rng, f.width, f.height, 0.08, 1.0, 3.0 / 4, 4.0 / 3);
        JpegDecodeOptions opt;
        opt.crop = true;
        opt.window = w;
        opt.scale_denom = pick_scale_denom(w.w, w.h, 224, 224);
        RgbImage img;
        const auto t = Clock::now();
        jpeg.decode(b.data(), b.size(), opt, img, s.path);
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t).count();
        const double area = double(w.w) * w.h / (double(f.width) * f.height);
        const double bottom = double(w.y + w.h) / f.height;
        v.push_back({ms, bottom, area, host_decode_cost(b.size(), area, bottom, f.cuttable, true)});
      }
    std::printf("%s: %zu crop decodes\n", restart ? "rewritten with restart markers" : "files as they are", v.size());
    fit(v);
    std::uniform_int_distribution<size_t> pick(0, v.size() - 1);
    for (int k : {16, 32, 48, 64, 96}) {
      double last = 0, best = 0;
      const int trials = 300;
      for (int tr = 0; tr < trials; ++tr) {
        std::vector<double> cost(256);
        std::vector<Timed> batch(256);
        for (size_t i = 0; i < batch.size(); ++i) cost[i] = (batch[i] = v[pick(g)]).cost;
        for (int i = 256 - k; i < 256; ++i) last += batch[static_cast<size_t>(i)].ms;
        for (int64_t i : cheapest(cost, std::vector<char>(256, 1), k)) best += batch[static_cast<size_t>(i)].ms;
      }
      std::printf("  k = %2d of 256: last k %.3f ms an image, the k cheapest %.3f (%.2fx)\n", k, last / (k * trials),
                  best / (k * trials), last / best);
    }
  }
}
