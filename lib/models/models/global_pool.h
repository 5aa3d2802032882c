// Global average pooling, (N, C, H, W) -> (N, C), whose gradient keeps a channels_last input's layout on CUDA: the
// mean's own backward gives an NCHW gradient, which a channels_last consumer (the last fused batch norm) then
// transposes (0.13 ms of ResNet-50's bf16 step at bs 256: bench/results/2026-12-03_h200/run72_relu_bits).
#pragma once
#include <torch/types.h>

namespace trainer {

// x.mean({2, 3}); for a channels_last CUDA x as one autograd function whose backward writes channels_last.
torch::Tensor global_avg_pool(const torch::Tensor& x);

}  // namespace trainer
