// Max pooling over NHWC rows (see max_pool_nhwc.h). Access pattern: one thread per output (forward) or input
// (backward) position and VEC channels (VEC = 8, one 16-byte load, where C % 8 == 0 and the pointers are aligned;
// else 1); consecutive threads take consecutive channel vectors, then consecutive positions along W, so a warp
// reads contiguous bytes of each window row. The forward reads its k x k window (neighbouring threads share most of
// it through L1), writes the maxima and one byte per value for the winning window position; the backward reads, for
// each of the windows covering its input position, the dy vector and the position bytes, and sums the matches in
// fp32. Indices are 32-bit: the launchers take tensors of fewer than 2^31 values.
#include "max_pool_nhwc.h"

#include <cmath>

#include "internal/launch.cuh"
#include "internal/vec.cuh"

namespace trainer::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxVec = 8;

template <int VEC> struct alignas(VEC) Bytes {
  uint8_t v[VEC];
};

template <typename T, int VEC>
__global__ void __launch_bounds__(kThreads) forward_kernel(const T* __restrict__ x, T* __restrict__ y,
                                                           uint8_t* __restrict__ arg, PoolShape sh, int out_h,
                                                           int out_w, int total) {
  begin_dependent();
  const int i = blockIdx.x * kThreads + threadIdx.x;
  if (i >= total) return;
  const int cv = sh.c / VEC, v = i % cv, pos = i / cv;
  const int ow = pos % out_w, oh = (pos / out_w) % out_h, n = pos / (out_w * out_h);
  const int h0 = oh * sh.s - sh.p, w0 = ow * sh.s - sh.p;
  const int kh0 = max(0, -h0), kh1 = min(sh.k, sh.h - h0), kw0 = max(0, -w0), kw1 = min(sh.k, sh.w - w0);
  float m[VEC];
  Bytes<VEC> best;
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    m[j] = -INFINITY;
    best.v[j] = static_cast<uint8_t>(kh0 * sh.k + kw0);
  }
  const T* base = x + (int64_t(n) * sh.h * sh.w) * sh.c + v * VEC;
  for (int kh = kh0; kh < kh1; ++kh)
    for (int kw = kw0; kw < kw1; ++kw) {
      const Pack<T, VEC> in = load<T, VEC>(base + (int64_t(h0 + kh) * sh.w + (w0 + kw)) * sh.c);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float val = to_f(in.v[j]);
        if (val > m[j] || isnan(val)) {
          m[j] = val;
          best.v[j] = static_cast<uint8_t>(kh * sh.k + kw);
        }
      }
    }
  const int64_t o = int64_t(pos) * sh.c + v * VEC;
  store<T, VEC>(y + o, m);
  if (arg) *reinterpret_cast<Bytes<VEC>*>(arg + o) = best;
}

template <typename T, int VEC>
__global__ void __launch_bounds__(kThreads) backward_kernel(const T* __restrict__ dy, const uint8_t* __restrict__ arg,
                                                            T* __restrict__ dx, PoolShape sh, int out_h, int out_w,
                                                            int total) {
  begin_dependent();
  const int i = blockIdx.x * kThreads + threadIdx.x;
  if (i >= total) return;
  const int cv = sh.c / VEC, v = i % cv, pos = i / cv;
  const int w = pos % sh.w, h = (pos / sh.w) % sh.h, n = pos / (sh.w * sh.h);
  // the windows covering (h, w): oh * s - p <= h <= oh * s - p + k - 1
  const int ah = h + sh.p - sh.k + 1, aw = w + sh.p - sh.k + 1;
  const int oh0 = ah <= 0 ? 0 : (ah + sh.s - 1) / sh.s, oh1 = min(out_h - 1, (h + sh.p) / sh.s);
  const int ow0 = aw <= 0 ? 0 : (aw + sh.s - 1) / sh.s, ow1 = min(out_w - 1, (w + sh.p) / sh.s);
  float g[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) g[j] = 0.f;
  for (int oh = oh0; oh <= oh1; ++oh)
    for (int ow = ow0; ow <= ow1; ++ow) {
      const int at = (h + sh.p - oh * sh.s) * sh.k + (w + sh.p - ow * sh.s);
      const int64_t o = ((int64_t(n) * out_h + oh) * out_w + ow) * sh.c + v * VEC;
      const Bytes<VEC> b = *reinterpret_cast<const Bytes<VEC>*>(arg + o);
      const Pack<T, VEC> d = load<T, VEC>(dy + o);
#pragma unroll
      for (int j = 0; j < VEC; ++j)
        if (b.v[j] == at) g[j] += to_f(d.v[j]);
    }
  store<T, VEC>(dx + int64_t(pos) * sh.c + v * VEC, g);
}


template <typename T, int VEC>
cudaError_t forward_vec(const void* x, void* y, uint8_t* arg, const PoolShape& sh, cudaStream_t s) {
  const int oh = sh.out_h(), ow = sh.out_w(), total = sh.n * oh * ow * (sh.c / VEC);
  launch_dependent(forward_kernel<T, VEC>, dim3((total + kThreads - 1) / kThreads), dim3(kThreads), s,
                   static_cast<const T*>(x), static_cast<T*>(y), arg, sh, oh, ow, total);
  return cudaGetLastError();
}

template <typename T, int VEC>
cudaError_t backward_vec(const void* dy, const uint8_t* arg, void* dx, const PoolShape& sh, cudaStream_t s) {
  const int total = sh.n * sh.h * sh.w * (sh.c / VEC);
  launch_dependent(backward_kernel<T, VEC>, dim3((total + kThreads - 1) / kThreads), dim3(kThreads), s,
                   static_cast<const T*>(dy), arg, static_cast<T*>(dx), sh, sh.out_h(), sh.out_w(), total);
  return cudaGetLastError();
}

template <typename T>
cudaError_t forward_typed(const void* x, void* y, uint8_t* arg, const PoolShape& sh, cudaStream_t s) {
  // the byte vectors of 8 positions are 8-byte aligned where the 16-byte value vectors are
  if (sh.c % kMaxVec == 0 && aligned16(x) && aligned16(y) && aligned16(arg)) return forward_vec<T, kMaxVec>(x, y, arg, sh, s);
  return forward_vec<T, 1>(x, y, arg, sh, s);
}

template <typename T>
cudaError_t backward_typed(const void* dy, const uint8_t* arg, void* dx, const PoolShape& sh, cudaStream_t s) {
  if (sh.c % kMaxVec == 0 && aligned16(dy) && aligned16(dx) && aligned16(arg)) return backward_vec<T, kMaxVec>(dy, arg, dx, sh, s);
  return backward_vec<T, 1>(dy, arg, dx, sh, s);
}

}  // namespace

cudaError_t max_pool_forward(const void* x, void* y, uint8_t* arg, HalfType dt, const PoolShape& shape,
                             cudaStream_t stream) {
  return dt == HalfType::bf16 ? forward_typed<__nv_bfloat16>(x, y, arg, shape, stream)
                              : forward_typed<__half>(x, y, arg, shape, stream);
}

cudaError_t max_pool_backward(const void* dy, const uint8_t* arg, void* dx, HalfType dt, const PoolShape& shape,
                              cudaStream_t stream) {
  return dt == HalfType::bf16 ? backward_typed<__nv_bfloat16>(dy, arg, dx, shape, stream)
                              : backward_typed<__half>(dy, arg, dx, shape, stream);
}

}  // namespace trainer::kernels
