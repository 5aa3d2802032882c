// Optimizers on LibTorch's fused multi-tensor kernels (at::_fused_sgd_, at::_fused_adamw_; CPU and CUDA) and
// LAMB on multi-tensor (foreach) ops:
// one launch per parameter group, skip-on-inf through found_inf, the learning rate passed per step.
// Parameters are split into a decayed group and a no-decay group (norms, biases, the model's
// no_weight_decay names), as timm's param_groups_weight_decay does.
#pragma once
#include <torch/nn/module.h>
#include <torch/types.h>

#include <map>
#include <string>
#include <vector>

#include "config/config.h"

namespace trainer {

struct ParamGroup {
  std::vector<std::string> names;
  std::vector<torch::Tensor> params;
  double weight_decay = 0.0;
};

// Splits trainable parameters: 1-D tensors (norm weights, biases) and `no_decay` names get no decay.
std::vector<ParamGroup> make_param_groups(const torch::nn::Module& model, double weight_decay, bool exclude_norm_bias,
                                          const std::vector<std::string>& no_decay);

class Optimizer {
 public:
  Optimizer(std::vector<ParamGroup> groups, const OptimConfig& cfg);
  // One update with learning rate lr. found_inf (optional, (1,) float on the params' device): skip if 1.
  // lr_tensor (optional, 0-dim float32 on the params' device, holding lr): the kernels read the rate from it, so a
  // captured CUDA graph sees each step's value.
  void step(double lr, const c10::optional<torch::Tensor>& found_inf = c10::nullopt,
            const torch::Tensor& lr_tensor = {});
  void zero_grad();  // grads set to undefined (freed), as PyTorch's set_to_none
  std::vector<torch::Tensor> grads() const;  // defined grads of all groups
  const std::vector<ParamGroup>& groups() const { return groups_; }
  // Named state (momentum buffers, Adam moments, step counts) for checkpoints.
  std::vector<std::pair<std::string, torch::Tensor>> state() const;
  void load_state(const std::map<std::string, torch::Tensor>& state);

 private:
  struct GroupState {
    std::vector<torch::Tensor> momentum;         // sgd
    std::vector<torch::Tensor> exp_avg, exp_avg_sq, steps;  // adamw (steps per tensor), lamb (one step)
    bool started = false;
  };
  void lamb_step(const ParamGroup& g, GroupState& s, const std::vector<torch::Tensor>& params,
                 const std::vector<torch::Tensor>& grads, double lr, const torch::Tensor& lr_tensor,
                 const c10::optional<torch::Tensor>& found_inf);

  std::vector<ParamGroup> groups_;
  std::vector<GroupState> state_;
  OptimConfig cfg_;
};

}  // namespace trainer
