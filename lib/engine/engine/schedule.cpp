#include "engine/schedule.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace trainer {

double scaled_lr(const OptimConfig& cfg, int64_t global_batch) {
  if (cfg.lr_base_batch <= 0) return cfg.lr;
  return cfg.lr * static_cast<double>(global_batch) / static_cast<double>(cfg.lr_base_batch);
}

LrSchedule::LrSchedule(const OptimConfig& cfg, int64_t steps_per_epoch, int64_t total_steps, double base_lr)
    : cfg_(cfg), steps_per_epoch_(std::max<int64_t>(steps_per_epoch, 1)), total_steps_(std::max<int64_t>(total_steps, 1)),
      base_lr_(base_lr) {
  // a warmup longer than the run (e.g. --set train.epochs=1 on a 2-epoch warmup) ends with the run
  warmup_steps_ = std::min<int64_t>(static_cast<int64_t>(std::llround(cfg.warmup_epochs * steps_per_epoch_)),
                                    total_steps_);
}

double LrSchedule::lr_at(int64_t step) const {
  if (step < warmup_steps_) {
    const double t = static_cast<double>(step) / warmup_steps_;
    return base_lr_ * (cfg_.warmup_factor + (1.0 - cfg_.warmup_factor) * t);
  }
  const double epoch = static_cast<double>(step) / steps_per_epoch_;
  const int64_t decay_steps = std::max<int64_t>(total_steps_ - warmup_steps_, 1);
  const double t = std::min(1.0, static_cast<double>(step - warmup_steps_) / decay_steps);
  const std::string& s = cfg_.schedule;
  if (s == "constant") return base_lr_;
  if (s == "cosine") return cfg_.min_lr + (base_lr_ - cfg_.min_lr) * 0.5 * (1.0 + std::cos(M_PI * t));
  if (s == "poly") return cfg_.min_lr + (base_lr_ - cfg_.min_lr) * std::pow(1.0 - t, cfg_.poly_power);
  if (s == "step") return base_lr_ * std::pow(cfg_.gamma, std::floor(epoch / cfg_.step_epochs));
  if (s == "multistep") {
    int passed = 0;
    for (double m : cfg_.milestones) passed += epoch >= m;
    return base_lr_ * std::pow(cfg_.gamma, passed);
  }
  TRAINER_FAIL("unknown schedule '", s, "'");
}

}  // namespace trainer
