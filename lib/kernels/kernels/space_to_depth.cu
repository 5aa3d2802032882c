// One thread an output pixel: its 4 c_in values gathered from the 2x2 input pixels it covers (neighbouring threads
// read neighbouring input pixels), written as one row of c_out values in 16-byte stores.
#include "space_to_depth.h"

#include <algorithm>
#include <type_traits>

#include "internal/launch.cuh"
#include "internal/vec.cuh"

namespace trainer::kernels {
namespace {

constexpr int kThreads = 256;

template <typename S, typename D, int COUT>
__global__ void __launch_bounds__(kThreads) s2d_kernel(const S* __restrict__ x, int64_t N, int64_t H, int64_t W,
                                                       int c_in, int pad, int64_t Ho, int64_t Wo,
                                                       D* __restrict__ y) {
  const int64_t total = N * Ho * Wo;
  for (int64_t o = int64_t(blockIdx.x) * kThreads + threadIdx.x; o < total; o += int64_t(gridDim.x) * kThreads) {
    const int64_t j = o % Wo, i = (o / Wo) % Ho, n = o / (Wo * Ho);
    float v[COUT];
#pragma unroll
    for (int k = 0; k < COUT; ++k) v[k] = 0.f;
#pragma unroll
    for (int phase = 0; phase < 4; ++phase) {
      const int64_t r = 2 * i + (phase >> 1) - pad, c = 2 * j + (phase & 1) - pad;
      if (r < 0 || r >= H || c < 0 || c >= W) continue;
      const S* p = x + ((n * H + r) * W + c) * c_in;
      for (int ch = 0; ch < c_in; ++ch) {
#pragma unroll
        for (int k = 0; k < COUT; ++k)  // a constant index into v keeps it in registers
          if (k == phase * c_in + ch) v[k] = to_f(p[ch]);
      }
    }
#pragma unroll
    for (int k = 0; k < COUT; k += 8) store<D, 8>(y + o * COUT + k, v + k);
  }
}

template <typename S, typename D>
void launch(const void* x, int64_t N, int64_t H, int64_t W, int c_in, int pad, void* y, int c_out, cudaStream_t s) {
  const int64_t Ho = (H + 2 * pad) / 2, Wo = (W + 2 * pad) / 2, total = N * Ho * Wo;
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>((total + kThreads - 1) / kThreads, sm_count() * 16LL));
  const dim3 grid(static_cast<unsigned>(blocks));
  const S* xs = static_cast<const S*>(x);
  D* yd = static_cast<D*>(y);
  if (c_out == 8) s2d_kernel<S, D, 8><<<grid, kThreads, 0, s>>>(xs, N, H, W, c_in, pad, Ho, Wo, yd);
  else s2d_kernel<S, D, 16><<<grid, kThreads, 0, s>>>(xs, N, H, W, c_in, pad, Ho, Wo, yd);
}

}  // namespace

cudaError_t space_to_depth(const void* x, ElemType x_type, int64_t N, int64_t H, int64_t W, int c_in, int pad,
                           void* y, HalfType y_type, int c_out, cudaStream_t stream) {
  if ((c_out != 8 && c_out != 16) || c_in < 1 || 4 * c_in > c_out || pad < 0 || N < 0 || H < 1 || W < 1 ||
      (H + 2 * pad) % 2 != 0 || (W + 2 * pad) % 2 != 0 || !aligned16(y))
    return cudaErrorInvalidValue;
  if (N == 0) return cudaSuccess;
  with_type(y_type, [&](auto* dtag) {
    with_elem_type(x_type, [&](auto* stag) {
      launch<std::remove_pointer_t<decltype(stag)>, std::remove_pointer_t<decltype(dtag)>>(x, N, H, W, c_in, pad, y,
                                                                                           c_out, stream);
    });
  });
  return cudaGetLastError();
}

}  // namespace trainer::kernels
