// The GPU decode path's batch assembly: crop windows of decoded device images resized into one batch.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "data/image_ops.h"
#include "data/jpeg_decoder.h"

namespace trainer {

// Crop + antialiased bilinear (or bicubic) resize (ATen's _upsample_bilinear2d_aa) + horizontal flip of (H, W, 3) uint8 device
// images into one (B, 3, size, size) float32 (or bfloat16) batch on the current stream: 0..255, or normalised
// and laid out channels_last in the same pass as `out` says. With `batched_kernel` one CUDA kernel does the whole
// batch (where this build has it: gpu_crop_resize_kernel_available()); otherwise ATen ops per sample. Images may
// be strided (H, W, 3) views, e.g. of planar decodes.
struct GpuResizeOutput {
  bool normalize = false;  // (v - mean255[c]) * inv_std255[c]
  float mean255[3] = {0.f, 0.f, 0.f}, inv_std255[3] = {1.f, 1.f, 1.f};
  bool channels_last = false;
  torch::ScalarType dtype = torch::kFloat32;  // or kBFloat16: the float32 result rounded as a cast would
  // bicubic: ATen's _upsample_bicubic2d_aa per sample (the batched kernel is bilinear), clamped to 0..255 as the
  // CPU path's uint8 is
  Interpolation filter = Interpolation::bilinear;
  // Normalised by a per-channel mean and std given on the 0..1 scale (data.mean, data.std).
  static GpuResizeOutput normalized(const std::vector<double>& mean, const std::vector<double>& std,
                                    bool channels_last, torch::ScalarType dtype = torch::kFloat32);
};
bool gpu_crop_resize_kernel_available();
torch::Tensor gpu_crop_resize(const std::vector<torch::Tensor>& images, const std::vector<Rect>& windows,
                              const std::vector<char>& flips, int64_t size, bool batched_kernel,
                              const GpuResizeOutput& out = GpuResizeOutput{});
// Evaluation of whole (H, W, 3) uint8 device images as torchvision's: each resized (ATen's antialiased filter of
// out.filter) to eval_resize's size, then its centre (size x size) cropped, into one batch laid out as `out` says.
torch::Tensor gpu_eval_resize(const std::vector<torch::Tensor>& images, int64_t size, double crop_pct,
                              const GpuResizeOutput& out);

}  // namespace trainer
