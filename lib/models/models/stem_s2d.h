// ResNet's 7x7 stride-2 stem convolution as a 4x4 stride-1 convolution over the space-to-depth rearrangement of its
// padded input, as MLPerf's ResNet-50 runs it: y[p, q] = sum_{r,s} w[r, s] x'[2p + r, 2q + s] with x' the input
// padded by 3 is, writing r = 2a + b (w zero at r = 7), sum_{a,b} w[2a + b] X_b[p + a] with X_b[j] = x'[2j + b]: the
// four 2x2 phases of x' as 4C channels of half its size. cuDNN has slow kernels only for so few input channels (3 in
// bf16: forward 1.77 ms, weight gradient 0.89 ms at bs 256 on the H200, bench/results/2026-12-02_h200/
// run61_stem_probe_wrn16 and 2026-12-04_h200/run77_pad_kernel_e2e); for 12 (16 with padding) it runs its ordinary
// ones, in the autocast dtype. The same sums in another order: within the dtype's rounding of the direct convolution.
#pragma once
#include <torch/types.h>

namespace trainer {

// Channels of the rearranged input for c input channels: 4c rounded up to 8 (whole 16-byte rows).
int64_t stem_s2d_channels(int64_t c);

// x (N, C, H, W) padded by `pad` on every side, H + 2 pad and W + 2 pad even -> (N, stem_s2d_channels(C),
// (H + 2 pad) / 2, (W + 2 pad) / 2), channels_last in `dtype`: channel (2 bh + bw) C + c at (i, j) holds
// x[c, 2i + bh - pad, 2j + bw - pad] (zero outside x and in the rounding channels). Our kernel on CUDA for
// channels_last inputs, ATen's pad and permute elsewhere. Not differentiable (the stem's input needs no gradient).
torch::Tensor stem_space_to_depth(const torch::Tensor& x, int64_t pad, torch::ScalarType dtype);

// The 7x7 weight (K, C, 7, 7) as the 4x4 weight (K, stem_s2d_channels(C), 4, 4) of the same convolution over
// stem_space_to_depth's output, through differentiable ATen ops (the 7x7 weight's gradient flows back through it).
torch::Tensor stem_s2d_weight(const torch::Tensor& w);

// Whether stem_conv_s2d computes conv2d(x, w, stride 2, padding pad) for these: a 7x7 weight over C <= 4 channels,
// H + 2 pad and W + 2 pad even, x needing no gradient.
bool stem_s2d_applies(const torch::Tensor& x, const torch::Tensor& w, int64_t stride, int64_t pad);

// conv2d(x, w, stride 2, padding pad) as the 4x4 convolution over the rearranged input (stem_s2d_applies must hold),
// in autocast's dtype where autocast is on (else x's).
torch::Tensor stem_conv_s2d(const torch::Tensor& x, const torch::Tensor& w, int64_t pad);

}  // namespace trainer
