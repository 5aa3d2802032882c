// How far the host may queue steps ahead of the device (train.steps_ahead). After each step the caller marks its
// end on the current stream; mark() first waits until the step marked `limit` marks before has run, so at most
// `limit` marked steps are unfinished when it returns. limit 0: no bound; on the CPU it does nothing.
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
