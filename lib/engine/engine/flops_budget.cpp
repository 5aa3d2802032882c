#include "engine/flops_budget.h"

#include "runtime/env.h"
#include "runtime/step_timer.h"

namespace trainer {

FlopsBudget flops_budget(double forward_flops_per_image, torch::Device device, bool low_precision) {
  FlopsBudget b;
  const EnvInfo env = query_env();
  const size_t i = device.is_cuda() ? static_cast<size_t>(std::max<int>(device.index(), 0)) : 0;
  b.gpu = device.is_cuda() && i < env.gpus.size() ? env.gpus[i].name : "cpu";
  b.train_flops_per_image = 3.0 * forward_flops_per_image;
  b.peak_flops = device.is_cuda() ? peak_flops(b.gpu, low_precision) : 0.0;
  return b;
}

}  // namespace trainer
