#include "models/vit.h"

#include <torch/torch.h>

#include <cmath>

#include "core/check.h"
#include "models/fused_bias_gelu.h"
#include "models/fused_layernorm.h"
#include "models/qkv_split.h"

namespace trainer {
namespace nn = torch::nn;

namespace {
nn::LayerNorm layer_norm(int64_t d) { return nn::LayerNorm(nn::LayerNormOptions({d}).eps(1e-6)); }

// at::linear, not nn::Linear's forward: the C++ frontend's F::linear runs matmul and then `out += bias` for 3-D
// input, which under autocast is a bf16 += fp32 add on the slow dynamic-cast kernel (22 ms per ViT-B step on an
// H200); at::linear is autocast-aware (bias cast too) and folds (B, N, D) into one GEMM with the bias in its epilogue.
torch::Tensor linear(const nn::Linear& l, const torch::Tensor& x) { return torch::linear(x, l->weight, l->bias); }
}  // namespace

// ---- block ----

ViTBlockImpl::ViTBlockImpl(int64_t dim, int64_t heads, double mlp_ratio, double drop, double attn_drop,
                           double drop_path)
    : heads_(heads), drop_(drop), attn_drop_(attn_drop), drop_path_(drop_path) {
  TRAINER_CHECK(dim % heads == 0, "embed_dim ", dim, " is not divisible by num_heads ", heads);
  const int64_t hidden = static_cast<int64_t>(dim * mlp_ratio);
  norm1_ = register_module("norm1", layer_norm(dim));
  auto attn = register_module("attn", std::make_shared<nn::Module>());
  qkv_ = attn->register_module("qkv", nn::Linear(dim, 3 * dim));
  proj_ = attn->register_module("proj", nn::Linear(dim, dim));
  norm2_ = register_module("norm2", layer_norm(dim));
  auto mlp = register_module("mlp", std::make_shared<nn::Module>());
  fc1_ = mlp->register_module("fc1", nn::Linear(dim, hidden));
  fc2_ = mlp->register_module("fc2", nn::Linear(hidden, dim));
}

torch::Tensor ViTBlockImpl::forward(const torch::Tensor& x) {
  torch::Tensor y = x + attention_branch(norm1_(x));
  return y + mlp_branch(norm2_(y));
}

torch::Tensor ViTBlockImpl::attention_branch(const torch::Tensor& normed, bool fused) {
  const int64_t B = normed.size(0), N = normed.size(1), D = normed.size(2);
  const bool train = is_training();
  // q, k, v: (B, heads, N, head_dim) views of the projection (B, N, 3, D), the same strides as timm's permute and
  // unbind(0), but split at (B, N, 3, D) before the heads are transposed: the gradients SDPA returns (laid out as
  // its inputs, B N heads head_dim) then stack along that dimension as one contiguous copy into the projection's
  // gradient, where unbind(0)'s stack and the permute back transpose them twice. unbind, not selects: three
  // selects would each backpropagate through a full-size zero tensor. `fused`: the stack and the bias gradient in
  // one kernel (models/qkv_split.h).
  auto qkv = qkv_projection(normed, qkv_->weight, qkv_->bias, fused);
  auto heads = [&](const torch::Tensor& t) { return t.view({B, N, heads_, D / heads_}).transpose(1, 2); };
  auto a = at::scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), /*attn_mask=*/{},
                                            /*dropout_p=*/train ? attn_drop_ : 0.0);
  a = linear(proj_, a.transpose(1, 2).reshape({B, N, D}));
  if (drop_ > 0) a = torch::dropout(a, drop_, train);
  return drop_path(a, drop_path_, train);
}

torch::Tensor ViTBlockImpl::mlp_branch(const torch::Tensor& normed, bool fused) {
  const bool train = is_training();
  auto h = linear_gelu(normed, fc1_->weight, fc1_->bias, fused);
  if (drop_ > 0) h = torch::dropout(h, drop_, train);
  h = linear(fc2_, h);
  if (drop_ > 0) h = torch::dropout(h, drop_, train);
  return drop_path(h, drop_path_, train);
}

// ---- network ----

VisionTransformerImpl::VisionTransformerImpl(const ViTOptions& opt) : opt_(opt) {
  TRAINER_CHECK(opt.img_size % opt.patch_size == 0, "ViT input size ", opt.img_size,
                " is not a multiple of the patch size ", opt.patch_size);
  const int64_t D = opt.embed_dim, grid = opt.img_size / opt.patch_size;
  auto pe = register_module("patch_embed", std::make_shared<nn::Module>());
  patch_proj_ = pe->register_module(
      "proj", nn::Conv2d(nn::Conv2dOptions(opt.in_chans, D, opt.patch_size).stride(opt.patch_size).bias(true)));
  cls_token_ = register_parameter("cls_token", torch::zeros({1, 1, D}));
  pos_embed_ = register_parameter("pos_embed", torch::zeros({1, grid * grid + 1, D}));
  nn::ModuleList blocks;
  for (int64_t i = 0; i < opt.depth; ++i) {
    const double dpr = opt.depth > 1 ? opt.drop_path_rate * i / (opt.depth - 1) : 0.0;
    ViTBlock b(D, opt.num_heads, opt.mlp_ratio, opt.drop_rate, opt.attn_drop_rate, dpr);
    blocks->push_back(b);
    blocks_.push_back(b);
  }
  register_module("blocks", blocks);
  norm_ = register_module("norm", layer_norm(D));
  head_ = register_module("head", nn::Linear(D, std::max<int64_t>(opt.num_classes, 1)));

  // timm's init: trunc-normal(.02) pos_embed and linears, tiny cls_token, zero biases.
  torch::NoGradGuard ng;
  trunc_normal_(pos_embed_, 0.02);
  nn::init::normal_(cls_token_, 0.0, 1e-6);
  for (auto& kv : named_modules(/*name_prefix=*/"", /*include_self=*/false)) {
    if (auto* l = kv.value()->as<nn::Linear>()) {
      trunc_normal_(l->weight, 0.02);
      nn::init::zeros_(l->bias);
    }
  }
}

torch::Tensor VisionTransformerImpl::forward_features(const torch::Tensor& x) {
  const int64_t B = x.size(0);
  torch::Tensor t = patch_proj_(x).flatten(2).transpose(1, 2);  // (B, N, D)
  // as timm: under autocast, cat promotes the bf16 patch tokens to the fp32 class token's type, so the
  // residual stream stays fp32 and only the matmuls run in bf16
  t = torch::cat({cls_token_.expand({B, -1, -1}), t}, 1);
  t = t + pos_embed_;
  if (opt_.drop_rate > 0) t = torch::dropout(t, opt_.drop_rate, is_training());
  ran_fused_ = fused_layernorm_applies(t, opt_.fused_norm);
  if (ran_fused_) return forward_blocks_fused(t);
  for (auto& b : blocks_) t = b->forward(t);
  return norm_(t);
}

// The blocks with every residual add fused into the norm after it: each norm takes the stream and the branch that
// joins it, and hands on the new stream and its normalised copy in the autocast dtype; the last norm's output is
// in that dtype too (the head's matmul would cast it to it). The branches run their fused kernels too: q/k/v's
// gradient stack with its bias sums, fc1's bias and GELU.
torch::Tensor VisionTransformerImpl::forward_blocks_fused(const torch::Tensor& stream) {
  auto add_norm = [](const torch::Tensor& s, const torch::Tensor& branch, const torch::nn::LayerNorm& norm,
                     bool want_stream) {
    return fused_add_layernorm(s, branch, norm->weight, norm->bias, norm->options.eps(), want_stream);
  };
  torch::Tensor s = stream, branch;  // the branch that joins the stream at the next norm (none before the first)
  for (auto& b : blocks_) {
    auto [n1, s1] = add_norm(s, branch, b->norm1(), true);
    auto [n2, s2] = add_norm(s1, b->attention_branch(n1, /*fused=*/true), b->norm2(), true);
    branch = b->mlp_branch(n2, /*fused=*/true);
    s = s2;
  }
  return add_norm(s, branch, norm_, false).first;
}

std::pair<int, int> VisionTransformerImpl::fused_norm_layers() {
  const int n = 2 * static_cast<int>(blocks_.size()) + 1;
  return {ran_fused_ ? n : 0, n};
}

torch::Tensor VisionTransformerImpl::forward_head(const torch::Tensor& tokens, bool pre_logits) {
  torch::Tensor y = tokens.select(1, 0);
  if (opt_.drop_rate > 0) y = torch::dropout(y, opt_.drop_rate, is_training());
  if (pre_logits || opt_.num_classes == 0) return y;
  return head_(y);
}

void VisionTransformerImpl::reset_classifier(int64_t num_classes) {
  opt_.num_classes = num_classes;
  head_ = replace_module("head", nn::Linear(opt_.embed_dim, std::max<int64_t>(num_classes, 1)));
  torch::NoGradGuard ng;
  trunc_normal_(head_->weight, 0.02);
  nn::init::zeros_(head_->bias);
}

double VisionTransformerImpl::flops_per_image() const {
  const double D = static_cast<double>(opt_.embed_dim);
  const double grid = static_cast<double>(opt_.img_size / opt_.patch_size);
  const double N = grid * grid + 1;
  const double H = D * opt_.mlp_ratio;
  double f = 2.0 * (N - 1) * D * opt_.in_chans * opt_.patch_size * opt_.patch_size;  // patch embed
  const double per_block = 2.0 * N * D * 3 * D      // qkv
                           + 2.0 * 2.0 * N * N * D  // scores and weighted sum
                           + 2.0 * N * D * D        // proj
                           + 2.0 * 2.0 * N * D * H; // mlp
  f += opt_.depth * per_block;
  f += 2.0 * D * opt_.num_classes;
  return f;
}

DataDefaults VisionTransformerImpl::data_defaults() const {
  DataDefaults d;
  d.input_size = opt_.img_size;
  d.crop_pct = 0.9;
  d.interpolation = "bicubic";
  d.mean.assign(opt_.in_chans, 0.5);
  d.std.assign(opt_.in_chans, 0.5);
  return d;
}

torch::Tensor resample_pos_embed(const torch::Tensor& pos, int64_t new_grid, int64_t prefix) {
  const int64_t n_old = pos.size(1) - prefix;
  const int64_t old_grid = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(n_old))));
  TRAINER_CHECK(old_grid * old_grid == n_old, "pos_embed with ", n_old, " patch rows is not a square grid");
  if (old_grid == new_grid) return pos;
  const int64_t D = pos.size(2);
  auto head = pos.narrow(1, 0, prefix);
  auto grid = pos.narrow(1, prefix, n_old).reshape({1, old_grid, old_grid, D}).permute({0, 3, 1, 2}).to(torch::kFloat);
  grid = torch::nn::functional::interpolate(
      grid, torch::nn::functional::InterpolateFuncOptions()
                .size(std::vector<int64_t>{new_grid, new_grid})
                .mode(torch::kBicubic)
                .align_corners(false)
                .antialias(true));
  grid = grid.permute({0, 2, 3, 1}).reshape({1, new_grid * new_grid, D}).to(pos.dtype());
  return torch::cat({head, grid}, 1);
}

void VisionTransformerImpl::adapt_state_dict(std::vector<std::pair<std::string, torch::Tensor>>& tensors) const {
  for (auto& kv : tensors) {
    if (kv.first == "pos_embed" && kv.second.dim() == 3 && kv.second.size(1) != pos_embed_.size(1))
      kv.second = resample_pos_embed(kv.second, opt_.img_size / opt_.patch_size);
  }
}

}  // namespace trainer
