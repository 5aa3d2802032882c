// ResNet's 7x7 stride-2 stem convolution under bf16 autocast, its forward computed in fp16. cuDNN (9.19, H200) has
// no fast bf16 kernel for 3-channel inputs: forward 1.77 ms in bf16 against 0.56 ms in fp16 at bs 256, 224 px
// (scripts/probes/stem_conv.py). The images and weights fit fp16 (its 5 exponent bits hold normalised pixels and
// initialised weights; 10 mantissa bits are more than bf16's 7) and the output is rounded to bf16 as autocast's
// would be. The weight gradient stays bf16: in fp16 the unscaled activation gradients would underflow.
#pragma once
#include <torch/types.h>

#include "models/batchnorm.h"

namespace trainer {

// Whether stem_conv takes the fp16 forward for x: enabled, CUDA, bf16 autocast on, at most 4 input channels.
bool stem_conv_fp16_applies(const torch::Tensor& x, bool enabled);
// conv2d(x, weight, stride, padding) without bias, as autocast would run it, the forward in fp16 where
// stem_conv_fp16_applies; else at::conv2d.
torch::Tensor stem_conv(const torch::Tensor& x, const torch::Tensor& weight, int64_t stride, int64_t padding,
                        bool fp16_forward);
// relu(bn(stem_conv(x))): where the fp16 forward applies and bn fuses inside (SyncableBatchNorm2dImpl::fuses_inside,
// training), one function whose norm reads the convolution's fp16 output and writes bf16 (no cast of the output);
// else stem_conv, then bn's forward_act.
torch::Tensor stem_conv_bn_relu(const torch::Tensor& x, const torch::Tensor& weight, int64_t stride, int64_t padding,
                                bool fp16_forward, SyncableBatchNorm2dImpl& bn);

}  // namespace trainer
