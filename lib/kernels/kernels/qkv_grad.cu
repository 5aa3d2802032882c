// q/k/v gradients stacked with their column sums (see qkv_grad.h), laid out as internal/column_tiles over the
// 3D output columns: a thread's 8 columns lie inside one of q, k, v (D is a multiple of 8), so it reads one source
// for all its rows. Two rows are loaded before either is stored, for more loads in flight.
#include "qkv_grad.h"

#include <type_traits>

#include "internal/column_sums.cuh"
#include "internal/column_tiles.cuh"
#include "internal/vec.cuh"

namespace trainer::kernels {
namespace {

template <typename T> __device__ __forceinline__ void add_row(const Pack<T, kTileVec>& g, float (&sum)[kTileVec]) {
#pragma unroll
  for (int i = 0; i < kTileVec; ++i) sum[i] += to_f(g.v[i]);
}

template <typename T>
__global__ void __launch_bounds__(kTileThreads)
    stack_kernel(const T* __restrict__ dq, const T* __restrict__ dk, const T* __restrict__ dv, T* __restrict__ out,
                 float* __restrict__ partial, int64_t rows, int D) {
  const int c = (blockIdx.x * kTileX + threadIdx.x) * kTileVec;  // of the 3D output columns
  float sum[kTileVec] = {};
  if (c < 3 * D) {
    const int part = c / D, cin = c - part * D;
    const T* src = part == 0 ? dq : part == 1 ? dk : dv;
    const int64_t step = int64_t(gridDim.y) * kTileY;
    int64_t r = int64_t(blockIdx.y) * kTileY + threadIdx.y;
    if (src == nullptr) {
      const float zero[kTileVec] = {};
      for (; r < rows; r += step) store<T, kTileVec>(out + r * 3 * D + c, zero);
    } else {
      for (; r + step < rows; r += 2 * step) {
        const Pack<T, kTileVec> g0 = load<T, kTileVec>(src + r * D + cin);
        const Pack<T, kTileVec> g1 = load<T, kTileVec>(src + (r + step) * D + cin);
        *reinterpret_cast<Pack<T, kTileVec>*>(out + r * 3 * D + c) = g0;
        *reinterpret_cast<Pack<T, kTileVec>*>(out + (r + step) * 3 * D + c) = g1;
        add_row(g0, sum);
        add_row(g1, sum);
      }
      if (r < rows) {
        const Pack<T, kTileVec> g0 = load<T, kTileVec>(src + r * D + cin);
        *reinterpret_cast<Pack<T, kTileVec>*>(out + r * 3 * D + c) = g0;
        add_row(g0, sum);
      }
    }
  }
  block_column_partials<kTileX, kTileY, kTileVec>(sum, partial, 3 * D);
}

}  // namespace

bool qkv_grad_supports(int64_t D) { return D > 0 && D % kTileVec == 0 && D <= (int64_t(1) << 28); }

int64_t qkv_grad_workspace_floats(int64_t rows, int64_t D) { return column_tile_workspace_floats(rows, 3 * D); }

cudaError_t qkv_grad(const void* dq, const void* dk, const void* dv, HalfType dt, int64_t rows, int64_t D, void* out,
                     float* dbias, float* workspace, cudaStream_t stream) {
  if (!qkv_grad_supports(D)) return cudaErrorInvalidValue;
  if (rows <= 0) return cudaMemsetAsync(dbias, 0, 3 * D * sizeof(float), stream);
  with_type(dt, [&](auto tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    constexpr auto kernel = stack_kernel<T>;
    const dim3 grid = column_tile_grid(rows, 3 * D, tile_blocks_per_sm<kernel>());
    kernel<<<grid, dim3(kTileX, kTileY), 0, stream>>>(static_cast<const T*>(dq), static_cast<const T*>(dk),
                                                      static_cast<const T*>(dv), static_cast<T*>(out), workspace, rows,
                                                      static_cast<int>(D));
    column_sums(workspace, static_cast<int>(grid.y), 3 * D, dbias, stream);
  });
  return cudaGetLastError();
}

}  // namespace trainer::kernels
