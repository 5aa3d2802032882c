// Host-side launch helpers the kernels share: the current device's SM count (asked once) and the element type
// behind a HalfType.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

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

// f(T*) with T the element type of dt (a null pointer of it, for the type)
template <typename F> void with_type(HalfType dt, F&& f) {
  if (dt == HalfType::bf16) f(static_cast<__nv_bfloat16*>(nullptr));
  else f(static_cast<__half*>(nullptr));
}

}  // namespace
}  // namespace trainer::kernels
