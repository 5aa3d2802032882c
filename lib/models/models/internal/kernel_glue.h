// What the ATen-facing layers of our CUDA kernels (fused_batchnorm.cpp, max_pool.cpp, ...) share: the kernels'
// 16-bit type of a tensor, the current stream of its device, whether autocast runs in a type they take, pointer
// alignment, and a launch error turned into an exception naming the op.
// Only for builds with the kernels (TRAINER_WITH_KERNELS).
#pragma once
#include <torch/types.h>

#include <ATen/autocast_mode.h>
#include <c10/cuda/CUDAStream.h>

#include <cstdint>

#include "core/check.h"
#include "kernels/half_type.h"

namespace trainer::glue {

inline kernels::HalfType half_type_of(const torch::Tensor& t) {
  return t.scalar_type() == torch::kBFloat16 ? kernels::HalfType::bf16 : kernels::HalfType::fp16;
}

inline cudaStream_t stream_of(const torch::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
}

// t's element type as the layout kernels read it (fp32, bf16, fp16); false for other types
inline bool elem_type_of(const torch::Tensor& t, kernels::ElemType* out) {
  switch (t.scalar_type()) {
    case torch::kFloat32: *out = kernels::ElemType::f32; return true;
    case torch::kBFloat16: *out = kernels::ElemType::bf16; return true;
    case torch::kHalf: *out = kernels::ElemType::fp16; return true;
    default: return false;
  }
}

// CUDA autocast on, in bf16 or fp16
inline bool autocast_half() {
  if (!at::autocast::is_autocast_enabled(at::kCUDA)) return false;
  const auto dt = at::autocast::get_autocast_dtype(at::kCUDA);
  return dt == at::kBFloat16 || dt == at::kHalf;
}

// x on CUDA under bf16/fp16 autocast with a 1-D fp32 CUDA bias: where a kernel that adds or sums a linear layer's
// bias can take over (each kernel checks its own widths too)
inline bool fusable_bias(const torch::Tensor& x, const torch::Tensor& bias) {
  if (!x.defined() || !x.is_cuda() || !bias.defined() || !bias.is_cuda()) return false;
  return bias.scalar_type() == torch::kFloat32 && bias.dim() == 1 && autocast_half();
}

// t's data `bytes`-aligned (an undefined tensor counts as aligned)
inline bool aligned(const torch::Tensor& t, int bytes) {
  return !t.defined() || reinterpret_cast<uintptr_t>(t.data_ptr()) % bytes == 0;
}

inline void check_launch(cudaError_t e, const char* op, const char* what) {
  TRAINER_CHECK(e == cudaSuccess, op, " (", what, "): ", cudaGetErrorString(e));
}

}  // namespace trainer::glue
