// MixUp and CutMix for a whole batch on its device, with torchvision.transforms.v2's semantics: the batch is
// mixed with itself rolled by one (sample i with sample i-1), labels become one-hot and are mixed with the same
// lambda; CutMix pastes a box of the rolled batch and sets lambda to the share of pixels kept.
// Random parameters are drawn first (host-side, from (seed, step): no device work, reproducible), then pixels move.
#pragma once
#include <torch/types.h>

#include <cstdint>

#include "config/config.h"

namespace trainer {

struct MixParams {
  enum Kind { none, mixup, cutmix } kind = none;
  double lam = 1.0;                           // weight of the batch itself (CutMix: share of pixels kept)
  int64_t x1 = 0, y1 = 0, x2 = 0, y2 = 0;     // CutMix box, half-open [x1, x2) x [y1, y2)
};

// torchvision's CutMix box around centre (rx, ry) for a Beta draw lam on an H x W image, and the adjusted lambda.
MixParams cutmix_box(double lam, int64_t rx, int64_t ry, int64_t H, int64_t W);

class BatchMixer {
 public:
  BatchMixer(const TrainConfig& cfg, uint64_t seed);
  bool enabled() const { return cfg_.mixup_alpha > 0 || cfg_.cutmix_alpha > 0; }
  // Parameters for micro-batch number `index` (same on every rank and every run with the same seed).
  MixParams draw(uint64_t index, int64_t H, int64_t W) const;

 private:
  TrainConfig cfg_;
  uint64_t seed_;
};

// Mixed images (N, C, H, W) and soft targets (N, num_classes) float32. kind none: one-hot targets.
std::pair<torch::Tensor, torch::Tensor> mix_batch(const torch::Tensor& images, const torch::Tensor& labels,
                                                  int64_t num_classes, const MixParams& p);

}  // namespace trainer
