#include "runtime/steps_ahead.h"

#ifdef TRAINER_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <deque>

namespace trainer {

struct StepsAhead::Events {
#ifdef TRAINER_WITH_CUDA
  std::deque<at::cuda::CUDAEvent> queued;  // the unfinished steps' ends, oldest first
#endif
};

StepsAhead::StepsAhead(torch::Device device, int limit)
    : device_(device), limit_(limit), ev_(std::make_unique<Events>()) {}
StepsAhead::~StepsAhead() = default;

void StepsAhead::mark() {
#ifdef TRAINER_WITH_CUDA
  if (!device_.is_cuda() || limit_ <= 0) return;
  ev_->queued.emplace_back(cudaEventDisableTiming);
  ev_->queued.back().record(c10::cuda::getCurrentCUDAStream(device_.index()));
  while (static_cast<int>(ev_->queued.size()) > limit_) {
    ev_->queued.front().synchronize();
    ev_->queued.pop_front();
  }
#endif
}

}  // namespace trainer
