// Device time of train steps without host synchronisation: timing events recorded on the current stream around
// each step, summed only when the caller has synchronised anyway (the log interval). On the CPU the same calls
// measure host time. idle() asks, without blocking, whether the device has finished everything up to the last
// stop(): true at a step boundary means the GPU waited for the host.
#pragma once
#include <torch/types.h>

#include <chrono>
#include <memory>
#include <vector>

namespace trainer {

class StepTimer {
 public:
  explicit StepTimer(torch::Device device);
  ~StepTimer();
  void start();
  void stop();
  bool idle() const;
  // Seconds between start/stop pairs since the last call. On CUDA, call after a synchronisation.
  double take_seconds();

 private:
  struct Events;
  torch::Device device_;
  std::unique_ptr<Events> ev_;
  std::chrono::steady_clock::time_point t0_;
  double host_s_ = 0;
};

// Dense tensor-core peak FLOP/s of a GPU by name (vendor datasheets) for MFU; 0 when unknown or fp32.
double peak_flops(const std::string& gpu_name, bool low_precision);

}  // namespace trainer
