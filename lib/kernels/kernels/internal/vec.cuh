// Device helpers shared by the kernels: bf16/fp16 (and fp32) -> fp32 and back, and VEC values moved as one load or
// store (16 bytes for 8 bf16/fp16 values, where the pointer is 16-byte aligned).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace trainer::kernels {

template <typename T> __device__ __forceinline__ float to_f(T v);
template <> __device__ __forceinline__ float to_f(float v) { return v; }
template <> __device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ __nv_bfloat16 from_f(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half from_f(float v) { return __float2half_rn(v); }

template <typename T, int VEC> struct alignas(sizeof(T) * VEC) Pack {
  T v[VEC];
};
template <typename T, int VEC> __device__ __forceinline__ Pack<T, VEC> load(const T* p) {
  return *reinterpret_cast<const Pack<T, VEC>*>(p);
}
template <typename T, int VEC> __device__ __forceinline__ void store(T* p, const float* in) {
  Pack<T, VEC> out;
#pragma unroll
  for (int i = 0; i < VEC; ++i) out.v[i] = from_f<T>(in[i]);
  *reinterpret_cast<Pack<T, VEC>*>(p) = out;
}

}  // namespace trainer::kernels
