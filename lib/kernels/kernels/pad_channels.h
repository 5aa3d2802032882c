// Zero-padding the channels of an NHWC image batch in one pass, casting on the way: ResNet's 3-channel stem input
// to the 4 (fp16 forward) or 8 (bf16 weight gradient) channels cuDNN's fast kernels take (models/stem_conv.cpp),
// which cuDNN otherwise pads itself, and a strided ATen copy plus fill is slower still. Plain CUDA behind a C++
// interface; returns the launch error (cudaSuccess when queued on `stream`).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/half_type.h"

namespace trainer::kernels {

// y (M rows of c_out values, in y_type) = x (M rows of c_in values, in x_type) followed by c_out - c_in zeros.
// 1 <= c_in <= c_out, c_out 4 or 8, y 16-byte aligned; else cudaErrorInvalidValue.
cudaError_t pad_channels(const void* x, ElemType x_type, int64_t M, int c_in, void* y, HalfType y_type, int c_out,
                         cudaStream_t stream);

}  // namespace trainer::kernels
