// Vision Transformer (timm's VisionTransformer, class token, global_pool='token') with timm names:
// patch_embed.proj, cls_token, pos_embed, blocks.{i}.{norm1,attn.qkv,attn.proj,norm2,mlp.fc1,mlp.fc2}, norm, head.
// Attention runs through at::scaled_dot_product_attention (flash / memory-efficient kernels on the GPU).
#pragma once
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include "models/classifier.h"
#include "models/fused_batchnorm.h"

namespace trainer {

struct ViTOptions {
  int64_t img_size = 224;       // input side; pos_embed has (img_size/patch)^2 + 1 rows
  int64_t patch_size = 16;
  int64_t in_chans = 3;
  int64_t num_classes = 1000;
  int64_t embed_dim = 768;
  int64_t depth = 12;
  int64_t num_heads = 12;
  double mlp_ratio = 4.0;
  double drop_rate = 0.0;       // dropout after pos_embed, in MLP/proj, and before the head
  double attn_drop_rate = 0.0;  // attention-probability dropout
  double drop_path_rate = 0.0;  // stochastic depth, linear over blocks
  FusedNorm fused_norm = FusedNorm::faster;  // residual add + LayerNorm (models/fused_layernorm.h), the
                                             // q/k/v gradient stack and fc1's bias + GELU in our kernels
};

class ViTBlockImpl : public torch::nn::Module {
 public:
  ViTBlockImpl(int64_t dim, int64_t heads, double mlp_ratio, double drop, double attn_drop, double drop_path);
  torch::Tensor forward(const torch::Tensor& x);  // (B,N,D) -> (B,N,D)
  // The two residual branches, each from its norm's output to what is added to the stream (dropout and drop-path
  // included): forward(x) = y + mlp_branch(norm2(y)) with y = x + attention_branch(norm1(x)). fused: our
  // kernels where they apply, q/k/v's gradient stack (models/qkv_split.h) and fc1's bias + GELU
  // (models/fused_bias_gelu.h).
  torch::Tensor attention_branch(const torch::Tensor& normed, bool fused = false);
  torch::Tensor mlp_branch(const torch::Tensor& normed, bool fused = false);
  const torch::nn::LayerNorm& norm1() const { return norm1_; }
  const torch::nn::LayerNorm& norm2() const { return norm2_; }

 private:
  int64_t heads_;
  double drop_, attn_drop_, drop_path_;
  torch::nn::LayerNorm norm1_{nullptr}, norm2_{nullptr};
  torch::nn::Linear qkv_{nullptr}, proj_{nullptr}, fc1_{nullptr}, fc2_{nullptr};
};
TORCH_MODULE(ViTBlock);

class VisionTransformerImpl : public ClassifierImpl {
 public:
  explicit VisionTransformerImpl(const ViTOptions& opt);
  torch::Tensor forward_features(const torch::Tensor& x) override;  // -> (B, 1+N, D)
  torch::Tensor forward_head(const torch::Tensor& tokens, bool pre_logits = false) override;
  void reset_classifier(int64_t num_classes) override;
  int64_t num_classes() const override { return opt_.num_classes; }
  std::string classifier_name() const override { return "head"; }
  std::vector<std::string> no_weight_decay() const override { return {"pos_embed", "cls_token"}; }
  double flops_per_image() const override;
  DataDefaults data_defaults() const override;
  // Resizes an incoming pos_embed to this model's grid (bicubic, as timm's resample_abs_pos_embed).
  void adapt_state_dict(std::vector<std::pair<std::string, torch::Tensor>>& tensors) const override;
  std::pair<int, int> fused_norm_layers() override;  // the blocks' two norms and the last one

 private:
  ViTOptions opt_;
  torch::nn::Conv2d patch_proj_{nullptr};
  torch::Tensor cls_token_, pos_embed_;  // (1,1,D), (1,1+N,D)
  torch::Tensor forward_blocks_fused(const torch::Tensor& stream);
  bool ran_fused_ = false;
  std::vector<ViTBlock> blocks_;
  torch::nn::LayerNorm norm_{nullptr};
  torch::nn::Linear head_{nullptr};
};

// Bicubic resize of a (1, prefix+g_old^2, D) position table to (1, prefix+g_new^2, D).
torch::Tensor resample_pos_embed(const torch::Tensor& pos, int64_t new_grid, int64_t prefix_tokens = 1);

}  // namespace trainer
