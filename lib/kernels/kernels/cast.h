// Casts between fp32 and a 16-bit type for up to kMaxCastTensors tensors in one launch: a layer's weights to
// autocast's type and their gradients back (models/weight_cast.h), where a cast per tensor costs a launch each.
// Plain CUDA behind a C++ interface; returns the launch error (cudaSuccess when queued on `stream`).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/half_type.h"

namespace trainer::kernels {

constexpr int kMaxCastTensors = 8;

// count pairs of buffers of n[i] elements each (dense, any alignment; 16-byte aligned ones move 8 at a time)
struct CastList {
  const void* src[kMaxCastTensors] = {};
  void* dst[kMaxCastTensors] = {};
  int64_t n[kMaxCastTensors] = {};
  int count = 0;
};

// to_half: src fp32, dst in dt (rounded to nearest even, as a tensor cast rounds); else src in dt, dst fp32.
cudaError_t cast_many(const CastList& list, HalfType dt, bool to_half, cudaStream_t stream);

}  // namespace trainer::kernels
