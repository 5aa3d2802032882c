// IDX files (MNIST, Fashion-MNIST): big-endian magic 0x00000803 (uint8, 3-D) / 0x00000801 (labels), dims, raw
// bytes; gzipped or not (Debian's dataset-fashion-mnist ships .gz). Read whole into memory.
#pragma once
#include <torch/types.h>

#include <string>

namespace trainer {

struct InMemoryDataset {
  torch::Tensor images;  // (N,H,W,C) uint8, CPU
  torch::Tensor labels;  // (N,) int64, CPU
  int64_t num_classes = 0;
};

// Reads one IDX file of unsigned bytes (any rank). Throws Error naming the file on a bad magic, truncated
// data or implausible dims.
torch::Tensor read_idx(const std::string& path);
// <root>/<split>-images-idx3-ubyte[.gz] and <root>/<split>-labels-idx1-ubyte[.gz].
InMemoryDataset load_idx_split(const std::string& root, const std::string& split);
// Random images (uniform noise with a class-dependent mean, so a model can learn something) for benchmarks.
InMemoryDataset make_synthetic(int64_t n, int64_t size, int64_t channels, int64_t num_classes, uint64_t seed);

}  // namespace trainer
