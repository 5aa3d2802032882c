// A linear layer followed by the exact GELU, with the bias and the GELU in our kernels (lib/kernels/bias_gelu):
// the GEMM runs without its bias, one kernel adds it and applies GELU, and the backward's kernel writes GELU's
// input gradient and the bias gradient in the same pass (no separate bias reduction). For CUDA inputs under bf16 or
// fp16 autocast with an fp32 bias whose size the kernels take; elsewhere it is ATen's gelu(linear(x, w, b)).
#pragma once
#include <torch/types.h>

namespace trainer {

// gelu(linear(x, weight, bias)), erf GELU as timm's nn.GELU; `fused` false keeps ATen's ops throughout.
torch::Tensor linear_gelu(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias, bool fused);

// Whether linear_gelu(x, weight, bias, true) runs our kernels.
bool linear_gelu_fuses(const torch::Tensor& x, const torch::Tensor& bias);

}  // namespace trainer
