// How far the host may queue steps ahead of the device. After each step the caller marks its end on the current
// stream; once more than `limit` marked steps are unfinished, mark() waits for the oldest. Without a bound the host
// fills the device's launch queue and then sits inside kernel launches, where other threads' CUDA calls (the GPU
// loader's nvJPEG call) queue behind it. limit 0: no bound; on the CPU it does nothing.
#pragma once
#include <torch/types.h>

#include <memory>

namespace trainer {

class StepsAhead {
 public:
  StepsAhead(torch::Device device, int limit);
  ~StepsAhead();
  void mark();

 private:
  struct Events;
  torch::Device device_;
  int limit_;
  std::unique_ptr<Events> ev_;
};

}  // namespace trainer
