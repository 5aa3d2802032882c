#include "engine/optimizer.h"

#include <torch/torch.h>

#include <algorithm>

#include "core/check.h"

namespace trainer {

std::vector<ParamGroup> make_param_groups(const torch::nn::Module& model, double weight_decay, bool exclude_norm_bias,
                                          const std::vector<std::string>& no_decay) {
  ParamGroup decay, keep;
  decay.weight_decay = weight_decay;
  keep.weight_decay = 0.0;
  for (const auto& kv : model.named_parameters()) {
    if (!kv.value().requires_grad()) continue;
    const bool listed = std::find(no_decay.begin(), no_decay.end(), kv.key()) != no_decay.end();
    const bool skip = exclude_norm_bias && (kv.value().dim() <= 1 || listed);
    ParamGroup& g = skip ? keep : decay;
    g.names.push_back(kv.key());
    g.params.push_back(kv.value());
  }
  std::vector<ParamGroup> out;
  if (!decay.params.empty()) out.push_back(std::move(decay));
  if (!keep.params.empty()) out.push_back(std::move(keep));
  return out;
}

Optimizer::Optimizer(std::vector<ParamGroup> groups, const OptimConfig& cfg)
    : groups_(std::move(groups)), state_(groups_.size()), cfg_(cfg) {
  TRAINER_CHECK(cfg.name == "sgd" || cfg.name == "adamw", "unknown optimizer '", cfg.name, "'");
}

void Optimizer::step(double lr, const c10::optional<torch::Tensor>& found_inf) {
  torch::NoGradGuard ng;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    ParamGroup& g = groups_[gi];
    GroupState& s = state_[gi];
    std::vector<torch::Tensor> params, grads;
    for (auto& p : g.params) {
      if (!p.grad().defined()) continue;
      params.push_back(p);
      grads.push_back(p.grad());
    }
    if (params.empty()) continue;
    TRAINER_CHECK(params.size() == g.params.size() || !s.started,
                  "a parameter lost its gradient after the first step (unused parameters are not supported)");
    if (cfg_.name == "sgd") {
      const bool first = !s.started;
      if (first && cfg_.momentum > 0)
        for (auto& p : params) s.momentum.push_back(torch::empty_like(p, torch::MemoryFormat::Preserve));
      at::_fused_sgd_(params, grads, cfg_.momentum > 0 ? at::TensorList(s.momentum) : at::TensorList(),
                      g.weight_decay, cfg_.momentum, lr, /*dampening=*/0.0, cfg_.nesterov, /*maximize=*/false,
                      /*is_first_step=*/first, /*grad_scale=*/c10::nullopt, found_inf);
    } else {
      if (!s.started) {
        for (auto& p : params) {
          s.exp_avg.push_back(torch::zeros_like(p, torch::MemoryFormat::Preserve));
          s.exp_avg_sq.push_back(torch::zeros_like(p, torch::MemoryFormat::Preserve));
          s.steps.push_back(torch::zeros({}, p.options().dtype(torch::kFloat32)));
        }
      }
      // torch.optim.AdamW(fused=True): count the step first, take it back where the step was skipped
      at::_foreach_add_(s.steps, 1);
      at::_fused_adamw_(params, grads, s.exp_avg, s.exp_avg_sq, /*max_exp_avg_sqs=*/{}, s.steps, lr, cfg_.betas[0],
                        cfg_.betas[1], g.weight_decay, cfg_.eps, /*amsgrad=*/false, /*maximize=*/false,
                        /*grad_scale=*/c10::nullopt, found_inf);
      if (found_inf) at::_foreach_sub_(s.steps, std::vector<torch::Tensor>(s.steps.size(), found_inf->squeeze()));
    }
    s.started = true;
  }
}

void Optimizer::zero_grad() {
  for (auto& g : groups_)
    for (auto& p : g.params) p.mutable_grad() = torch::Tensor();
}

std::vector<torch::Tensor> Optimizer::grads() const {
  std::vector<torch::Tensor> out;
  for (const auto& g : groups_)
    for (const auto& p : g.params)
      if (p.grad().defined()) out.push_back(p.grad());
  return out;
}

std::vector<std::pair<std::string, torch::Tensor>> Optimizer::state() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const auto& g = groups_[gi];
    const auto& s = state_[gi];
    for (size_t i = 0; i < g.names.size(); ++i) {
      if (i < s.momentum.size()) out.emplace_back("momentum." + g.names[i], s.momentum[i]);
      if (i < s.exp_avg.size()) {
        out.emplace_back("exp_avg." + g.names[i], s.exp_avg[i]);
        out.emplace_back("exp_avg_sq." + g.names[i], s.exp_avg_sq[i]);
        out.emplace_back("step." + g.names[i], s.steps[i]);
      }
    }
  }
  return out;
}

void Optimizer::load_state(const std::map<std::string, torch::Tensor>& st) {
  torch::NoGradGuard ng;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    auto& g = groups_[gi];
    GroupState s;
    auto get = [&](const std::string& key, const torch::Tensor& like) -> torch::Tensor {
      auto it = st.find(key);
      TRAINER_CHECK(it != st.end(), "optimizer state lacks '", key, "'");
      TRAINER_CHECK(it->second.sizes() == like.sizes(), "optimizer state '", key, "' has shape ", it->second.sizes(),
                    ", expected ", like.sizes());
      return it->second.to(like.device(), like.scalar_type()).contiguous(like.suggest_memory_format()).clone();
    };
    bool any = false;
    for (size_t i = 0; i < g.names.size(); ++i) {
      const auto& p = g.params[i];
      if (cfg_.name == "sgd" && cfg_.momentum > 0 && st.count("momentum." + g.names[i])) {
        s.momentum.push_back(get("momentum." + g.names[i], p));
        any = true;
      } else if (cfg_.name == "adamw" && st.count("exp_avg." + g.names[i])) {
        s.exp_avg.push_back(get("exp_avg." + g.names[i], p));
        s.exp_avg_sq.push_back(get("exp_avg_sq." + g.names[i], p));
        s.steps.push_back(st.at("step." + g.names[i]).to(p.device(), torch::kFloat32).clone());
        any = true;
      }
    }
    s.started = any;
    state_[gi] = std::move(s);
  }
}

}  // namespace trainer
