#include "models/classifier.h"

#include <torch/torch.h>

#include <cmath>

#include "models/batchnorm.h"

namespace trainer {

std::pair<int, int> ClassifierImpl::fused_norm_layers() { return fused_batchnorm_layers(*this); }

int64_t ClassifierImpl::parameter_count() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

torch::Tensor drop_path(const torch::Tensor& x, double p, bool training) {
  if (p <= 0.0 || !training) return x;
  const double keep = 1.0 - p;
  std::vector<int64_t> shape(x.dim(), 1);
  shape[0] = x.size(0);
  auto mask = torch::empty(shape, x.options()).bernoulli_(keep);
  return x * mask.div_(keep);
}

void to_channels_last(torch::nn::Module& model) {
  torch::NoGradGuard ng;
  for (auto& p : model.parameters())
    if (p.dim() == 4) p.set_data(p.contiguous(torch::MemoryFormat::ChannelsLast));
  for (auto& b : model.buffers())
    if (b.dim() == 4) b.set_data(b.contiguous(torch::MemoryFormat::ChannelsLast));
}

void trunc_normal_(torch::Tensor& t, double std, double a, double b) {
  // inverse-CDF sampling, as torch.nn.init.trunc_normal_ does (no clamping spikes at the bounds), but in float64:
  // float32's uniform_ returns its lower end -1 about once in 2^24 draws (a few times in ViT-B's 86M weights),
  // and erfinv(-1) = -inf would become a weight at the bound, here 100 std
  torch::NoGradGuard ng;
  auto cdf = [](double x) { return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))); };
  torch::Tensor u = torch::empty(t.sizes(), t.options().dtype(torch::kFloat64));
  u.uniform_(2 * cdf(a / std) - 1, 2 * cdf(b / std) - 1).erfinv_().mul_(std * std::sqrt(2.0)).clamp_(a, b);
  t.copy_(u);
}

}  // namespace trainer
