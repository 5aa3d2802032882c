// One thread a row (pixel): its c_in values read one by one (neighbouring threads read neighbouring bytes), the
// padded row written as one 8- or 16-byte store.
#include "pad_channels.h"

#include <algorithm>
#include <type_traits>

#include "internal/launch.cuh"
#include "internal/vec.cuh"

namespace trainer::kernels {
namespace {

constexpr int kThreads = 256;

template <typename S, typename D, int COUT>
__global__ void __launch_bounds__(kThreads) pad_kernel(const S* __restrict__ x, int64_t M, int c_in,
                                                       D* __restrict__ y) {
  for (int64_t r = int64_t(blockIdx.x) * kThreads + threadIdx.x; r < M; r += int64_t(gridDim.x) * kThreads) {
    float v[COUT];
#pragma unroll
    for (int c = 0; c < COUT; ++c) v[c] = c < c_in ? to_f(x[r * c_in + c]) : 0.f;
    store<D, COUT>(y + r * COUT, v);
  }
}

template <typename S, typename D>
void launch(const void* x, int64_t M, int c_in, void* y, int c_out, cudaStream_t s) {
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>((M + kThreads - 1) / kThreads, sm_count() * 16LL));
  const dim3 grid(static_cast<unsigned>(blocks));
  if (c_out == 4) pad_kernel<S, D, 4><<<grid, kThreads, 0, s>>>(static_cast<const S*>(x), M, c_in, static_cast<D*>(y));
  else pad_kernel<S, D, 8><<<grid, kThreads, 0, s>>>(static_cast<const S*>(x), M, c_in, static_cast<D*>(y));
}

}  // namespace

cudaError_t pad_channels(const void* x, ElemType x_type, int64_t M, int c_in, void* y, HalfType y_type, int c_out,
                         cudaStream_t stream) {
  if ((c_out != 4 && c_out != 8) || c_in < 1 || c_in > c_out || M < 0 || !aligned16(y))
    return cudaErrorInvalidValue;
  if (M == 0) return cudaSuccess;
  with_type(y_type, [&](auto* dtag) {
    with_elem_type(x_type, [&](auto* stag) {
      launch<std::remove_pointer_t<decltype(stag)>, std::remove_pointer_t<decltype(dtag)>>(x, M, c_in, y, c_out,
                                                                                           stream);
    });
  });
  return cudaGetLastError();
}

}  // namespace trainer::kernels
