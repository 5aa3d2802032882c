// GPU-only checks (ctest label `gpu`): bf16/fp16 steps of the big models, the scaler on CUDA, and the
// GPU-resident loader against its CPU twin. Skipped, with a message, where no CUDA device is usable.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "data/memory_loader.h"
#include "engine/trainer.h"
#include "models/registry.h"
#include "runtime/env.h"

namespace trainer {
namespace {

#define REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "needs a CUDA device; none is usable here"

Config gpu_config(const std::string& model, const std::string& precision) {
  Config c;
  c.run.device = "cuda";
  c.model.name = model;
  c.model.in_chans = 3;
  c.model.num_classes = 1000;
  c.model.small_stem = false;
  c.model.channels_last = model.rfind("resnet", 0) == 0;
  c.data.image_size = 224;
  c.train.precision = precision;
  c.optim.schedule = "constant";
  return c;
}

void train_a_few_steps(const Config& c) {
  RunContext ctx;
  ctx.device = torch::Device(torch::kCUDA, 0);
  Trainer t(c, ctx, false);
  auto x = torch::randn({32, 3, 224, 224}, torch::TensorOptions().device(ctx.device));
  if (c.model.channels_last) x = x.contiguous(torch::MemoryFormat::ChannelsLast);
  auto y = torch::randint(1000, {32}, torch::TensorOptions().device(ctx.device).dtype(torch::kInt64));
  double first = 0, last = 0;
  for (int i = 0; i < 8; ++i) {
    t.train_step(Batch{x, y, {}});
    const double l = t.take_train_loss();
    if (i == 0) first = l;
    last = l;
    ASSERT_TRUE(std::isfinite(l)) << c.model.name << " step " << i;
  }
  EXPECT_LT(last, first) << c.model.name << " did not fit a fixed batch";
  for (auto& p : t.model()->parameters())
    if (p.dim() == 4 && c.model.channels_last) EXPECT_TRUE(p.is_contiguous(torch::MemoryFormat::ChannelsLast));
}

TEST(Gpu, Bf16StepsResNet50ChannelsLast) {
  REQUIRE_GPU();
  train_a_few_steps(gpu_config("resnet50", "bf16"));
}

TEST(Gpu, Bf16StepsViTBase) {
  REQUIRE_GPU();
  auto c = gpu_config("vit_base_patch16_224", "bf16");
  c.optim.name = "adamw";
  c.optim.lr = 1e-4;
  train_a_few_steps(c);
}

TEST(Gpu, Fp16StepsWithScaler) {
  REQUIRE_GPU();
  train_a_few_steps(gpu_config("resnet18", "fp16"));
}

TEST(Gpu, ScalerBacksOffOnInfAndGrows) {
  REQUIRE_GPU();
  torch::Device d(torch::kCUDA, 0);
  GradScalerOptions o;
  o.growth_interval = 2;
  GradScaler s(d, true, o);
  auto g = torch::ones({8}, torch::TensorOptions().device(d));
  s.unscale_({g});
  s.update();
  s.unscale_({g});
  s.update();
  EXPECT_EQ(s.scale_tensor().item<double>(), 131072.0);
  g[3] = std::numeric_limits<float>::infinity();
  s.unscale_({g});
  EXPECT_EQ(s.found_inf().item<double>(), 1.0);
  s.update();
  EXPECT_EQ(s.scale_tensor().item<double>(), 65536.0);
}

TEST(Gpu, ResidentLoaderEqualsCpuLoader) {
  REQUIRE_GPU();
  InMemoryDataset ds = make_synthetic(300, 28, 1, 10, 7);
  MemoryLoaderOptions o;
  o.batch_size = 64;
  o.mean = {0.5};
  o.std = {0.25};
  o.seed = 3;
  MemoryLoader cpu(ds, o, torch::kCPU), gpu(ds, o, torch::Device(torch::kCUDA, 0));
  cpu.set_epoch(2);
  gpu.set_epoch(2);
  Batch a, b;
  int n = 0;
  while (cpu.next(a)) {
    ASSERT_TRUE(gpu.next(b));
    EXPECT_EQ(a.indices, b.indices);
    EXPECT_TRUE(torch::allclose(a.images, b.images.cpu()));
    EXPECT_TRUE(torch::equal(a.labels, b.labels.cpu()));
    ++n;
  }
  EXPECT_EQ(n, 4);
}

}  // namespace
}  // namespace trainer
