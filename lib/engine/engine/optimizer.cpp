#include "engine/optimizer.h"

#include <torch/torch.h>

#include <algorithm>

#include "core/check.h"
#include "core/strings.h"

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
  if (cfg.name != "sgd" && cfg.name != "adamw" && cfg.name != "lamb")
    throw ConfigError(str_cat("key 'optim.name': unknown optimizer '", cfg.name, "' (expected sgd, adamw or lamb)"));
}

void Optimizer::step(double lr, const c10::optional<torch::Tensor>& found_inf, const torch::Tensor& lr_tensor) {
  const bool device_lr = lr_tensor.defined();
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
      // Momentum starts at zero and every step is a "later" step: with dampening 0, buf = momentum * 0 + grad is
      // torch's first-step buf = grad bit for bit, and it stays right when the first step is skipped on the device
      // (found_inf), which torch.optim.SGD under a GradScaler skips too (its buffer is then made at the next step).
      if (!s.started && cfg_.momentum > 0)
        for (auto& p : params) s.momentum.push_back(torch::zeros_like(p, torch::MemoryFormat::Preserve));
      const at::TensorList mom = cfg_.momentum > 0 ? at::TensorList(s.momentum) : at::TensorList();
      if (device_lr)
        at::_fused_sgd_(params, grads, mom, g.weight_decay, cfg_.momentum, lr_tensor, /*dampening=*/0.0,
                        cfg_.nesterov, /*maximize=*/false, /*is_first_step=*/false, /*grad_scale=*/c10::nullopt,
                        found_inf);
      else
        at::_fused_sgd_(params, grads, mom, g.weight_decay, cfg_.momentum, lr, /*dampening=*/0.0, cfg_.nesterov,
                        /*maximize=*/false, /*is_first_step=*/false, /*grad_scale=*/c10::nullopt, found_inf);
    } else if (cfg_.name == "lamb") {
      lamb_step(g, s, params, grads, lr, lr_tensor, found_inf);
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
      if (device_lr)
        at::_fused_adamw_(params, grads, s.exp_avg, s.exp_avg_sq, /*max_exp_avg_sqs=*/{}, s.steps, lr_tensor,
                          cfg_.betas[0], cfg_.betas[1], g.weight_decay, cfg_.eps, /*amsgrad=*/false,
                          /*maximize=*/false, /*grad_scale=*/c10::nullopt, found_inf);
      else
        at::_fused_adamw_(params, grads, s.exp_avg, s.exp_avg_sq, /*max_exp_avg_sqs=*/{}, s.steps, lr, cfg_.betas[0],
                          cfg_.betas[1], g.weight_decay, cfg_.eps, /*amsgrad=*/false, /*maximize=*/false,
                          /*grad_scale=*/c10::nullopt, found_inf);
      if (found_inf) at::_foreach_sub_(s.steps, std::vector<torch::Tensor>(s.steps.size(), found_inf->squeeze()));
    }
    s.started = true;
  }
}

// LAMB (You et al. 2019) with timm's Lamb semantics (bias correction, grad averaging, trust ratio
// ||w|| / ||update|| applied only where weight decay is on, 1 where either norm is 0; timm's max_grad_norm is
// optim.clip_grad_norm, applied before). No fused kernel exists: multi-tensor ops, then each state is replaced
// only where found_inf is 0, so a skipped step leaves moments, step count and weights untouched.
void Optimizer::lamb_step(const ParamGroup& g, GroupState& s, const std::vector<torch::Tensor>& params,
                          const std::vector<torch::Tensor>& grads, double lr, const torch::Tensor& lr_tensor,
                          const c10::optional<torch::Tensor>& found_inf) {
  const double b1 = cfg_.betas[0], b2 = cfg_.betas[1];
  if (!s.started) {
    for (auto& p : params) {
      s.exp_avg.push_back(torch::zeros_like(p, torch::MemoryFormat::Preserve));
      s.exp_avg_sq.push_back(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    }
    s.steps.push_back(torch::zeros({}, params[0].options().dtype(torch::kFloat32)));
  }
  torch::Tensor skip = found_inf ? found_inf->squeeze().gt(0) : torch::zeros({}, s.steps[0].options().dtype(torch::kBool));
  s.steps[0].add_(skip.logical_not().to(torch::kFloat32));
  const torch::Tensor step = s.steps[0].clamp_min(1.0);
  const torch::Tensor bc1 = 1.0 - torch::pow(b1, step), bc2_sqrt = (1.0 - torch::pow(b2, step)).sqrt();
  auto m = at::_foreach_lerp(s.exp_avg, grads, 1.0 - b1);
  auto v = at::_foreach_mul(s.exp_avg_sq, b2);
  at::_foreach_addcmul_(v, grads, grads, 1.0 - b2);
  auto denom = at::_foreach_sqrt(v);
  at::_foreach_div_(denom, bc2_sqrt);
  at::_foreach_add_(denom, cfg_.eps);
  auto update = at::_foreach_div(m, bc1);
  at::_foreach_div_(update, denom);
  const bool adapt = g.weight_decay != 0;
  if (adapt) at::_foreach_add_(update, params, g.weight_decay);
  std::vector<torch::Tensor> wn, un;
  if (adapt) {
    wn = at::_foreach_norm(params, 2);
    un = at::_foreach_norm(update, 2);
  }
  for (size_t i = 0; i < params.size(); ++i) {
    torch::Tensor u = update[i];
    if (adapt) u = u * torch::where(wn[i].gt(0).logical_and(un[i].gt(0)), wn[i] / un[i], torch::ones_like(wn[i]));
    params[i].copy_(torch::where(skip, params[i], params[i] - (lr_tensor.defined() ? lr_tensor * u : lr * u)));
    s.exp_avg[i].copy_(torch::where(skip, s.exp_avg[i], m[i]));
    s.exp_avg_sq[i].copy_(torch::where(skip, s.exp_avg_sq[i], v[i]));
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
        // adamw counts steps per tensor (as torch.optim), lamb per group (as timm): stored beside each tensor
        out.emplace_back("step." + g.names[i], s.steps[i < s.steps.size() ? i : 0]);
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
      } else if ((cfg_.name == "adamw" || cfg_.name == "lamb") && st.count("exp_avg." + g.names[i])) {
        s.exp_avg.push_back(get("exp_avg." + g.names[i], p));
        s.exp_avg_sq.push_back(get("exp_avg_sq." + g.names[i], p));
        TRAINER_CHECK(st.count("step." + g.names[i]), "optimizer state lacks 'step.", g.names[i], "'");
        if (cfg_.name == "adamw" || s.steps.empty())
          s.steps.push_back(st.at("step." + g.names[i]).to(p.device(), torch::kFloat32).clone());
        any = true;
      }
    }
    s.started = any;
    state_[gi] = std::move(s);
  }
}

}  // namespace trainer
