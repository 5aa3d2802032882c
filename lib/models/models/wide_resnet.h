// Wide ResNet for small images (Zagoruyko & Komodakis 2016, CIFAR form): wrn{depth}_{k} has (depth - 4) / 6
// pre-activation basic blocks in each of three stages of 16k, 32k and 64k channels (strides 1, 2, 2) after a 3x3
// stem of 16 channels, then batch norm + ReLU, average pooling and fc. timm has no such model; names follow its
// ResNet's style: conv1, layer{1..3}.{i}.{bn1,conv1,bn2,conv2,shortcut}, norm, fc.
#pragma once
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include "models/batchnorm.h"
#include "models/classifier.h"

namespace trainer {

struct WideResNetOptions {
  int64_t depth = 28;   // 6n + 4
  int64_t widen = 10;   // k: channels 16k, 32k, 64k
  int64_t num_classes = 10;
  int64_t in_chans = 3;
  FusedNorm fused_norm = FusedNorm::faster;  // bn + ReLU in our kernels (models/fused_batchnorm.h)
  double drop_rate = 0.0;       // dropout before fc
  double drop_path_rate = 0.0;  // stochastic depth of the residual branches, linear over blocks
  int64_t input_size = 32;      // for flops_per_image and data_defaults
};

// x + conv2(relu(bn2(conv1(relu(bn1(x)))))), the shortcut a 1x1 conv of relu(bn1(x)) where the shape changes.
class PreActBlockImpl : public torch::nn::Module {
 public:
  PreActBlockImpl(int64_t in, int64_t out, int64_t stride, double drop_path);
  torch::Tensor forward(const torch::Tensor& x);
  double flops(int64_t h_in, int64_t w_in) const;  // forward FLOPs for an (h_in, w_in) input
  int64_t stride() const { return stride_; }

 private:
  int64_t stride_;
  double drop_path_;
  SyncableBatchNorm2d bn1_{nullptr}, bn2_{nullptr};
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, shortcut_{nullptr};
};
TORCH_MODULE(PreActBlock);

class WideResNetImpl : public ClassifierImpl {
 public:
  explicit WideResNetImpl(const WideResNetOptions& opt);
  torch::Tensor forward_features(const torch::Tensor& x) override;
  torch::Tensor forward_head(const torch::Tensor& features, bool pre_logits = false) override;
  void reset_classifier(int64_t num_classes) override;
  int64_t num_classes() const override { return opt_.num_classes; }
  std::string classifier_name() const override { return "fc"; }
  double flops_per_image() const override;
  DataDefaults data_defaults() const override;

 private:
  WideResNetOptions opt_;
  int64_t num_features_ = 0;
  torch::nn::Conv2d conv1_{nullptr};
  std::vector<PreActBlock> blocks_;  // all blocks in order, also registered under layer{1..3}
  SyncableBatchNorm2d norm_{nullptr};
  torch::nn::Linear fc_{nullptr};
};

std::shared_ptr<WideResNetImpl> make_wide_resnet(const WideResNetOptions& opt);

}  // namespace trainer
