// The GPU loader's read-ahead, reading side only: 256 files of an ImageFolder read the way it did until 2026-12-05
// (each into its own new vector, then all copied into one buffer) against read_batch (data/sample_read.h: sizes
// first, then every file straight into its slice of one reused buffer), on N threads, 20 batches a figure.
//
//   T=.venv/lib/python3.11/site-packages/torch
//   g++ -O2 -std=c++17 -Ilib/core -Ilib/data -I$T/include -I$T/include/torch/csrc/api/include \
//     scripts/probes/read_batch.cpp build/lib/data/libtrainer_data.a build/lib/runtime/libtrainer_runtime.a \
//     build/lib/core/libtrainer_core.a -L$T/lib -ltorch -ltorch_cpu -lc10 -lspdlog -lfmt -Wl,-rpath,$T/lib \
//     -lpthread -o /tmp/read_batch
//   /tmp/read_batch DIR THREADS
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/parallel.h"
#include "data/image_folder.h"
#include "data/sample_read.h"

using namespace trainer;
using Clock = std::chrono::steady_clock;

static double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s DIR THREADS\n", argv[0]);
    return 2;
  }
  const auto list = scan_image_folder(argv[1]).samples;
  const int threads = std::atoi(argv[2]);
  const size_t B = 256;
  std::vector<const ImageSample*> batch;
  for (size_t i = 0; i < B; ++i) batch.push_back(&list[i % list.size()]);
  std::vector<uint8_t> buffer;  // reused, as the host allocator's cached pinned blocks are
  auto take = [&](size_t n) {
    if (buffer.size() < n) buffer.resize(n);
    return buffer.data();
  };
  for (int pass = 0; pass < 3; ++pass) {
    double before = 0, after = 0;
    const int reps = 20;
    for (int k = 0; k < reps; ++k) {
      auto t = Clock::now();
      std::vector<std::vector<uint8_t>> files(B);
      parallel_for(B, threads, [&](int64_t i) { read_sample_bytes(*batch[i], files[i]); });
      std::vector<size_t> at(B + 1, 0);
      for (size_t i = 0; i < B; ++i) at[i + 1] = at[i] + files[i].size();
      uint8_t* base = take(at[B]);
      parallel_for(B, threads, [&](int64_t i) { std::memcpy(base + at[i], files[i].data(), files[i].size()); });
      before += ms_since(t);
      t = Clock::now();
      read_batch(batch, threads, take);
      after += ms_since(t);
    }
    std::printf("%d threads, %zu files: own vectors + copy %.2f ms, read_batch %.2f ms a batch\n", threads, B,
                before / reps, after / reps);
  }
}
