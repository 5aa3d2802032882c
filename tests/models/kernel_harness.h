// Helpers of the GPU kernel harnesses in tests/models: the relative L2 error, the 16-bit dtype names, device time
// per call, autocast for a scope, and the skip of a test that needs a GPU and a build with the kernels.
#pragma once
#include <torch/torch.h>

#include <ATen/autocast_mode.h>
#include <c10/cuda/CUDAStream.h>

#include <functional>

#include "models/fused_batchnorm.h"  // fused_batchnorm_built: whether this build has the kernels

// the first statement of a test that needs a CUDA device and this build's kernels: a clean skip without either
#define REQUIRE_KERNELS()                                                                         \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device; none is usable here";  \
  if (!::trainer::fused_batchnorm_built()) GTEST_SKIP() << "this build has no CUDA kernels of its own (no nvcc)"

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

// autocast in `dtype` for the scope, as the trainer's step sets it
struct Autocast {
  explicit Autocast(at::ScalarType dtype) {
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, dtype);
    at::autocast::increment_nesting();
  }
  ~Autocast() {
    at::autocast::decrement_nesting();
    at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(at::kCUDA, false);
  }
};

}  // namespace trainer::test
