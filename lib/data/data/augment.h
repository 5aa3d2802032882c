// Per-sample photometric augmentation and random erasing, applied to a whole batch on its device (the CPU
// threads only decode, crop and resize). Each sample's parameters are drawn on the host from (seed, epoch,
// sample index) -- their own stream, apart from the crop and flip draws -- so they do not depend on threads,
// batch composition or rank, and can be tested apart from the pixel math.
//  - Colour jitter: torchvision's ColorJitter(brightness, contrast, saturation, hue) on [0, 1] floats, each
//    sample with its own factors and its own random order of the four operations.
//  - Random erasing: torchvision's RandomErasing(p, scale, ratio) box search (10 tries), on the normalised image,
//    filled with 0 (the mean colour) or, in pixel mode, per-pixel normal noise (timm's mode='pixel').
#pragma once
#include <torch/types.h>

#include <array>
#include <cstdint>
#include <vector>

#include "data/auto_augment.h"

namespace trainer {

struct AugmentOptions {
  std::vector<double> jitter;                     // empty = off, else {brightness, contrast, saturation, hue}
  double erase_prob = 0.0;                        // 0 = off
  std::vector<double> erase_scale = {0.02, 0.33};  // erased area fraction
  std::vector<double> erase_ratio = {0.3, 3.3};    // erased box aspect ratio
  bool erase_pixel = false;                       // fill with normal noise instead of 0
  AutoAugmentOptions auto_augment;                // RandAugment / TrivialAugmentWide, first of all
  bool jitter_on() const;
  bool erase_on() const { return erase_prob > 0; }
};

struct SampleAugment {
  float factor[4] = {1.f, 1.f, 1.f, 0.f};  // brightness, contrast, saturation factors; hue shift
  int64_t order[4] = {0, 1, 2, 3};         // the operations in the order applied
  int64_t erase[4] = {0, 0, 0, 0};         // y, x, h, w; h == 0: not erased
};

SampleAugment draw_augment(const AugmentOptions& o, uint64_t seed, int64_t epoch, int64_t index, int64_t H, int64_t W);

// x: (B, 3, H, W) float in [0, 1], changed in place. factors (B, 4) float on x's device; order (B, 4) int64 on the
// CPU (sample i's k-th operation); ops: which of brightness, contrast, saturation, hue are on (the others are
// skipped, no device work). Each operation runs once per pass on the samples that take it then.
void color_jitter_(torch::Tensor& x, const torch::Tensor& factors, const torch::Tensor& order,
                   const std::array<bool, 4>& ops = {true, true, true, true});
// x: (B, C, H, W); boxes (B, 4) int64 (y, x, h, w), h == 0 leaves the sample alone. pixel: normal noise from a
// generator of its own seeded with noise_seed (the global generators are not touched), else zeros.
void erase_(torch::Tensor& x, const torch::Tensor& boxes, bool pixel, uint64_t noise_seed = 0);

// The loaders' use: draws for a batch (one small host-to-device copy), then jitter before normalisation and
// erasing after it.
class BatchAugmenter {
 public:
  BatchAugmenter(AugmentOptions o, uint64_t seed) : opt_(std::move(o)), seed_(seed) {}
  bool enabled() const { return opt_.jitter_on() || opt_.erase_on() || opt_.auto_augment.on(); }
  struct Draws {
    torch::Tensor factors, boxes;  // on the device
    torch::Tensor order;           // on the host
    uint64_t noise_seed = 0;       // erase_mode pixel: from (seed, epoch, the batch's first sample)
  };
  Draws draw(const std::vector<int64_t>& indices, int64_t epoch, int64_t H, int64_t W, torch::Device device) const;
  // x (B,C,H,W) floats on the 0..255 scale: RandAugment / TrivialAugmentWide with uint8 semantics (x is rounded
  // to integers first, as a uint8 image would be)
  void auto_augment_255_(torch::Tensor& x, const std::vector<int64_t>& indices, int64_t epoch) const;
  // x in [0, 255] scale floats (B,3,H,W): jitter works on [0, 1] and the result returns to [0, 255]
  void jitter_255_(torch::Tensor& x, const Draws& d) const;
  void erase_(torch::Tensor& x, const Draws& d) const;
  // The image loaders' last step: x (B,3,H,W) floats on a 0..255 scale become (x - mean) / std, with
  // RandAugment/TrivialAugment and colour jitter before and erasing after when `train` (mean255 and inv_std255
  // broadcast over (1,3,1,1)).
  void augment_and_normalize_(torch::Tensor& x, const std::vector<int64_t>& indices, int64_t epoch, bool train,
                  const torch::Tensor& mean255, const torch::Tensor& inv_std255) const;

 private:
  AugmentOptions opt_;
  uint64_t seed_;
};

// A loader's normalised float batch as it is handed out: in `dtype` (data.dtype) and channels_last or
// contiguous, in one pass (none where it is both already).
inline torch::Tensor batch_layout(const torch::Tensor& x, torch::ScalarType dtype, bool channels_last) {
  return x.to(x.options().dtype(dtype), /*non_blocking=*/false, /*copy=*/false,
              channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous);
}

}  // namespace trainer
