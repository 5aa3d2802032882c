// `--profile START:END`: a Chrome trace (chrome://tracing, Perfetto) of optimizer steps START..END-1 through the
// LibTorch (Kineto) profiler, CPU ops and, on CUDA, kernels and copies. The engine marks named ranges
// (data, forward, backward, all-reduce, optimizer) with RECORD_USER_SCOPE so the trace shows where a step goes.
#pragma once
#include <cstdint>
#include <string>

#include <torch/types.h>

namespace trainer {

struct ProfileRange {
  int64_t start = -1, end = -1;  // optimizer steps [start, end); start < 0: off
  bool on() const { return start >= 0; }
};
// "10:15" -> {10, 15}; "" -> off. Throws ConfigError on anything else.
ProfileRange parse_profile_range(const std::string& spec);

class StepProfiler {
 public:
  StepProfiler(ProfileRange range, std::string trace_path, torch::Device device);
  ~StepProfiler();
  // Call with the index of the optimizer step about to start; starts or stops the profiler at the edges.
  void at_step(int64_t step);
  void finish();  // stops early (end of training before END) and writes the trace
  bool written() const { return written_; }

 private:
  ProfileRange range_;
  std::string path_;
  torch::Device device_;
  bool running_ = false, written_ = false;
};

}  // namespace trainer
