// Learning rate per optimizer step: linear warmup from lr*warmup_factor, then constant, cosine, step,
// multistep or polynomial decay, all in units of optimizer steps (epochs x steps_per_epoch).
#pragma once
#include <cstdint>

#include "config/config.h"

namespace trainer {

// The peak learning rate: optim.lr, times global_batch / optim.lr_base_batch when that is set (the linear
// scaling rule of Goyal et al.; min_lr is an absolute floor and is not scaled).
double scaled_lr(const OptimConfig& cfg, int64_t global_batch);

class LrSchedule {
 public:
  LrSchedule(const OptimConfig& cfg, int64_t steps_per_epoch, int64_t total_steps, double base_lr);
  double lr_at(int64_t step) const;  // step counted from 0
  double base_lr() const { return base_lr_; }

 private:
  OptimConfig cfg_;
  int64_t steps_per_epoch_, total_steps_, warmup_steps_;
  double base_lr_;
};

}  // namespace trainer
