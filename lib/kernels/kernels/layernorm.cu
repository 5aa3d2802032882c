// LayerNorm with the residual add (see layernorm.h). A warp owns a row: lane l holds the pairs of columns
// 2 * (i * 32 + l), i < NP = D / 64, so every load of the warp is one contiguous 256-byte (fp32) or 128-byte
// (bf16/fp16) segment. The forward runs one row per warp, 8 rows a block; the backward strides over rows with a
// resident grid, keeping its share of dweight and dbias in registers, and sums them per block in shared memory
// into partials that internal/column_sums adds up per column (in double).
#include "layernorm.h"

#include <algorithm>
#include <type_traits>

#include "internal/column_sums.cuh"
#include "internal/launch.cuh"
#include "internal/vec.cuh"

namespace trainer::kernels {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;

template <typename T> struct Pair;
template <> struct Pair<__nv_bfloat16> {
  using type = __nv_bfloat162;
  static __device__ __forceinline__ float2 to_f2(type v) { return __bfloat1622float2(v); }
  static __device__ __forceinline__ type from_f2(float2 v) { return __float22bfloat162_rn(v); }
};
template <> struct Pair<__half> {
  using type = __half2;
  static __device__ __forceinline__ float2 to_f2(type v) { return __half22float2(v); }
  static __device__ __forceinline__ type from_f2(float2 v) { return __float22half2_rn(v); }
};

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <typename T, int NP, bool ADD>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(const float2* __restrict__ x, const typename Pair<T>::type* __restrict__ a, float2* __restrict__ s,
                   typename Pair<T>::type* __restrict__ y, int64_t rows, const float2* __restrict__ weight,
                   const float2* __restrict__ bias, float eps, float* __restrict__ mean_out,
                   float* __restrict__ rstd_out) {
  constexpr int D = 64 * NP, P = D / 2;  // values, pairs per row
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row >= rows) return;
  float2 v[NP];
#pragma unroll
  for (int i = 0; i < NP; ++i) v[i] = x[row * P + i * 32 + lane];
  if constexpr (ADD) {
    typename Pair<T>::type av[NP];
#pragma unroll
    for (int i = 0; i < NP; ++i) av[i] = a[row * P + i * 32 + lane];
#pragma unroll
    for (int i = 0; i < NP; ++i) {
      const float2 t = Pair<T>::to_f2(av[i]);
      v[i].x += t.x;
      v[i].y += t.y;
      s[row * P + i * 32 + lane] = v[i];
    }
  }
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < NP; ++i) sum += v[i].x + v[i].y;
  const float mean = warp_sum(sum) / D;
  float sq = 0.f;
#pragma unroll
  for (int i = 0; i < NP; ++i) {
    const float dx = v[i].x - mean, dy = v[i].y - mean;
    sq += dx * dx + dy * dy;
  }
  const float rstd = rsqrtf(warp_sum(sq) / D + eps);
#pragma unroll
  for (int i = 0; i < NP; ++i) {
    const float2 w = weight[i * 32 + lane], b = bias[i * 32 + lane];
    y[row * P + i * 32 + lane] =
        Pair<T>::from_f2(make_float2((v[i].x - mean) * rstd * w.x + b.x, (v[i].y - mean) * rstd * w.y + b.y));
  }
  if (lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

// g = ds + rstd * (dy * w - mean(dy * w) - xhat * mean(dy * w * xhat)), xhat = (s - mean) * rstd, per row; the
// block's sums of dy * xhat and dy per column to partial[0][blockIdx.x], partial[1][blockIdx.x].
template <typename T, int NP, bool DS, bool DA>
__global__ void __launch_bounds__(kThreads)
    backward_kernel(const typename Pair<T>::type* __restrict__ dy, const float2* __restrict__ ds,
                    const float2* __restrict__ s, const float* __restrict__ mean, const float* __restrict__ rstd,
                    const float2* __restrict__ weight, int64_t rows, float2* __restrict__ dx,
                    typename Pair<T>::type* __restrict__ da, float* __restrict__ partial) {
  constexpr int D = 64 * NP, P = D / 2;
  __shared__ float sh[2][D];
  for (int c = threadIdx.x; c < D; c += kThreads) sh[0][c] = sh[1][c] = 0.f;
  const int lane = threadIdx.x % 32;
  float2 w[NP], dw[NP], db[NP];
#pragma unroll
  for (int i = 0; i < NP; ++i) {
    w[i] = weight[i * 32 + lane];
    dw[i] = db[i] = make_float2(0.f, 0.f);
  }
  for (int64_t row = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32; row < rows; row += int64_t(gridDim.x) * kWarps) {
    const float m = mean[row], r = rstd[row];
    float2 xh[NP], g[NP];
#pragma unroll
    for (int i = 0; i < NP; ++i) {
      xh[i] = s[row * P + i * 32 + lane];
      g[i] = Pair<T>::to_f2(dy[row * P + i * 32 + lane]);
    }
    float sg = 0.f, sgx = 0.f;
#pragma unroll
    for (int i = 0; i < NP; ++i) {
      xh[i] = make_float2((xh[i].x - m) * r, (xh[i].y - m) * r);
      dw[i].x += g[i].x * xh[i].x;
      dw[i].y += g[i].y * xh[i].y;
      db[i].x += g[i].x;
      db[i].y += g[i].y;
      g[i] = make_float2(g[i].x * w[i].x, g[i].y * w[i].y);
      sg += g[i].x + g[i].y;
      sgx += g[i].x * xh[i].x + g[i].y * xh[i].y;
    }
    sg = warp_sum(sg) / D;
    sgx = warp_sum(sgx) / D;
#pragma unroll
    for (int i = 0; i < NP; ++i) {
      float2 o = make_float2(r * (g[i].x - sg - xh[i].x * sgx), r * (g[i].y - sg - xh[i].y * sgx));
      if constexpr (DS) {
        const float2 d = ds[row * P + i * 32 + lane];
        o.x += d.x;
        o.y += d.y;
      }
      dx[row * P + i * 32 + lane] = o;
      if constexpr (DA) da[row * P + i * 32 + lane] = Pair<T>::from_f2(o);
    }
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < NP; ++i) {
    const int c = 2 * (i * 32 + lane);
    atomicAdd(&sh[0][c], dw[i].x);
    atomicAdd(&sh[0][c + 1], dw[i].y);
    atomicAdd(&sh[1][c], db[i].x);
    atomicAdd(&sh[1][c + 1], db[i].y);
  }
  __syncthreads();
  for (int c = threadIdx.x; c < D; c += kThreads) {
    partial[int64_t(blockIdx.x) * D + c] = sh[0][c];
    partial[(int64_t(gridDim.x) + blockIdx.x) * D + c] = sh[1][c];
  }
}

constexpr int kMaxBlocksPerSm = 2048 / kThreads;

template <auto Kernel> int blocks_per_sm() {
  static const int n = [] {
    int b = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, Kernel, kThreads, 0) != cudaSuccess) b = 1;
    return std::min(std::max(b, 1), kMaxBlocksPerSm);
  }();
  return n;
}

// f(std::integral_constant<int, NP>) for D = 64 * NP among the supported widths; false if D is not one
template <typename F> bool with_width(int64_t D, F&& f) {
  switch (D) {
    case 192: f(std::integral_constant<int, 3>{}); return true;
    case 256: f(std::integral_constant<int, 4>{}); return true;
    case 384: f(std::integral_constant<int, 6>{}); return true;
    case 512: f(std::integral_constant<int, 8>{}); return true;
    case 768: f(std::integral_constant<int, 12>{}); return true;
    case 1024: f(std::integral_constant<int, 16>{}); return true;
    default: return false;
  }
}

template <typename T, int NP, bool ADD>
void forward_launch(const float* x, const void* a, float* s, void* y, int64_t rows, const float* w, const float* b,
                    float eps, float* mean, float* rstd, cudaStream_t stream) {
  using P2 = typename Pair<T>::type;
  const unsigned grid = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
  forward_kernel<T, NP, ADD><<<grid, kThreads, 0, stream>>>(
      reinterpret_cast<const float2*>(x), static_cast<const P2*>(a), reinterpret_cast<float2*>(s),
      static_cast<P2*>(y), rows, reinterpret_cast<const float2*>(w), reinterpret_cast<const float2*>(b), eps, mean,
      rstd);
}

// the backward's grid: one resident wave, or fewer blocks where the rows do not fill it; the workspace holds
// two rows of D partial sums per block
template <typename T, int NP, bool DS, bool DA>
int backward_grid(int64_t rows) {
  const int64_t want = int64_t(sm_count()) * blocks_per_sm<backward_kernel<T, NP, DS, DA>>();
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(want, (rows + kWarps - 1) / kWarps)));
}

// f(T*, integral_constant NP, bool_constant DS, bool_constant DA) for the backward's variant; false if D is not
// a supported width
template <typename F> bool with_backward_variant(HalfType dt, int64_t D, bool ds, bool da, F&& f) {
  bool ok = false;
  with_type(dt, [&](auto tag) {
    ok = with_width(D, [&](auto np) {
      using yes = std::true_type;
      using no = std::false_type;
      if (ds) da ? f(tag, np, yes{}, yes{}) : f(tag, np, yes{}, no{});
      else da ? f(tag, np, no{}, yes{}) : f(tag, np, no{}, no{});
    });
  });
  return ok;
}

template <typename T, int NP, bool DS, bool DA>
int backward_launch(const void* dy, const float* ds, const float* s, const float* mean, const float* rstd,
                    const float* w, int64_t rows, float* dx, void* da, float* partial, cudaStream_t stream) {
  using P2 = typename Pair<T>::type;
  const int grid = backward_grid<T, NP, DS, DA>(rows);
  backward_kernel<T, NP, DS, DA><<<grid, kThreads, 0, stream>>>(
      static_cast<const P2*>(dy), reinterpret_cast<const float2*>(ds), reinterpret_cast<const float2*>(s), mean, rstd,
      reinterpret_cast<const float2*>(w), rows, reinterpret_cast<float2*>(dx), static_cast<P2*>(da), partial);
  return grid;
}

}  // namespace

bool ln_supports(int64_t D) {
  return with_width(D, [](auto) {});
}

cudaError_t ln_forward(const float* x, const void* a, float* s, void* y, HalfType dt, int64_t rows, int64_t D,
                       const float* weight, const float* bias, float eps, float* mean, float* rstd,
                       cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  bool ok = false;
  with_type(dt, [&](auto tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    ok = with_width(D, [&](auto np) {
      constexpr int NP = decltype(np)::value;
      if (a) forward_launch<T, NP, true>(x, a, s, y, rows, weight, bias, eps, mean, rstd, stream);
      else forward_launch<T, NP, false>(x, a, s, y, rows, weight, bias, eps, mean, rstd, stream);
    });
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

int64_t ln_workspace_floats(int64_t rows, int64_t D, HalfType dt, bool with_ds, bool with_da) {
  int64_t floats = 0;
  with_backward_variant(dt, D, with_ds, with_da, [&](auto tag, auto np, auto ds, auto da) {
    using T = std::remove_pointer_t<decltype(tag)>;
    floats = 2 * int64_t(backward_grid<T, decltype(np)::value, decltype(ds)::value, decltype(da)::value>(rows)) * D;
  });
  return floats;
}

cudaError_t ln_backward(const void* dy, const float* ds, const float* s, const float* mean, const float* rstd,
                        const float* weight, HalfType dt, int64_t rows, int64_t D, float* dx, void* da,
                        float* dweight, float* dbias, float* workspace, cudaStream_t stream) {
  const bool ok = with_backward_variant(dt, D, ds != nullptr, da != nullptr, [&](auto tag, auto np, auto has_ds,
                                                                                  auto has_da) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const int grid = backward_launch<T, decltype(np)::value, decltype(has_ds)::value, decltype(has_da)::value>(
        dy, ds, s, mean, rstd, weight, rows, dx, da, workspace, stream);
    column_sums(workspace, grid, D, dweight, stream);
    column_sums(workspace + int64_t(grid) * D, grid, D, dbias, stream);
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace trainer::kernels
