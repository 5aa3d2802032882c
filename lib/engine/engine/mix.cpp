#include "engine/mix.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/check.h"

namespace trainer {
namespace {

// Beta(a, a) from two Gamma(a, 1) draws
double sample_beta(std::mt19937_64& g, double a) {
  std::gamma_distribution<double> gamma(a, 1.0);
  const double x = gamma(g), y = gamma(g);
  return x + y > 0 ? x / (x + y) : 0.5;
}

}  // namespace

MixParams cutmix_box(double lam, int64_t rx, int64_t ry, int64_t H, int64_t W) {
  const double r = 0.5 * std::sqrt(1.0 - lam);
  const int64_t rw = static_cast<int64_t>(r * static_cast<double>(W));  // int() truncation, as torchvision
  const int64_t rh = static_cast<int64_t>(r * static_cast<double>(H));
  MixParams p;
  p.kind = MixParams::cutmix;
  p.x1 = std::max<int64_t>(rx - rw, 0);
  p.y1 = std::max<int64_t>(ry - rh, 0);
  p.x2 = std::min<int64_t>(rx + rw, W);
  p.y2 = std::min<int64_t>(ry + rh, H);
  p.lam = 1.0 - static_cast<double>((p.x2 - p.x1) * (p.y2 - p.y1)) / static_cast<double>(W * H);
  return p;
}

BatchMixer::BatchMixer(const TrainConfig& cfg, uint64_t seed) : cfg_(cfg), seed_(seed) {}

MixParams BatchMixer::draw(uint64_t index, int64_t H, int64_t W) const {
  MixParams p;
  if (!enabled()) return p;
  std::seed_seq seq{static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32), 0x6d697875u,
                    static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32)};
  std::mt19937_64 g(seq);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  if (u(g) >= cfg_.mix_prob) return p;
  const bool both = cfg_.mixup_alpha > 0 && cfg_.cutmix_alpha > 0;
  const bool cut = both ? u(g) < cfg_.mix_switch_prob : cfg_.cutmix_alpha > 0;
  if (!cut) {
    p.kind = MixParams::mixup;
    p.lam = sample_beta(g, cfg_.mixup_alpha);
    return p;
  }
  const double lam = sample_beta(g, cfg_.cutmix_alpha);
  const int64_t rx = std::uniform_int_distribution<int64_t>(0, W - 1)(g);
  const int64_t ry = std::uniform_int_distribution<int64_t>(0, H - 1)(g);
  return cutmix_box(lam, rx, ry, H, W);
}

std::pair<torch::Tensor, torch::Tensor> mix_batch(const torch::Tensor& images, const torch::Tensor& labels,
                                                  int64_t num_classes, const MixParams& p) {
  TRAINER_CHECK(images.dim() == 4 && labels.dim() == 1 && images.size(0) == labels.size(0),
                "mix_batch expects images (N, C, H, W) and labels (N), got ", images.sizes(), " and ", labels.sizes());
  torch::NoGradGuard ng;
  torch::Tensor target = torch::one_hot(labels, num_classes).to(torch::kFloat32);
  if (p.kind == MixParams::none) return {images, target};
  torch::Tensor out;
  if (p.kind == MixParams::mixup) {
    out = images.roll(1, 0).mul_(1.0 - p.lam).add_(images * p.lam);
  } else {
    out = images.clone();
    if (p.x2 > p.x1 && p.y2 > p.y1) {
      using namespace torch::indexing;
      const std::vector<TensorIndex> box{Ellipsis, Slice(p.y1, p.y2), Slice(p.x1, p.x2)};
      out.index_put_(box, images.roll(1, 0).index(box));
    }
  }
  target = target.roll(1, 0).mul_(1.0 - p.lam).add_(target * p.lam);
  return {out, target};
}

}  // namespace trainer
