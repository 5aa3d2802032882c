// The fused batch-norm kernels (lib/kernels, through models/fused_batchnorm) on the GPU: right against ATen in fp32
// over every ResNet-50 layer shape, and how fast each pass streams its bytes there, in one run (label gpu).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <c10/cuda/CUDAFunctions.h>

#include <chrono>
#include <cstdio>
#include <functional>

#include "kernel_harness.h"
#include "models/batchnorm.h"
#include "models/fused_batchnorm.h"

#ifdef TRAINER_WITH_KERNELS
#include "kernels/batchnorm_nhwc.h"
#endif

namespace trainer {
namespace {

struct Shape {
  int64_t n, c, h, w;
  int in_resnet50;  // how many of ResNet-50's 53 batch norms have this shape at batch 256 (0: an odd test shape)
};

// ResNet-50 at batch 256, 224 px: stem, then per stage the bottleneck's bn1/bn2/bn3 and the downsample's
const std::vector<Shape> kShapes = {
    {256, 64, 112, 112, 1}, {256, 64, 56, 56, 6},  {256, 256, 56, 56, 4}, {256, 128, 56, 56, 1},
    {256, 128, 28, 28, 7},  {256, 512, 28, 28, 5}, {256, 256, 28, 28, 1}, {256, 256, 14, 14, 11},
    {256, 1024, 14, 14, 7}, {256, 512, 14, 14, 1}, {256, 512, 7, 7, 5},   {256, 2048, 7, 7, 4},
    {1, 2048, 7, 7, 0},     {3, 24, 5, 7, 0},      {2, 13, 9, 11, 0},     {4, 3, 1, 1, 0}};

// The three forms ResNet uses: bn3 (+ z, ReLU), bn1/bn2 (ReLU, whose backward recomputes the mask from x), the
// downsample's (plain).
struct Form {
  bool add, relu;
  const char* name;
};
const Form kForms[] = {{true, true, " +add+relu"}, {false, true, " +relu"}, {false, false, ""}};

// relu?(batch_norm(x) (+ z)) fused against ATen's batch_norm (+ add) (+ relu) in fp32 on the same (bf16/fp16-rounded)
// values. Statistics and running statistics are computed from the same inputs in fp32/double: 1e-4 relative. The
// outputs and gradients are rounded to the 8 (bf16) or 11 (fp16) bit mantissa once, and the ReLU mask may differ
// where an output rounds across 0: 2e-2 relative in the L2 norm.
void check_against_aten(const Shape& sh, torch::ScalarType dtype, const Form& form) {
  const torch::Device dev(torch::kCUDA, 0);
  torch::manual_seed(1);
  auto cl = [&](torch::Tensor t) { return t.to(dev, dtype).contiguous(torch::MemoryFormat::ChannelsLast); };
  const auto o32 = torch::TensorOptions().device(dev).dtype(torch::kFloat32);
  torch::Tensor x = cl(torch::randn({sh.n, sh.c, sh.h, sh.w}) * 2 + 0.5);
  torch::Tensor z = form.add ? cl(torch::randn({sh.n, sh.c, sh.h, sh.w})) : torch::Tensor();
  torch::Tensor dy = cl(torch::randn({sh.n, sh.c, sh.h, sh.w}));
  torch::Tensor w = (torch::rand({sh.c}, o32) + 0.5).requires_grad_(true), b = torch::randn({sh.c}, o32).requires_grad_(true);
  torch::Tensor rm = torch::randn({sh.c}, o32), rv = torch::rand({sh.c}, o32) + 0.5;
  // reference: fp32 ATen on the same rounded values
  torch::Tensor xr = x.to(torch::kFloat32).requires_grad_(true);
  torch::Tensor zr = form.add ? z.to(torch::kFloat32).requires_grad_(true) : torch::Tensor();
  torch::Tensor wr = w.detach().clone().requires_grad_(true), br = b.detach().clone().requires_grad_(true);
  torch::Tensor rmr = rm.clone(), rvr = rv.clone();
  torch::Tensor yr = torch::batch_norm(xr, wr, br, rmr, rvr, /*training=*/true, 0.1, 1e-5, false);
  if (form.add) yr = yr + zr;
  if (form.relu) yr = yr.relu();
  yr.backward(dy.to(torch::kFloat32));
  // ours
  torch::Tensor xf = x.detach().clone().requires_grad_(true);
  torch::Tensor zf = form.add ? z.detach().clone().requires_grad_(true) : torch::Tensor();
  torch::Tensor y = fused_batchnorm(xf, zf, w, b, rm, rv, 0.1, 1e-5, /*training=*/true, form.relu);
  y.backward(dy);
  const double tol = 2e-2;
  EXPECT_TRUE(y.is_contiguous(torch::MemoryFormat::ChannelsLast));
  EXPECT_LT(test::rel_l2(y, yr), tol);
  EXPECT_LT(test::rel_l2(xf.grad(), xr.grad()), tol);
  if (form.add) EXPECT_LT(test::rel_l2(zf.grad(), zr.grad()), tol);
  EXPECT_LT(test::rel_l2(w.grad(), wr.grad()), tol);
  EXPECT_LT(test::rel_l2(b.grad(), br.grad()), tol);
  EXPECT_LT(test::rel_l2(rm, rmr), 1e-4);
  EXPECT_LT(test::rel_l2(rv, rvr), 1e-4);
  // evaluation: running statistics, no autograd
  torch::NoGradGuard ng;
  torch::Tensor ye = fused_batchnorm(x, z, w, b, rm, rv, 0.1, 1e-5, /*training=*/false, form.relu);
  torch::Tensor yer = torch::batch_norm(x.to(torch::kFloat32), w, b, rm, rv, false, 0.1, 1e-5, false);
  if (form.add) yer = yer + z.to(torch::kFloat32);
  if (form.relu) yer = yer.relu();
  EXPECT_LT(test::rel_l2(ye, yer), tol);
}

TEST(FusedBatchNorm, MatchesAtenInFp32OverTheResNet50Shapes) {
  REQUIRE_KERNELS();
  for (const auto dtype : {torch::kBFloat16, torch::kHalf})
    for (const Shape& sh : kShapes)
      for (const Form& form : kForms) {
        if (!form.add && sh.n == 256 && sh.c > 256) continue;  // the other forms on the layers that have them
        SCOPED_TRACE(testing::Message() << test::name_of(dtype) << " " << sh.n << "x" << sh.c << "x" << sh.h << "x"
                                        << sh.w << form.name);
        check_against_aten(sh, dtype, form);
      }
}

// A forked output (fused_batchnorm_forked: a block's output read by the next block's convolution and shortcut):
// the backward sums the two outputs' gradients in its reduction. Against ATen in fp32 given dy + dy2, with the
// tolerances of check_against_aten; and with one of the two outputs unused, against the other's gradient alone.
void check_forked(const Shape& sh, torch::ScalarType dtype) {
  const torch::Device dev(torch::kCUDA, 0);
  torch::manual_seed(2);
  auto cl = [&](torch::Tensor t) { return t.to(dev, dtype).contiguous(torch::MemoryFormat::ChannelsLast); };
  const auto o32 = torch::TensorOptions().device(dev).dtype(torch::kFloat32);
  const torch::Tensor x = cl(torch::randn({sh.n, sh.c, sh.h, sh.w}) * 2 + 0.5), z = cl(torch::randn(x.sizes()));
  const torch::Tensor dy = cl(torch::randn(x.sizes())), dy2 = cl(torch::randn(x.sizes()));
  const torch::Tensor w = torch::rand({sh.c}, o32) + 0.5, b = torch::randn({sh.c}, o32);
  auto reference = [&](const torch::Tensor& g) {  // fp32 ATen: the input's and the residual's gradients
    torch::Tensor xr = x.to(torch::kFloat32).requires_grad_(true), zr = z.to(torch::kFloat32).requires_grad_(true);
    torch::Tensor rm = torch::zeros({sh.c}, o32), rv = torch::ones({sh.c}, o32);
    (torch::batch_norm(xr, w, b, rm, rv, true, 0.1, 1e-5, false) + zr).relu().backward(g.to(torch::kFloat32));
    return std::make_pair(xr.grad(), zr.grad());
  };
  for (const int used : {3, 1, 2}) {  // which outputs get a gradient: both, the first, the second
    SCOPED_TRACE(testing::Message() << "outputs used: " << used);
    torch::Tensor xf = x.detach().clone().requires_grad_(true), zf = z.detach().clone().requires_grad_(true);
    torch::Tensor rm = torch::zeros({sh.c}, o32), rv = torch::ones({sh.c}, o32);
    const auto [y1, y2] = fused_batchnorm_forked(xf, zf, w, b, rm, rv, 0.1, 1e-5, true, true, nullptr, /*fork=*/true);
    EXPECT_TRUE(y1.data_ptr() == y2.data_ptr());  // one tensor's storage, not a copy
    std::vector<torch::Tensor> outs, grads;
    if (used & 1) outs.push_back(y1), grads.push_back(dy);
    if (used & 2) outs.push_back(y2), grads.push_back(dy2);
    torch::autograd::backward(outs, grads);
    const torch::Tensor g = used == 3 ? dy.to(torch::kFloat32) + dy2.to(torch::kFloat32) : used == 1 ? dy : dy2;
    const auto [dxr, dzr] = reference(g);
    EXPECT_LT(test::rel_l2(xf.grad(), dxr), 2e-2);
    EXPECT_LT(test::rel_l2(zf.grad(), dzr), 2e-2);
  }
}

TEST(FusedBatchNorm, ForkedOutputSumsBothGradientsInItsBackward) {
  REQUIRE_KERNELS();
  for (const auto dtype : {torch::kBFloat16, torch::kHalf})
    for (const Shape& sh : kShapes) {
      SCOPED_TRACE(testing::Message() << test::name_of(dtype) << " " << sh.n << "x" << sh.c << "x" << sh.h << "x"
                                      << sh.w);
      check_forked(sh, dtype);
    }
}

// SyncBatchNorm through the fused kernels (one all-reduce of per-channel sums each way). Two ranks holding the same
// batch are one all-reduce that doubles: the statistics and the input gradient are those of the batch alone, the
// parameter gradients this rank's, the running variance unbiased over both ranks' values (2M). With one rank (the
// identity) everything equals the local fused path. The host never waits on the GPU (CUDA's sync debug mode).
TEST(FusedBatchNorm, SyncBatchNormSumsOverRanksWithoutHostSyncs) {
  REQUIRE_KERNELS();
  const torch::Device dev(torch::kCUDA, 0);
  for (const int ranks : {1, 2})
    for (const bool fork : {false, true}) {  // fork: a second gradient, summed in the first backward half
      SCOPED_TRACE(testing::Message() << ranks << " identical ranks" << (fork ? ", forked output" : ""));
      torch::manual_seed(3);
      const int64_t C = 32;
      SyncableBatchNorm2d local(C), sync(C);
      local->to(dev);
      sync->to(dev);
      set_fused_batchnorm(*local, FusedNorm::on);
      set_fused_batchnorm(*sync, FusedNorm::on);
      int calls = 0;
      enable_sync_batchnorm(*sync, [&calls, ranks](torch::Tensor& t) {
        ++calls;
        t.mul_(ranks);
      });
      auto make = [&] {
        return (torch::randn({8, C, 12, 12}, torch::TensorOptions().device(dev)) * 3 + 1)
            .to(torch::kBFloat16)
            .contiguous(torch::MemoryFormat::ChannelsLast);
      };
      const torch::Tensor x = make(), z = make(), dy = make();
      torch::Tensor xl = x.detach().clone().requires_grad_(true), xs = x.detach().clone().requires_grad_(true);
      torch::Tensor zl = z.detach().clone().requires_grad_(true), zs = z.detach().clone().requires_grad_(true);
      auto backward = [&](const std::pair<torch::Tensor, torch::Tensor>& y) {
        if (fork) torch::autograd::backward({y.first, y.second}, {dy, dy * 0.5});
        else y.first.backward(dy);
      };
      const auto yl = local->forward_act_forked(xl, zl, true, fork);
      backward(yl);
      torch::cuda::synchronize();
      c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
      std::pair<torch::Tensor, torch::Tensor> ys;
      try {
        ys = sync->forward_act_forked(xs, zs, true, fork);
        backward(ys);
      } catch (const std::exception& e) {
        c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
        FAIL() << "a host sync: " << e.what();
      }
      c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
      EXPECT_TRUE(sync->ran_fused());
      EXPECT_EQ(calls, 2);  // statistics forward, gradient sums backward
      // the same math but for the shift of the sums (the running mean here, the first row locally): bf16 roundings
      EXPECT_LT(test::rel_l2(ys.first, yl.first), 1e-2);
      EXPECT_LT(test::rel_l2(xs.grad(), xl.grad()), 1e-2);
      EXPECT_LT(test::rel_l2(zs.grad(), zl.grad()), 1e-2);
      EXPECT_LT(test::rel_l2(sync->weight.grad(), local->weight.grad()), 1e-4);
      EXPECT_LT(test::rel_l2(sync->bias.grad(), local->bias.grad()), 1e-4);
      EXPECT_LT(test::rel_l2(sync->running_mean, local->running_mean), 1e-5);
      const double n = static_cast<double>(ranks) * x.numel() / C;
      const torch::Tensor var = x.to(torch::kFloat64).transpose(0, 1).reshape({C, -1}).var(1, /*unbiased=*/false);
      EXPECT_LT(test::rel_l2(sync->running_var, 0.9 + 0.1 * var * (n / (n - 1))), 1e-5);
      EXPECT_EQ(sync->num_batches_tracked.item<int64_t>(), 1);
    }
}

#ifdef TRAINER_WITH_KERNELS
// Each ResNet-50 shape with the residual add and ReLU: every kernel pass timed on its own (CUDA events) against the
// bytes it must move - statistics read x; apply reads x and z, writes y; backward reads dy, y, x in its reduction,
// which writes the masked gradient dz, and dz and x in its elementwise pass, which writes dx (a ReLU alone: dy and x
// twice, dx written) - then forward + backward through autograd against
// ATen's ops in the same dtype (bf16: ATen's generic NHWC kernels; fp16: cuDNN's), and the sum over ResNet-50's 53
// layers. A measurement (speed is judged in bench/, not here): it asserts only that every launch succeeded.
TEST(FusedBatchNorm, EveryPassStreamsItsBytesOnTheResNet50Shapes) {
  REQUIRE_KERNELS();
  const torch::Device dev(torch::kCUDA, 0);
  const cudaStream_t s = c10::cuda::getCurrentCUDAStream().stream();
  for (const auto dtype : {torch::kBFloat16, torch::kHalf}) {
    double fused_sum = 0, aten_sum = 0;
    for (const Shape& sh : kShapes) {
      if (sh.in_resnet50 == 0) continue;
      torch::manual_seed(1);
      const auto o = torch::TensorOptions().device(dev).dtype(dtype);
      const auto o32 = o.dtype(torch::kFloat32);
      auto cl = [&]() { return torch::randn({sh.n, sh.c, sh.h, sh.w}, o).contiguous(torch::MemoryFormat::ChannelsLast); };
      torch::Tensor x = cl(), z = cl(), dy = cl(), y = torch::empty_like(x), dx = torch::empty_like(x),
                    dz = torch::empty_like(x);
      torch::Tensor w = torch::rand({sh.c}, o32) + 0.5, b = torch::randn({sh.c}, o32);
      torch::Tensor rm = torch::zeros({sh.c}, o32), rv = torch::ones({sh.c}, o32);
      torch::Tensor st = torch::empty({6, sh.c}, o32);  // mean, invstd, scale, shift, dweight, dbias
      const int64_t C = sh.c, M = x.numel() / C;
      torch::Tensor ws = torch::empty({kernels::bn_workspace_floats(M, C)}, o32);
      const auto dt = dtype == torch::kHalf ? kernels::HalfType::fp16 : kernels::HalfType::bf16;
      float* p = st.data_ptr<float>();
      const double stats = test::device_ms([&] {
        kernels::bn_forward_stats(x.data_ptr(), dt, M, C, w.data_ptr<float>(), b.data_ptr<float>(), 1e-5f, 0.1f,
                                  rm.data_ptr<float>(), rv.data_ptr<float>(), p, p + C, p + 2 * C, p + 3 * C,
                                  ws.data_ptr<float>(), s);
      });
      torch::Tensor bits = torch::empty({kernels::bn_relu_bits_bytes(M, C)}, o.dtype(torch::kUInt8));
      uint8_t* bp = bits.data_ptr<uint8_t>();
      const double apply = test::device_ms([&] {
        kernels::bn_apply(x.data_ptr(), z.data_ptr(), y.data_ptr(), dt, M, C, p + 2 * C, p + 3 * C, true, nullptr, s);
      });
      const double apply_bits = test::device_ms([&] {  // what training runs: the ReLU's bits written too
        kernels::bn_apply(x.data_ptr(), z.data_ptr(), y.data_ptr(), dt, M, C, p + 2 * C, p + 3 * C, true, bp, s);
      });
      const double backward_relu = test::device_ms([&] {  // bn1/bn2: the mask from x, no dz
        kernels::bn_backward(dy.data_ptr(), nullptr, nullptr, nullptr, x.data_ptr(), dx.data_ptr(), nullptr, dt, M, C,
                             w.data_ptr<float>(), p, p + C, p + 2 * C, p + 3 * C, true, p + 4 * C, p + 5 * C,
                             ws.data_ptr<float>(), s);
      });
      const double backward = test::device_ms([&] {
        kernels::bn_backward(dy.data_ptr(), nullptr, y.data_ptr(), nullptr, x.data_ptr(), dx.data_ptr(),
                             dz.data_ptr(), dt, M, C, w.data_ptr<float>(), p, p + C, p + 2 * C, p + 3 * C, true,
                             p + 4 * C, p + 5 * C, ws.data_ptr<float>(), s);
      });
      const double backward_two = test::device_ms([&] {  // a forked output: the second gradient read too
        kernels::bn_backward(dy.data_ptr(), z.data_ptr(), y.data_ptr(), nullptr, x.data_ptr(), dx.data_ptr(),
                             dz.data_ptr(), dt, M, C, w.data_ptr<float>(), p, p + C, p + 2 * C, p + 3 * C, true,
                             p + 4 * C, p + 5 * C, ws.data_ptr<float>(), s);
      });
      const double backward_two_bits = test::device_ms([&] {  // the same with the ReLU's bits instead of y
        kernels::bn_backward(dy.data_ptr(), z.data_ptr(), nullptr, bp, x.data_ptr(), dx.data_ptr(), dz.data_ptr(), dt,
                             M, C, w.data_ptr<float>(), p, p + C, p + 2 * C, p + 3 * C, true, p + 4 * C, p + 5 * C,
                             ws.data_ptr<float>(), s);
      });
      const double add = test::device_ms([&] { torch::add_out(dx, dy, z); });  // what the fork saves
      ASSERT_EQ(cudaGetLastError(), cudaSuccess);
      const double unit = static_cast<double>(x.numel()) * x.element_size();  // one pass over a tensor, bytes
      auto tbs = [&](double units, double ms) { return units * unit / ms * 1e-9; };
      const double fused = test::device_ms([&] {
        torch::Tensor xi = x.detach().requires_grad_(true), zi = z.detach().requires_grad_(true);
        fused_batchnorm(xi, zi, w, b, rm, rv, 0.1, 1e-5, true, true).backward(dy);
      });
      const double aten = test::device_ms([&] {
        torch::Tensor xi = x.detach().requires_grad_(true), zi = z.detach().requires_grad_(true);
        (torch::batch_norm(xi, w, b, rm, rv, true, 0.1, 1e-5, false) + zi).relu().backward(dy);
      });
      fused_sum += sh.in_resnet50 * fused;
      aten_sum += sh.in_resnet50 * aten;
      std::printf("  %s %lldx%lldx%lldx%lld: stats %.3f ms %.2f TB/s, apply %.3f ms %.2f TB/s (with bits %.3f ms), "
                  "backward %.3f ms %.2f TB/s (ReLU alone %.3f ms %.2f TB/s; two gradients %.3f ms %.2f TB/s, with "
                  "bits %.3f ms %.2f TB/s, against add %.3f ms + backward); fwd+bwd %.3f ms (%.2f TB/s), ATen %.3f "
                  "ms: %.2fx\n",
                  test::name_of(dtype), static_cast<long long>(sh.n), static_cast<long long>(sh.c),
                  static_cast<long long>(sh.h), static_cast<long long>(sh.w), stats, tbs(1, stats), apply,
                  tbs(3, apply), apply_bits, backward, tbs(7, backward), backward_relu, tbs(5, backward_relu),
                  backward_two, tbs(8, backward_two), backward_two_bits, tbs(7.0625, backward_two_bits), add, fused,
                  tbs(11, fused), aten, aten / fused);
    }
    std::printf("  %s, ResNet-50's 53 layers at batch 256 (with add + ReLU): fused %.2f ms, ATen %.2f ms a step\n",
                test::name_of(dtype), fused_sum, aten_sum);
  }
}
#endif

}  // namespace
}  // namespace trainer
