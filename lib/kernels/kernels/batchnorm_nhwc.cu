// Batch norm over NHWC rows (see batchnorm_nhwc.h). One access pattern for every kernel: a block of 256 threads is
// TX channel vectors wide (VEC = 8 values, one 16-byte load, where C % 8 == 0 and the pointers are aligned; else
// VEC = 1) and TY = 256 / TX rows tall, so a warp reads whole rows' worth of contiguous bytes. A thread keeps its
// channel vector for the whole kernel (its per-channel coefficients stay in registers, no index arithmetic per
// element) and strides over rows, kUnroll rows at a time with all their loads issued before any use, so each SM has
// enough 16-byte loads in flight to stream at HBM speed. The grid is one wave of resident blocks (occupancy asked
// of the runtime per kernel). Reductions: each thread sums its rows in fp32 registers, the block sums over TY in
// shared memory and writes one partial per channel; a finalize kernel adds the partials in double, 32 channels per
// block, its 32 warps splitting the partials. Statistics use sums shifted by the first row's value (close to the
// mean, so the variance E[(x-k)^2] - E[x-k]^2 does not cancel), not E[x^2] - E[x]^2.
#include "batchnorm_nhwc.h"

#include <algorithm>
#include <type_traits>

#include "internal/launch.cuh"
#include "internal/vec.cuh"

namespace trainer::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxVec = 8;
constexpr int kUnroll = 4;
constexpr int kMaxBlocksPerSm = 2048 / kThreads;  // the workspace bound: no SM holds more resident threads

// The rows this thread visits: first, first + step, ... (below M); the kernels take them kUnroll at a time, every
// load of a group issued before any is used, then the tail one by one.
struct Rows {
  int64_t first, step;
  __device__ Rows()
      : first(int64_t(blockIdx.y) * blockDim.y + threadIdx.y), step(int64_t(gridDim.y) * blockDim.y) {}
};

// ---- launch geometry ----

// resident blocks of 256 threads per SM for one kernel, asked of the runtime once
template <auto Kernel> int blocks_per_sm() {
  static const int n = [] {
    int b = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, Kernel, kThreads, 0) != cudaSuccess) b = 1;
    return std::max(b, 1);
  }();
  return n;
}

struct Tile {
  dim3 block, grid;
};

// TX = the channel vectors rounded up to a power of two (at most 32), TY = 256 / TX; grid.x covers the channel
// vectors, grid.y fills `per_sm` blocks per SM without giving a thread fewer than about kUnroll * 4 rows.
Tile tile(int64_t M, int64_t C, int vec, int per_sm) {
  const int64_t cv = std::max<int64_t>(C / vec, 1);
  int tx = 1;
  while (tx < cv && tx < 32) tx *= 2;
  const int ty = kThreads / tx;
  const int64_t grid_x = (cv + tx - 1) / tx;
  const int64_t want = std::max<int64_t>(1, int64_t(sm_count()) * per_sm / grid_x);
  const int64_t min_rows = int64_t(ty) * kUnroll * 4;
  const int64_t grid_y = std::max<int64_t>(1, std::min<int64_t>({want, (M + min_rows - 1) / min_rows, 65535}));
  return {dim3(tx, ty), dim3(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y))};
}

template <auto Kernel> Tile tile_for(int64_t M, int64_t C, int vec) { return tile(M, C, vec, blocks_per_sm<Kernel>()); }


template <typename... P> int pick_vec(int64_t C, const P*... p) {
  return C % kMaxVec == 0 && (aligned16(p) && ...) ? kMaxVec : 1;
}

// ---- reductions ----

// Where the ReLU passed the gradient: nowhere masked (kNoMask), y > 0 (kMaskY), or the forward's output recomputed
// from x with its scale and shift, rounded to T as it was stored, > 0 (kMaskX: for a ReLU without the residual add,
// so that the backward need not read y), or the forward's bits (kMaskBits: y > 0 as bn_apply stored it, one byte per
// row and channel vector of 8, a sixteenth of reading y; 8-wide kernels only).
enum Mask : int { kNoMask, kMaskY, kMaskX, kMaskBits };

// the byte of row r's channel vector v in a mask of C / kMaxVec bytes a row
__device__ __forceinline__ int64_t mask_byte(int64_t r, int C, int v) { return r * (C / kMaxVec) + v; }

template <typename T, int VEC, int MASK, typename XT>
__device__ __forceinline__ void mask_grad(float* g, const Pack<T, VEC>& y, const Pack<XT, VEC>& x, uint32_t bits,
                                          const float* sc, const float* sf) {
  static_assert(MASK != kMaskBits || VEC == kMaxVec, "the ReLU's bits are per vector of 8 channels");
#pragma unroll
  for (int i = 0; i < VEC; ++i) {
    if constexpr (MASK == kMaskY) g[i] = to_f(y.v[i]) > 0.f ? g[i] : 0.f;
    if constexpr (MASK == kMaskX) g[i] = to_f(from_f<T>(fmaf(to_f(x.v[i]), sc[i], sf[i]))) > 0.f ? g[i] : 0.f;
    if constexpr (MASK == kMaskBits) g[i] = (bits >> i) & 1u ? g[i] : 0.f;
  }
}

// One row's contribution. Statistics (BWD = false): a += x - k, b += (x - k)^2 with k the first row. Gradient sums
// (BWD = true): g = dy (+ dy2 when DY2) masked as MASK says; a += g, b += g * (x - k) with k the mean; g stored to
// g_out when STORE_G (the residual branch's gradient, which the elementwise pass then reads instead of dy and y).
template <typename T, int VEC, bool BWD, int MASK, bool STORE_G, bool DY2, typename XT>
__device__ __forceinline__ void accumulate(const Pack<XT, VEC>& x, const Pack<T, VEC>& dy, const Pack<T, VEC>& dy2,
                                           const Pack<T, VEC>& y, uint32_t bits, const float* k, const float* sc,
                                           const float* sf, float* a, float* b, T* g_out) {
  float g[VEC];
  if constexpr (BWD) {
#pragma unroll
    for (int i = 0; i < VEC; ++i) g[i] = DY2 ? to_f(dy.v[i]) + to_f(dy2.v[i]) : to_f(dy.v[i]);
    mask_grad<T, VEC, MASK, XT>(g, y, x, bits, sc, sf);
  }
#pragma unroll
  for (int i = 0; i < VEC; ++i) {
    const float d = to_f(x.v[i]) - k[i];
    if constexpr (BWD) {
      a[i] += g[i];
      b[i] += g[i] * d;
    } else {
      a[i] += d;
      b[i] += d * d;
    }
  }
  if constexpr (STORE_G) store<T, VEC>(g_out, g);
}

// the per-channel scale and shift of the thread's vector, for kMaskX
template <int VEC, int MASK>
__device__ __forceinline__ void load_mask_coef(const float* scale, const float* shift, int c0, float* sc, float* sf) {
  if constexpr (MASK == kMaskX) {
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      sc[i] = scale[c0 + i];
      sf[i] = shift[c0 + i];
    }
  }
}

// partial: [2][grid.y][C], the block's sums a and b over its rows. mean: the shift k of the gradient sums, and of
// the statistics where given (else the first row)
// XT: x's element type (T's but for a norm whose input has another producer's type, as the fp16 stem's)
template <typename T, int VEC, bool BWD, int MASK, bool STORE_G, bool DY2, typename XT = T>
__global__ void __launch_bounds__(kThreads) reduce_kernel(const XT* __restrict__ x, const T* __restrict__ dy,
                                                          const T* __restrict__ dy2, const T* __restrict__ y,
                                                          const uint8_t* __restrict__ bits,
                                                          const float* __restrict__ mean,
                                                          const float* __restrict__ scale,
                                                          const float* __restrict__ shift, int64_t M, int C,
                                                          float* __restrict__ partial, T* __restrict__ g_out) {
  begin_dependent();
  __shared__ float sh[2][kThreads * kMaxVec];
  const int tx = threadIdx.x, ty = threadIdx.y, TX = blockDim.x, TY = blockDim.y;
  const int v = blockIdx.x * TX + tx, c0 = v * VEC;
  float a[VEC], b[VEC];
#pragma unroll
  for (int i = 0; i < VEC; ++i) a[i] = b[i] = 0.f;
  if (v < C / VEC) {
    float k[VEC], sc[VEC], sf[VEC];
    load_mask_coef<VEC, MASK>(scale, shift, c0, sc, sf);
    if constexpr (BWD) {
#pragma unroll
      for (int i = 0; i < VEC; ++i) k[i] = mean[c0 + i];
    } else if (mean) {  // a shift every rank shares (SyncBatchNorm)
#pragma unroll
      for (int i = 0; i < VEC; ++i) k[i] = mean[c0 + i];
    } else {
      const Pack<XT, VEC> first = load<XT, VEC>(x + c0);
#pragma unroll
      for (int i = 0; i < VEC; ++i) k[i] = to_f(first.v[i]);
    }
    const Rows rows;
    int64_t r = rows.first;
    Pack<XT, VEC> px[kUnroll];
    Pack<T, VEC> pg[kUnroll], pg2[kUnroll], py[kUnroll];
    uint32_t pb[kUnroll] = {};
    for (; r + (kUnroll - 1) * rows.step < M; r += kUnroll * rows.step) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t o = (r + u * rows.step) * C + c0;
        px[u] = load<XT, VEC>(x + o);
        if constexpr (BWD) pg[u] = load<T, VEC>(dy + o);
        if constexpr (DY2) pg2[u] = load<T, VEC>(dy2 + o);
        if constexpr (MASK == kMaskY) py[u] = load<T, VEC>(y + o);
        if constexpr (MASK == kMaskBits) pb[u] = bits[mask_byte(r + u * rows.step, C, v)];
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        accumulate<T, VEC, BWD, MASK, STORE_G, DY2, XT>(px[u], pg[u], pg2[u], py[u], pb[u], k, sc, sf, a, b,
                                                        g_out + (r + u * rows.step) * C + c0);
    }
    for (; r < M; r += rows.step) {
      const int64_t o = r * C + c0;
      px[0] = load<XT, VEC>(x + o);
      if constexpr (BWD) pg[0] = load<T, VEC>(dy + o);
      if constexpr (DY2) pg2[0] = load<T, VEC>(dy2 + o);
      if constexpr (MASK == kMaskY) py[0] = load<T, VEC>(y + o);
      if constexpr (MASK == kMaskBits) pb[0] = bits[mask_byte(r, C, v)];
      accumulate<T, VEC, BWD, MASK, STORE_G, DY2, XT>(px[0], pg[0], pg2[0], py[0], pb[0], k, sc, sf, a, b,
                                                      g_out + o);
    }
  }
  const int slot = (ty * TX + tx) * VEC;
#pragma unroll
  for (int i = 0; i < VEC; ++i) {
    sh[0][slot + i] = a[i];
    sh[1][slot + i] = b[i];
  }
  __syncthreads();
  for (int stride = TY / 2; stride > 0; stride >>= 1) {  // TY is a power of two
    if (ty < stride) {
      const int other = ((ty + stride) * TX + tx) * VEC;
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        sh[0][slot + i] += sh[0][other + i];
        sh[1][slot + i] += sh[1][other + i];
      }
    }
    __syncthreads();
  }
  if (ty == 0 && v < C / VEC) {
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      partial[int64_t(blockIdx.y) * C + c0 + i] = sh[0][slot + i];
      partial[(int64_t(gridDim.y) + blockIdx.y) * C + c0 + i] = sh[1][slot + i];
    }
  }
}

// The finalize kernels run blocks of (32 channels, 32 partial rows): a small layer's few blocks each take a short
// column of the up to ~1,000 partials (the finalize is latency, not bandwidth). Channel c's two sums over the
// reduction's grid_y partials, in double; the result is valid in threadIdx.y == 0.
constexpr int kFinalX = 32, kFinalY = 32;
__device__ __forceinline__ void sum_partials(const float* __restrict__ partial, int grid_y, int C, int c, double* a,
                                             double* b) {
  __shared__ double sh[2][kFinalY][kFinalX];
  double sa = 0, sb = 0;
  if (c < C)
#pragma unroll 4
    for (int j = threadIdx.y; j < grid_y; j += kFinalY) {
      sa += partial[int64_t(j) * C + c];
      sb += partial[(int64_t(grid_y) + j) * C + c];
    }
  sh[0][threadIdx.y][threadIdx.x] = sa;
  sh[1][threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y == 0)
    for (int j = 1; j < kFinalY; ++j) {
      sa += sh[0][j][threadIdx.x];
      sb += sh[1][j][threadIdx.x];
    }
  *a = sa;
  *b = sb;
}

// where the statistics go (see bn_forward_stats)
struct StatsOut {
  const float *weight, *bias;
  float eps, momentum;
  float *running_mean, *running_var, *save_mean, *save_invstd, *scale, *shift;
};

// channel c's statistics from s1 = sum (x - k), s2 = sum (x - k)^2 over n values
__device__ __forceinline__ void stats_from_sums(const StatsOut& o, int c, double s1, double s2, double n, double k) {
  const double shifted = s1 / n;
  const double var = fmax(s2 / n - shifted * shifted, 0.0);  // biased, as the normalisation uses
  const double mean = k + shifted;
  const double invstd = 1.0 / sqrt(var + static_cast<double>(o.eps));
  o.save_mean[c] = static_cast<float>(mean);
  o.save_invstd[c] = static_cast<float>(invstd);
  const double w = o.weight ? o.weight[c] : 1.0, b = o.bias ? o.bias[c] : 0.0;
  o.scale[c] = static_cast<float>(w * invstd);
  o.shift[c] = static_cast<float>(b - mean * w * invstd);
  const double m = o.momentum;
  if (o.running_mean) o.running_mean[c] = static_cast<float>((1.0 - m) * o.running_mean[c] + m * mean);
  if (o.running_var)
    o.running_var[c] = static_cast<float>((1.0 - m) * o.running_var[c] + m * var * n / fmax(n - 1.0, 1.0));
}

// the statistics from this reduction's partials (shift: the first row of x)
template <typename T>
__global__ void finalize_stats(const T* __restrict__ x, const float* __restrict__ partial, int grid_y, int64_t M, int C,
                               StatsOut o) {
  begin_dependent();
  const int c = blockIdx.x * kFinalX + threadIdx.x;
  double sa, sb;
  sum_partials(partial, grid_y, C, c, &sa, &sb);
  if (threadIdx.y != 0 || c >= C) return;
  stats_from_sums(o, c, sa, sb, static_cast<double>(M), static_cast<double>(to_f(x[c])));
}

// SyncBatchNorm: the local sums for the all-reduce, sums = [s1 (C), s2 (C), M]
__global__ void finalize_sums(const float* __restrict__ partial, int grid_y, int64_t M, int C, double* sums) {
  begin_dependent();
  const int c = blockIdx.x * kFinalX + threadIdx.x;
  double sa, sb;
  sum_partials(partial, grid_y, C, c, &sa, &sb);
  if (threadIdx.y != 0 || c >= C) return;
  sums[c] = sa;
  sums[C + c] = sb;
  if (c == 0) sums[2 * C] = static_cast<double>(M);
}

// SyncBatchNorm: the statistics from the sums over ranks (the count in sums[2C]), shifted by k
__global__ void stats_from_global_sums(const double* __restrict__ sums, const float* k, int C, StatsOut o) {
  begin_dependent();
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c < C) stats_from_sums(o, c, sums[c], sums[C + c], sums[2 * C], k[c]);
}

__global__ void eval_scale_shift(const float* weight, const float* bias, const float* running_mean,
                                 const float* running_var, float eps, int C, float* scale, float* shift) {
  begin_dependent();
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const float invstd = rsqrtf(running_var[c] + eps);
  const float w = weight ? weight[c] : 1.f, b = bias ? bias[c] : 0.f;
  scale[c] = w * invstd;
  shift[c] = b - running_mean[c] * w * invstd;
}

// coef: [3][C] = weight * invstd, sum g / n, weight * invstd^2 * sum (g * xhat) / n, from the gradient sums
// sg = sum g and sgx = sum g * (x - mean) over n values
__device__ __forceinline__ void coef_from_sums(int C, int c, double sg, double sgx, double n, const float* weight,
                                               const float* invstd, float* coef) {
  const double is = invstd[c], a = (weight ? weight[c] : 1.0) * is;
  coef[c] = static_cast<float>(a);
  coef[C + c] = static_cast<float>(sg / n);
  coef[2 * C + c] = static_cast<float>(a * sgx * is / n * is);
}

// dweight = sum g * xhat, dbias = sum g, over this reduction's (this rank's) rows; then coef from the same sums
// (COEF) or the sums kept for the all-reduce, sums = [sum g (C), sum g * (x - mean) (C)]
template <bool COEF>
__global__ void finalize_backward(const float* __restrict__ partial, int grid_y, int64_t M, int C, const float* weight,
                                  const float* invstd, float* dweight, float* dbias, float* coef, double* sums) {
  begin_dependent();
  const int c = blockIdx.x * kFinalX + threadIdx.x;
  double sg, sgx;
  sum_partials(partial, grid_y, C, c, &sg, &sgx);
  if (threadIdx.y != 0 || c >= C) return;
  if (dweight) dweight[c] = static_cast<float>(sgx * invstd[c]);
  if (dbias) dbias[c] = static_cast<float>(sg);
  if constexpr (COEF) {
    coef_from_sums(C, c, sg, sgx, static_cast<double>(M), weight, invstd, coef);
  } else {
    sums[c] = sg;
    sums[C + c] = sgx;
  }
}

// SyncBatchNorm: coef from the gradient sums over ranks and the forward's count over ranks
__global__ void coef_from_global_sums(const double* __restrict__ sums, const double* count, int C, const float* weight,
                                      const float* invstd, float* coef) {
  begin_dependent();
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c < C) coef_from_sums(C, c, sums[c], sums[C + c], *count, weight, invstd, coef);
}

// ---- elementwise passes ----

// y = x * scale + shift (+ z), then max(., 0) when RELU; BITS: y > 0 (as stored) into bits, see kMaskBits
template <typename T, int VEC, bool ADD, bool RELU, bool BITS, typename XT = T>
__global__ void __launch_bounds__(kThreads) apply_kernel(const XT* __restrict__ x, const T* __restrict__ z,
                                                         T* __restrict__ y, uint8_t* __restrict__ bits, int64_t M,
                                                         int C, const float* __restrict__ scale,
                                                         const float* __restrict__ shift) {
  begin_dependent();
  static_assert(!BITS || (RELU && VEC == kMaxVec), "the ReLU's bits are per vector of 8 channels");
  const int v = blockIdx.x * blockDim.x + threadIdx.x, c0 = v * VEC;
  if (v >= C / VEC) return;
  float sc[VEC], sf[VEC];
#pragma unroll
  for (int i = 0; i < VEC; ++i) {
    sc[i] = scale[c0 + i];
    sf[i] = shift[c0 + i];
  }
  auto out = [&](const Pack<XT, VEC>& xv, const Pack<T, VEC>& zv, int64_t row) {
    float o[VEC];
    uint32_t m = 0;
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      o[i] = fmaf(to_f(xv.v[i]), sc[i], sf[i]);
      if constexpr (ADD) o[i] += to_f(zv.v[i]);
      if constexpr (RELU) o[i] = fmaxf(o[i], 0.f);
      if constexpr (BITS) m |= (to_f(from_f<T>(o[i])) > 0.f ? 1u : 0u) << i;
    }
    store<T, VEC>(y + row * C + c0, o);
    if constexpr (BITS) bits[mask_byte(row, C, v)] = static_cast<uint8_t>(m);
  };
  const Rows rows;
  int64_t r = rows.first;
  Pack<XT, VEC> px[kUnroll];
  Pack<T, VEC> pz[kUnroll];
  for (; r + (kUnroll - 1) * rows.step < M; r += kUnroll * rows.step) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t o = (r + u * rows.step) * C + c0;
      px[u] = load<XT, VEC>(x + o);
      if constexpr (ADD) pz[u] = load<T, VEC>(z + o);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) out(px[u], pz[u], r + u * rows.step);
  }
  for (; r < M; r += rows.step) {
    const int64_t o = r * C + c0;
    px[0] = load<XT, VEC>(x + o);
    if constexpr (ADD) pz[0] = load<T, VEC>(z + o);
    out(px[0], pz[0], r);
  }
}

// g = dy masked as MASK says; dx = a * (g - b) - ac * (x - mean) with (a, b, ac) = coef; dz = g when DZ
template <typename T, int VEC, bool DZ, int MASK, typename XT = T>
__global__ void __launch_bounds__(kThreads) backward_kernel(const T* __restrict__ dy, const T* __restrict__ y,
                                                            const uint8_t* __restrict__ bits,
                                                            const XT* __restrict__ x, T* __restrict__ dx,
                                                            T* __restrict__ dz, int64_t M, int C,
                                                            const float* __restrict__ coef,
                                                            const float* __restrict__ mean,
                                                            const float* __restrict__ scale,
                                                            const float* __restrict__ shift) {
  begin_dependent();
  const int v = blockIdx.x * blockDim.x + threadIdx.x, c0 = v * VEC;
  if (v >= C / VEC) return;
  float ca[VEC], cb[VEC], cac[VEC], mu[VEC], sc[VEC], sf[VEC];
#pragma unroll
  for (int i = 0; i < VEC; ++i) {
    ca[i] = coef[c0 + i];
    cb[i] = coef[C + c0 + i];
    cac[i] = coef[2 * C + c0 + i];
    mu[i] = mean[c0 + i];
  }
  load_mask_coef<VEC, MASK>(scale, shift, c0, sc, sf);
  auto out = [&](const Pack<T, VEC>& gv, const Pack<T, VEC>& yv, const Pack<XT, VEC>& xv, uint32_t bv, int64_t o) {
    float g[VEC], d[VEC];
#pragma unroll
    for (int i = 0; i < VEC; ++i) g[i] = to_f(gv.v[i]);
    mask_grad<T, VEC, MASK, XT>(g, yv, xv, bv, sc, sf);
#pragma unroll
    for (int i = 0; i < VEC; ++i) d[i] = ca[i] * (g[i] - cb[i]) - cac[i] * (to_f(xv.v[i]) - mu[i]);
    if constexpr (DZ) store<T, VEC>(dz + o, g);
    store<T, VEC>(dx + o, d);
  };
  const Rows rows;
  int64_t r = rows.first;
  Pack<T, VEC> pg[kUnroll], py[kUnroll];
  Pack<XT, VEC> px[kUnroll];
  uint32_t pb[kUnroll] = {};
  for (; r + (kUnroll - 1) * rows.step < M; r += kUnroll * rows.step) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t o = (r + u * rows.step) * C + c0;
      pg[u] = load<T, VEC>(dy + o);
      if constexpr (MASK == kMaskY) py[u] = load<T, VEC>(y + o);
      if constexpr (MASK == kMaskBits) pb[u] = bits[mask_byte(r + u * rows.step, C, v)];
      px[u] = load<XT, VEC>(x + o);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) out(pg[u], py[u], px[u], pb[u], (r + u * rows.step) * C + c0);
  }
  for (; r < M; r += rows.step) {
    const int64_t o = r * C + c0;
    pg[0] = load<T, VEC>(dy + o);
    if constexpr (MASK == kMaskY) py[0] = load<T, VEC>(y + o);
    if constexpr (MASK == kMaskBits) pb[0] = bits[mask_byte(r, C, v)];
    px[0] = load<XT, VEC>(x + o);
    out(pg[0], py[0], px[0], pb[0], o);
  }
}

dim3 final_grid(int64_t C) { return dim3(static_cast<unsigned>((C + kFinalX - 1) / kFinalX)); }
const dim3 kFinalBlock(kFinalX, kFinalY);

// ---- typed launchers ----

template <int V> using IntC = std::integral_constant<int, V>;

// the backward's pointers (see bn_backward); XT: x's element type
template <typename T, typename XT = T> struct BwdArgs {
  using X = XT;
  const T *dy, *dy2, *y;
  const uint8_t* bits;
  const XT* x;
  T *dx, *dz;
  const float *weight, *mean, *invstd, *scale, *shift;
  float *dweight, *dbias, *workspace;
};

// f(IntC<VEC>) with the widest VEC the channels and pointers allow
template <typename F, typename... P> void with_vec(int64_t C, F&& f, const P*... p) {
  if (pick_vec(C, p...) == kMaxVec) f(IntC<kMaxVec>{});
  else f(IntC<1>{});
}

// The statistics' reduction, shifted by k (null: the first row), into the workspace's partials; returns the grid
template <typename T, int VEC>
Tile stats_reduce(const T* x, const float* k, int64_t M, int64_t C, float* workspace, cudaStream_t s) {
  constexpr auto kernel = reduce_kernel<T, VEC, false, kNoMask, false, false>;
  const Tile t = tile_for<kernel>(M, C, VEC);
  launch_dependent(kernel, t.grid, t.block, s, x, nullptr, nullptr, nullptr, nullptr, k, nullptr, nullptr, M,
                   static_cast<int>(C), workspace, nullptr);
  return t;
}

template <typename T, int VEC, bool ADD, bool RELU, bool BITS = false, typename XT>
void apply_launch(const XT* x, const T* z, T* y, uint8_t* bits, int64_t M, int64_t C, const float* scale,
                  const float* shift, cudaStream_t s) {
  constexpr auto kernel = apply_kernel<T, VEC, ADD, RELU, BITS, XT>;
  const Tile t = tile_for<kernel>(M, C, VEC);
  launch_dependent(kernel, t.grid, t.block, s, x, z, y, bits, M, static_cast<int>(C), scale, shift);
}

// bits (the ReLU's, with relu and VEC 8 only: bn_apply checks) may be null
template <typename T, int VEC, typename XT>
void apply_vec(const XT* x, const T* z, T* y, uint8_t* bits, int64_t M, int64_t C, const float* scale,
               const float* shift, bool relu, cudaStream_t s) {
  if constexpr (VEC == kMaxVec) {
    if (bits && z) return apply_launch<T, VEC, true, true, true>(x, z, y, bits, M, C, scale, shift, s);
    if (bits) return apply_launch<T, VEC, false, true, true>(x, z, y, bits, M, C, scale, shift, s);
  }
  if (z && relu) apply_launch<T, VEC, true, true>(x, z, y, bits, M, C, scale, shift, s);
  else if (z) apply_launch<T, VEC, true, false>(x, z, y, bits, M, C, scale, shift, s);
  else if (relu) apply_launch<T, VEC, false, true>(x, z, y, bits, M, C, scale, shift, s);
  else apply_launch<T, VEC, false, false>(x, z, y, bits, M, C, scale, shift, s);
}

// The passes over the tensor per case: with the residual add and ReLU the reduction reads dy, y and x and writes
// the masked gradient to dz, which the elementwise pass reads back with x (7 passes: not dy and y twice, 8); a ReLU
// alone recomputes its mask from x (5, not 7 with y); no ReLU reads dy and x (5, and 1 more writing dz = dy).
template <int MASK, bool DZ> struct BackwardPlan {
  static constexpr bool kStoreG = DZ && MASK != kNoMask;
  static constexpr int kElementwiseMask = kStoreG ? int(kNoMask) : MASK;
  static constexpr bool kElementwiseDz = DZ && !kStoreG;
};

// f(IntC<VEC>, IntC<MASK>, bool_constant<DZ>) for the backward's case
// (the ReLU's bits only 8-wide: the entry points check that they fit)
template <typename A, typename F>
void with_backward_case(const A& a, int64_t C, bool relu, F&& f) {
  const int mask = !relu ? kNoMask : a.bits ? kMaskBits : a.y ? kMaskY : kMaskX;
  with_vec(
      C,
      [&](auto vec) {
        auto dz = [&](auto m) {
          if (a.dz) f(vec, m, std::true_type{});
          else f(vec, m, std::false_type{});
        };
        if constexpr (decltype(vec)::value == kMaxVec)
          if (mask == kMaskBits) return dz(IntC<kMaskBits>{});
        if (mask == kMaskY) dz(IntC<kMaskY>{});
        else if (mask == kMaskX) dz(IntC<kMaskX>{});
        else dz(IntC<kNoMask>{});
      },
      a.dy, a.dy2, a.y, a.x, a.dx, a.dz);
}

template <typename T, typename XT, int VEC, bool DZ, int MASK, bool DY2>
Tile backward_reduce_launch(const BwdArgs<T, XT>& a, int64_t M, int64_t C, cudaStream_t s) {
  constexpr auto reduce = reduce_kernel<T, VEC, true, MASK, BackwardPlan<MASK, DZ>::kStoreG, DY2, XT>;
  const Tile t = tile_for<reduce>(M, C, VEC);
  launch_dependent(reduce, t.grid, t.block, s, a.x, a.dy, a.dy2, a.y, a.bits, a.mean, a.scale, a.shift, M,
                   static_cast<int>(C), a.workspace, a.dz);
  return t;
}

// the second gradient is read only where the reduction stores g (the elementwise pass then reads g alone)
template <int VEC, bool DZ, int MASK, typename T, typename XT>
Tile backward_reduce(const BwdArgs<T, XT>& a, int64_t M, int64_t C, cudaStream_t s) {
  if constexpr (BackwardPlan<MASK, DZ>::kStoreG)
    if (a.dy2) return backward_reduce_launch<T, XT, VEC, DZ, MASK, true>(a, M, C, s);
  return backward_reduce_launch<T, XT, VEC, DZ, MASK, false>(a, M, C, s);
}

template <int VEC, bool DZ, int MASK, typename T, typename XT>
void backward_elementwise(const BwdArgs<T, XT>& a, const float* coef, int64_t M, int64_t C, cudaStream_t s) {
  using Plan = BackwardPlan<MASK, DZ>;
  constexpr auto kernel = backward_kernel<T, VEC, Plan::kElementwiseDz, Plan::kElementwiseMask, XT>;
  const Tile e = tile_for<kernel>(M, C, VEC);
  launch_dependent(kernel, e.grid, e.block, s, Plan::kStoreG ? a.dz : a.dy, a.y, a.bits, a.x, a.dx, a.dz, M,
                   static_cast<int>(C), coef, a.mean, a.scale, a.shift);
}

template <typename T, typename XT = T>
BwdArgs<T, XT> bwd_args(const void* dy, const void* dy2, const void* y, const uint8_t* bits, const void* x, void* dx,
                        void* dz, const float* weight, const float* mean, const float* invstd, const float* scale,
                        const float* shift, float* dweight, float* dbias, float* workspace) {
  return {static_cast<const T*>(dy), static_cast<const T*>(dy2), static_cast<const T*>(y), bits,
          static_cast<const XT*>(x), static_cast<T*>(dx), static_cast<T*>(dz), weight, mean, invstd, scale, shift,
          dweight, dbias, workspace};
}

// f(T*, XT*) (null pointers, for the types) with T the rest's element type and XT x's: one type for all, or an fp16
// x under bf16 (the stem); false for other pairs
template <typename F> bool with_types(BnTypes t, F&& f) {
  if (t.x == t.rest) {
    with_type(t.x, [&](auto tag) { f(tag, tag); });
    return true;
  }
  if (t.x != HalfType::fp16 || t.rest != HalfType::bf16) return false;
  f(static_cast<__nv_bfloat16*>(nullptr), static_cast<__half*>(nullptr));
  return true;
}

// Whether the backward's arguments make sense: the ReLU's mask knowable (bits, y, or x with scale and shift), bits
// only where the tensors run 8-wide, a second gradient only in the case whose reduction stores the masked gradient
// (ReLU with y or bits, dz).
bool backward_args_fit(const void* dy, const void* dy2, const void* y, const uint8_t* bits, const void* x,
                       const void* dx, const void* dz, int64_t C, const float* scale, const float* shift, bool relu) {
  if (relu && !y && !bits && (!scale || !shift)) return false;
  if (bits && pick_vec(C, dy, dy2, y, x, dx, dz) != kMaxVec) return false;
  return !dy2 || (relu && (y || bits) && dz);
}

template <typename P> using Elem = std::remove_pointer_t<P>;

}  // namespace

int64_t bn_workspace_floats(int64_t M, int64_t C) {
  // partials for the most rows of blocks any reduction may launch (8-wide only where C is a multiple of 8)
  int64_t grid_y = tile(M, C, 1, kMaxBlocksPerSm).grid.y;
  if (C % kMaxVec == 0) grid_y = std::max<int64_t>(grid_y, tile(M, C, kMaxVec, kMaxBlocksPerSm).grid.y);
  return 2 * grid_y * C + 3 * C;
}

cudaError_t bn_forward_stats(const void* x, HalfType dt, int64_t M, int64_t C, const float* weight, const float* bias,
                             float eps, float momentum, float* running_mean, float* running_var, float* save_mean,
                             float* save_invstd, float* scale, float* shift, float* workspace, cudaStream_t stream) {
  const StatsOut o{weight, bias, eps, momentum, running_mean, running_var, save_mean, save_invstd, scale, shift};
  with_type(dt, [&](auto tag) {
    using T = Elem<decltype(tag)>;
    const T* xt = static_cast<const T*>(x);
    with_vec(C, [&](auto vec) {
      const Tile t = stats_reduce<T, decltype(vec)::value>(xt, nullptr, M, C, workspace, stream);
      launch_dependent(finalize_stats<T>, final_grid(C), kFinalBlock, stream, xt, workspace, t.grid.y, M,
                       static_cast<int>(C), o);
    }, x);
  });
  return cudaGetLastError();
}

cudaError_t bn_forward_sums(const void* x, HalfType dt, int64_t M, int64_t C, const float* k, double* sums,
                            float* workspace, cudaStream_t stream) {
  with_type(dt, [&](auto tag) {
    using T = Elem<decltype(tag)>;
    with_vec(C, [&](auto vec) {
      const Tile t = stats_reduce<T, decltype(vec)::value>(static_cast<const T*>(x), k, M, C, workspace, stream);
      launch_dependent(finalize_sums, final_grid(C), kFinalBlock, stream, workspace, t.grid.y, M,
                       static_cast<int>(C), sums);
    }, x);
  });
  return cudaGetLastError();
}

cudaError_t bn_stats_from_sums(const double* sums, const float* k, int64_t C, const float* weight, const float* bias,
                               float eps, float momentum, float* running_mean, float* running_var, float* save_mean,
                               float* save_invstd, float* scale, float* shift, cudaStream_t stream) {
  const StatsOut o{weight, bias, eps, momentum, running_mean, running_var, save_mean, save_invstd, scale, shift};
  launch_dependent(stats_from_global_sums, dim3(static_cast<unsigned>((C + kThreads - 1) / kThreads)),
                   dim3(kThreads), stream, sums, k, static_cast<int>(C), o);
  return cudaGetLastError();
}

cudaError_t bn_eval_scale_shift(const float* weight, const float* bias, const float* running_mean,
                                const float* running_var, float eps, int64_t C, float* scale, float* shift,
                                cudaStream_t stream) {
  launch_dependent(eval_scale_shift, dim3(static_cast<unsigned>((C + kThreads - 1) / kThreads)), dim3(kThreads),
                   stream, weight, bias, running_mean, running_var, eps, static_cast<int>(C), scale, shift);
  return cudaGetLastError();
}

bool bn_relu_bits_fit(int64_t C, const void* x, const void* z, const void* y) {
  return pick_vec(C, x, z, y) == kMaxVec;
}

int64_t bn_relu_bits_bytes(int64_t M, int64_t C) { return M * (C / kMaxVec); }

cudaError_t bn_apply(const void* x, const void* z, void* y, BnTypes types, int64_t M, int64_t C, const float* scale,
                     const float* shift, bool relu, uint8_t* relu_bits, cudaStream_t stream) {
  if (relu_bits && (!relu || !bn_relu_bits_fit(C, x, z, y))) return cudaErrorInvalidValue;
  const bool known = with_types(types, [&](auto tag, auto xtag) {
    using T = Elem<decltype(tag)>;
    using XT = Elem<decltype(xtag)>;
    with_vec(C, [&](auto vec) {
      apply_vec<T, decltype(vec)::value>(static_cast<const XT*>(x), static_cast<const T*>(z), static_cast<T*>(y),
                                         relu_bits, M, C, scale, shift, relu, stream);
    }, x, z, y);
  });
  return known ? cudaGetLastError() : cudaErrorInvalidValue;
}

cudaError_t bn_backward(const void* dy, const void* dy2, const void* y, const uint8_t* relu_bits, const void* x,
                        void* dx, void* dz, BnTypes types, int64_t M, int64_t C, const float* weight,
                        const float* save_mean, const float* save_invstd, const float* scale, const float* shift,
                        bool relu, float* dweight, float* dbias, float* workspace, cudaStream_t stream) {
  if (!backward_args_fit(dy, dy2, y, relu_bits, x, dx, dz, C, scale, shift, relu)) return cudaErrorInvalidValue;
  const bool known = with_types(types, [&](auto tag, auto xtag) {
    using T = Elem<decltype(tag)>;
    using XT = Elem<decltype(xtag)>;
    const auto a = bwd_args<T, XT>(dy, dy2, y, relu_bits, x, dx, dz, weight, save_mean, save_invstd, scale, shift,
                                   dweight, dbias, workspace);
    with_backward_case(a, C, relu, [&](auto vec, auto mask, auto has_dz) {
      constexpr int V = decltype(vec)::value, K = decltype(mask)::value;
      constexpr bool D = decltype(has_dz)::value;
      const Tile t = backward_reduce<V, D, K>(a, M, C, stream);
      float* coef = workspace + 2 * int64_t(t.grid.y) * C;
      launch_dependent(finalize_backward<true>, final_grid(C), kFinalBlock, stream, workspace, t.grid.y, M,
                       static_cast<int>(C), weight, save_invstd, dweight, dbias, coef, nullptr);
      backward_elementwise<V, D, K>(a, coef, M, C, stream);
    });
  });
  return known ? cudaGetLastError() : cudaErrorInvalidValue;
}

cudaError_t bn_backward_sums(const void* dy, const void* dy2, const void* y, const uint8_t* relu_bits, const void* x,
                             void* dz, HalfType dt, int64_t M, int64_t C, const float* save_mean,
                             const float* save_invstd, const float* scale, const float* shift, bool relu,
                             float* dweight, float* dbias, double* sums, float* workspace, cudaStream_t stream) {
  if (!backward_args_fit(dy, dy2, y, relu_bits, x, nullptr, dz, C, scale, shift, relu)) return cudaErrorInvalidValue;
  with_type(dt, [&](auto tag) {
    using T = Elem<decltype(tag)>;
    const auto a = bwd_args<T>(dy, dy2, y, relu_bits, x, nullptr, dz, nullptr, save_mean, save_invstd, scale, shift,
                               dweight, dbias, workspace);
    with_backward_case(a, C, relu, [&](auto vec, auto mask, auto has_dz) {
      const Tile t = backward_reduce<decltype(vec)::value, decltype(has_dz)::value, decltype(mask)::value>(
          a, M, C, stream);
      launch_dependent(finalize_backward<false>, final_grid(C), kFinalBlock, stream, workspace, t.grid.y, M,
                       static_cast<int>(C), nullptr, save_invstd, dweight, dbias, nullptr, sums);
    });
  });
  return cudaGetLastError();
}

cudaError_t bn_backward_from_sums(const void* dy, const void* y, const uint8_t* relu_bits, const void* x, void* dx,
                                  void* dz, HalfType dt, int64_t M, int64_t C, const float* weight,
                                  const float* save_mean, const float* save_invstd, const float* scale,
                                  const float* shift, bool relu, const double* sums, const double* count,
                                  float* workspace, cudaStream_t stream) {
  if (!backward_args_fit(dy, nullptr, y, relu_bits, x, dx, dz, C, scale, shift, relu)) return cudaErrorInvalidValue;
  with_type(dt, [&](auto tag) {
    using T = Elem<decltype(tag)>;
    const auto a = bwd_args<T>(dy, nullptr, y, relu_bits, x, dx, dz, weight, save_mean, save_invstd, scale, shift,
                               nullptr, nullptr, workspace);
    with_backward_case(a, C, relu, [&](auto vec, auto mask, auto has_dz) {
      float* coef = workspace;  // the partials are spent
      launch_dependent(coef_from_global_sums, dim3(static_cast<unsigned>((C + kThreads - 1) / kThreads)),
                       dim3(kThreads), stream, sums, count, static_cast<int>(C), weight, save_invstd, coef);
      backward_elementwise<decltype(vec)::value, decltype(has_dz)::value, decltype(mask)::value>(a, coef, M, C,
                                                                                                stream);
    });
  });
  return cudaGetLastError();
}

}  // namespace trainer::kernels
