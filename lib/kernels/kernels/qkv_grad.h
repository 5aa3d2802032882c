// The gradient of a transformer's fused q/k/v projection output: dq, dk, dv (rows x D each, bf16/fp16, row-major:
// the (B, N, heads, head_dim) layout attention returns them in) stacked into rows x 3D as the projection wrote
// q | k | v, with the column sums of the result (the projection bias's gradient, fp32) in the same pass, so the
// bias costs no reduction of its own. An absent (null) gradient counts as zeros. D a multiple of 8, all pointers
// 16-byte aligned. Plain CUDA behind a C++ interface; models/qkv_split.cpp is the ATen-facing layer.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/half_type.h"

namespace trainer::kernels {

bool qkv_grad_supports(int64_t D);

// fp32 workspace qkv_grad needs for rows x D on the current device.
int64_t qkv_grad_workspace_floats(int64_t rows, int64_t D);

// out: rows x 3D in dt; dbias: 3D floats.
cudaError_t qkv_grad(const void* dq, const void* dk, const void* dv, HalfType dt, int64_t rows, int64_t D, void* out,
                     float* dbias, float* workspace, cudaStream_t stream);

}  // namespace trainer::kernels
