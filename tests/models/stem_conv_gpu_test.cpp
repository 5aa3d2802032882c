// The ResNet stem convolution's fp16 forward under bf16 autocast (models/stem_conv) on the GPU: output and weight
// gradient against the convolution in fp32, no further off than autocast's bf16 convolution is, and the time of
// both on ResNet-50's stem; the same with its batch norm + ReLU in one function (label gpu).
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>

#include "kernel_harness.h"
#include "models/batchnorm.h"
#include "models/fused_batchnorm.h"
#include "models/stem_conv.h"
#include "models/stem_s2d.h"

#ifdef TRAINER_WITH_KERNELS
#include <c10/cuda/CUDAStream.h>

#include "kernels/pad_channels.h"
#endif

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
    EXPECT_TRUE(ours.y.is_contiguous(cl));  // the padded input is channels_last, also for 1 channel
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

#ifdef TRAINER_WITH_KERNELS
// The stem's padding kernel (kernels/pad_channels.h) equals ATen's zero pad of the channels and cast, bit for bit,
// for the input types it takes and both paddings the stem uses (odd and ResNet-50 batches), refuses what it does not
// take, and is timed against ATen's strided copy and fill at ResNet-50's batch.
TEST(StemConv, PaddingKernelEqualsAtensPadAndCast) {
  REQUIRE_KERNELS();
  const auto cl = torch::MemoryFormat::ChannelsLast;
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  auto elem = [](torch::ScalarType t) {
    return t == torch::kFloat32 ? kernels::ElemType::f32 : t == torch::kBFloat16 ? kernels::ElemType::bf16
                                                                                 : kernels::ElemType::fp16;
  };
  auto half = [](torch::ScalarType t) { return t == torch::kHalf ? kernels::HalfType::fp16 : kernels::HalfType::bf16; };
  const std::vector<std::pair<int, torch::ScalarType>> outs = {{4, torch::kHalf}, {8, torch::kBFloat16}};
  for (const auto& shape : std::vector<std::vector<int64_t>>{{3, 3, 37, 29}, {2, 1, 5, 7}, {256, 3, 224, 224}})
  for (const auto src : {torch::kFloat32, torch::kBFloat16, torch::kHalf})
  for (const auto& [c_out, dst] : outs) {
    SCOPED_TRACE(testing::Message() << shape[0] << "x" << shape[1] << "x" << shape[2] << "x" << shape[3] << " "
                                    << c10::toString(src) << " -> " << c_out << " " << c10::toString(dst));
    torch::manual_seed(2);
    torch::Tensor x = torch::randn(shape, torch::device(torch::kCUDA)).to(src).contiguous(cl);
    const int64_t M = x.numel() / x.size(1);
    torch::Tensor y = torch::empty({shape[0], c_out, shape[2], shape[3]}, x.options().dtype(dst).memory_format(cl));
    y.fill_(7);  // what the kernel must overwrite
    ASSERT_EQ(kernels::pad_channels(x.data_ptr(), elem(src), M, static_cast<int>(shape[1]), y.data_ptr(),
                                    half(dst), c_out, stream),
              cudaSuccess);
    const torch::Tensor ref = at::constant_pad_nd(x, {0, 0, 0, 0, 0, c_out - shape[1]}).to(dst);
    EXPECT_TRUE(torch::equal(y, ref));
    if (shape[0] == 256 && src == torch::kBFloat16) {
      const double ours = test::device_ms([&] {
        (void)kernels::pad_channels(x.data_ptr(), elem(src), M, 3, y.data_ptr(), half(dst), c_out, stream);
      });
      const double aten = test::device_ms([&] {
        y.narrow(1, 0, 3).copy_(x);
        y.narrow(1, 3, c_out - 3).zero_();
      });
      std::printf("  256x3x224x224 bf16 -> %d channels %s: kernel %.3f ms, ATen copy + fill %.3f ms\n", c_out,
                  test::name_of(dst), ours, aten);
    }
  }
  // what it does not take
  torch::Tensor x = torch::zeros({1, 3, 4, 4}, torch::device(torch::kCUDA)).contiguous(cl);
  torch::Tensor y = torch::zeros({1, 8, 4, 4}, x.options().dtype(torch::kHalf)).contiguous(cl);
  const auto f32 = kernels::ElemType::f32;
  EXPECT_EQ(kernels::pad_channels(x.data_ptr(), f32, 16, 3, y.data_ptr(), kernels::HalfType::fp16, 5, stream),
            cudaErrorInvalidValue);  // 4 or 8 channels out
  EXPECT_EQ(kernels::pad_channels(x.data_ptr(), f32, 16, 9, y.data_ptr(), kernels::HalfType::fp16, 8, stream),
            cudaErrorInvalidValue);  // more channels in than out
  EXPECT_EQ(kernels::pad_channels(x.data_ptr(), f32, 16, 3, static_cast<char*>(y.data_ptr()) + 2,
                                  kernels::HalfType::fp16, 8, stream),
            cudaErrorInvalidValue);  // y not 16-byte aligned
}
#endif

// The stem as a 4x4 convolution over its input's space-to-depth (models/stem_s2d.h) under bf16 autocast: the kernel's
// rearrangement equals ATen's (the CPU path) bit for bit; output and weight gradient against fp32 within 1e-2 and
// no further than 1.25x autocast's direct bf16 convolution (the same bf16 inputs, the sums in another order); then
// forward + weight gradient timed against the fp16 forward and autocast's bf16 at ResNet-50's batch.
TEST(StemConv, SpaceToDepthMatchesFp32AsCloselyAsAutocast) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device; none is usable here";
  const torch::Device dev(torch::kCUDA, 0);
  const auto cl = torch::MemoryFormat::ChannelsLast;
  at::globalContext().setBenchmarkCuDNN(true);
  for (const auto& shape : std::vector<std::vector<int64_t>>{{256, 3, 224, 224}, {2, 1, 64, 64}, {3, 3, 30, 18}}) {
    SCOPED_TRACE(testing::Message() << shape[0] << "x" << shape[1] << "x" << shape[2] << "x" << shape[3]);
    torch::manual_seed(7);
    torch::Tensor x = torch::randn(shape, torch::device(dev)).contiguous(cl);
    torch::Tensor w = (torch::randn({64, shape[1], 7, 7}, torch::device(dev)) * 0.05).contiguous(cl);
    for (const auto src : {torch::kFloat32, torch::kBFloat16}) {
      const torch::Tensor xs = x.to(src);
      EXPECT_TRUE(torch::equal(stem_space_to_depth(xs, 3, torch::kBFloat16).cpu(),
                               stem_space_to_depth(xs.cpu(), 3, torch::kBFloat16)))
          << c10::toString(src);
    }
    ASSERT_TRUE(stem_s2d_applies(x, w, 2, 3));
    torch::Tensor dy = torch::randn({shape[0], 64, shape[2] / 2, shape[3] / 2}, torch::device(dev)).contiguous(cl) * 1e-6;
    torch::Tensor wr = w.detach().requires_grad_(true);
    torch::Tensor yr = at::conv2d(x, wr, {}, {2, 2}, {3, 3});
    yr.backward(dy);
    auto run_s2d = [&](bool s2d) {
      torch::Tensor wi = w.detach().requires_grad_(true);
      torch::Tensor y;
      {
        Bf16Autocast ac;
        y = s2d ? stem_conv_s2d(x, wi, 3) : at::conv2d(x, wi, {}, {2, 2}, {3, 3});
      }
      y.backward(dy.to(y.scalar_type()));
      return Result{y.detach(), wi.grad()};
    };
    const Result ours = run_s2d(true), aten = run_s2d(false);
    EXPECT_EQ(ours.y.scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(ours.y.is_contiguous(cl));
    const double e_y = test::rel_l2(ours.y, yr), e_y_aten = test::rel_l2(aten.y, yr);
    const double e_w = test::rel_l2(ours.dw, wr.grad()), e_w_aten = test::rel_l2(aten.dw, wr.grad());
    std::printf("  %ldx%ldx%ldx%ld: space-to-depth output rel L2 %.2e (autocast bf16 %.2e), weight grad %.2e (%.2e)\n",
                shape[0], shape[1], shape[2], shape[3], e_y, e_y_aten, e_w, e_w_aten);
    EXPECT_LT(e_y, 1e-2);
    EXPECT_LT(e_w, 1e-2);
    EXPECT_LT(e_y, 1.25 * e_y_aten + 1e-4);
    EXPECT_LT(e_w, 1.25 * e_w_aten + 1e-4);
    if (shape[0] == 256) {
      for (const int path : {0, 1, 2}) {  // space-to-depth, fp16 forward, autocast bf16
        torch::Tensor wi = w.detach().requires_grad_(true);
        const double ms = test::device_ms([&] {
          torch::Tensor y;
          {
            Bf16Autocast ac;
            y = path == 0 ? stem_conv_s2d(x, wi, 3) : stem_conv(x, wi, 2, 3, /*fp16_forward=*/path == 1);
          }
          y.backward(dy.to(torch::kBFloat16));
        });
        std::printf("  stem forward + weight gradient, %s: %.3f ms\n",
                    path == 0 ? "space-to-depth" : path == 1 ? "fp16 forward" : "autocast bf16", ms);
      }
    }
  }
}

struct NormResult {
  torch::Tensor y, dw, dgamma, dbeta, running_mean, running_var;
  bool ran_fused = false;
  int64_t batches = 0;
};

// relu(bn(stem(x))) in training under bf16 autocast with the norm's parameters gamma and beta, then its backward
// given dy: through stem_conv_bn_relu (one function where it applies) or as stem_conv and the norm's own forward
// (two functions, the cast between them)
NormResult run_with_norm(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& gamma,
                         const torch::Tensor& beta, const torch::Tensor& dy, bool one_function) {
  SyncableBatchNorm2d bn(64);
  bn->to(x.device());
  bn->set_fused(FusedNorm::faster);
  bn->train();
  {
    torch::NoGradGuard ng;
    bn->weight.copy_(gamma);
    bn->bias.copy_(beta);
  }
  torch::Tensor wi = w.detach().requires_grad_(true);
  torch::Tensor y;
  {
    Bf16Autocast ac;
    y = one_function ? stem_conv_bn_relu(x, wi, 2, 3, true, *bn)
                     : bn->forward_act(stem_conv(x, wi, 2, 3, true), torch::Tensor(), true);
  }
  y.backward(dy.to(y.scalar_type()));
  return {y.detach(), wi.grad(), bn->weight.grad(), bn->bias.grad(), bn->running_mean.clone(),
          bn->running_var.clone(), bn->ran_fused(), bn->num_batches_tracked.item<int64_t>()};
}

// One function against fp32 ATen (convolution, batch norm in training, ReLU) and against the two functions it
// replaces. The output within 1e-2 of fp32 (bf16's rounding, ~2e-3) and no further than 1.25x the two functions'
// error; the running statistics within 2e-3 (fp16's rounding of the convolution's output). The gradients: fp32's
// backward given the ReLU mask of our output (an output that rounds across 0 flips its mask, and with random dy
// the flips alone move the sums by a few percent: ~2e-2 for both paths at 855 values a channel), then within 1e-2
// (bf16's rounding of dy, of the norm's input gradient and of the convolution's inputs). Then both timed at
// ResNet-50's batch, forward and backward.
TEST(StemConv, WithItsNormInOneFunctionMatchesTheTwoAndFp32) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device; none is usable here";
  if (!fused_batchnorm_built()) GTEST_SKIP() << "this build has no CUDA kernels of its own";
  const torch::Device dev(torch::kCUDA, 0);
  const auto cl = torch::MemoryFormat::ChannelsLast;
  at::globalContext().setBenchmarkCuDNN(true);
  for (const auto& shape : std::vector<std::vector<int64_t>>{{256, 3, 224, 224}, {3, 3, 37, 29}}) {
    SCOPED_TRACE(testing::Message() << shape[0] << "x" << shape[1] << "x" << shape[2] << "x" << shape[3]);
    torch::manual_seed(6);
    const auto o = torch::device(dev);
    torch::Tensor x = torch::randn(shape, o).contiguous(cl);
    torch::Tensor w = (torch::randn({64, shape[1], 7, 7}, o) * 0.05).contiguous(cl);
    torch::Tensor gamma = torch::rand({64}, o) + 0.5, beta = torch::randn({64}, o) * 0.5;
    const int64_t ho = (shape[2] + 6 - 7) / 2 + 1, wo = (shape[3] + 6 - 7) / 2 + 1;
    torch::Tensor dy = torch::randn({shape[0], 64, ho, wo}, o).contiguous(cl) * 1e-3;
    const NormResult one = run_with_norm(x, w, gamma, beta, dy, true), two = run_with_norm(x, w, gamma, beta, dy, false);
    EXPECT_TRUE(one.ran_fused);
    EXPECT_EQ(one.batches, 1);
    EXPECT_EQ(one.y.scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(one.y.is_contiguous(cl));
    // fp32 reference
    torch::Tensor wr = w.detach().requires_grad_(true), gr = gamma.clone().requires_grad_(true),
                  br = beta.clone().requires_grad_(true);
    torch::Tensor rm = torch::zeros({64}, o), rv = torch::ones({64}, o);
    torch::Tensor pre = torch::batch_norm(at::conv2d(x, wr, {}, {2, 2}, {3, 3}), gr, br, rm, rv, /*training=*/true,
                                          0.1, 1e-5, false);
    const torch::Tensor yr = pre.relu();
    pre.backward(dy * (one.y > 0).to(torch::kFloat32));
    const double e_y = test::rel_l2(one.y, yr), e_y_two = test::rel_l2(two.y, yr);
    std::printf("  output rel L2 against fp32: one function %.2e, two %.2e\n", e_y, e_y_two);
    EXPECT_LT(e_y, 1e-2);
    EXPECT_LT(e_y, 1.25 * e_y_two + 1e-4);
    const std::pair<const char*, std::pair<torch::Tensor, torch::Tensor>> grads[] = {
        {"conv weight grad", {one.dw, wr.grad()}},
        {"norm weight grad", {one.dgamma, gr.grad()}},
        {"norm bias grad", {one.dbeta, br.grad()}}};
    for (const auto& [what, pair] : grads) {
      const double e = test::rel_l2(pair.first, pair.second);
      std::printf("  %s rel L2 against fp32 with our ReLU mask: %.2e\n", what, e);
      EXPECT_LT(e, 1e-2) << what;
    }
    EXPECT_LT(test::rel_l2(one.running_mean, rm), 2e-3);
    EXPECT_LT(test::rel_l2(one.running_var, rv), 2e-3);
    if (shape[0] == 256) {
      for (const bool fused : {true, false}) {
        const double ms = test::device_ms([&] { (void)run_with_norm(x, w, gamma, beta, dy, fused); });
        std::printf("  stem + norm + ReLU forward and backward, %s: %.3f ms\n",
                    fused ? "one function" : "two functions", ms);
      }
    }
  }
}

}  // namespace
}  // namespace trainer
