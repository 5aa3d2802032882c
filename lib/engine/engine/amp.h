// Mixed precision: an RAII autocast guard and a grad scaler with torch.amp.GradScaler's semantics
// (initial scale 2^16, x2 after 2000 clean steps, x0.5 and the step skipped on inf/nan), built on the
// same ATen kernels PyTorch uses, so nothing here waits on the GPU.
#pragma once
#include <torch/types.h>

#include <string>
#include <vector>

namespace trainer {

enum class Precision { fp32, bf16, fp16 };
Precision parse_precision(const std::string& s);
const char* precision_name(Precision p);

// Autocast for the forward pass on `device` in `p` (fp32: does nothing).
class AutocastGuard {
 public:
  AutocastGuard(torch::Device device, Precision p);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool active_ = false;
  c10::DeviceType type_;
  bool prev_enabled_ = false;
  at::ScalarType prev_dtype_;
};

struct GradScalerOptions {
  double init_scale = 65536.0;      // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;   // clean steps before growing
};

class GradScaler {
 public:
  GradScaler(torch::Device device, bool enabled, GradScalerOptions opt = {});
  bool enabled() const { return enabled_; }
  // loss * scale (identity when disabled)
  torch::Tensor scale(const torch::Tensor& loss) const;
  // Divides grads by the scale and records whether any is inf/nan, in one fused pass. Call once per step,
  // before clipping. Disabled: only checks for non-finite values (bf16/fp32 skip-on-nan).
  void unscale_(const std::vector<torch::Tensor>& grads);
  // 1.0 when the last unscale_ saw inf/nan, else 0.0: a device tensor, passed to the optimizer.
  const torch::Tensor& found_inf() const { return found_inf_; }
  // Adjusts the scale for the next step from found_inf, then clears it.
  void update();
  const torch::Tensor& scale_tensor() const { return scale_; }
  const torch::Tensor& growth_tracker() const { return growth_tracker_; }
  void load(const torch::Tensor& scale, const torch::Tensor& growth_tracker);

 private:
  bool enabled_;
  GradScalerOptions opt_;
  torch::Tensor scale_;           // (1,) float32 on device
  torch::Tensor growth_tracker_;  // (1,) int32 on device
  torch::Tensor found_inf_;       // (1,) float32 on device
  torch::Tensor one_;             // (1,) float32 1.0, the inverse scale when disabled
};

}  // namespace trainer
