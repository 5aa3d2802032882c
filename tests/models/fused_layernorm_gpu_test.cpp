// The fused residual add + LayerNorm (lib/kernels/layernorm, through models/fused_layernorm) on the GPU: right
// against ATen in fp32 over the ViT widths and odd token counts, the whole ViT fused against its ATen path, and the
// time of the pass at ViT-B's size against ATen's add, layer_norm and casts (label gpu).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>

#include "kernel_harness.h"
#include "models/fused_layernorm.h"
#include "models/registry.h"

namespace trainer {
namespace {

struct Shape {
  int64_t b, n, d;
};
// ViT-Ti/S/B/L widths; 197 (224 px), 50 (112 px), 577 (384 px) tokens; one odd row count
const Shape kShapes[] = {{4, 197, 192}, {3, 50, 384}, {8, 197, 768}, {2, 577, 1024}, {1, 1, 768}, {5, 7, 256},
                         {3, 11, 512}};

// (y, s) = (LayerNorm(x + a) in dtype, x + a) with gradients dy of y and ds of s, fused against ATen in fp32 on the
// same rounded values. s is one fp32 add of the same values (1e-6); y is rounded to dtype once (1e-2 relative in L2);
// dx is fp32 arithmetic on the same dy (1e-4); da is dx rounded to dtype (1e-2); dweight, dbias: sums over rows
// (1e-4). Also without the branch (the first norm) and with the stream unused (the last).
void check_shape(const Shape& sh, torch::ScalarType dtype, bool with_branch, bool with_ds) {
  const auto o = torch::TensorOptions().device(torch::kCUDA);
  torch::manual_seed(4);
  const torch::Tensor x = torch::randn({sh.b, sh.n, sh.d}, o) * 2 + 0.3;
  const torch::Tensor a = (torch::randn({sh.b, sh.n, sh.d}, o)).to(dtype);
  const torch::Tensor dy = torch::randn({sh.b, sh.n, sh.d}, o).to(dtype), ds = torch::randn({sh.b, sh.n, sh.d}, o);
  const torch::Tensor w = torch::rand({sh.d}, o) + 0.5, b = torch::randn({sh.d}, o);
  // reference
  torch::Tensor xr = x.clone().requires_grad_(true), ar = a.to(torch::kFloat32).requires_grad_(true);
  torch::Tensor wr = w.clone().requires_grad_(true), br = b.clone().requires_grad_(true);
  torch::Tensor sr = with_branch ? xr + ar : xr * 1;
  torch::Tensor yr = torch::layer_norm(sr, {sh.d}, wr, br, 1e-6);
  torch::Tensor loss = (yr * dy.to(torch::kFloat32)).sum();
  if (with_ds) loss = loss + (sr * ds).sum();
  loss.backward();
  // ours
  torch::Tensor xf = x.clone().requires_grad_(true), af = a.clone().requires_grad_(true);
  torch::Tensor wf = w.clone().requires_grad_(true), bf = b.clone().requires_grad_(true);
  std::pair<torch::Tensor, torch::Tensor> out;
  {
    test::Autocast ac(dtype);
    ASSERT_TRUE(fused_layernorm_applies(xf, FusedNorm::faster));
    out = fused_add_layernorm(xf, with_branch ? af : torch::Tensor(), wf, bf, 1e-6, with_ds);
  }
  EXPECT_EQ(out.first.scalar_type(), dtype);
  EXPECT_LT(test::rel_l2(out.first, yr), 1e-2);
  if (with_ds) {
    EXPECT_LT(test::rel_l2(out.second, sr), 1e-6);
    torch::autograd::backward({out.first, out.second}, {dy, ds});
  } else {
    out.first.backward(dy);
  }
  EXPECT_LT(test::rel_l2(xf.grad(), xr.grad()), 1e-4);
  if (with_branch) {
    EXPECT_EQ(af.grad().scalar_type(), dtype);
    EXPECT_LT(test::rel_l2(af.grad(), ar.grad()), 1e-2);
  }
  EXPECT_LT(test::rel_l2(wf.grad(), wr.grad()), 1e-4);
  EXPECT_LT(test::rel_l2(bf.grad(), br.grad()), 1e-4);
}

TEST(FusedLayerNorm, MatchesAtenInFp32OverTheViTWidths) {
  REQUIRE_KERNELS();
  for (const auto dtype : {torch::kBFloat16, torch::kHalf})
    for (const Shape& sh : kShapes)
      for (const bool branch : {true, false})
        for (const bool ds : {true, false}) {
          SCOPED_TRACE(testing::Message() << test::name_of(dtype) << " " << sh.b << "x" << sh.n << "x" << sh.d
                                          << (branch ? " +branch" : "") << (ds ? " +stream gradient" : ""));
          check_shape(sh, dtype, branch, ds);
        }
}

// logits and gradients of the whole model, fused against model.fused_norm off, the same weights and images under
// bf16 autocast: within bf16's roundings (the fused path rounds the norms' outputs once, ATen's path rounds them at
// the GEMMs' casts: the same values, so the two differ by reduction order only; 2e-2 relative in L2)
TEST(FusedLayerNorm, ViTFollowsItsAtenPath) {
  REQUIRE_KERNELS();
  for (const char* name : {"vit_tiny_patch16_224", "vit_small_patch16_224"}) {
    SCOPED_TRACE(name);
    ModelConfig c;
    c.name = name;
    c.num_classes = 100;
    c.in_chans = 3;
    c.fused_norm = "off";
    torch::manual_seed(0);
    Classifier ref = create_model(c, 224);
    c.fused_norm = "auto";
    Classifier fused = create_model(c, 224);
    {
      torch::NoGradGuard ng;
      auto pf = fused->parameters();
      auto pr = ref->parameters();
      for (size_t i = 0; i < pf.size(); ++i) pf[i].copy_(pr[i]);
    }
    ref->to(torch::kCUDA);
    fused->to(torch::kCUDA);
    const auto o = torch::TensorOptions().device(torch::kCUDA);
    const torch::Tensor x = torch::randn({8, 3, 224, 224}, o);
    const torch::Tensor target = torch::randint(0, 100, {8}, o.dtype(torch::kLong));
    torch::Tensor lr, lf;
    {
      test::Autocast ac(torch::kBFloat16);
      lr = ref->forward(x);
      lf = fused->forward(x);
    }
    EXPECT_LT(test::rel_l2(lf.to(torch::kFloat32), lr.to(torch::kFloat32)), 2e-2);
    torch::nn::functional::cross_entropy(lr.to(torch::kFloat32), target).backward();
    torch::nn::functional::cross_entropy(lf.to(torch::kFloat32), target).backward();
    auto nf = fused->named_parameters();
    for (const auto& kv : ref->named_parameters()) {
      SCOPED_TRACE(kv.key());
      ASSERT_TRUE(nf[kv.key()].grad().defined());
      EXPECT_LT(test::rel_l2(nf[kv.key()].grad(), kv.value().grad()), 5e-2);
    }
  }
}

// ViT-B's norm at batch 256 (256 x 197 x 768): the fused forward + backward against ATen's add, layer_norm and casts
// under autocast, and the bytes each must move (fused: forward reads x, a, writes s, y; backward reads dy, ds, s,
// writes dx, da). A measurement (speed is judged in bench/): it asserts only that both ran.
TEST(FusedLayerNorm, TimesTheViTBasePass) {
  REQUIRE_KERNELS();
  const auto o = torch::TensorOptions().device(torch::kCUDA);
  const int64_t B = 256, N = 197, D = 768;
  const torch::Tensor x = torch::randn({B, N, D}, o), a = torch::randn({B, N, D}, o).to(torch::kBFloat16);
  const torch::Tensor dy = torch::randn({B, N, D}, o).to(torch::kBFloat16), ds = torch::randn({B, N, D}, o);
  const torch::Tensor w = torch::ones({D}, o), b = torch::zeros({D}, o);
  auto step = [&](bool fused) {
    torch::Tensor xi = x.detach().requires_grad_(true), ai = a.detach().requires_grad_(true);
    torch::Tensor wi = w.detach().requires_grad_(true), bi = b.detach().requires_grad_(true);
    std::pair<torch::Tensor, torch::Tensor> out;
    {
      test::Autocast ac(torch::kBFloat16);
      if (fused) {
        out = fused_add_layernorm(xi, ai, wi, bi, 1e-6, true);
      } else {
        torch::Tensor s = xi + ai;
        out = {torch::layer_norm(s, {D}, wi, bi, 1e-6).to(torch::kBFloat16), s};
      }
    }
    torch::autograd::backward({out.first, out.second}, {dy, ds});
  };
  const double fused = test::device_ms([&] { step(true); }), aten = test::device_ms([&] { step(false); });
  const double bytes = static_cast<double>(B * N * D) * (4 + 2 + 4 + 2 + 2 + 4 + 4 + 4 + 2);
  std::printf("  256x197x768 add + LayerNorm forward + backward: fused %.3f ms (%.2f TB/s of %.2f GB), ATen %.3f ms: "
              "%.2fx\n",
              fused, bytes / fused * 1e-9, bytes * 1e-9, aten, aten / fused);
  EXPECT_GT(fused, 0);
}

}  // namespace
}  // namespace trainer
