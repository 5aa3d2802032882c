// One launch for a list of casts (see cast.h): each tensor gets ceil(n / 4096) blocks of 256 threads; a block finds
// its tensor by a scan over the (at most 8) first-block offsets, and each thread moves 4 groups of 4 values, 256
// groups apart (a warp's accesses contiguous), all loads issued before the stores: 16-byte fp32 and 8-byte 16-bit
// accesses where both buffers are 16-byte aligned, else element by element.
#include "cast.h"

#include <type_traits>

#include "internal/launch.cuh"
#include "internal/vec.cuh"

namespace trainer::kernels {
namespace {

constexpr int kVec = 4, kThreads = 256, kUnroll = 4, kPerBlock = kVec * kThreads * kUnroll;

struct Blocks {
  CastList list;
  int64_t first[kMaxCastTensors + 1];  // tensor i's blocks: first[i] .. first[i + 1] - 1
  unsigned aligned;                    // bit i: both of tensor i's buffers 16-byte aligned
};

// fp32 -> 16-bit rounds to nearest even (as a tensor cast does); 16-bit -> fp32 is exact
template <typename S, typename D> __device__ __forceinline__ D convert(S v) {
  if constexpr (std::is_same_v<D, float>) return to_f(v);
  else return from_f<D>(v);
}

template <typename S, typename D>
__global__ void __launch_bounds__(kThreads) cast_kernel(const Blocks b) {
  begin_dependent();
  int t = 0;
  while (int64_t(blockIdx.x) >= b.first[t + 1]) ++t;
  const int64_t n = b.list.n[t], base = (int64_t(blockIdx.x) - b.first[t]) * kPerBlock;
  const S* src = static_cast<const S*>(b.list.src[t]);
  D* dst = static_cast<D*>(b.list.dst[t]);
  if ((b.aligned >> t) & 1u) {
    Pack<S, kVec> in[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + (int64_t(u) * kThreads + threadIdx.x) * kVec;
      if (i + kVec <= n) in[u] = *reinterpret_cast<const Pack<S, kVec>*>(src + i);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + (int64_t(u) * kThreads + threadIdx.x) * kVec;
      if (i + kVec <= n) {
        Pack<D, kVec> out;
#pragma unroll
        for (int k = 0; k < kVec; ++k) out.v[k] = convert<S, D>(in[u].v[k]);
        *reinterpret_cast<Pack<D, kVec>*>(dst + i) = out;
      } else {
        for (int64_t k = i; k < n && k < i + kVec; ++k) dst[k] = convert<S, D>(src[k]);
      }
    }
  } else {
    for (int64_t i = base + threadIdx.x; i < n && i < base + kPerBlock; i += kThreads) dst[i] = convert<S, D>(src[i]);
  }
}

}  // namespace

cudaError_t cast_many(const CastList& list, HalfType dt, bool to_half, cudaStream_t stream) {
  if (list.count < 0 || list.count > kMaxCastTensors) return cudaErrorInvalidValue;
  Blocks b{list, {}, 0u};
  b.first[0] = 0;
  for (int i = 0; i < list.count; ++i) {
    if (list.n[i] < 0 || (list.n[i] > 0 && (list.src[i] == nullptr || list.dst[i] == nullptr)))
      return cudaErrorInvalidValue;
    b.first[i + 1] = b.first[i] + (list.n[i] + kPerBlock - 1) / kPerBlock;
    if (aligned16(list.src[i]) && aligned16(list.dst[i])) b.aligned |= 1u << i;
  }
  const int64_t blocks = b.first[list.count];
  if (blocks == 0) return cudaSuccess;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(blocks));
  with_type(dt, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if (to_half) launch_dependent(cast_kernel<float, T>, grid, dim3(kThreads), stream, b);
    else launch_dependent(cast_kernel<T, float>, grid, dim3(kThreads), stream, b);
  });
  return cudaGetLastError();
}

}  // namespace trainer::kernels
