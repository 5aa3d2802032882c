#include "distributed/reducer.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include "core/check.h"
#include "distributed/process_group.h"

namespace trainer {

struct GradReducer::Hooks {
  // The accumulators are owned weakly by the parameters; holding them keeps the hooks registered.
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t>> registered;
};

GradReducer::GradReducer(DistContext& ctx, std::vector<torch::Tensor> params, ReducerOptions opts)
    : ctx_(ctx), opts_(opts), hooks_(std::make_unique<Hooks>()) {
  for (auto& p : params)
    if (p.requires_grad()) params_.push_back(p);
  TRAINER_CHECK(opts_.bucket_bytes > 0 && opts_.first_bucket_bytes > 0, "bucket sizes must be positive");

  // ---- buckets: reverse registration order, one dtype each, a small first one ----
  bucket_of_.assign(params_.size(), 0);
  int64_t bytes = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    const auto& p = params_[k];
    const int64_t limit = buckets_.size() <= 1 ? opts_.first_bucket_bytes : opts_.bucket_bytes;
    if (buckets_.empty() || buckets_.back().dtype != p.scalar_type() || bytes >= limit) {
      buckets_.push_back(Bucket{});
      buckets_.back().dtype = p.scalar_type();
      bytes = 0;
    }
    buckets_.back().params.push_back(k);
    bucket_of_[k] = buckets_.size() - 1;
    bytes += p.numel() * p.element_size();
  }
  seen_.assign(params_.size(), false);

  if (opts_.overlap) {
    for (size_t k = 0; k < params_.size(); ++k) {
      auto acc = torch::autograd::impl::grad_accumulator(params_[k]);
      TRAINER_CHECK(acc, "parameter ", k, " has no gradient accumulator (not a leaf?)");
      const uintptr_t key = acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
          [this, k](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
            on_ready(k);
            return outputs;
          }));
      hooks_->registered.emplace_back(std::move(acc), key);
    }
  }
}

GradReducer::~GradReducer() {
  for (auto& [acc, key] : hooks_->registered) acc->del_post_hook(key);
}

std::vector<std::vector<size_t>> GradReducer::buckets() const {
  std::vector<std::vector<size_t>> out;
  for (const auto& b : buckets_) out.push_back(b.params);
  return out;
}

void GradReducer::prepare(bool sync) {
  std::lock_guard<std::mutex> lock(mu_);
  sync_ = sync;
  next_ = 0;
  launched_in_backward_ = 0;
  std::fill(seen_.begin(), seen_.end(), false);
  for (auto& b : buckets_) b.pending = b.params.size();
}

void GradReducer::on_ready(size_t param) {
  // Runs on autograd's thread for the device, after the gradient was accumulated into .grad.
  std::lock_guard<std::mutex> lock(mu_);
  if (!sync_ || seen_[param]) return;
  seen_[param] = true;
  --buckets_[bucket_of_[param]].pending;
  const size_t before = next_;
  launch_ready_prefix();
  launched_in_backward_ += static_cast<int64_t>(next_ - before);
}

void GradReducer::launch_ready_prefix() {
  while (next_ < buckets_.size() && buckets_[next_].pending == 0) launch(buckets_[next_++]);
}

void GradReducer::launch(Bucket& b) {
  torch::NoGradGuard ng;
  std::vector<torch::Tensor> views;
  views.reserve(b.params.size());
  for (size_t k : b.params) {
    const auto& g = params_[k].grad();
    views.push_back(g.defined() ? g.reshape({-1}) : torch::zeros({params_[k].numel()}, params_[k].options()));
  }
  b.flat = torch::cat(views);
  if (opts_.bf16 && b.flat.scalar_type() == torch::kFloat32) b.flat = b.flat.to(torch::kBFloat16);
  b.wait = ctx_.all_reduce_async(b.flat, "all-reduce of gradients");
}

void GradReducer::finish() {
  std::lock_guard<std::mutex> lock(mu_);
  TRAINER_CHECK(sync_, "GradReducer::finish() after prepare(false)");
  for (auto& b : buckets_) b.pending = 0;  // what never got a gradient is reduced as zeros
  launch_ready_prefix();
  torch::NoGradGuard ng;
  const double inv = 1.0 / ctx_.world_size();
  for (auto& b : buckets_) {
    b.wait();
    b.wait = nullptr;
    torch::Tensor mean = b.flat.to(b.dtype).mul_(inv);
    std::vector<int64_t> sizes;
    std::vector<torch::Tensor> grads;
    for (size_t k : b.params) {
      auto& p = params_[k];
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      sizes.push_back(p.numel());
      grads.push_back(p.grad());
    }
    auto parts = mean.split_with_sizes(sizes);
    for (size_t i = 0; i < grads.size(); ++i) grads[i].copy_(parts[i].view_as(grads[i]));
    b.flat = torch::Tensor();
  }
  sync_ = false;
}

}  // namespace trainer
