// The ResNet stem convolution's fp16 forward under bf16 autocast (models/stem_conv) on the GPU: output and weight
// gradient against the convolution in fp32, no further off than autocast's bf16 convolution is, and the time of
// both on ResNet-50's stem (label gpu).
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>

#include "kernel_harness.h"
#include "models/stem_conv.h"

namespace trainer {
namespace {

// bf16 autocast for the scope, as the trainer's step sets it
struct Bf16Autocast {
  Bf16Autocast() {
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
    at::autocast::increment_nesting();
  }
  ~Bf16Autocast() {
    at::autocast::decrement_nesting();
    at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(at::kCUDA, false);
  }
};

struct Result {
  torch::Tensor y, dw;
};

Result run(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& dy, bool fp16) {
  torch::Tensor wi = w.detach().requires_grad_(true);
  torch::Tensor y;
  {
    Bf16Autocast ac;
    EXPECT_EQ(stem_conv_fp16_applies(x, fp16), fp16);
    y = stem_conv(x, wi, 2, 3, fp16);
  }
  y.backward(dy.to(y.scalar_type()));
  return {y.detach(), wi.grad()};
}

// Output: bf16's rounding of each output is about 2^-9 relative (rel L2 ~2e-3); the fp16 inputs add less. The
// weight gradient sums millions of bf16 products in fp32: its error comes from the bf16 inputs (~3e-3). Both paths
// must stay within 1e-2 of fp32 and ours within 1.25x autocast's own error.
TEST(StemConv, Fp16ForwardMatchesFp32AsCloselyAsAutocast) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device; none is usable here";
  const torch::Device dev(torch::kCUDA, 0);
  at::globalContext().setBenchmarkCuDNN(true);
  for (const auto& shape : std::vector<std::vector<int64_t>>{{256, 3, 224, 224}, {3, 3, 37, 29}, {2, 1, 64, 64}}) {
    SCOPED_TRACE(testing::Message() << shape[0] << "x" << shape[1] << "x" << shape[2] << "x" << shape[3]);
    torch::manual_seed(5);
    const auto cl = torch::MemoryFormat::ChannelsLast;
    torch::Tensor x = torch::randn(shape, torch::device(dev)).contiguous(cl);
    torch::Tensor w = (torch::randn({64, shape[1], 7, 7}, torch::device(dev)) * 0.05).contiguous(cl);
    const int64_t ho = (shape[2] + 6 - 7) / 2 + 1, wo = (shape[3] + 6 - 7) / 2 + 1;
    torch::Tensor dy = torch::randn({shape[0], 64, ho, wo}, torch::device(dev)).contiguous(cl) * 1e-6;
    // fp32 reference
    torch::Tensor wr = w.detach().requires_grad_(true);
    torch::Tensor yr = at::conv2d(x, wr, {}, {2, 2}, {3, 3});
    yr.backward(dy);
    const Result ours = run(x, w, dy, true), aten = run(x, w, dy, false);
    EXPECT_EQ(ours.y.scalar_type(), torch::kBFloat16);
    EXPECT_EQ(ours.y.is_contiguous(cl), aten.y.is_contiguous(cl));  // 1 channel: ATen picks NCHW too
    const double e_y = test::rel_l2(ours.y, yr), e_y_aten = test::rel_l2(aten.y, yr);
    const double e_w = test::rel_l2(ours.dw, wr.grad()), e_w_aten = test::rel_l2(aten.dw, wr.grad());
    std::printf("  %ldx%ldx%ldx%ld: output rel L2 %.2e (autocast bf16 %.2e), weight grad %.2e (%.2e)\n", shape[0],
                shape[1], shape[2], shape[3], e_y, e_y_aten, e_w, e_w_aten);
    EXPECT_LT(e_y, 1e-2);
    EXPECT_LT(e_w, 1e-2);
    EXPECT_LT(e_y, 1.25 * e_y_aten + 1e-4);
    EXPECT_LT(e_w, 1.25 * e_w_aten + 1e-4);
    if (shape[0] == 256) {
      for (const bool fp16 : {true, false}) {
        torch::Tensor wi = w.detach().requires_grad_(true);
        const double ms = test::device_ms([&] {
          torch::Tensor y;
          {
            Bf16Autocast ac;
            y = stem_conv(x, wi, 2, 3, fp16);
          }
          y.backward(dy.to(torch::kBFloat16));
        });
        std::printf("  stem forward + weight gradient, %s: %.3f ms\n", fp16 ? "fp16 forward" : "autocast bf16",
                    ms);
      }
    }
  }
}

}  // namespace
}  // namespace trainer
