// The space-to-depth rearrangement of ResNet's stem input (models/stem_s2d.h) in one pass, zero-padded and cast on
// the way: a 7x7 stride-2 convolution over C channels is a 4x4 stride-1 convolution over the 2x2 phases of its
// padded input (4C channels), which cuDNN runs with its ordinary fast kernels (3 channels get slow ones in bf16).
// Plain CUDA behind a C++ interface; returns the launch error (cudaSuccess when queued on `stream`).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/half_type.h"
#include "kernels/pad_channels.h"

namespace trainer::kernels {

// x: N x H x W x c_in (NHWC, in x_type); y: N x Ho x Wo x c_out (in y_type) with Ho = (H + 2 pad) / 2,
// Wo = (W + 2 pad) / 2: y[n, i, j, (2 bh + bw) c_in + c] = x[n, 2i + bh - pad, 2j + bw - pad, c], zero outside x and
// for channels from 4 c_in on. H + 2 pad and W + 2 pad even, 4 c_in <= c_out, c_out 8 or 16, y 16-byte aligned;
// else cudaErrorInvalidValue.
cudaError_t space_to_depth(const void* x, ElemType x_type, int64_t N, int64_t H, int64_t W, int c_in, int pad,
                           void* y, HalfType y_type, int c_out, cudaStream_t stream);

}  // namespace trainer::kernels
