// `trainer bench`: a reproducible training-throughput benchmark. Fixed seed, one synthetic batch resident on
// the device (compute only: what the GPU can do when data is never the bottleneck), warm-up steps excluded,
// N timed steps between two synchronisations. Prints a table and returns/writes JSON with the figures and
// the environment, comparable with scripts/bench_pytorch.py's output.
#pragma once
#include <string>

#include "config/config.h"
#include "engine/trainer.h"

namespace trainer {

struct BenchResult {
  double img_per_s = 0;
  double step_ms = 0;        // mean over the timed steps
  double peak_mem_gib = 0;   // peak allocated during the timed steps (train.cuda_graph: reserved)
  double mfu = 0;            // model FLOPs utilisation vs the GPU's dense bf16/fp16 peak (0 when unknown)
  std::string json;          // the full record
};

BenchResult run_bench(const Config& cfg, const RunContext& ctx);

struct DataBenchResult {
  double img_per_s = 0;       // batches delivered on the device, normalised
  double read_us = 0, decode_us = 0, resize_us = 0;  // per image, summed over threads (CPU time)
  double cut_fraction = 0;  // of the images, those whose window was cut out of a restart-marker file
  int workers = 0;
  std::string json;
};
// `trainer bench-data`: the input pipeline alone (the config's training split, its augmentation), warm-up
// batches excluded, bench.steps batches timed.
DataBenchResult run_bench_data(const Config& cfg, const RunContext& ctx);
// FNV-1a 64 of a text, hex: names a resolved config in results.
std::string fnv1a_hex(const std::string& text);

}  // namespace trainer
