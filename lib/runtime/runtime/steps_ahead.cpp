#include "runtime/steps_ahead.h"

#ifdef TRAINER_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <vector>

namespace trainer {

struct StepsAhead::Events {
#ifdef TRAINER_WITH_CUDA
  std::vector<at::cuda::CUDAEvent> ring;  // the last `limit` steps' ends, reused in turn
  size_t next = 0;
#endif
};

StepsAhead::StepsAhead(torch::Device device, int limit)
    : device_(device), limit_(limit), ev_(std::make_unique<Events>()) {}
StepsAhead::~StepsAhead() = default;

void StepsAhead::mark() {
#ifdef TRAINER_WITH_CUDA
  if (!device_.is_cuda() || limit_ <= 0) return;
  if (ev_->ring.empty()) ev_->ring.resize(static_cast<size_t>(limit_));  // events created on first record
  at::cuda::CUDAEvent& e = ev_->ring[ev_->next];
  ev_->next = (ev_->next + 1) % ev_->ring.size();
  e.synchronize();  // the step `limit` marks ago (nothing before its first record)
  e.record(c10::cuda::getCurrentCUDAStream(device_.index()));
#endif
}

}  // namespace trainer
