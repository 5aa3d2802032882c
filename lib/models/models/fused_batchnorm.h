// Batch norm fused with the residual add and ReLU after it, in our NHWC kernels (lib/kernels), as one autograd
// function: for channels_last bf16/fp16 CUDA activations with fp32 parameters and running statistics. Training
// uses batch statistics and updates the running ones as torch does (momentum, unbiased variance); evaluation uses
// the running ones. Where it does not apply (a build without the kernels, the CPU, NCHW, fp32) callers keep ATen.
#pragma once
#include <torch/types.h>

#include <functional>
#include <string>
#include <utility>

namespace trainer {

// model.fused_norm: off; auto = where the kernels beat ATen's path in a ResNet step (bf16 and fp16, where ATen takes
// cuDNN's NHWC batch norm: bench/results/2026-12-01_h200/run54_fused_bn_fast), SyncBatchNorm excluded until its
// fused path is measured; on = wherever they can run, SyncBatchNorm included.
enum class FusedNorm { off, faster, on };
FusedNorm fused_norm_from(const std::string& config_value);  // "auto" | "on" | "off"

// Whether this build has the kernels (nvcc was found).
bool fused_batchnorm_built();
// Whether the models use them for x under `policy`: CUDA, 4-D, channels_last contiguous, a dtype the policy takes,
// more than one value per channel in training; in evaluation only without autograd (the fused function has no eval
// backward).
bool fused_batchnorm_applies(const torch::Tensor& x, bool training, FusedNorm policy);
using AllReduceFn = std::function<void(torch::Tensor&)>;  // in-place sum over ranks

// y = relu?(batch_norm(x) + z); z undefined for none (else x's shape and dtype). Updates the running statistics in
// training. all_reduce (SyncBatchNorm, training only; it must outlive the backward): the statistics and the input
// gradient over all ranks' batches, through one all-reduce of per-channel sums each way (shifted by the running
// mean, which every rank holds alike); the parameter gradients stay this rank's.
torch::Tensor fused_batchnorm(const torch::Tensor& x, const torch::Tensor& z, const torch::Tensor& weight,
                              const torch::Tensor& bias, torch::Tensor& running_mean, torch::Tensor& running_var,
                              double momentum, double eps, bool training, bool relu,
                              const AllReduceFn* all_reduce = nullptr);

// The same, returning y twice for two consumers (a block's output feeds the next block's convolution and its
// shortcut): in training with fork, as two autograd outputs sharing y's storage, so that the backward receives
// their gradients apart and its reduction sums them instead of autograd's separate add (two passes over y's size
// fewer); without fork, or in evaluation, y and y.
std::pair<torch::Tensor, torch::Tensor> fused_batchnorm_forked(const torch::Tensor& x, const torch::Tensor& z,
                                                               const torch::Tensor& weight, const torch::Tensor& bias,
                                                               torch::Tensor& running_mean,
                                                               torch::Tensor& running_var, double momentum,
                                                               double eps, bool training, bool relu,
                                                               const AllReduceFn* all_reduce, bool fork);

// The fused training passes outside autograd, for a function that holds a batch norm inside it (the fp16 stem and
// its norm, models/stem_conv.h): relu?(batch_norm(x)) without residual or SyncBatchNorm, the running statistics
// updated. x: fp16 or out_dtype (bf16 or fp16), channels_last, more than one value per channel; the output, and the
// backward's dy and dx, in out_dtype. `saved` receives what the backward needs.
struct FusedBnSaved {
  torch::Tensor x, mean, invstd, scale, shift;
  bool relu = false;
};
torch::Tensor fused_batchnorm_train_forward(const torch::Tensor& x, const torch::Tensor& weight,
                                            const torch::Tensor& bias, torch::Tensor& running_mean,
                                            torch::Tensor& running_var, double momentum, double eps, bool relu,
                                            torch::ScalarType out_dtype, FusedBnSaved& saved);
struct FusedBnGrads {
  torch::Tensor dx, dweight, dbias;
};
FusedBnGrads fused_batchnorm_train_backward(const FusedBnSaved& saved, const torch::Tensor& weight,
                                            const torch::Tensor& dy);

}  // namespace trainer
