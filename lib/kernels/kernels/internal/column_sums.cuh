// Column sums over rows split across a grid: each block writes its partial sums as one row of `partial`
// (block_column_partials), and column_sums adds the rows up per column in double.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace trainer::kernels {
namespace {

// For blocks of TX x TY threads where thread (x, y) holds the sums of VEC consecutive columns
// (blockIdx.x * TX + x) * VEC + i over its rows: the block's sums over y, written to row blockIdx.y of partial
// (C columns). Laid out [y][i][x] in shared memory, so each read below is one bank per lane. All threads call it.
template <int TX, int TY, int VEC>
__device__ __forceinline__ void block_column_partials(const float (&sum)[VEC], float* __restrict__ partial, int C) {
  static_assert(TY >= VEC, "a block needs a thread for each of its TX x VEC columns");
  __shared__ float sh[TY][VEC][TX];
#pragma unroll
  for (int i = 0; i < VEC; ++i) sh[threadIdx.y][i][threadIdx.x] = sum[i];
  __syncthreads();
  const int t = threadIdx.y * TX + threadIdx.x;
  if (t >= TX * VEC) return;
  const int i = t / TX, x = t % TX, col = (blockIdx.x * TX + x) * VEC + i;
  float s = 0;
#pragma unroll
  for (int j = 0; j < TY; ++j) s += sh[j][i][x];
  if (col < C) partial[int64_t(blockIdx.y) * C + col] = s;
}

constexpr int kColumnSumX = 32, kColumnSumY = 8;  // a block sums 32 columns, 8 threads down each

__global__ void column_sums_kernel(const float* __restrict__ partial, int blocks, int D, float* __restrict__ out) {
  __shared__ double sh[kColumnSumY][kColumnSumX];
  const int c = blockIdx.x * kColumnSumX + threadIdx.x;
  double a = 0;
  if (c < D)
    for (int j = threadIdx.y; j < blocks; j += kColumnSumY) a += partial[int64_t(j) * D + c];
  sh[threadIdx.y][threadIdx.x] = a;
  __syncthreads();
  if (threadIdx.y == 0 && c < D) {
    for (int j = 1; j < kColumnSumY; ++j) a += sh[j][threadIdx.x];
    out[c] = static_cast<float>(a);
  }
}

inline void column_sums(const float* partial, int blocks, int64_t D, float* out, cudaStream_t stream) {
  column_sums_kernel<<<static_cast<unsigned>((D + kColumnSumX - 1) / kColumnSumX), dim3(kColumnSumX, kColumnSumY), 0,
                       stream>>>(partial, blocks, static_cast<int>(D), out);
}

}  // namespace
}  // namespace trainer::kernels
