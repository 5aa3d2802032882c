#include "engine/amp.h"

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include "core/check.h"

namespace trainer {

Precision parse_precision(const std::string& s) {
  if (s == "fp32") return Precision::fp32;
  if (s == "bf16") return Precision::bf16;
  if (s == "fp16") return Precision::fp16;
  throw ConfigError("unknown precision '" + s + "' (expected bf16, fp16 or fp32)");
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::bf16: return "bf16";
    case Precision::fp16: return "fp16";
  }
  return "?";
}

AutocastGuard::AutocastGuard(torch::Device device, Precision p) : type_(device.type()) {
  if (p == Precision::fp32) return;
  active_ = true;
  prev_enabled_ = at::autocast::is_autocast_enabled(type_);
  prev_dtype_ = at::autocast::get_autocast_dtype(type_);
  at::autocast::set_autocast_enabled(type_, true);
  at::autocast::set_autocast_dtype(type_, p == Precision::bf16 ? at::kBFloat16 : at::kHalf);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  // leaving the outermost autocast region drops the cache of casted weights, as torch.autocast does
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(type_, prev_enabled_);
  at::autocast::set_autocast_dtype(type_, prev_dtype_);
}

GradScaler::GradScaler(torch::Device device, bool enabled, GradScalerOptions opt) : enabled_(enabled), opt_(opt) {
  auto f = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  scale_ = torch::full({1}, opt.init_scale, f);
  growth_tracker_ = torch::zeros({1}, f.dtype(torch::kInt32));
  found_inf_ = torch::zeros({1}, f);
  one_ = torch::ones({1}, f);
}

torch::Tensor GradScaler::scale(const torch::Tensor& loss) const {
  return enabled_ ? loss * scale_.to(loss.dtype()) : loss;
}

void GradScaler::unscale_(const std::vector<torch::Tensor>& grads) {
  found_inf_.zero_();
  if (grads.empty()) return;
  // the kernel wants grads of one device; group by dtype is not needed (it handles mixed dtypes per list)
  const torch::Tensor inv = enabled_ ? scale_.reciprocal() : one_;
  at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf_, inv);
}

void GradScaler::update() {
  if (enabled_)
    at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, opt_.growth_factor, opt_.backoff_factor,
                           opt_.growth_interval);
}

void GradScaler::load(const torch::Tensor& scale, const torch::Tensor& growth_tracker) {
  scale_.copy_(scale);
  growth_tracker_.copy_(growth_tracker);
}

}  // namespace trainer
