// A transformer block's residual add and the LayerNorm after it in our kernels (lib/kernels/layernorm), as one
// autograd function: the fp32 residual stream s = x + a and LayerNorm(s) written straight in the autocast dtype
// for the next GEMM; the backward sums the stream's own gradient into LayerNorm's input gradient and writes it in
// fp32 and in the branch's dtype at once, with the weight and bias gradients. For CUDA fp32 streams under bf16 or
// fp16 autocast; elsewhere callers keep ATen's add, layer_norm and casts.
#pragma once
#include <torch/types.h>

#include <utility>

#include "models/fused_batchnorm.h"  // FusedNorm: model.fused_norm covers both norms

namespace trainer {

// Whether fused_add_layernorm runs our kernels for the stream x under `policy`: a build with the kernels, CUDA,
// fp32 contiguous x whose last dimension the kernels take (192-1024 in steps of 64 or 128), autocast on in bf16 or
// fp16.
bool fused_layernorm_applies(const torch::Tensor& x, FusedNorm policy);

// (LayerNorm(x + a) in the autocast dtype, the stream x + a in fp32); a undefined for none (the stream is then x's
// values), else x's shape in bf16/fp16 (the branch's output). Without want_stream the second is undefined (a last
// norm whose input goes nowhere else).
std::pair<torch::Tensor, torch::Tensor> fused_add_layernorm(const torch::Tensor& x, const torch::Tensor& a,
                                                            const torch::Tensor& weight, const torch::Tensor& bias,
                                                            double eps, bool want_stream);

}  // namespace trainer
