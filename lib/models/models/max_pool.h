// Max pooling for channels_last bf16/fp16 CUDA activations in our NHWC kernels (lib/kernels/max_pool_nhwc), as one
// autograd function that saves a byte per output for its backward instead of ATen's int64 indices; ATen's
// max_pool2d everywhere else. Same values and gradients as ATen's (the first maximum in scan order wins).
#pragma once
#include <torch/types.h>

#include "models/fused_batchnorm.h"  // FusedNorm

namespace trainer {

// max_pool2d(x, k, stride s, padding p) (no dilation, floor sizes): our kernels where `policy` is not off and x is
// CUDA, 4-D, channels_last contiguous, bf16 or fp16, with fewer than 2^31 values and k <= 15; else ATen's.
torch::Tensor max_pool2d_nhwc(const torch::Tensor& x, int64_t k, int64_t s, int64_t p, FusedNorm policy);
// Whether max_pool2d_nhwc takes our kernels for x.
bool max_pool_nhwc_applies(const torch::Tensor& x, int64_t k, int64_t s, int64_t p, FusedNorm policy);

}  // namespace trainer
