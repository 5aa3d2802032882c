// BatchNorm2d that can compute its training statistics over all data-parallel ranks (SyncBatchNorm).
//
// Same parameters, buffers and state-dict names as torch::nn::BatchNorm2d, and the same forward until
// set_all_reduce() gives it a sum over ranks: then, in training, the per-channel sum, sum of squares and count
// are summed over ranks through a differentiable all-reduce (its backward sums the gradients over ranks too), so
// the output and the gradients equal those of one BatchNorm over the global batch (the fused kernels do the same
// with one all-reduce of shifted per-channel sums each way). Models do not know about process groups: the engine
// injects the collective.
#pragma once
#include <torch/nn/modules/batchnorm.h>

#include <functional>
#include <utility>

#include "models/fused_batchnorm.h"

namespace trainer {

class SyncableBatchNorm2dImpl : public torch::nn::BatchNorm2dImpl {
 public:
  using torch::nn::BatchNorm2dImpl::BatchNorm2dImpl;
  torch::Tensor forward(const torch::Tensor& x) { return forward_act(x, torch::Tensor(), /*relu=*/false); }
  // relu?(batch_norm(x) + z), z undefined for none: the fused kernels (with the sum over ranks too) where
  // fused_batchnorm_applies under set_fused's policy (models/fused_batchnorm.h), else ATen's batch norm, add, ReLU.
  torch::Tensor forward_act(const torch::Tensor& x, const torch::Tensor& z, bool relu) {
    return forward_act_forked(x, z, relu, /*fork=*/false).first;
  }
  // The same output for two consumers; where fused with fork, two autograd uses whose gradients the backward sums
  // in its own reduction (fused_batchnorm_forked), else the output twice.
  std::pair<torch::Tensor, torch::Tensor> forward_act_forked(const torch::Tensor& x, const torch::Tensor& z, bool relu,
                                                             bool fork);
  void set_all_reduce(AllReduceFn fn) { all_reduce_ = std::move(fn); }
  void set_fused(FusedNorm policy) { fused_ = policy; }
  // Whether the last forward ran the fused kernels.
  bool ran_fused() const { return ran_fused_; }
  // For a caller that runs this norm's fused training passes inside its own autograd function (the fp16 stem:
  // fused_batchnorm_train_forward, no residual, no SyncBatchNorm): whether it may, for an input on x's device in
  // x's layout; and the bookkeeping forward_act does when it did (num_batches_tracked, ran_fused).
  bool fuses_inside(const torch::Tensor& x) const;
  void count_fused_batch();

 private:
  torch::Tensor forward_unfused(const torch::Tensor& x);
  AllReduceFn all_reduce_;
  FusedNorm fused_ = FusedNorm::off;
  bool ran_fused_ = false;
};
TORCH_MODULE(SyncableBatchNorm2d);

// model.fused_norm: every SyncableBatchNorm2d in `m` fuses under `policy`.
void set_fused_batchnorm(torch::nn::Module& m, FusedNorm policy);
// How many of m's SyncableBatchNorm2d layers ran the fused kernels in their last forward, and how many there are.
std::pair<int, int> fused_batchnorm_layers(torch::nn::Module& m);
// Gives every SyncableBatchNorm2d in `m` the collective; returns how many there are.
int enable_sync_batchnorm(torch::nn::Module& m, const AllReduceFn& fn);

}  // namespace trainer
