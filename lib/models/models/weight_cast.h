// A layer's weights cast to autocast's dtype as one autograd function: one multi-tensor cast forward and one back.
// Autocast casts each fp32 weight by itself and autograd casts each 16-bit gradient back: two small kernels per
// weight (ResNet-50's 53 convolutions: 0.31 ms of its bf16 step at bs 256, most of it launch latency:
// bench/results/2026-12-03_h200/run73_stem_norm_one_function).
#pragma once
#include <torch/types.h>

#include <vector>

namespace trainer {

// Whether cast_weights_for_autocast casts x's layer's weights: x on CUDA under CUDA autocast in a 16-bit dtype.
bool weight_cast_applies(const torch::Tensor& x);

// ws (fp32, on x's device) in autocast's dtype, their gradients cast back to fp32 in one pass once all of them are
// computed; ws as they are where weight_cast_applies(x) does not hold or a weight is not fp32 (autocast then casts
// them as usual). Undefined weights stay undefined.
std::vector<torch::Tensor> cast_weights_for_autocast(const torch::Tensor& x, const std::vector<torch::Tensor>& ws);

}  // namespace trainer
