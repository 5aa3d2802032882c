// Helpers of the GPU kernel harnesses in tests/models: the relative L2 error, the 16-bit dtype names, device time
// per call.
#pragma once
#include <torch/torch.h>

#include <c10/cuda/CUDAStream.h>

#include <functional>

namespace trainer::test {

// |a - b| / |b| in the L2 norm, in double
inline double rel_l2(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a.to(torch::kFloat64) - b.to(torch::kFloat64)).norm() / b.to(torch::kFloat64).norm().clamp_min(1e-30))
      .item<double>();
}

inline const char* name_of(torch::ScalarType t) { return t == torch::kHalf ? "fp16" : "bf16"; }

// milliseconds per call of f on the current stream, from CUDA events around 20 calls after 3 warm-up calls
inline double device_ms(const std::function<void()>& f) {
  for (int i = 0; i < 3; ++i) f();
  const cudaStream_t s = c10::cuda::getCurrentCUDAStream().stream();
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaEventRecord(e0, s);
  for (int i = 0; i < 20; ++i) f();
  cudaEventRecord(e1, s);
  cudaEventSynchronize(e1);
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return ms / 20;
}

}  // namespace trainer::test
