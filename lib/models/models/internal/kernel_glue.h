// What the ATen-facing layers of our CUDA kernels (fused_batchnorm.cpp, max_pool.cpp) share: the kernels' 16-bit
// type of a tensor, the current stream of its device, and a launch error turned into an exception naming the op.
// Only for builds with the kernels (TRAINER_WITH_KERNELS).
#pragma once
#include <torch/types.h>

#include <c10/cuda/CUDAStream.h>

#include "core/check.h"
#include "kernels/half_type.h"

namespace trainer::glue {

inline kernels::HalfType half_type_of(const torch::Tensor& t) {
  return t.scalar_type() == torch::kBFloat16 ? kernels::HalfType::bf16 : kernels::HalfType::fp16;
}

inline cudaStream_t stream_of(const torch::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
}

inline void check_launch(cudaError_t e, const char* op, const char* what) {
  TRAINER_CHECK(e == cudaSuccess, op, " (", what, "): ", cudaGetErrorString(e));
}

}  // namespace trainer::glue
