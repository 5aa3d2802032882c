// Batch norm over NHWC rows (see batchnorm_nhwc.h). Access pattern, shared by both reductions: a block of 256
// threads is TX channel vectors wide (VEC = 8 values, one 16-byte load, where C % 8 == 0 and the pointers are
// aligned; else VEC = 1) and TY = 256 / TX rows tall; a warp reads whole rows' worth of contiguous bytes. Blocks
// stride over the rows (grid.y of them, about 8 per SM in all), each thread summing its rows in fp32 registers;
// the block then sums over TY in shared memory and writes one partial per channel; a finalize kernel adds the
// partials in double. Statistics use sums shifted by the first row's value (close to the mean, so the variance
// E[(x-k)^2] - E[x-k]^2 does not cancel), not E[x^2] - E[x]^2. The elementwise passes stride over VEC-vectors.
#include "batchnorm_nhwc.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

namespace trainer::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxVec = 8;

template <typename T> __device__ __forceinline__ float to_f(T v);
template <> __device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ __nv_bfloat16 from_f(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half from_f(float v) { return __float2half_rn(v); }

template <typename T, int VEC> __device__ __forceinline__ void load(const T* p, float* out) {
  if constexpr (VEC * sizeof(T) == 16) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const T* t = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < VEC; ++i) out[i] = to_f(t[i]);
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) out[i] = to_f(p[i]);
  }
}

template <typename T, int VEC> __device__ __forceinline__ void store(T* p, const float* in) {
  if constexpr (VEC * sizeof(T) == 16) {
    uint4 raw;
    T* t = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int i = 0; i < VEC; ++i) t[i] = from_f<T>(in[i]);
    *reinterpret_cast<uint4*>(p) = raw;
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) p[i] = from_f<T>(in[i]);
  }
}

// ---- reduction geometry ----

int sm_count() {
  static const int n = [] {
    int dev = 0, count = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev);
    return count > 0 ? count : 1;
  }();
  return n;
}

struct ReduceShape {
  int tx = 1, ty = kThreads, grid_x = 1, grid_y = 1;
};

ReduceShape reduce_shape(int64_t M, int64_t C, int vec) {
  ReduceShape s;
  const int64_t cv = std::max<int64_t>(C / vec, 1);
  while (s.tx < cv && s.tx < 32) s.tx *= 2;
  s.ty = kThreads / s.tx;
  s.grid_x = static_cast<int>((cv + s.tx - 1) / s.tx);
  const int64_t want = std::max<int64_t>(1, int64_t(sm_count()) * 8 / s.grid_x);
  const int64_t min_rows = int64_t(s.ty) * 16;  // at least 16 rows per thread
  s.grid_y = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(want, (M + min_rows - 1) / min_rows)));
  return s;
}

bool aligned16(const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; }

int pick_vec(int64_t C, const void* a, const void* b = nullptr, const void* c = nullptr, const void* d = nullptr,
             const void* e = nullptr) {
  return C % kMaxVec == 0 && aligned16(a) && aligned16(b) && aligned16(c) && aligned16(d) && aligned16(e) ? kMaxVec
                                                                                                         : 1;
}

// ---- kernels ----

// BWD = false: a = sum (x - k), b = sum (x - k)^2 with k the first row. BWD = true: g = dy (masked by y > 0 when
// RELU), a = sum g, b = sum g * (x - mean). partial: [2][grid.y][C].
template <typename T, int VEC, bool BWD, bool RELU>
__global__ void __launch_bounds__(kThreads) reduce_kernel(const T* __restrict__ x, const T* __restrict__ dy,
                                                          const T* __restrict__ y, const float* __restrict__ mean,
                                                          int64_t M, int C, float* __restrict__ partial) {
  __shared__ float sh[2][kThreads * kMaxVec];
  const int tx = threadIdx.x, ty = threadIdx.y, TX = blockDim.x, TY = blockDim.y;
  const int cv = C / VEC;
  const int v = blockIdx.x * TX + tx;
  float a[VEC], b[VEC];
#pragma unroll
  for (int i = 0; i < VEC; ++i) a[i] = b[i] = 0.f;
  if (v < cv) {
    const int c0 = v * VEC;
    float k[VEC];
    if constexpr (BWD) {
#pragma unroll
      for (int i = 0; i < VEC; ++i) k[i] = mean[c0 + i];
    } else {
      load<T, VEC>(x + c0, k);
    }
    for (int64_t r = int64_t(blockIdx.y) * TY + ty; r < M; r += int64_t(gridDim.y) * TY) {
      float xv[VEC];
      load<T, VEC>(x + r * C + c0, xv);
      if constexpr (BWD) {
        float g[VEC];
        load<T, VEC>(dy + r * C + c0, g);
        if constexpr (RELU) {
          float yv[VEC];
          load<T, VEC>(y + r * C + c0, yv);
#pragma unroll
          for (int i = 0; i < VEC; ++i) g[i] = yv[i] > 0.f ? g[i] : 0.f;
        }
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          a[i] += g[i];
          b[i] += g[i] * (xv[i] - k[i]);
        }
      } else {
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          const float d = xv[i] - k[i];
          a[i] += d;
          b[i] += d * d;
        }
      }
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
  if (ty == 0 && v < cv) {
    const int c0 = v * VEC;
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      partial[int64_t(blockIdx.y) * C + c0 + i] = sh[0][slot + i];
      partial[(int64_t(gridDim.y) + blockIdx.y) * C + c0 + i] = sh[1][slot + i];
    }
  }
}

// channel c's two sums over the reduction's grid.y partials, in double
__device__ __forceinline__ void sum_partials(const float* __restrict__ partial, int grid_y, int C, int c, double* a,
                                             double* b) {
  for (int j = 0; j < grid_y; ++j) {
    *a += partial[int64_t(j) * C + c];
    *b += partial[(int64_t(grid_y) + j) * C + c];
  }
}

template <typename T>
__global__ void finalize_stats(const T* __restrict__ x, const float* __restrict__ partial, int grid_y, int64_t M, int C,
                               const float* weight, const float* bias, float eps, float momentum, float* running_mean,
                               float* running_var, float* save_mean, float* save_invstd, float* scale, float* shift) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  double sa = 0, sb = 0;
  sum_partials(partial, grid_y, C, c, &sa, &sb);
  const double n = static_cast<double>(M);
  const double shifted = sa / n;
  const double var = fmax(sb / n - shifted * shifted, 0.0);  // biased, as the normalisation uses
  const double mean = static_cast<double>(to_f(x[c])) + shifted;
  const double invstd = 1.0 / sqrt(var + static_cast<double>(eps));
  save_mean[c] = static_cast<float>(mean);
  save_invstd[c] = static_cast<float>(invstd);
  const double w = weight ? weight[c] : 1.0, b = bias ? bias[c] : 0.0;
  scale[c] = static_cast<float>(w * invstd);
  shift[c] = static_cast<float>(b - mean * w * invstd);
  if (running_mean) running_mean[c] = static_cast<float>((1.0 - momentum) * running_mean[c] + momentum * mean);
  if (running_var)
    running_var[c] = static_cast<float>((1.0 - momentum) * running_var[c] + momentum * var * n / fmax(n - 1.0, 1.0));
}

__global__ void eval_scale_shift(const float* weight, const float* bias, const float* running_mean,
                                 const float* running_var, float eps, int C, float* scale, float* shift) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const float invstd = rsqrtf(running_var[c] + eps);
  const float w = weight ? weight[c] : 1.f, b = bias ? bias[c] : 0.f;
  scale[c] = w * invstd;
  shift[c] = b - running_mean[c] * w * invstd;
}

// coef: [3][C] = weight * invstd, dbias / M, weight * invstd * dweight / M * invstd
__global__ void finalize_backward(const float* __restrict__ partial, int grid_y, int64_t M, int C, const float* weight,
                                  const float* invstd, float* dweight, float* dbias, float* coef) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  double sg = 0, sgx = 0;
  sum_partials(partial, grid_y, C, c, &sg, &sgx);
  const double is = invstd[c], n = static_cast<double>(M);
  const double dw = sgx * is;  // sum g * xhat
  if (dweight) dweight[c] = static_cast<float>(dw);
  if (dbias) dbias[c] = static_cast<float>(sg);
  const double a = (weight ? weight[c] : 1.0) * is;
  coef[c] = static_cast<float>(a);
  coef[C + c] = static_cast<float>(sg / n);
  coef[2 * C + c] = static_cast<float>(a * dw / n * is);
}

template <typename T, int VEC, bool ADD, bool RELU>
__global__ void __launch_bounds__(kThreads) apply_kernel(const T* __restrict__ x, const T* __restrict__ z,
                                                         T* __restrict__ y, int64_t n_vec, int cv,
                                                         const float* __restrict__ scale,
                                                         const float* __restrict__ shift) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_vec; i += int64_t(gridDim.x) * blockDim.x) {
    const int c0 = static_cast<int>(i % cv) * VEC;
    float xv[VEC], zv[VEC];
    load<T, VEC>(x + i * VEC, xv);
    if constexpr (ADD) load<T, VEC>(z + i * VEC, zv);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      float o = fmaf(xv[k], __ldg(scale + c0 + k), __ldg(shift + c0 + k));
      if constexpr (ADD) o += zv[k];
      if constexpr (RELU) o = fmaxf(o, 0.f);
      xv[k] = o;
    }
    store<T, VEC>(y + i * VEC, xv);
  }
}

// dx = a * (g - b) - ac * (x - mean) with (a, b, ac) = coef; dz = g
template <typename T, int VEC, bool DZ, bool RELU>
__global__ void __launch_bounds__(kThreads) backward_kernel(const T* __restrict__ dy, const T* __restrict__ y,
                                                            const T* __restrict__ x, T* __restrict__ dx,
                                                            T* __restrict__ dz, int64_t n_vec, int cv, int C,
                                                            const float* __restrict__ coef,
                                                            const float* __restrict__ mean) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_vec; i += int64_t(gridDim.x) * blockDim.x) {
    const int c0 = static_cast<int>(i % cv) * VEC;
    float g[VEC], xv[VEC];
    load<T, VEC>(dy + i * VEC, g);
    if constexpr (RELU) {
      float yv[VEC];
      load<T, VEC>(y + i * VEC, yv);
#pragma unroll
      for (int k = 0; k < VEC; ++k) g[k] = yv[k] > 0.f ? g[k] : 0.f;
    }
    if constexpr (DZ) store<T, VEC>(dz + i * VEC, g);
    load<T, VEC>(x + i * VEC, xv);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const int c = c0 + k;
      xv[k] = __ldg(coef + c) * (g[k] - __ldg(coef + C + c)) - __ldg(coef + 2 * C + c) * (xv[k] - __ldg(mean + c));
    }
    store<T, VEC>(dx + i * VEC, xv);
  }
}

int elementwise_blocks(int64_t n_vec) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((n_vec + kThreads - 1) / kThreads, int64_t(sm_count()) * 16)));
}

int channel_blocks(int64_t C) { return static_cast<int>((C + kThreads - 1) / kThreads); }

// ---- typed launchers ----

template <typename T>
void forward_stats(const T* x, int64_t M, int64_t C, const float* weight, const float* bias, float eps, float momentum,
                   float* rm, float* rv, float* save_mean, float* save_invstd, float* scale, float* shift,
                   float* workspace, cudaStream_t s) {
  const int vec = pick_vec(C, x);
  const ReduceShape rs = reduce_shape(M, C, vec);
  const dim3 block(rs.tx, rs.ty), grid(rs.grid_x, rs.grid_y);
  const int Ci = static_cast<int>(C);
  if (vec == kMaxVec) reduce_kernel<T, kMaxVec, false, false><<<grid, block, 0, s>>>(x, nullptr, nullptr, nullptr, M, Ci, workspace);
  else reduce_kernel<T, 1, false, false><<<grid, block, 0, s>>>(x, nullptr, nullptr, nullptr, M, Ci, workspace);
  finalize_stats<T><<<channel_blocks(C), kThreads, 0, s>>>(x, workspace, rs.grid_y, M, Ci, weight, bias, eps, momentum,
                                                           rm, rv, save_mean, save_invstd, scale, shift);
}

template <typename T, int VEC>
void apply_vec(const T* x, const T* z, T* y, int64_t M, int64_t C, const float* scale, const float* shift, bool relu,
               cudaStream_t s) {
  const int64_t n_vec = M * C / VEC;
  const int cv = static_cast<int>(C / VEC), blocks = elementwise_blocks(n_vec);
  if (z && relu) apply_kernel<T, VEC, true, true><<<blocks, kThreads, 0, s>>>(x, z, y, n_vec, cv, scale, shift);
  else if (z) apply_kernel<T, VEC, true, false><<<blocks, kThreads, 0, s>>>(x, z, y, n_vec, cv, scale, shift);
  else if (relu) apply_kernel<T, VEC, false, true><<<blocks, kThreads, 0, s>>>(x, z, y, n_vec, cv, scale, shift);
  else apply_kernel<T, VEC, false, false><<<blocks, kThreads, 0, s>>>(x, z, y, n_vec, cv, scale, shift);
}

template <typename T>
void apply(const T* x, const T* z, T* y, int64_t M, int64_t C, const float* scale, const float* shift, bool relu,
           cudaStream_t s) {
  if (pick_vec(C, x, z, y) == kMaxVec) apply_vec<T, kMaxVec>(x, z, y, M, C, scale, shift, relu, s);
  else apply_vec<T, 1>(x, z, y, M, C, scale, shift, relu, s);
}

template <typename T, int VEC>
void backward_vec(const T* dy, const T* y, const T* x, T* dx, T* dz, int64_t M, int64_t C, const float* weight,
                  const float* mean, const float* invstd, bool relu, float* dweight, float* dbias, float* workspace,
                  cudaStream_t s) {
  const ReduceShape rs = reduce_shape(M, C, VEC);
  const dim3 block(rs.tx, rs.ty), grid(rs.grid_x, rs.grid_y);
  const int Ci = static_cast<int>(C);
  if (relu) reduce_kernel<T, VEC, true, true><<<grid, block, 0, s>>>(x, dy, y, mean, M, Ci, workspace);
  else reduce_kernel<T, VEC, true, false><<<grid, block, 0, s>>>(x, dy, y, mean, M, Ci, workspace);
  float* coef = workspace + 2 * int64_t(rs.grid_y) * C;
  finalize_backward<<<channel_blocks(C), kThreads, 0, s>>>(workspace, rs.grid_y, M, Ci, weight, invstd, dweight, dbias,
                                                           coef);
  const int64_t n_vec = M * C / VEC;
  const int cv = static_cast<int>(C / VEC), blocks = elementwise_blocks(n_vec);
  if (dz && relu) backward_kernel<T, VEC, true, true><<<blocks, kThreads, 0, s>>>(dy, y, x, dx, dz, n_vec, cv, Ci, coef, mean);
  else if (dz) backward_kernel<T, VEC, true, false><<<blocks, kThreads, 0, s>>>(dy, y, x, dx, dz, n_vec, cv, Ci, coef, mean);
  else if (relu) backward_kernel<T, VEC, false, true><<<blocks, kThreads, 0, s>>>(dy, y, x, dx, dz, n_vec, cv, Ci, coef, mean);
  else backward_kernel<T, VEC, false, false><<<blocks, kThreads, 0, s>>>(dy, y, x, dx, dz, n_vec, cv, Ci, coef, mean);
}

template <typename T>
void backward(const T* dy, const T* y, const T* x, T* dx, T* dz, int64_t M, int64_t C, const float* weight,
              const float* mean, const float* invstd, bool relu, float* dweight, float* dbias, float* workspace,
              cudaStream_t s) {
  if (pick_vec(C, dy, relu ? y : nullptr, x, dx, dz) == kMaxVec)
    backward_vec<T, kMaxVec>(dy, y, x, dx, dz, M, C, weight, mean, invstd, relu, dweight, dbias, workspace, s);
  else
    backward_vec<T, 1>(dy, y, x, dx, dz, M, C, weight, mean, invstd, relu, dweight, dbias, workspace, s);
}

}  // namespace

int64_t bn_workspace_floats(int64_t M, int64_t C) {
  // the partials of whichever width the launch picks (8-wide only where C is a multiple of 8)
  const int grid_y = C % kMaxVec == 0 ? std::max(reduce_shape(M, C, 1).grid_y, reduce_shape(M, C, kMaxVec).grid_y)
                                      : reduce_shape(M, C, 1).grid_y;
  return 2 * int64_t(grid_y) * C + 3 * C;
}

cudaError_t bn_forward_stats(const void* x, BnDtype dt, int64_t M, int64_t C, const float* weight, const float* bias,
                             float eps, float momentum, float* running_mean, float* running_var, float* save_mean,
                             float* save_invstd, float* scale, float* shift, float* workspace, cudaStream_t stream) {
  if (dt == BnDtype::bf16)
    forward_stats(static_cast<const __nv_bfloat16*>(x), M, C, weight, bias, eps, momentum, running_mean, running_var,
                  save_mean, save_invstd, scale, shift, workspace, stream);
  else
    forward_stats(static_cast<const __half*>(x), M, C, weight, bias, eps, momentum, running_mean, running_var,
                  save_mean, save_invstd, scale, shift, workspace, stream);
  return cudaGetLastError();
}

cudaError_t bn_eval_scale_shift(const float* weight, const float* bias, const float* running_mean,
                                const float* running_var, float eps, int64_t C, float* scale, float* shift,
                                cudaStream_t stream) {
  eval_scale_shift<<<channel_blocks(C), kThreads, 0, stream>>>(weight, bias, running_mean, running_var, eps,
                                                               static_cast<int>(C), scale, shift);
  return cudaGetLastError();
}

cudaError_t bn_apply(const void* x, const void* z, void* y, BnDtype dt, int64_t M, int64_t C, const float* scale,
                     const float* shift, bool relu, cudaStream_t stream) {
  if (dt == BnDtype::bf16)
    apply(static_cast<const __nv_bfloat16*>(x), static_cast<const __nv_bfloat16*>(z), static_cast<__nv_bfloat16*>(y),
          M, C, scale, shift, relu, stream);
  else
    apply(static_cast<const __half*>(x), static_cast<const __half*>(z), static_cast<__half*>(y), M, C, scale, shift,
          relu, stream);
  return cudaGetLastError();
}

cudaError_t bn_backward(const void* dy, const void* y, const void* x, void* dx, void* dz, BnDtype dt, int64_t M,
                        int64_t C, const float* weight, const float* save_mean, const float* save_invstd, bool relu,
                        float* dweight, float* dbias, float* workspace, cudaStream_t stream) {
  if (dt == BnDtype::bf16)
    backward(static_cast<const __nv_bfloat16*>(dy), static_cast<const __nv_bfloat16*>(y),
             static_cast<const __nv_bfloat16*>(x), static_cast<__nv_bfloat16*>(dx), static_cast<__nv_bfloat16*>(dz),
             M, C, weight, save_mean, save_invstd, relu, dweight, dbias, workspace, stream);
  else
    backward(static_cast<const __half*>(dy), static_cast<const __half*>(y), static_cast<const __half*>(x),
             static_cast<__half*>(dx), static_cast<__half*>(dz), M, C, weight, save_mean, save_invstd, relu, dweight,
             dbias, workspace, stream);
  return cudaGetLastError();
}

}  // namespace trainer::kernels
