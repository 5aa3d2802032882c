// RandAugment and TrivialAugmentWide with torchvision's semantics (transforms.RandAugment(num_ops, magnitude,
// num_magnitude_bins=31) and transforms.TrivialAugmentWide(), nearest interpolation, fill 0), applied per sample to
// a whole batch on its device. Images are floats holding uint8 values (0..255, integers) and every op rounds and
// clamps as torchvision's uint8 tensor path does, so the result equals torchvision's pixel for pixel. Each sample's
// ops and magnitudes are drawn on the host from (seed, epoch, sample index) in a stream of their own; samples that
// drew the same op are gathered and transformed together (a few kernels per op present, not per sample).
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace trainer {

struct AutoAugmentOptions {
  std::string policy;  // "" = off | "rand" (RandAugment) | "trivial" (TrivialAugmentWide)
  int num_ops = 2;     // rand: ops applied in sequence
  int magnitude = 9;   // rand: magnitude bin, 0 .. num_bins - 1
  int num_bins = 31;
  bool on() const { return !policy.empty(); }
};

// torchvision's op list, in its order (the same for both policies)
enum class AutoOp : int {
  identity, shear_x, shear_y, translate_x, translate_y, rotate, brightness, color, contrast, sharpness, posterize,
  solarize, auto_contrast, equalize, count
};
const char* auto_op_name(AutoOp op);

// The magnitude of `op` at `bin` (unsigned), as torchvision's _augmentation_space tables give it for an H x W image
// (float32 values, like torch.linspace). `signed_op` tells whether the op takes a random sign.
double auto_augment_magnitude(const std::string& policy, AutoOp op, int bin, int num_bins, int64_t H, int64_t W,
                              bool* signed_op = nullptr);

struct AutoAugmentDraw {
  int n = 0;  // ops to apply, in order
  AutoOp op[4] = {};
  double magnitude[4] = {};  // signed
};
AutoAugmentDraw draw_auto_augment(const AutoAugmentOptions& o, uint64_t seed, int64_t epoch, int64_t index,
                                  int64_t H, int64_t W);

// One op with per-sample magnitudes (one per sample of x) on x (B, C, H, W) float holding 0..255 integers, C 1 or 3.
torch::Tensor apply_auto_op(const torch::Tensor& x, AutoOp op, const std::vector<double>& magnitudes);
// The draws of a batch applied in place; draws[i] belongs to x[i].
void auto_augment_(torch::Tensor& x, const std::vector<AutoAugmentDraw>& draws);

}  // namespace trainer
