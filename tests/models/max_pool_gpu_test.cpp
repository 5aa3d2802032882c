// The NHWC max-pool kernels (lib/kernels, through models/max_pool) on the GPU against ATen's max_pool2d: the same
// values and gradients over ResNet's stem shape and odd ones, with ties, and their speed on the stem (label gpu).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>

#include "kernel_harness.h"
#include "models/max_pool.h"

namespace trainer {
namespace {

struct PoolCase {
  int64_t n, c, h, w, k, s, p;
};

// Forward: bit-equal to ATen's in the same dtype (a maximum is exact). Backward: each input's gradient is the sum
// of the dy values of the windows it wins (at most 4 for 3x3 stride 2), against ATen's in fp32 on the same values:
// one rounding of the sum to 8 (bf16) or 11 (fp16) mantissa bits, 1e-2 relative in the L2 norm. Ties (values drawn
// from {0, 1, 2}) check that the first maximum in scan order wins, as in ATen.
TEST(MaxPoolNhwc, MatchesAtenValuesAndGradients) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device; none is usable here";
  if (!fused_batchnorm_built()) GTEST_SKIP() << "this build has no CUDA kernels of its own (no nvcc)";
  const torch::Device dev(torch::kCUDA, 0);
  const std::vector<PoolCase> cases = {{256, 64, 112, 112, 3, 2, 1}, {3, 24, 9, 11, 3, 2, 1}, {2, 13, 8, 7, 3, 2, 1},
                                       {4, 16, 5, 5, 2, 2, 0},       {2, 8, 6, 6, 3, 1, 1},   {1, 8, 3, 3, 3, 2, 1}};
  for (const auto dtype : {torch::kBFloat16, torch::kHalf})
    for (const PoolCase& pc : cases)
      for (const bool ties : {false, true}) {
        SCOPED_TRACE(testing::Message() << test::name_of(dtype) << " " << pc.n << "x" << pc.c << "x"
                                        << pc.h << "x" << pc.w << " k" << pc.k << " s" << pc.s << " p" << pc.p
                                        << (ties ? " ties" : ""));
        torch::manual_seed(4);
        const auto o = torch::TensorOptions().device(dev);
        torch::Tensor x = ties ? torch::randint(0, 3, {pc.n, pc.c, pc.h, pc.w}, o) : torch::randn({pc.n, pc.c, pc.h, pc.w}, o);
        x = x.to(dtype).contiguous(torch::MemoryFormat::ChannelsLast);
        ASSERT_TRUE(max_pool_nhwc_applies(x, pc.k, pc.s, pc.p, FusedNorm::faster));
        torch::Tensor xi = x.detach().requires_grad_(true);
        torch::Tensor y = max_pool2d_nhwc(xi, pc.k, pc.s, pc.p, FusedNorm::faster);
        torch::Tensor yr = torch::max_pool2d(x, pc.k, pc.s, pc.p);
        ASSERT_EQ(y.sizes(), yr.sizes());
        EXPECT_TRUE(y.is_contiguous(torch::MemoryFormat::ChannelsLast));
        EXPECT_TRUE(torch::equal(y, yr));
        {
          torch::NoGradGuard ng;  // evaluation: no positions kept
          EXPECT_TRUE(torch::equal(max_pool2d_nhwc(x, pc.k, pc.s, pc.p, FusedNorm::faster), yr));
        }
        torch::Tensor dy = torch::randn(y.sizes(), o).to(dtype).contiguous(torch::MemoryFormat::ChannelsLast);
        y.backward(dy);
        torch::Tensor xr = x.to(torch::kFloat32).requires_grad_(true);
        torch::max_pool2d(xr, pc.k, pc.s, pc.p).backward(dy.to(torch::kFloat32));
        EXPECT_LT(test::rel_l2(xi.grad(), xr.grad()), 1e-2);
        EXPECT_TRUE(xi.grad().is_contiguous(torch::MemoryFormat::ChannelsLast));
        if (pc.n != 256 || ties) continue;
        const double fwd = test::device_ms([&] { max_pool2d_nhwc(x, pc.k, pc.s, pc.p, FusedNorm::faster); });
        const double both = test::device_ms([&] {
          torch::Tensor a = x.detach().requires_grad_(true);
          max_pool2d_nhwc(a, pc.k, pc.s, pc.p, FusedNorm::faster).backward(dy);
        });
        const double aten = test::device_ms([&] {
          torch::Tensor a = x.detach().requires_grad_(true);
          torch::max_pool2d(a, pc.k, pc.s, pc.p).backward(dy);
        });
        // bytes: forward reads x, writes y and a byte per output; backward reads dy and the bytes, writes dx
        const double in = static_cast<double>(x.numel()) * x.element_size(), out = static_cast<double>(y.numel());
        const double fwd_bytes = in + out * (x.element_size() + 1), bwd_bytes = in + out * (x.element_size() + 1);
        std::printf("  %s %lldx%lldx%lldx%lld max pool 3x3/2: forward %.3f ms (%.2f TB/s), forward + backward %.3f ms "
                    "(%.2f TB/s); ATen %.3f ms: %.2fx\n",
                    test::name_of(dtype), static_cast<long long>(pc.n),
                    static_cast<long long>(pc.c), static_cast<long long>(pc.h), static_cast<long long>(pc.w), fwd,
                    fwd_bytes / fwd * 1e-9, both, (fwd_bytes + bwd_bytes) / both * 1e-9, aten, aten / both);
      }
}

}  // namespace
}  // namespace trainer
