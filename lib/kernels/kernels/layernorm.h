// LayerNorm over the last dimension of a transformer's fp32 residual stream (rows x D, row-major), fused with the
// residual add before it and with the casts around it:
//   forward:  s = x + a (the branch's bf16/fp16 output; none: s = x), y = (s - mean) * rstd * weight + bias written
//             in bf16/fp16 for the next GEMM, mean and rstd = 1 / sqrt(var + eps) kept per row (biased variance,
//             from the row held in registers: two passes over registers, no E[x^2] - E[x]^2);
//   backward: from the gradient of y (bf16/fp16) and of s (fp32, the stream's own path), g = ds + LayerNorm's input
//             gradient, written as dx (fp32) and da (bf16/fp16) at once; dweight and dbias through per-block
//             partial sums and one column-sum kernel.
// One warp per row, each lane holding D / 32 values as pairs (D a multiple of 64, at most 1024). Plain CUDA behind a
// C++ interface; models/fused_layernorm.cpp is the ATen-facing layer. Launchers return the launch error.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/half_type.h"

namespace trainer::kernels {

// The row widths the kernels take: 192, 256, 384, 512, 768, 1024 (ViT-Ti/S/B/L and friends).
bool ln_supports(int64_t D);

// s (written only where a is given) = x + a; y = LayerNorm(s) in dt; mean, rstd: rows floats each.
cudaError_t ln_forward(const float* x, const void* a, float* s, void* y, HalfType dt, int64_t rows, int64_t D,
                       const float* weight, const float* bias, float eps, float* mean, float* rstd,
                       cudaStream_t stream);

// fp32 workspace ln_backward needs on the current device for rows x D, with or without ds and da (its grid's
// partial sums: 2 x blocks x D).
int64_t ln_workspace_floats(int64_t rows, int64_t D, HalfType dt, bool with_ds, bool with_da);

// dy: the gradient of y (dt); ds: of s through its other use (fp32, may be null); s, mean, rstd, weight: the
// forward's. Writes dx = ds + dLayerNorm/ds (fp32), da (dt, may be null) = the same values, dweight, dbias (D).
cudaError_t ln_backward(const void* dy, const float* ds, const float* s, const float* mean, const float* rstd,
                        const float* weight, HalfType dt, int64_t rows, int64_t D, float* dx, void* da,
                        float* dweight, float* dbias, float* workspace, cudaStream_t stream);

}  // namespace trainer::kernels
