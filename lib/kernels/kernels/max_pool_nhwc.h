// Max pooling over NHWC activations (a channels_last NCHW tensor), bf16 or fp16, square window k, stride s, padding
// p, no dilation, floor output size: ResNet's 3x3 stride-2 stem pool. The forward also writes, per output value, the
// window position of its maximum (kh * k + kw, one byte: k <= 15) instead of ATen's int64 input index, so the
// backward gathers each input's gradient from the at most ceil(k/s)^2 windows covering it, without atomics.
// Plain CUDA behind a C++ interface (no torch headers); models/max_pool.cpp is the ATen-facing layer. Each launcher
// returns the launch error (cudaSuccess when the kernel was queued on `stream`).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/half_type.h"

namespace trainer::kernels {

struct PoolShape {
  int n, h, w, c;  // input, NHWC
  int k, s, p;     // window, stride, padding
  int out_h() const { return (h + 2 * p - k) / s + 1; }
  int out_w() const { return (w + 2 * p - k) / s + 1; }
};

// y (n, out_h, out_w, c) = the window maxima of x (padding never wins; the first maximum in scan order, NaN
// winning, as ATen's); arg (same shape, may be null) = the position of each maximum in its window.
cudaError_t max_pool_forward(const void* x, void* y, uint8_t* arg, HalfType dt, const PoolShape& shape,
                             cudaStream_t stream);

// dx (n, h, w, c) = the sum of dy over the windows whose maximum (arg) is that input value.
cudaError_t max_pool_backward(const void* dy, const uint8_t* arg, void* dx, HalfType dt, const PoolShape& shape,
                              cudaStream_t stream);

}  // namespace trainer::kernels
