// ResNet as in timm/torchvision (v1.5: stride on the 3x3 conv), with drop-path and a small-image stem.
#include "models/resnet.h"

#include <torch/torch.h>

#include <tuple>

#include "core/check.h"
#include "models/internal/conv_layers.h"
#include "models/max_pool.h"
#include "models/stem_conv.h"
#include "models/stem_s2d.h"
#include "models/weight_cast.h"

namespace trainer {
namespace nn = torch::nn;

using conv_layers::conv;
using conv_layers::conv_with;
using conv_layers::conv_flops;
using conv_layers::out_size;

// ---- block ----

ResBlockImpl::ResBlockImpl(int64_t inplanes, int64_t planes, int64_t stride, bool bottleneck, int64_t groups,
                           int64_t base_width, double drop_path)
    : bottleneck_(bottleneck), stride_(stride), drop_path_(drop_path) {
  if (bottleneck) {
    const int64_t width = planes * base_width / 64 * groups;
    out_channels_ = planes * 4;
    conv1_ = register_module("conv1", conv(inplanes, width, 1));
    bn1_ = register_module("bn1", SyncableBatchNorm2d(width));
    conv2_ = register_module("conv2", conv(width, width, 3, stride, groups));
    bn2_ = register_module("bn2", SyncableBatchNorm2d(width));
    conv3_ = register_module("conv3", conv(width, out_channels_, 1));
    bn3_ = register_module("bn3", SyncableBatchNorm2d(out_channels_));
  } else {
    TRAINER_CHECK(groups == 1 && base_width == 64, "BasicBlock supports only groups=1 and base_width=64");
    out_channels_ = planes;
    conv1_ = register_module("conv1", conv(inplanes, planes, 3, stride));
    bn1_ = register_module("bn1", SyncableBatchNorm2d(planes));
    conv2_ = register_module("conv2", conv(planes, planes, 3));
    bn2_ = register_module("bn2", SyncableBatchNorm2d(planes));
  }
  if (stride != 1 || inplanes != out_channels_) {
    downsample_ = register_module(
        "downsample", nn::Sequential(conv(inplanes, out_channels_, 1, stride), SyncableBatchNorm2d(out_channels_)));
  }
}

std::pair<torch::Tensor, torch::Tensor> ResBlockImpl::forward_forked(const torch::Tensor& x,
                                                                     const torch::Tensor& x_shortcut, bool fork) {
  auto* down = downsample_ ? downsample_->ptr<nn::Conv2dImpl>(0).get() : nullptr;
  const std::vector<torch::Tensor> w = cast_weights_for_autocast(
      x, {conv1_->weight, conv2_->weight, bottleneck_ ? conv3_->weight : torch::Tensor(),
          down ? down->weight : torch::Tensor()});
  torch::Tensor y = bn1_->forward_act(conv_with(*conv1_, x, w[0]), torch::Tensor(), /*relu=*/true);
  if (bottleneck_) y = bn2_->forward_act(conv_with(*conv2_, y, w[1]), torch::Tensor(), /*relu=*/true);
  SyncableBatchNorm2d& last = bottleneck_ ? bn3_ : bn2_;
  torch::Tensor pre = bottleneck_ ? conv_with(*conv3_, y, w[2]) : conv_with(*conv2_, y, w[1]);
  torch::Tensor shortcut =
      down ? downsample_->ptr<SyncableBatchNorm2dImpl>(1)->forward(conv_with(*down, x_shortcut, w[3])) : x_shortcut;
  // the last norm, the residual add and the ReLU in one pass, unless drop-path scales the branch in between
  if (drop_path_ == 0 || !is_training()) return last->forward_act_forked(pre, shortcut, /*relu=*/true, fork);
  y = drop_path(last(pre), drop_path_, is_training());
  y = y.add_(shortcut).relu_();
  return {y, y};
}

void ResBlockImpl::zero_init_last() {
  torch::NoGradGuard ng;
  (bottleneck_ ? bn3_ : bn2_)->weight.zero_();
}

double ResBlockImpl::flops(int64_t h, int64_t w) const {
  const int64_t ho = out_size(h, 3, stride_), wo = out_size(w, 3, stride_);
  double f = 0;
  if (bottleneck_) {
    f += conv_flops(conv1_, h, w) + conv_flops(conv2_, ho, wo) + conv_flops(conv3_, ho, wo);
  } else {
    f += conv_flops(conv1_, ho, wo) + conv_flops(conv2_, ho, wo);
  }
  if (downsample_) {
    f += conv_flops(conv1_->options.in_channels(), out_channels_, 1, 1, ho, wo);
  }
  return f;
}

// ---- network ----

ResNetImpl::ResNetImpl(const ResNetOptions& opt) : opt_(opt) {
  TRAINER_CHECK(opt.layers.size() == 4, "ResNet needs 4 stages, got ", opt.layers.size());
  const int64_t stem = 64;
  conv1_ = register_module("conv1", opt.small_stem ? conv(opt.in_chans, stem, 3, 1) : conv(opt.in_chans, stem, 7, 2));
  bn1_ = register_module("bn1", SyncableBatchNorm2d(stem));
  int64_t total_blocks = 0;
  for (auto n : opt.layers) total_blocks += n;
  int64_t inplanes = stem, block_idx = 0;
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t planes = 64 << stage;
    nn::ModuleList layer;
    for (int64_t i = 0; i < opt.layers[stage]; ++i) {
      const int64_t stride = (stage > 0 && i == 0) ? 2 : 1;
      const double dpr = total_blocks > 1 ? opt.drop_path_rate * block_idx / (total_blocks - 1) : 0.0;
      ResBlock b(inplanes, planes, stride, opt.bottleneck, opt.groups, opt.base_width, dpr);
      inplanes = b->out_channels();
      layer->push_back(b);
      blocks_.push_back(b);
      ++block_idx;
    }
    register_module("layer" + std::to_string(stage + 1), layer);
  }
  num_features_ = inplanes;
  fc_ = register_module("fc", nn::Linear(num_features_, opt.num_classes));
  conv_layers::init_weights(*this);
  set_fused_batchnorm(*this, opt.fused_norm);
  if (opt.zero_init_last)
    for (auto& b : blocks_) b->zero_init_last();
}

torch::Tensor ResNetImpl::forward_features(const torch::Tensor& x) {
  torch::Tensor y;
  if (opt_.small_stem)
    y = bn1_->forward_act(conv1_(x), torch::Tensor(), /*relu=*/true);
  else if (opt_.stem_s2d && x.is_cuda() && stem_s2d_applies(x, conv1_->weight, /*stride=*/2, /*pad=*/3))
    y = bn1_->forward_act(stem_conv_s2d(x, conv1_->weight, /*pad=*/3), torch::Tensor(), /*relu=*/true);
  else
    y = stem_conv_bn_relu(x, conv1_->weight, 2, 3, opt_.stem_fp16, *bn1_);
  if (!opt_.small_stem) y = max_pool2d_nhwc(y, /*k=*/3, /*s=*/2, /*p=*/1, opt_.fused_norm);
  // each block's output reaches the next block twice (convolution, shortcut): see ResBlockImpl::forward_forked
  torch::Tensor y_shortcut = y;
  for (size_t i = 0; i < blocks_.size(); ++i)
    std::tie(y, y_shortcut) = blocks_[i]->forward_forked(y, y_shortcut, /*fork=*/i + 1 < blocks_.size());
  return y;
}

torch::Tensor ResNetImpl::forward_head(const torch::Tensor& f, bool pre_logits) {
  return conv_layers::pooled_head(f, fc_, opt_.drop_rate, opt_.num_classes, is_training(), pre_logits);
}

void ResNetImpl::reset_classifier(int64_t num_classes) {
  opt_.num_classes = num_classes;
  fc_ = replace_module("fc", nn::Linear(num_features_, std::max<int64_t>(num_classes, 1)));
}

double ResNetImpl::flops_per_image() const {
  int64_t h = opt_.input_size, w = opt_.input_size;
  double f = 0;
  const int64_t k = opt_.small_stem ? 3 : 7, s = opt_.small_stem ? 1 : 2;
  h = out_size(h, k, s);
  w = out_size(w, k, s);
  f += conv_flops(opt_.in_chans, 64, k, 1, h, w);
  if (!opt_.small_stem) {
    h = (h + 2 - 3) / 2 + 1;
    w = (w + 2 - 3) / 2 + 1;
  }
  for (const auto& b : blocks_) {
    f += b->flops(h, w);
    // every stage but the first halves the grid in its first block
    const int64_t ho = out_size(h, 3, b->options_stride()), wo = out_size(w, 3, b->options_stride());
    h = ho;
    w = wo;
  }
  f += 2.0 * num_features_ * opt_.num_classes;
  return f;
}

DataDefaults ResNetImpl::data_defaults() const {
  DataDefaults d;
  d.input_size = opt_.input_size;
  d.crop_pct = 0.875;
  d.interpolation = "bilinear";
  if (opt_.in_chans != 3) {
    d.mean.assign(opt_.in_chans, 0.449);  // ImageNet's channel average
    d.std.assign(opt_.in_chans, 0.226);
  }
  return d;
}

std::shared_ptr<ResNetImpl> make_resnet(const ResNetOptions& opt) { return std::make_shared<ResNetImpl>(opt); }

}  // namespace trainer
