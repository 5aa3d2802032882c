// The launch geometry of the row-major elementwise kernels that also sum columns (bias_gelu, qkv_grad): blocks of
// kTileX x kTileY threads, threadIdx.x taking 8-value column vectors (a warp reads 512 contiguous bytes of a bf16
// row), threadIdx.y rows; grid.x tiles the columns, grid.y strides over rows, so each thread keeps its columns'
// constants and sums in registers for all its rows.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "launch.cuh"

namespace trainer::kernels {
namespace {

constexpr int kTileVec = 8, kTileX = 32, kTileY = 8, kTileThreads = kTileX * kTileY;
constexpr int kTileMaxBlocksPerSm = 2048 / kTileThreads;

template <auto Kernel> int tile_blocks_per_sm() {
  static const int n = [] {
    int b = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, Kernel, kTileThreads, 0) != cudaSuccess) b = 1;
    return std::min(std::max(b, 1), kTileMaxBlocksPerSm);
  }();
  return n;
}

// grid.x covers C / 8 column vectors; grid.y fills per_sm blocks an SM, giving each thread at least 4 rows (fewer
// blocks, fewer partial rows to add up, once the rows run short)
inline dim3 column_tile_grid(int64_t rows, int64_t C, int per_sm) {
  const int64_t gx = (C / kTileVec + kTileX - 1) / kTileX;
  const int64_t want = std::max<int64_t>(1, int64_t(sm_count()) * per_sm / gx);
  const int64_t gy = std::max<int64_t>(1, std::min<int64_t>({want, (rows + 4 * kTileY - 1) / (4 * kTileY), 65535}));
  return dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
}

// partial floats a column-summing launch over rows x C may need
inline int64_t column_tile_workspace_floats(int64_t rows, int64_t C) {
  return std::max<int64_t>(1, int64_t(column_tile_grid(rows, C, kTileMaxBlocksPerSm).y) * C);
}

}  // namespace
}  // namespace trainer::kernels
