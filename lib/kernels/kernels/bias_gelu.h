// A linear layer's bias and the exact (erf) GELU after it, as the MLP of a transformer block runs them when its
// GEMM is computed without the bias (rows x C, row-major, bf16/fp16 activations, fp32 bias):
//   forward:  hb = (h + bias) rounded to the activation type (what a GEMM with the bias would have written),
//             y = GELU(hb) = hb * (1 + erf(hb / sqrt 2)) / 2 in dt; hb is not stored (the backward recomputes it);
//   backward: dh = dy * GELU'(hb) in dt, and dbias = the column sums of dh (before rounding) in fp32, through
//             per-block partial sums and one column-sum kernel: the bias gradient costs no pass of its own.
// C a multiple of 8, h/y/dy/dh 16-byte aligned (8-value vectors). Plain CUDA behind a C++ interface;
// models/fused_bias_gelu.cpp is the ATen-facing layer. Launchers return the launch error.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/half_type.h"

namespace trainer::kernels {

bool bias_gelu_supports(int64_t C);

cudaError_t bias_gelu_forward(const void* h, const float* bias, void* y, HalfType dt, int64_t rows, int64_t C,
                              cudaStream_t stream);

// fp32 workspace bias_gelu_backward needs for rows x C on the current device.
int64_t bias_gelu_workspace_floats(int64_t rows, int64_t C);

// dy: the gradient of y; h, bias: the forward's inputs. Writes dh (dt; it may be dy, overwritten in place) and
// dbias (C floats).
cudaError_t bias_gelu_backward(const void* dy, const void* h, const float* bias, HalfType dt, int64_t rows, int64_t C,
                               void* dh, float* dbias, float* workspace, cudaStream_t stream);

}  // namespace trainer::kernels
