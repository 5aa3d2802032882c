#include "runtime/step_timer.h"

#ifdef TRAINER_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <deque>

namespace trainer {

struct StepTimer::Events {
#ifdef TRAINER_WITH_CUDA
  std::deque<std::pair<at::cuda::CUDAEvent, at::cuda::CUDAEvent>> pairs;  // timing-enabled
  std::vector<std::pair<at::cuda::CUDAEvent, at::cuda::CUDAEvent>> spare;
#endif
};

StepTimer::StepTimer(torch::Device device) : device_(device), ev_(std::make_unique<Events>()) {}
StepTimer::~StepTimer() = default;

void StepTimer::start() {
#ifdef TRAINER_WITH_CUDA
  if (device_.is_cuda()) {
    if (ev_->spare.empty()) {
      ev_->pairs.emplace_back(at::cuda::CUDAEvent(cudaEventDefault), at::cuda::CUDAEvent(cudaEventDefault));
    } else {
      ev_->pairs.push_back(std::move(ev_->spare.back()));
      ev_->spare.pop_back();
    }
    ev_->pairs.back().first.record(c10::cuda::getCurrentCUDAStream(device_.index()));
    return;
  }
#endif
  t0_ = std::chrono::steady_clock::now();
}

void StepTimer::stop() {
#ifdef TRAINER_WITH_CUDA
  if (device_.is_cuda()) {
    ev_->pairs.back().second.record(c10::cuda::getCurrentCUDAStream(device_.index()));
    return;
  }
#endif
  host_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

bool StepTimer::idle() const {
#ifdef TRAINER_WITH_CUDA
  if (device_.is_cuda() && !ev_->pairs.empty()) return ev_->pairs.back().second.query();
#endif
  return false;
}

double StepTimer::take_seconds() {
#ifdef TRAINER_WITH_CUDA
  if (device_.is_cuda()) {
    double s = 0;
    while (!ev_->pairs.empty() && ev_->pairs.front().second.query()) {
      s += ev_->pairs.front().first.elapsed_time(ev_->pairs.front().second) / 1e3;
      ev_->spare.push_back(std::move(ev_->pairs.front()));
      ev_->pairs.pop_front();
    }
    return s;
  }
#endif
  const double s = host_s_;
  host_s_ = 0;
  return s;
}

double peak_flops(const std::string& gpu, bool low_precision) {
  if (!low_precision) return 0;
  if (gpu.find("H200") != std::string::npos || gpu.find("H100") != std::string::npos) return 989e12;
  if (gpu.find("A100") != std::string::npos) return 312e12;
  return 0;
}

}  // namespace trainer
