#include "models/batchnorm.h"

#include <torch/torch.h>

#include "models/fused_batchnorm.h"

namespace trainer {
namespace {

// y = sum over ranks of x; dy/dx: the incoming gradient summed over ranks (every rank's output depends on every
// rank's input).
struct AllReduceSum : public torch::autograd::Function<AllReduceSum> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x, const AllReduceFn* fn) {
    ctx->saved_data["fn"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(fn));
    torch::Tensor y = x.clone();
    (*fn)(y);
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto* fn = reinterpret_cast<const AllReduceFn*>(static_cast<intptr_t>(ctx->saved_data["fn"].toInt()));
    torch::Tensor g = grads[0].contiguous().clone();
    (*fn)(g);
    return {g, torch::Tensor()};
  }
};

}  // namespace

std::pair<torch::Tensor, torch::Tensor> SyncableBatchNorm2dImpl::forward_act_forked(const torch::Tensor& x,
                                                                                   const torch::Tensor& z, bool relu,
                                                                                   bool fork) {
  // auto leaves SyncBatchNorm to ATen's ops until its fused path has been measured on GPUs; on fuses it too
  const bool fuse = (!all_reduce_ || fused_ == FusedNorm::on) && options.affine() && options.track_running_stats() &&
                    options.momentum().has_value() && fused_batchnorm_applies(x, is_training(), fused_) &&
                    (!z.defined() || (z.sizes() == x.sizes() && z.scalar_type() == x.scalar_type()));
  ran_fused_ = fuse;
  if (fuse) {
    if (is_training()) {
      torch::NoGradGuard ng;
      num_batches_tracked.add_(1);
    }
    return fused_batchnorm_forked(x, z.defined() ? z.contiguous(torch::MemoryFormat::ChannelsLast) : z, weight, bias,
                                  running_mean, running_var, *options.momentum(), options.eps(), is_training(), relu,
                                  all_reduce_ && is_training() ? &all_reduce_ : nullptr, fork);
  }
  torch::Tensor y = forward_unfused(x);
  if (z.defined()) y.add_(z);
  if (relu) y.relu_();
  return {y, y};
}

bool SyncableBatchNorm2dImpl::fuses_inside(const torch::Tensor& x) const {
  return is_training() && !all_reduce_ && fused_ != FusedNorm::off && fused_batchnorm_built() && options.affine() &&
         options.track_running_stats() && options.momentum().has_value() && x.defined() && x.is_cuda() &&
         x.dim() == 4 && x.is_contiguous(torch::MemoryFormat::ChannelsLast);
}

void SyncableBatchNorm2dImpl::count_fused_batch() {
  ran_fused_ = true;
  torch::NoGradGuard ng;
  num_batches_tracked.add_(1);
}

torch::Tensor SyncableBatchNorm2dImpl::forward_unfused(const torch::Tensor& x) {
  if (!all_reduce_ || !is_training()) return torch::nn::BatchNorm2dImpl::forward(x);
  TORCH_CHECK(x.dim() == 4, "SyncBatchNorm expects NCHW input, got ", x.dim(), " dimensions");
  const int64_t c = x.size(1);
  torch::Tensor xf = x.to(torch::kFloat32);
  // per-channel sum, sum of squares and count, summed over ranks in one collective
  torch::Tensor local = torch::cat({xf.sum({0, 2, 3}), xf.square().sum({0, 2, 3}),
                                    torch::full({1}, static_cast<double>(x.numel() / c), xf.options())});
  torch::Tensor total = AllReduceSum::apply(local, &all_reduce_);
  torch::Tensor n = total.narrow(0, 2 * c, 1);
  torch::Tensor mean = total.narrow(0, 0, c) / n;
  torch::Tensor var = (total.narrow(0, c, c) / n - mean.square()).clamp_min(0);  // biased, as batch norm divides
  {
    torch::NoGradGuard ng;
    const double m = options.momentum().value_or(0.1);
    // the unbiased variance for the running estimate, n / (n - 1) on the device: no host sync per layer
    const torch::Tensor count = n.detach();
    running_mean.mul_(1 - m).add_(mean.detach(), m);
    running_var.mul_(1 - m).add_(var.detach() * (count / (count - 1).clamp_min(1.0)), m);
    num_batches_tracked.add_(1);
  }
  torch::Tensor scale = torch::rsqrt(var + options.eps());
  if (options.affine()) scale = scale * weight;
  torch::Tensor shift = -mean * scale;
  if (options.affine()) shift = shift + bias;
  torch::Tensor y = xf * scale.view({1, c, 1, 1}) + shift.view({1, c, 1, 1});
  return y.to(x.scalar_type());
}

void set_fused_batchnorm(torch::nn::Module& m, FusedNorm policy) {
  // not named_modules(include_self): m may be under construction, not yet held by a shared_ptr
  if (auto* self = m.as<SyncableBatchNorm2dImpl>()) self->set_fused(policy);
  for (auto& kv : m.named_modules("", /*include_self=*/false))
    if (auto* bn = kv.value()->as<SyncableBatchNorm2dImpl>()) bn->set_fused(policy);
}

std::pair<int, int> fused_batchnorm_layers(torch::nn::Module& m) {
  std::pair<int, int> n{0, 0};
  for (auto& kv : m.named_modules("", /*include_self=*/false))
    if (auto* bn = kv.value()->as<SyncableBatchNorm2dImpl>()) {
      n.first += bn->ran_fused() ? 1 : 0;
      ++n.second;
    }
  return n;
}

int enable_sync_batchnorm(torch::nn::Module& m, const AllReduceFn& fn) {
  int n = 0;
  for (auto& kv : m.named_modules("", /*include_self=*/true))
    if (auto* bn = kv.value()->as<SyncableBatchNorm2dImpl>()) {
      bn->set_all_reduce(fn);
      ++n;
    }
  return n;
}

}  // namespace trainer
