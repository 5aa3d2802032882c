// fc1's bias + exact GELU (lib/kernels/bias_gelu, through models/fused_bias_gelu) on the GPU: right against ATen in
// fp32 over the ViT MLP widths and odd row counts, ATen's ops where the kernels do not apply, the backward's
// gradient written over the incoming one (one buffer less at the MLP's peak, a caller's own left alone), and the time of the
// pass (and of the whole fc1) at ViT-B's size against ATen's gelu, gelu_backward and bias reduction (label gpu).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <optional>

#include "kernel_harness.h"
#include "models/fused_batchnorm.h"
#include "models/fused_bias_gelu.h"

#ifdef TRAINER_WITH_KERNELS
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>

#include "kernels/bias_gelu.h"
#endif

namespace trainer {
namespace {

struct Shape {
  int64_t rows, c;
};
// ViT-Ti/S/B/L MLP widths (4 x 192 ... 4 x 1024) at 197, 50 and 577 tokens, and odd row counts
const Shape kShapes[] = {{4 * 197, 768}, {3 * 50, 1536}, {8 * 197, 3072}, {2 * 577, 4096}, {1, 3072}, {7, 1536},
                         {33, 8}};

// The GEMM is the identity (exact in bf16/fp16: x * 1 summed with zeros), so what is compared is the kernels: the
// reference is ATen's gelu in fp32 on the same hb = (x + bias) rounded to dtype, backward through autograd.
// y and dx (= dh through the identity) are the fp32 values rounded once to dtype (5e-3 relative in L2, bf16's unit
// roundoff 3.9e-3); dbias sums the unrounded fp32 values in both (1e-4).
void check_shape(const Shape& sh, torch::ScalarType dtype) {
  const auto o = torch::TensorOptions().device(torch::kCUDA);
  torch::manual_seed(7);
  const torch::Tensor x = (torch::randn({sh.rows, sh.c}, o) * 1.5).to(dtype);
  const torch::Tensor bias = torch::randn({sh.c}, o) * 0.5, eye = torch::eye(sh.c, o);
  const torch::Tensor dy = torch::randn({sh.rows, sh.c}, o).to(dtype);
  const torch::Tensor hb = (x.to(torch::kFloat32) + bias).to(dtype).to(torch::kFloat32).requires_grad_(true);
  const torch::Tensor yr = torch::gelu(hb);
  yr.backward(dy.to(torch::kFloat32));
  const torch::Tensor dbias_ref = hb.grad().sum(0);

  torch::Tensor xf = x.clone().requires_grad_(true), bf = bias.clone().requires_grad_(true), y;
  {
    test::Autocast ac(dtype);
    ASSERT_TRUE(linear_gelu_fuses(xf, bf));
    y = linear_gelu(xf, eye, bf, true);
  }
  ASSERT_EQ(y.scalar_type(), dtype);
  EXPECT_LT(test::rel_l2(y, yr), 5e-3);
  y.backward(dy);
  EXPECT_EQ(xf.grad().scalar_type(), dtype);
  EXPECT_LT(test::rel_l2(xf.grad(), hb.grad()), 5e-3);
  EXPECT_LT(test::rel_l2(bf.grad(), dbias_ref), 1e-4);
}

TEST(FusedBiasGelu, MatchesAtenInFp32OverTheViTMlpWidths) {
  REQUIRE_KERNELS();
  for (const auto dtype : {torch::kBFloat16, torch::kHalf})
    for (const Shape& sh : kShapes) {
      SCOPED_TRACE(testing::Message() << test::name_of(dtype) << " " << sh.rows << "x" << sh.c);
      check_shape(sh, dtype);
    }
}

// A width the kernels do not take (not a multiple of 8) and a run outside autocast keep ATen's gelu(linear): the
// same values and gradients as the composite written out.
TEST(FusedBiasGelu, KeepsAtenWhereTheKernelsDoNotApply) {
  REQUIRE_KERNELS();
  const auto o = torch::TensorOptions().device(torch::kCUDA);
  for (const bool autocast : {true, false}) {
    SCOPED_TRACE(autocast ? "C = 100 under autocast" : "C = 128 in fp32");
    const int64_t C = autocast ? 100 : 128;
    const torch::Tensor x = torch::randn({9, 64}, o), w = torch::randn({C, 64}, o) * 0.1, b = torch::randn({C}, o);
    torch::Tensor x1 = x.clone().requires_grad_(true), b1 = b.clone().requires_grad_(true);
    torch::Tensor x2 = x.clone().requires_grad_(true), b2 = b.clone().requires_grad_(true), y1, y2;
    {
      std::optional<test::Autocast> ac;
      if (autocast) ac.emplace(torch::kBFloat16);
      EXPECT_FALSE(linear_gelu_fuses(x1, b1));
      y1 = linear_gelu(x1, w, b1, true);
      y2 = torch::gelu(torch::linear(x2, w, b2));
    }
    EXPECT_TRUE(torch::equal(y1, y2));
    y1.sum().backward();
    y2.sum().backward();
    EXPECT_TRUE(torch::equal(x1.grad(), x2.grad()));
    EXPECT_TRUE(torch::equal(b1.grad(), b2.grad()));
  }
}

#ifdef TRAINER_WITH_KERNELS
// the most bytes allocated on the current device while f runs, above what was allocated before it
int64_t peak_bytes_during(const std::function<void()>& f) {
  const auto dev = c10::cuda::current_device();
  const size_t all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  torch::cuda::synchronize();
  c10::cuda::CUDACachingAllocator::resetPeakStats(dev);
  const int64_t before = c10::cuda::CUDACachingAllocator::getDeviceStats(dev).allocated_bytes[all].current;
  f();
  torch::cuda::synchronize();
  return c10::cuda::CUDACachingAllocator::getDeviceStats(dev).allocated_bytes[all].peak - before;
}
#endif

// fc1 + GELU + fc2 as a ViT block's MLP runs them (8 x 197 tokens, 768 -> 3072 -> 768, bf16 autocast). fc2's
// backward makes GELU's output gradient (one 9.7 MB buffer); ours writes GELU's input gradient over it, which
// nobody else holds, so the whole backward never holds more than that one buffer above its start (H200: 9.7 MB,
// ATen's 14.6; before the overwrite fired, 15.3). A gradient the caller passes in and still holds is left as it was.
TEST(FusedBiasGelu, BackwardWritesOverOnlyAGradientNobodyElseHolds) {
  REQUIRE_KERNELS();
#ifdef TRAINER_WITH_KERNELS
  const auto o = torch::TensorOptions().device(torch::kCUDA);
  const int64_t B = 8, N = 197, D = 768, C = 3072;
  torch::manual_seed(3);
  const torch::Tensor x = torch::randn({B, N, D}, o), w1 = torch::randn({C, D}, o) * 0.03, b1 = torch::randn({C}, o);
  const torch::Tensor w2 = torch::randn({D, C}, o) * 0.02;
  const torch::Tensor dout = torch::randn({B, N, D}, o).to(torch::kBFloat16);
  auto backward_peak = [&](bool fused) {
    torch::Tensor xi = x.clone().requires_grad_(true), out;
    {
      test::Autocast ac(torch::kBFloat16);
      out = torch::linear(linear_gelu(xi, w1, b1, fused), w2);
    }
    return peak_bytes_during([&] { out.backward(dout); });
  };
  const int64_t fused = backward_peak(true), aten = backward_peak(false), buffer = B * N * C * 2;
  std::printf("  MLP backward peak above its start: fused %.1f MB, ATen %.1f MB (one GELU-sized buffer %.1f MB)\n",
              fused / 1e6, aten / 1e6, buffer / 1e6);
  EXPECT_LE(fused, buffer + buffer / 20) << "more than GELU's one gradient buffer alive at once";
  EXPECT_LT(fused, aten);

  const torch::Tensor dy = torch::randn({B * N, C}, o).to(torch::kBFloat16), kept = dy.clone();
  torch::Tensor xi = torch::randn({B * N, C}, o).to(torch::kBFloat16).requires_grad_(true), y;
  {
    test::Autocast ac(torch::kBFloat16);
    y = linear_gelu(xi, torch::eye(C, o), b1, true);
  }
  y.backward(dy);
  EXPECT_TRUE(torch::equal(dy, kept));
#endif
}

// ViT-B's fc1 at batch 256 (50432 x 3072): the kernels' forward + backward against ATen's gelu, gelu_backward and
// the bias gradient's reduction, with the bytes the kernels must move (forward reads h, writes y; backward reads dy,
// h, writes dh); then the whole fc1 + GELU forward and backward, GEMMs included, fused against ATen. A measurement
// (speed is judged in bench/): it asserts only that both ran.
TEST(FusedBiasGelu, TimesTheViTBaseMlp) {
  REQUIRE_KERNELS();
#ifdef TRAINER_WITH_KERNELS
  const auto o = torch::TensorOptions().device(torch::kCUDA);
  const int64_t rows = 256 * 197, C = 3072, D = 768;
  const torch::Tensor h = torch::randn({rows, C}, o).to(torch::kBFloat16), dy = torch::randn_like(h);
  const torch::Tensor bias = torch::randn({C}, o);
  torch::Tensor y = torch::empty_like(h), dh = torch::empty_like(h), dbias = torch::empty({C}, o);
  torch::Tensor ws = torch::empty({kernels::bias_gelu_workspace_floats(rows, C)}, o);
  const cudaStream_t s = c10::cuda::getCurrentCUDAStream().stream();
  const double fused = test::device_ms([&] {
    kernels::bias_gelu_forward(h.data_ptr(), bias.data_ptr<float>(), y.data_ptr(), kernels::HalfType::bf16, rows, C,
                               s);
    kernels::bias_gelu_backward(dy.data_ptr(), h.data_ptr(), bias.data_ptr<float>(), kernels::HalfType::bf16, rows,
                                C, dh.data_ptr(), dbias.data_ptr<float>(), ws.data_ptr<float>(), s);
  });
  const double aten = test::device_ms([&] {
    y = torch::gelu(h);
    dh = torch::gelu_backward(dy, h);
    dbias = dh.sum(0).to(torch::kFloat32);
  });
  const double bytes = static_cast<double>(rows * C) * 2 * 5;
  std::printf("  50432x3072 bias + GELU forward + backward: fused %.3f ms (%.2f TB/s of %.2f GB), ATen %.3f ms: "
              "%.2fx\n",
              fused, bytes / fused * 1e-9, bytes * 1e-9, aten, aten / fused);

  const torch::Tensor x = torch::randn({256, 197, D}, o).to(torch::kBFloat16), w = torch::randn({C, D}, o) * 0.02;
  auto mlp = [&](bool fuse) {
    torch::Tensor xi = x.detach().requires_grad_(true), wi = w.detach().requires_grad_(true);
    torch::Tensor bi = bias.detach().requires_grad_(true), out;
    {
      test::Autocast ac(torch::kBFloat16);
      out = linear_gelu(xi, wi, bi, fuse);
    }
    out.backward(dy.view({256, 197, C}));
  };
  const double whole_fused = test::device_ms([&] { mlp(true); }), whole_aten = test::device_ms([&] { mlp(false); });
  std::printf("  ViT-B fc1 + GELU forward + backward with the GEMMs: fused %.3f ms, ATen %.3f ms: %.2fx\n",
              whole_fused, whole_aten, whole_aten / whole_fused);
  EXPECT_GT(fused, 0);
  EXPECT_GT(whole_fused, 0);
#endif
}

}  // namespace
}  // namespace trainer
