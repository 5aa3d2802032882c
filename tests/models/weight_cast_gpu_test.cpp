// The layer-wise weight cast (models/weight_cast.h) against autocast's own per-weight casts: the same 16-bit weights
// and the same fp32 gradients bit for bit, strides kept, undefined, unused and unaligned weights handled; and the
// time of both for ResNet-50's convolution weights (label gpu; the CPU case runs everywhere).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>

#include "kernel_harness.h"
#include "models/registry.h"
#include "models/weight_cast.h"

namespace trainer {
namespace {

TEST(WeightCast, LeavesWeightsAloneOffCudaAutocast) {
  torch::Tensor x = torch::randn({2, 3}), w = torch::randn({4, 3});
  const std::vector<torch::Tensor> out = cast_weights_for_autocast(x, {w, torch::Tensor()});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(out[0].is_same(w));
  EXPECT_FALSE(out[1].defined());
  EXPECT_FALSE(weight_cast_applies(x));
}

TEST(WeightCast, EqualsAutocastsCastsAndTheirGradients) {
  REQUIRE_KERNELS();
  const auto o = torch::device(torch::kCUDA);
  const auto cl = torch::MemoryFormat::ChannelsLast;
  for (const auto dtype : {torch::kBFloat16, torch::kHalf}) {
    SCOPED_TRACE(test::name_of(dtype));
    torch::manual_seed(3);
    std::vector<torch::Tensor> ws = {torch::randn({64, 32, 3, 3}, o).contiguous(cl).requires_grad_(true),
                                     torch::randn({256, 64, 1, 1}, o).contiguous(cl).requires_grad_(true),
                                     torch::Tensor(), torch::randn({7, 5}, o).requires_grad_(true),
                                     torch::randn({9}, o).requires_grad_(true),  // unused
                                     // 4 bytes past an aligned start: the kernel's element-by-element path
                                     torch::randn({101}, o).narrow(0, 1, 100).detach().requires_grad_(true)};
    const std::vector<size_t> used = {0, 1, 3, 5};
    ASSERT_NE(reinterpret_cast<uintptr_t>(ws[5].data_ptr()) % 16, 0u);
    std::vector<torch::Tensor> r;
    for (const auto& w : ws) r.push_back(w.defined() ? torch::randn(w.sizes(), o) : torch::Tensor());
    const torch::Tensor x = torch::zeros({1}, o);
    std::vector<torch::Tensor> cast;
    {
      test::Autocast ac(dtype);
      EXPECT_TRUE(weight_cast_applies(x));
      cast = cast_weights_for_autocast(x, ws);
    }
    ASSERT_EQ(cast.size(), ws.size());
    EXPECT_FALSE(cast[2].defined());
    torch::Tensor loss = torch::zeros({}, o);
    for (const size_t i : used) {
      EXPECT_EQ(cast[i].scalar_type(), dtype);
      EXPECT_EQ(cast[i].strides(), ws[i].strides());
      EXPECT_TRUE(torch::equal(cast[i], ws[i].detach().to(dtype)));
      loss = loss + (cast[i].to(torch::kFloat32) * r[i]).sum();
    }
    loss.backward();
    for (const size_t i : used) {
      ASSERT_TRUE(ws[i].grad().defined());
      EXPECT_EQ(ws[i].grad().scalar_type(), torch::kFloat32);
      EXPECT_TRUE(torch::equal(ws[i].grad(), r[i].to(dtype).to(torch::kFloat32))) << i;
    }
    EXPECT_FALSE(ws[4].grad().defined());
  }
}

TEST(WeightCast, TimesResNet50sConvolutionWeights) {
  REQUIRE_KERNELS();
  const torch::Device dev(torch::kCUDA, 0);
  ModelConfig c;
  c.name = "resnet50";
  c.num_classes = 1000;
  Classifier model = create_model(c, 224);
  model->to(dev);
  std::vector<torch::Tensor> ws;
  for (const auto& p : model->parameters())
    if (p.dim() == 4) ws.push_back(p.contiguous(torch::MemoryFormat::ChannelsLast).detach().requires_grad_(true));
  std::printf("  %zu convolution weights\n", ws.size());
  const torch::Tensor x = torch::zeros({1}, torch::device(dev));
  std::vector<torch::Tensor> grads;
  for (const auto& w : ws) grads.push_back(torch::ones_like(w, w.options().dtype(torch::kBFloat16)));
  for (const bool grouped : {true, false}) {
    const double ms = test::device_ms([&] {
      std::vector<torch::Tensor> cast;
      {
        test::Autocast ac(torch::kBFloat16);
        for (size_t i = 0; i < ws.size(); i += 4) {  // four at a time, as a bottleneck block's weights
          const std::vector<torch::Tensor> group(ws.begin() + i, ws.begin() + std::min(ws.size(), i + 4));
          for (const auto& w : group)
            if (!grouped) cast.push_back(w.to(torch::kBFloat16));
          if (grouped)
            for (const auto& c : cast_weights_for_autocast(x, group)) cast.push_back(c);
        }
      }
      torch::autograd::backward(cast, grads);
    });
    std::printf("  the weights cast and their gradients cast back, %s: %.3f ms\n",
                grouped ? "a function per four weights" : "one cast per weight", ms);
  }
}

}  // namespace
}  // namespace trainer
