// Host-side launch helpers the kernels share: the current device's SM count (asked once) and the element type
// behind a HalfType.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "kernels/half_type.h"

namespace trainer::kernels {
namespace {

inline int sm_count() {
  static const int n = [] {
    int dev = 0, count = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev);
    return count > 0 ? count : 1;
  }();
  return n;
}

// Programmatic dependent launch (sm_90+): a kernel queued by launch_dependent may be scheduled while the kernel
// before it on the stream is still running, which hides its launch latency behind that kernel's tail. Such a kernel
// calls begin_dependent() before it touches memory: it returns once the previous grid has completed and its writes
// are visible (then lets the next dependent kernel be scheduled). Plain launches below sm_90 or where the
// environment sets TRAINER_PDL=0; begin_dependent() returns at once in a plainly launched kernel.
__device__ __forceinline__ void begin_dependent() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

inline bool dependent_launch_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("TRAINER_PDL");
    if (e != nullptr && std::strcmp(e, "0") == 0) return false;
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
      return false;
    return major >= 9;
  }();
  return on;
}

// kernel<<<grid, block, 0, s>>>(args...), as a programmatic dependent launch where enabled (errors: cudaGetLastError)
template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t s, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = 0;
  cfg.stream = s;
  cudaLaunchAttribute attr = {};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = dependent_launch_enabled() ? 1 : 0;
  (void)cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

// p 16-byte aligned (a null pointer counts as aligned)
inline bool aligned16(const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// f(S*) with S the element type of et (a null pointer of it, for the type)
template <typename F> void with_elem_type(ElemType et, F&& f) {
  if (et == ElemType::f32) f(static_cast<float*>(nullptr));
  else if (et == ElemType::bf16) f(static_cast<__nv_bfloat16*>(nullptr));
  else f(static_cast<__half*>(nullptr));
}

// f(T*) with T the element type of dt (a null pointer of it, for the type)
template <typename F> void with_type(HalfType dt, F&& f) {
  if (dt == HalfType::bf16) f(static_cast<__nv_bfloat16*>(nullptr));
  else f(static_cast<__half*>(nullptr));
}

}  // namespace
}  // namespace trainer::kernels
