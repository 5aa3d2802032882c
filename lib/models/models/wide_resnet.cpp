// Wide ResNet (CIFAR form) with pre-activation blocks, as in the authors' code (szagoruyko/wide-residual-networks).
#include "models/wide_resnet.h"

#include <torch/torch.h>

#include "core/check.h"
#include "models/internal/conv_layers.h"

namespace trainer {
namespace nn = torch::nn;

using conv_layers::conv;
using conv_layers::conv_flops;
using conv_layers::out_size;

// ---- block ----

PreActBlockImpl::PreActBlockImpl(int64_t in, int64_t out, int64_t stride, double drop_path)
    : stride_(stride), drop_path_(drop_path) {
  bn1_ = register_module("bn1", SyncableBatchNorm2d(in));
  conv1_ = register_module("conv1", conv(in, out, 3, stride));
  bn2_ = register_module("bn2", SyncableBatchNorm2d(out));
  conv2_ = register_module("conv2", conv(out, out, 3));
  if (stride != 1 || in != out) shortcut_ = register_module("shortcut", conv(in, out, 1, stride));
}

torch::Tensor PreActBlockImpl::forward(const torch::Tensor& x) {
  torch::Tensor o = bn1_->forward_act(x, torch::Tensor(), /*relu=*/true);
  torch::Tensor y = conv2_(bn2_->forward_act(conv1_(o), torch::Tensor(), /*relu=*/true));
  if (drop_path_ > 0) y = drop_path(y, drop_path_, is_training());
  return y + (shortcut_ ? shortcut_(o) : x);
}

double PreActBlockImpl::flops(int64_t h, int64_t w) const {
  const int64_t ho = out_size(h, 3, stride_), wo = out_size(w, 3, stride_);
  double f = conv_flops(conv1_, ho, wo) + conv_flops(conv2_, ho, wo);
  if (shortcut_) f += conv_flops(shortcut_, ho, wo);
  return f;
}

// ---- network ----

WideResNetImpl::WideResNetImpl(const WideResNetOptions& opt) : opt_(opt) {
  TRAINER_CHECK(opt.depth >= 10 && (opt.depth - 4) % 6 == 0, "Wide ResNet depth must be 6n + 4 (10, 16, 22, 28, 40...), got ",
                opt.depth);
  TRAINER_CHECK(opt.widen >= 1, "Wide ResNet widening factor must be at least 1, got ", opt.widen);
  const int64_t per_stage = (opt.depth - 4) / 6, total_blocks = 3 * per_stage, stem = 16;
  conv1_ = register_module("conv1", conv(opt.in_chans, stem, 3));
  int64_t in = stem, block_idx = 0;
  for (int stage = 0; stage < 3; ++stage) {
    const int64_t out = (stem << stage) * opt.widen;
    nn::ModuleList layer;
    for (int64_t i = 0; i < per_stage; ++i) {
      const int64_t stride = (stage > 0 && i == 0) ? 2 : 1;
      const double dpr = total_blocks > 1 ? opt.drop_path_rate * block_idx / (total_blocks - 1) : 0.0;
      PreActBlock b(in, out, stride, dpr);
      layer->push_back(b);
      blocks_.push_back(b);
      in = out;
      ++block_idx;
    }
    register_module("layer" + std::to_string(stage + 1), layer);
  }
  num_features_ = in;
  norm_ = register_module("norm", SyncableBatchNorm2d(num_features_));
  fc_ = register_module("fc", nn::Linear(num_features_, opt.num_classes));
  conv_layers::init_weights(*this);
  {
    torch::NoGradGuard ng;
    fc_->bias.zero_();
  }
  set_fused_batchnorm(*this, opt.fused_norm);
}

torch::Tensor WideResNetImpl::forward_features(const torch::Tensor& x) {
  torch::Tensor y = conv1_(x);
  for (auto& b : blocks_) y = b->forward(y);
  return norm_->forward_act(y, torch::Tensor(), /*relu=*/true);
}

torch::Tensor WideResNetImpl::forward_head(const torch::Tensor& f, bool pre_logits) {
  return conv_layers::pooled_head(f, fc_, opt_.drop_rate, opt_.num_classes, is_training(), pre_logits);
}

void WideResNetImpl::reset_classifier(int64_t num_classes) {
  opt_.num_classes = num_classes;
  fc_ = replace_module("fc", nn::Linear(num_features_, std::max<int64_t>(num_classes, 1)));
}

double WideResNetImpl::flops_per_image() const {
  int64_t h = opt_.input_size, w = opt_.input_size;
  double f = conv_flops(conv1_, h, w);
  for (const auto& b : blocks_) {
    f += b->flops(h, w);
    h = out_size(h, 3, b->stride());
    w = out_size(w, 3, b->stride());
  }
  return f + 2.0 * num_features_ * opt_.num_classes;
}

DataDefaults WideResNetImpl::data_defaults() const {
  DataDefaults d;
  d.input_size = opt_.input_size;
  d.crop_pct = 1.0;  // small-image models are evaluated on the whole image
  if (opt_.in_chans != 3) {
    d.mean.assign(opt_.in_chans, 0.449);  // ImageNet's channel average, as ResNet's
    d.std.assign(opt_.in_chans, 0.226);
  }
  return d;
}

std::shared_ptr<WideResNetImpl> make_wide_resnet(const WideResNetOptions& opt) {
  return std::make_shared<WideResNetImpl>(opt);
}

}  // namespace trainer
