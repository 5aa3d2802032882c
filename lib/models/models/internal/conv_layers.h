// What the convolutional networks (resnet.cpp, wide_resnet.cpp) share: a bias-free "same"-padded convolution, its
// output size and FLOPs, and timm's ResNet initialisation.
#pragma once
#include <torch/nn/init.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/functional/dropout.h>

#include "models/global_pool.h"

namespace trainer::conv_layers {

inline torch::nn::Conv2d conv(int64_t in, int64_t out, int64_t k, int64_t stride = 1, int64_t groups = 1) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, k).stride(stride).padding(k / 2).groups(groups).bias(false));
}

// c's convolution of x with weight w in c's place (its cast to autocast's dtype: models/weight_cast.h)
inline torch::Tensor conv_with(const torch::nn::Conv2dImpl& c, const torch::Tensor& x, const torch::Tensor& w) {
  const auto& o = c.options;
  TORCH_CHECK(std::holds_alternative<torch::ExpandingArray<2>>(o.padding()) &&
                  std::holds_alternative<torch::enumtype::kZeros>(o.padding_mode()),
              "conv_with: explicit zero padding expected");
  return at::conv2d(x, w, o.bias() ? c.bias : torch::Tensor(), *o.stride(),
                    *std::get<torch::ExpandingArray<2>>(o.padding()), *o.dilation(), o.groups());
}

// 2 * MACs of a conv producing (cout, h_out, w_out)
inline double conv_flops(int64_t cin, int64_t cout, int64_t k, int64_t groups, int64_t h_out, int64_t w_out) {
  return 2.0 * static_cast<double>(cin / groups) * k * k * cout * h_out * w_out;
}

inline double conv_flops(const torch::nn::Conv2d& c, int64_t h_out, int64_t w_out) {
  const auto& o = c->options;
  return conv_flops(o.in_channels(), o.out_channels(), (*o.kernel_size())[0], o.groups(), h_out, w_out);
}

// output side of a "same"-padded k x k convolution (or pooling) with this stride
inline int64_t out_size(int64_t in, int64_t k, int64_t stride) { return (in + 2 * (k / 2) - k) / stride + 1; }

// timm's init: kaiming-normal (fan_out, relu) convs, unit BN.
inline void init_weights(torch::nn::Module& m) {
  for (auto& kv : m.named_modules(/*name_prefix=*/"", /*include_self=*/false)) {
    if (auto* c = kv.value()->as<torch::nn::Conv2d>()) {
      torch::nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
    } else if (auto* b = kv.value()->as<torch::nn::BatchNorm2d>()) {
      torch::nn::init::ones_(b->weight);
      torch::nn::init::zeros_(b->bias);
    }
  }
}

// The head of both: global average pooling, dropout in training, fc (none with 0 classes or pre_logits).
inline torch::Tensor pooled_head(const torch::Tensor& features, torch::nn::Linear& fc, double drop_rate,
                                 int64_t num_classes, bool training, bool pre_logits) {
  torch::Tensor y = global_avg_pool(features);
  if (drop_rate > 0) y = torch::dropout(y, drop_rate, training);
  if (pre_logits) return y;
  return num_classes > 0 ? fc(y) : y;
}

}  // namespace trainer::conv_layers
