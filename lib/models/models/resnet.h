// ResNet family (resnet18..152, wide_resnet50_2, resnext50_32x4d) with timm/torchvision parameter names:
// conv1, bn1, layer{1..4}.{i}.{conv,bn}{1..3}, layer*.0.downsample.{0,1}, fc.
#pragma once
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include "models/batchnorm.h"
#include "models/classifier.h"

namespace trainer {

struct ResNetOptions {
  bool bottleneck = false;                 // Bottleneck (50+) or BasicBlock (18/34)
  std::vector<int64_t> layers = {2, 2, 2, 2};  // blocks per stage
  int64_t groups = 1;                      // ResNeXt cardinality
  int64_t base_width = 64;                 // width per group (wide: 128, resnext 32x4d: 4)
  int64_t num_classes = 1000;
  int64_t in_chans = 3;
  bool small_stem = false;                 // 3x3 stride-1 stem, no max-pool (CIFAR/MNIST-size inputs)
  bool zero_init_last = true;              // zero the last BN gamma of each block
  FusedNorm fused_norm = FusedNorm::faster;  // batch norm (+ add + ReLU) in our kernels (models/fused_batchnorm.h)
  bool stem_fp16 = true;                   // the 7x7 stem's forward in fp16 under bf16 autocast (models/stem_conv.h)
  bool stem_s2d = true;    // CUDA: the 7x7 stem as a 4x4 convolution over its input's space-to-depth (models/stem_s2d.h)
  double drop_rate = 0.0;                  // dropout before fc
  double drop_path_rate = 0.0;             // stochastic depth, linear over blocks
  int64_t input_size = 224;                // for flops_per_image and data_defaults
};

// One residual block; BasicBlock when `bottleneck` is false.
class ResBlockImpl : public torch::nn::Module {
 public:
  ResBlockImpl(int64_t inplanes, int64_t planes, int64_t stride, bool bottleneck, int64_t groups,
               int64_t base_width, double drop_path);
  torch::Tensor forward(const torch::Tensor& x) { return forward_forked(x, x, /*fork=*/false).first; }
  // The block on an input given twice, once for the residual branch and once for the shortcut (the same values:
  // the previous block's forked output), returning its output the same way where `fork` (the next block reads it
  // twice), so that the fused batch norms sum the two gradients in their backward.
  std::pair<torch::Tensor, torch::Tensor> forward_forked(const torch::Tensor& x, const torch::Tensor& x_shortcut,
                                                         bool fork);
  void zero_init_last();
  int64_t out_channels() const { return out_channels_; }
  double flops(int64_t h_in, int64_t w_in) const;  // forward FLOPs for an (h_in, w_in) input
  int64_t options_stride() const { return stride_; }

 private:
  bool bottleneck_;
  int64_t stride_, out_channels_;
  double drop_path_;
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr};
  SyncableBatchNorm2d bn1_{nullptr}, bn2_{nullptr}, bn3_{nullptr};
  torch::nn::Sequential downsample_{nullptr};
};
TORCH_MODULE(ResBlock);

class ResNetImpl : public ClassifierImpl {
 public:
  explicit ResNetImpl(const ResNetOptions& opt);
  torch::Tensor forward_features(const torch::Tensor& x) override;
  torch::Tensor forward_head(const torch::Tensor& features, bool pre_logits = false) override;
  void reset_classifier(int64_t num_classes) override;
  int64_t num_classes() const override { return opt_.num_classes; }
  std::string classifier_name() const override { return "fc"; }
  double flops_per_image() const override;
  DataDefaults data_defaults() const override;

 private:
  ResNetOptions opt_;
  int64_t num_features_ = 0;
  torch::nn::Conv2d conv1_{nullptr};
  SyncableBatchNorm2d bn1_{nullptr};
  std::vector<ResBlock> blocks_;  // all blocks in order, also registered under layer{1..4}
  torch::nn::Linear fc_{nullptr};
};

std::shared_ptr<ResNetImpl> make_resnet(const ResNetOptions& opt);

}  // namespace trainer
