// The q/k/v projection's fused backward (lib/kernels/qkv_grad, through models/qkv_split) on the GPU: the same
// forward and GEMM gradients as ATen's linear + unbind, the bias gradient against fp32 sums over the ViT widths and
// odd token counts, an unused gradient, and the time at ViT-B's size against ATen's stack and bias reduction
// (label gpu).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>

#include "kernel_harness.h"
#include "models/fused_batchnorm.h"
#include "models/qkv_split.h"

#ifdef TRAINER_WITH_KERNELS
#include <c10/cuda/CUDAStream.h>

#include "kernels/qkv_grad.h"
#endif

namespace trainer {
namespace {

struct Shape {
  int64_t b, n, d;
};
const Shape kShapes[] = {{4, 197, 192}, {3, 50, 384}, {8, 197, 768}, {2, 577, 1024}, {1, 1, 768}, {5, 7, 8}};

// q, k, v and the gradients of x and the weight are the same ops on the same values as ATen's path (the stack is
// a copy): equal exactly. The bias gradient is the fp32 sum of the same bf16/fp16 gradients in both (ATen's
// rounds it to the bias's autocast dtype: compared to the fp32 sums at that dtype's precision, ours at 1e-5).
void check_shape(const Shape& sh, torch::ScalarType dtype, bool use_k) {
  const auto o = torch::TensorOptions().device(torch::kCUDA);
  torch::manual_seed(11);
  const int64_t C = sh.d;
  const torch::Tensor x = torch::randn({sh.b, sh.n, C}, o).to(dtype), w = torch::randn({3 * sh.d, C}, o) * 0.05;
  const torch::Tensor b = torch::randn({3 * sh.d}, o);
  std::vector<torch::Tensor> g;
  for (int i = 0; i < 3; ++i) g.push_back(torch::randn({sh.b, sh.n, sh.d}, o).to(dtype));
  auto run = [&](bool fused) {
    torch::Tensor xi = x.clone().requires_grad_(true), wi = w.clone().requires_grad_(true);
    torch::Tensor bi = b.clone().requires_grad_(true);
    std::vector<torch::Tensor> qkv;
    {
      test::Autocast ac(dtype);
      EXPECT_TRUE(qkv_projection_fuses(xi, bi));
      qkv = qkv_projection(xi, wi, bi, fused);
    }
    torch::Tensor loss = (qkv[0].to(torch::kFloat32) * g[0]).sum() + (qkv[2].to(torch::kFloat32) * g[2]).sum();
    if (use_k) loss = loss + (qkv[1].to(torch::kFloat32) * g[1]).sum();
    loss.backward();
    return std::vector<torch::Tensor>{qkv[0], qkv[1], qkv[2], xi.grad(), wi.grad(), bi.grad()};
  };
  const auto fused = run(true), aten = run(false);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(torch::equal(fused[i], aten[i])) << "output " << i;
  const torch::Tensor gk = use_k ? g[1] : torch::zeros_like(g[1]);
  const torch::Tensor ref = torch::cat({g[0], gk, g[2]}, -1).to(torch::kFloat32).reshape({-1, 3 * sh.d}).sum(0);
  EXPECT_LT(test::rel_l2(fused[5], ref), 1e-5);
  EXPECT_LT(test::rel_l2(aten[5], ref), dtype == torch::kHalf ? 2e-3 : 1e-2);
}

TEST(QkvSplit, MatchesAtenOverTheViTWidths) {
  REQUIRE_KERNELS();
  for (const auto dtype : {torch::kBFloat16, torch::kHalf})
    for (const Shape& sh : kShapes)
      for (const bool use_k : {true, false}) {
        SCOPED_TRACE(testing::Message() << test::name_of(dtype) << " " << sh.b << "x" << sh.n << "x" << sh.d
                                        << (use_k ? "" : " k unused"));
        check_shape(sh, dtype, use_k);
      }
}

// ViT-B's projection at batch 256 (256 x 197 x 2304): the split's backward kernel (the stack with its column sums)
// against ATen's stack and bias reduction, and the bytes the kernel must move (reads the three gradients, writes
// the stack). A measurement (speed is judged in bench/): it asserts only that both ran.
TEST(QkvSplit, TimesTheViTBaseBackward) {
  REQUIRE_KERNELS();
#ifdef TRAINER_WITH_KERNELS
  const auto o = torch::TensorOptions().device(torch::kCUDA);
  const int64_t rows = 256 * 197, D = 768;
  std::vector<torch::Tensor> g;
  for (int i = 0; i < 3; ++i) g.push_back(torch::randn({rows, D}, o).to(torch::kBFloat16));
  torch::Tensor out = torch::empty({rows, 3 * D}, g[0].options()), dbias = torch::empty({3 * D}, o);
  torch::Tensor ws = torch::empty({kernels::qkv_grad_workspace_floats(rows, D)}, o);
  const cudaStream_t s = c10::cuda::getCurrentCUDAStream().stream();
  const double fused = test::device_ms([&] {
    kernels::qkv_grad(g[0].data_ptr(), g[1].data_ptr(), g[2].data_ptr(), kernels::HalfType::bf16, rows, D,
                      out.data_ptr(), dbias.data_ptr<float>(), ws.data_ptr<float>(), s);
  });
  const double aten = test::device_ms([&] {
    out = torch::stack(g, 1).view({rows, 3 * D});
    dbias = out.sum(0).to(torch::kFloat32);
  });
  const double bytes = static_cast<double>(rows * 3 * D) * 2 * 2;
  std::printf("  50432x2304 q/k/v gradient stack + bias sums: fused %.3f ms (%.2f TB/s of %.2f GB), ATen %.3f ms: "
              "%.2fx\n",
              fused, bytes / fused * 1e-9, bytes * 1e-9, aten, aten / fused);
  EXPECT_GT(fused, 0);
#endif
}

}  // namespace
}  // namespace trainer
