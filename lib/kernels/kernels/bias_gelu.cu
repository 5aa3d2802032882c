// Bias + exact GELU (see bias_gelu.h), laid out as internal/column_tiles: each thread keeps its 8 bias values (and
// in the backward its 8 column sums) in registers for all its rows. The backward adds its threads' sums per block
// into one row of partials per grid.y index, which internal/column_sums adds up per column.
#include "bias_gelu.h"

#include <type_traits>

#include "internal/column_sums.cuh"
#include "internal/column_tiles.cuh"
#include "internal/vec.cuh"

namespace trainer::kernels {
namespace {

constexpr int kVec = kTileVec, kTX = kTileX, kTY = kTileY;

__device__ __forceinline__ float gelu(float x) { return 0.5f * x * (1.f + erff(x * 0.70710678118654752f)); }
__device__ __forceinline__ float gelu_grad(float x) {
  const float cdf = 0.5f * (1.f + erff(x * 0.70710678118654752f));
  const float pdf = __expf(-0.5f * x * x) * 0.39894228040143268f;  // exp(-x^2 / 2) / sqrt(2 pi)
  return cdf + x * pdf;
}

__device__ __forceinline__ void load_bias(const float* bias, float (&b)[kVec]) {
  const float4 lo = reinterpret_cast<const float4*>(bias)[0], hi = reinterpret_cast<const float4*>(bias)[1];
  b[0] = lo.x, b[1] = lo.y, b[2] = lo.z, b[3] = lo.w, b[4] = hi.x, b[5] = hi.y, b[6] = hi.z, b[7] = hi.w;
}

// hb as the activation type holds it: h + bias rounded once
template <typename T> __device__ __forceinline__ float biased(T h, float b) { return to_f(from_f<T>(to_f(h) + b)); }

template <typename T>
__device__ __forceinline__ void forward_row(T* y, const float (&b)[kVec], const Pack<T, kVec>& x, int64_t at) {
  float out[kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i) out[i] = gelu(biased(x.v[i], b[i]));
  store<T, kVec>(y + at, out);
}

// four rows loaded before any is computed: one 16-byte load a row would leave too few bytes in flight per SM
constexpr int kForwardRows = 4;

template <typename T>
__global__ void __launch_bounds__(kTileThreads)
    forward_kernel(const T* __restrict__ h, const float* __restrict__ bias, T* __restrict__ y, int64_t rows, int C) {
  const int c = (blockIdx.x * kTX + threadIdx.x) * kVec;
  if (c >= C) return;
  float b[kVec];
  load_bias(bias + c, b);
  const int64_t step = int64_t(gridDim.y) * kTY;
  int64_t r = int64_t(blockIdx.y) * kTY + threadIdx.y;
  for (; r + (kForwardRows - 1) * step < rows; r += kForwardRows * step) {
    Pack<T, kVec> x[kForwardRows];
#pragma unroll
    for (int u = 0; u < kForwardRows; ++u) x[u] = load<T, kVec>(h + (r + u * step) * C + c);
#pragma unroll
    for (int u = 0; u < kForwardRows; ++u) forward_row(y, b, x[u], (r + u * step) * C + c);
  }
  for (; r < rows; r += step) forward_row(y, b, load<T, kVec>(h + r * C + c), r * C + c);
}

template <typename T>
__device__ __forceinline__ void backward_row(T* dh, const float (&b)[kVec], const Pack<T, kVec>& g,
                                             const Pack<T, kVec>& x, int64_t at, float (&sum)[kVec]) {
  float out[kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    out[i] = to_f(g.v[i]) * gelu_grad(biased(x.v[i], b[i]));
    sum[i] += out[i];
  }
  store<T, kVec>(dh + at, out);
}

template <typename T>
__global__ void __launch_bounds__(kTileThreads)
    backward_kernel(const T* dy, const T* __restrict__ h, const float* __restrict__ bias, T* dh,
                    float* __restrict__ partial, int64_t rows, int C) {  // dh may be dy: each value is read first
  const int c = (blockIdx.x * kTX + threadIdx.x) * kVec;
  float sum[kVec] = {};
  if (c < C) {
    float b[kVec];
    load_bias(bias + c, b);
    const int64_t step = int64_t(gridDim.y) * kTY;
    int64_t r = int64_t(blockIdx.y) * kTY + threadIdx.y;
    for (; r + step < rows; r += 2 * step) {  // two rows in flight: four 16-byte loads before any math
      const int64_t a0 = r * C + c, a1 = (r + step) * C + c;
      const Pack<T, kVec> g0 = load<T, kVec>(dy + a0), x0 = load<T, kVec>(h + a0);
      const Pack<T, kVec> g1 = load<T, kVec>(dy + a1), x1 = load<T, kVec>(h + a1);
      backward_row(dh, b, g0, x0, a0, sum);
      backward_row(dh, b, g1, x1, a1, sum);
    }
    if (r < rows) {
      const int64_t a0 = r * C + c;
      backward_row(dh, b, load<T, kVec>(dy + a0), load<T, kVec>(h + a0), a0, sum);
    }
  }
  block_column_partials<kTX, kTY, kVec>(sum, partial, C);
}

}  // namespace

bool bias_gelu_supports(int64_t C) { return C > 0 && C % kVec == 0 && C <= (int64_t(1) << 30); }

cudaError_t bias_gelu_forward(const void* h, const float* bias, void* y, HalfType dt, int64_t rows, int64_t C,
                              cudaStream_t stream) {
  if (!bias_gelu_supports(C)) return cudaErrorInvalidValue;
  if (rows <= 0) return cudaSuccess;
  with_type(dt, [&](auto tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    constexpr auto kernel = forward_kernel<T>;
    kernel<<<column_tile_grid(rows, C, tile_blocks_per_sm<kernel>()), dim3(kTX, kTY), 0, stream>>>(
        static_cast<const T*>(h), bias, static_cast<T*>(y), rows, static_cast<int>(C));
  });
  return cudaGetLastError();
}

int64_t bias_gelu_workspace_floats(int64_t rows, int64_t C) {
  return column_tile_workspace_floats(rows, C);
}

cudaError_t bias_gelu_backward(const void* dy, const void* h, const float* bias, HalfType dt, int64_t rows, int64_t C,
                               void* dh, float* dbias, float* workspace, cudaStream_t stream) {
  if (!bias_gelu_supports(C)) return cudaErrorInvalidValue;
  if (rows <= 0) return cudaMemsetAsync(dbias, 0, C * sizeof(float), stream);
  with_type(dt, [&](auto tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    constexpr auto kernel = backward_kernel<T>;
    const dim3 grid = column_tile_grid(rows, C, tile_blocks_per_sm<kernel>());
    kernel<<<grid, dim3(kTX, kTY), 0, stream>>>(static_cast<const T*>(dy), static_cast<const T*>(h), bias,
                                                static_cast<T*>(dh), workspace, rows, static_cast<int>(C));
    column_sums(workspace, static_cast<int>(grid.y), C, dbias, stream);
  });
  return cudaGetLastError();
}

}  // namespace trainer::kernels
