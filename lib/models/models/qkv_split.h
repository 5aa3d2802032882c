// A transformer block's fused q/k/v projection and its split into q, k and v, with the backward in our kernel
// (lib/kernels/qkv_grad): the three gradients attention returns are stacked into the projection's output gradient
// and summed into its bias gradient in one pass, where ATen stacks them (unbind's backward) and then reduces the
// bias gradient in a pass of its own. The GEMM still adds the bias in its epilogue. For CUDA inputs under bf16 or
// fp16 autocast whose width the kernel takes; elsewhere ATen's linear and unbind.
#pragma once
#include <torch/types.h>

#include <vector>

namespace trainer {

// (q, k, v), each (B, N, D), views of linear(x, weight, bias) seen as (B, N, 3, D) (timm's qkv layout); x is
// (B, N, C). `fused` false keeps ATen's ops.
std::vector<torch::Tensor> qkv_projection(const torch::Tensor& x, const torch::Tensor& weight,
                                          const torch::Tensor& bias, bool fused);

// Whether qkv_projection(x, weight, bias, true) runs our kernel's backward.
bool qkv_projection_fuses(const torch::Tensor& x, const torch::Tensor& bias);

}  // namespace trainer
