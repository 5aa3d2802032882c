// BatchNorm2d that can compute its training statistics over all data-parallel ranks (SyncBatchNorm).
//
// Same parameters, buffers and state-dict names as torch::nn::BatchNorm2d, and the same forward until
// set_all_reduce() gives it a sum over ranks: then, in training, the per-channel sum, sum of squares and count
// are summed over ranks through a differentiable all-reduce (its backward sums the gradients over ranks too), so
// the output and the gradients equal those of one BatchNorm over the global batch. Models do not know about
// process groups: the engine injects the collective.
#pragma once
#include <torch/nn/modules/batchnorm.h>

#include <functional>

namespace trainer {

using AllReduceFn = std::function<void(torch::Tensor&)>;  // in-place sum over ranks

class SyncableBatchNorm2dImpl : public torch::nn::BatchNorm2dImpl {
 public:
  using torch::nn::BatchNorm2dImpl::BatchNorm2dImpl;
  torch::Tensor forward(const torch::Tensor& x);
  void set_all_reduce(AllReduceFn fn) { all_reduce_ = std::move(fn); }

 private:
  AllReduceFn all_reduce_;
};
TORCH_MODULE(SyncableBatchNorm2d);

// Gives every SyncableBatchNorm2d in `m` the collective; returns how many there are.
int enable_sync_batchnorm(torch::nn::Module& m, const AllReduceFn& fn);

}  // namespace trainer
