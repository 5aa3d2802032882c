// One launch for a list of casts (see cast.h): the tensors' 8-element chunks are numbered one after another; a
// thread takes chunks grid-stride, finds its tensor by a scan over the (at most 8) chunk offsets, and moves a full
// chunk of a 16-byte aligned tensor as vector loads and stores (two float4 and one 16-byte 16-bit pack), else
// element by element.
#include "cast.h"

#include <algorithm>
#include <type_traits>

#include "internal/launch.cuh"
#include "internal/vec.cuh"

namespace trainer::kernels {
namespace {

constexpr int kVec = 8, kThreads = 256;

struct Chunks {
  CastList list;
  int64_t first[kMaxCastTensors + 1];  // tensor i's chunks: first[i] .. first[i + 1] - 1
  unsigned aligned;                    // bit i: both of tensor i's buffers 16-byte aligned
};

template <typename S, typename D> __device__ __forceinline__ D convert(S v);
template <> __device__ __forceinline__ __nv_bfloat16 convert(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half convert(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ float convert(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ __forceinline__ float convert(__half v) { return __half2float(v); }

template <typename S, typename D>
__global__ void __launch_bounds__(kThreads) cast_kernel(const Chunks c) {
  const int64_t total = c.first[c.list.count];
  for (int64_t g = int64_t(blockIdx.x) * kThreads + threadIdx.x; g < total; g += int64_t(gridDim.x) * kThreads) {
    int t = 0;
    while (g >= c.first[t + 1]) ++t;
    const int64_t i0 = (g - c.first[t]) * kVec, n = c.list.n[t];
    const S* src = static_cast<const S*>(c.list.src[t]) + i0;
    D* dst = static_cast<D*>(c.list.dst[t]) + i0;
    if (i0 + kVec <= n && (c.aligned >> t & 1u)) {
      Pack<S, kVec> in = *reinterpret_cast<const Pack<S, kVec>*>(src);
      Pack<D, kVec> out;
#pragma unroll
      for (int k = 0; k < kVec; ++k) out.v[k] = convert<S, D>(in.v[k]);
      *reinterpret_cast<Pack<D, kVec>*>(dst) = out;
    } else {
      for (int64_t k = 0; k < kVec && i0 + k < n; ++k) dst[k] = convert<S, D>(src[k]);
    }
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

cudaError_t cast_many(const CastList& list, HalfType dt, bool to_half, cudaStream_t stream) {
  if (list.count < 0 || list.count > kMaxCastTensors) return cudaErrorInvalidValue;
  Chunks c{list, {}, 0u};
  c.first[0] = 0;
  for (int i = 0; i < list.count; ++i) {
    if (list.n[i] < 0 || (list.n[i] > 0 && (list.src[i] == nullptr || list.dst[i] == nullptr)))
      return cudaErrorInvalidValue;
    c.first[i + 1] = c.first[i] + (list.n[i] + kVec - 1) / kVec;
    if (aligned16(list.src[i]) && aligned16(list.dst[i])) c.aligned |= 1u << i;
  }
  const int64_t total = c.first[list.count];
  if (total == 0) return cudaSuccess;
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, int64_t(sm_count()) * 8);
  const dim3 grid(static_cast<unsigned>(blocks));
  with_type(dt, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if (to_half) cast_kernel<float, T><<<grid, kThreads, 0, stream>>>(c);
    else cast_kernel<T, float><<<grid, kThreads, 0, stream>>>(c);
  });
  return cudaGetLastError();
}

}  // namespace trainer::kernels
