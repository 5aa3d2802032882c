// The face every model has (timm's): forward = forward_head(forward_features(x)), reset_classifier,
// no_weight_decay, counts for MFU reporting and a default data config. Parameter and buffer names equal
// timm's for the same model name, so state dicts move both ways unchanged.
#pragma once
#include <torch/nn/module.h>
#include <torch/types.h>

#include <string>
#include <vector>

namespace trainer {

// The input a model was designed for (timm's pretrained_cfg): eval resize/crop and normalisation.
struct DataDefaults {
  int64_t input_size = 224;              // square input side, pixels
  double crop_pct = 0.875;               // eval: resize shorter side to input_size / crop_pct, then centre crop
  std::vector<double> mean = {0.485, 0.456, 0.406};  // per channel, 0..1 scale
  std::vector<double> std = {0.229, 0.224, 0.225};
  std::string interpolation = "bilinear";  // bilinear | bicubic
};

class ClassifierImpl : public torch::nn::Module {
 public:
  using torch::nn::Module::Module;
  // (B,C,H,W) float -> (B,num_classes) logits
  torch::Tensor forward(const torch::Tensor& x) { return forward_head(forward_features(x)); }
  // (B,C,H,W) -> unpooled features: (B,F,h,w) for CNNs, (B,N,D) tokens for ViT
  virtual torch::Tensor forward_features(const torch::Tensor& x) = 0;
  // features -> logits; pre_logits=true stops after pooling (B,F)
  virtual torch::Tensor forward_head(const torch::Tensor& features, bool pre_logits = false) = 0;
  // New classifier with num_classes outputs (0 = identity head), freshly initialised.
  virtual void reset_classifier(int64_t num_classes) = 0;
  virtual int64_t num_classes() const = 0;
  // Name prefix of the classifier's parameters ("fc" for ResNet, "head" for ViT).
  virtual std::string classifier_name() const = 0;
  // Parameter names kept out of weight decay besides norms and biases (e.g. pos_embed, cls_token).
  virtual std::vector<std::string> no_weight_decay() const { return {}; }
  // Forward FLOPs (2 x multiply-adds) for one image of the model's input size; backward is ~2x this.
  virtual double flops_per_image() const = 0;
  virtual DataDefaults data_defaults() const = 0;
  // Adapts incoming weights before loading (e.g. ViT resizes pos_embed to this model's grid).
  virtual void adapt_state_dict(std::vector<std::pair<std::string, torch::Tensor>>& tensors) const {}
  // model.fused_norm: how many of the model's norm layers ran trainer's fused kernels in the last forward, and how
  // many there are (batch norms by default).
  virtual std::pair<int, int> fused_norm_layers();

  int64_t parameter_count() const;
};

using Classifier = std::shared_ptr<ClassifierImpl>;

// timm's DropPath: zero whole samples with probability p during training, scale the rest by 1/(1-p).
torch::Tensor drop_path(const torch::Tensor& x, double p, bool training);
// Converts every 4-D parameter and buffer to channels_last (NHWC) in place; Module::to has no memory format.
void to_channels_last(torch::nn::Module& model);
// In-place normal(0, std) truncated to [a, b], absolute bounds as in timm's and torch's trunc_normal_: with ViT's
// std .02 the default +-2 lie at 100 std, so the draws are effectively untruncated (timm's init).
void trunc_normal_(torch::Tensor& t, double std, double a = -2.0, double b = 2.0);

}  // namespace trainer
