// GPU-only checks (ctest label `gpu`): bf16/fp16 steps of the big models, the scaler on CUDA, and the
// GPU-resident loader against its CPU twin. Skipped, with a message, where no CUDA device is usable.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <functional>
#include <sstream>
#include <thread>

#include "checkpoint/checkpoint.h"
#include "core/fs.h"
#include "data/auto_loader.h"
#include "data/gpu_image_loader.h"
#include "data/image_folder.h"
#include "data/image_ops.h"
#include "data/jpeg_decoder.h"
#include "data/jpeg_encoder.h"
#include "data/image_loader.h"
#include "data/memory_loader.h"
#include "test_support/image_fixtures.h"
#include "test_support/test_support.h"
#include "engine/trainer.h"
#include "models/batchnorm.h"
#include "models/fused_batchnorm.h"
#include "models/registry.h"
#include "models/weights.h"
#include "runtime/env.h"
#include "runtime/steps_ahead.h"

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

// train.steps_ahead: once more than N marked steps are queued, mark() returns only after the oldest has run; without
// a bound it returns at once, with the device still busy on what the host queued.
TEST(Gpu, StepsAheadWaitsForTheOldestQueuedStep) {
  REQUIRE_GPU();
  const torch::Device dev(torch::kCUDA, 0);
  const torch::Tensor a = torch::randn({4096, 4096}, torch::TensorOptions().device(dev));
  auto queue_work = [&] {  // some tens of ms of matrix products
    torch::Tensor x = a;
    for (int i = 0; i < 40; ++i) x = torch::mm(x, a).div_(64);
    return x;
  };
  torch::cuda::synchronize();
  for (int limit : {1, 0}) {
    StepsAhead ahead(dev, limit);
    queue_work();
    at::cuda::CUDAEvent first;
    first.record(c10::cuda::getCurrentCUDAStream(0));
    ahead.mark();
    queue_work();
    ahead.mark();
    if (limit == 1)
      EXPECT_TRUE(first.query()) << "limit 1: the second mark returned before the first step had run";
    else
      EXPECT_FALSE(first.query()) << "no bound: the host waited for the device anyway";
    torch::cuda::synchronize();
  }
}

// run.cuda_sync sets the device's scheduling flag, and a later one replaces it on the initialised device
TEST(Gpu, CudaSyncSetsTheDevicesSchedulingFlag) {
  REQUIRE_GPU();
  const torch::Device d(torch::kCUDA, 0);
  torch::ones({1}, torch::TensorOptions().device(d));  // the context is up first, as in a run
  unsigned flags = 0;
  EXPECT_EQ(set_cuda_sync("blocking", d), static_cast<unsigned>(cudaDeviceScheduleBlockingSync));
  ASSERT_EQ(cudaGetDeviceFlags(&flags), cudaSuccess);
  EXPECT_EQ(flags & cudaDeviceScheduleMask, static_cast<unsigned>(cudaDeviceScheduleBlockingSync));
  EXPECT_EQ(set_cuda_sync("spin", d), static_cast<unsigned>(cudaDeviceScheduleSpin));
  ASSERT_EQ(cudaGetDeviceFlags(&flags), cudaSuccess);
  EXPECT_EQ(flags & cudaDeviceScheduleMask, static_cast<unsigned>(cudaDeviceScheduleSpin));
  EXPECT_TRUE(torch::ones({4}, torch::TensorOptions().device(d)).sum().item<float>() == 4.0f);
}

TEST(Gpu, Bf16StepsViTBase) {
  REQUIRE_GPU();
  auto c = gpu_config("vit_base_patch16_224", "bf16");
  c.optim.name = "adamw";
  c.optim.lr = 1e-4;
  train_a_few_steps(c);
}

// train.cuda_graph: the replayed step gives the eager step's losses (same weights, batches, per-step lr,
// mixing and dropout RNG), for each optimizer and precision.
struct GraphCase {
  std::string model, optim, precision;
  double mix_alpha, drop_path;
};
class CudaGraph : public ::testing::TestWithParam<GraphCase> {};
INSTANTIATE_TEST_SUITE_P(Gpu, CudaGraph,
                         ::testing::Values(GraphCase{"resnet18", "sgd", "bf16", 0.0, 0.0},
                                           GraphCase{"resnet18", "lamb", "fp16", 0.0, 0.0},
                                           GraphCase{"vit_tiny_patch16_224", "adamw", "bf16", 0.8, 0.0},
                                           GraphCase{"vit_tiny_patch16_224", "adamw", "bf16", 0.0, 0.1}),
                         [](const ::testing::TestParamInfo<GraphCase>& i) {
                           std::string n = i.param.model.substr(0, i.param.model.find('_')) + "_" + i.param.optim +
                                           "_" + i.param.precision;
                           if (i.param.mix_alpha > 0) n += "_mix";
                           if (i.param.drop_path > 0) n += "_droppath";
                           return n;
                         });

TEST_P(CudaGraph, ReplayedStepMatchesEagerStep) {
  REQUIRE_GPU();
  const GraphCase& g = GetParam();
  Config c = gpu_config(g.model, g.precision);
  c.model.num_classes = 10;
  c.model.drop_path_rate = g.drop_path;
  c.data.image_size = 64;
  c.optim.name = g.optim;
  c.optim.lr = g.optim == "sgd" ? 0.05 : 1e-3;
  c.optim.schedule = "cosine";
  c.optim.warmup_epochs = 0.01;  // 10 of the 1000 steps a data-less trainer assumes per epoch: lr moves each step
  c.train.cudnn_benchmark = false;
  c.train.mixup_alpha = g.mix_alpha;
  c.train.cutmix_alpha = g.mix_alpha;
  RunContext ctx;
  ctx.device = torch::Device(torch::kCUDA, 0);
  Trainer eager(c, ctx, false);
  c.train.cuda_graph = true;
  Trainer graph(c, ctx, false);
  load_state_dict(*graph.model(), state_dict(*eager.model()), LoadMode::strict, "copy");
  auto opts = torch::TensorOptions().device(ctx.device);
  std::vector<Batch> batches;
  torch::manual_seed(11);
  for (int i = 0; i < 4; ++i) {  // 4 batches seen 3 times each
    auto x = torch::randn({16, 3, 64, 64}, opts);
    if (c.model.channels_last) x = x.contiguous(torch::MemoryFormat::ChannelsLast);
    batches.push_back(Batch{x, torch::randint(10, {16}, opts.dtype(torch::kInt64)), {}});
  }
  auto run = [&](Trainer& t) {
    torch::manual_seed(5);  // dropout / drop-path draws
    std::vector<double> losses;
    for (int i = 0; i < 12; ++i) {
      EXPECT_TRUE(t.train_step(batches[i % 4]));
      losses.push_back(t.take_train_loss());
    }
    return losses;
  };
  const auto le = run(eager), lg = run(graph);
  EXPECT_TRUE(graph.step_graph_active());
  EXPECT_FALSE(eager.step_graph_active());
  for (size_t i = 0; i < le.size(); ++i) {
    ASSERT_TRUE(std::isfinite(le[i]));
    EXPECT_NEAR(lg[i] / le[i], 1.0, 2e-3) << g.model << " " << g.optim << " step " << i << ": graph " << lg[i]
                                          << " eager " << le[i];
  }
  EXPECT_LT(le.back(), le.front()) << "the eager run did not learn the fixed batches";
  // ResNet in bf16 captures the fused batch-norm kernels (model.fused_norm auto)
  if (g.model.rfind("resnet", 0) == 0 && g.precision == "bf16" && fused_batchnorm_built()) {
    const auto [fused, all] = fused_batchnorm_layers(*graph.model());
    EXPECT_EQ(fused, all) << "batch norms that ran fused in the captured step";
  }
}

// train.cuda_graph: once the step is captured, what the run reserves is about one step's memory (the graph's pool
// and the weights), not the eager warm-up steps' cached blocks on top of it.
TEST(Gpu, CudaGraphReservesOneStepNotTwo) {
  REQUIRE_GPU();
  Config c = gpu_config("resnet18", "bf16");
  c.model.num_classes = 10;
  c.data.image_size = 128;
  c.train.cuda_graph = true;
  RunContext ctx;
  ctx.device = torch::Device(torch::kCUDA, 0);
  Trainer t(c, ctx, false);
  auto opts = torch::TensorOptions().device(ctx.device);
  const Batch b{torch::randn({64, 3, 128, 128}, opts).contiguous(torch::MemoryFormat::ChannelsLast),
                torch::randint(10, {64}, opts.dtype(torch::kInt64)), {}};
  torch::cuda::synchronize();
  c10::cuda::CUDACachingAllocator::emptyCache();  // earlier tests' cached blocks
  for (int i = 0; i < 3; ++i) t.train_step(b);     // eager: cuDNN tuning, optimizer state
  torch::cuda::synchronize();
  const double eager = gpu_memory(ctx.device).reserved_gib;
  for (int i = 0; i < 3; ++i) t.train_step(b);     // the capture, then replays
  torch::cuda::synchronize();
  ASSERT_TRUE(t.step_graph_active());
  const double graph = gpu_memory(ctx.device).reserved_gib;
  std::printf("  reserved after the eager steps %.3f GiB, after the capture %.3f GiB\n", eager, graph);
  EXPECT_LT(graph, 1.5 * eager);
}

// train.cuda_graph while a loader's threads make their own CUDA calls (copies, event queries, nvJPEG): the
// capture of the step must not be invalidated by them (it was, with the default global capture mode, on the
// H200 in session 6: "operation failed due to a previous error during capture").
TEST(Gpu, CudaGraphCapturesWhileALoaderWorks) {
  REQUIRE_GPU();
  test::TempDir dir;
  const auto list = jpeg_folder(dir, 2, 12);
  torch::Device dev(torch::kCUDA, 0);
  for (const bool gpu_decode : {false, true}) {
    if (gpu_decode && !gpu_decode_available()) {
      std::printf("  GPU decode: this build has no nvJPEG; CPU decode only\n");
      continue;
    }
    Config c = gpu_config("resnet18", "bf16");
    c.model.num_classes = 2;
    c.data.image_size = 64;
    c.train.cuda_graph = true;
    c.train.cudnn_benchmark = false;
    RunContext ctx;
    ctx.device = dev;
    Trainer t(c, ctx, false);
    ImageLoaderOptions o;
    o.batch_size = 8;  // 24 samples: 3 batches an epoch, so the loader's threads go on across the capture
    o.image_size = 64;
    o.workers = 2;
    o.channels_last = true;
    std::unique_ptr<Loader> loader;
    if (gpu_decode) loader = std::make_unique<GpuImageLoader>(list.samples, o, dev);
    else loader = std::make_unique<ImageLoader>(list.samples, o, dev);
    int64_t epoch = 0;
    Batch b;
    for (int i = 0; i < 10; ++i) {
      while (!loader->next(b)) loader->set_epoch(++epoch);
      ASSERT_TRUE(t.train_step(b)) << (gpu_decode ? "GPU" : "CPU") << " decode, step " << i;
      const double l = t.take_train_loss();
      ASSERT_TRUE(std::isfinite(l)) << (gpu_decode ? "GPU" : "CPU") << " decode, step " << i;
    }
    EXPECT_TRUE(t.step_graph_active()) << (gpu_decode ? "GPU" : "CPU") << " decode";
  }
}

// data.decode auto: a run's checkpoint records the kind its loader settled on, and a run resumed from it with auto
// takes that kind at once instead of deciding again (the decision depends on timing; a resumed run would otherwise
// start on the CPU path and could settle elsewhere).
TEST(Gpu, AutoDecodeResumesWithTheKindTheCheckpointRecords) {
  REQUIRE_GPU();
  if (!gpu_decode_available()) GTEST_SKIP() << "this build has no nvJPEG";
  test::TempDir dir;
  test::jpeg_folder(dir, 2, 12);
  auto config = [&](const std::string& decode, int64_t epochs) {
    return config_from_overrides({"run.device=cuda", "model.name=resnet18", "model.num_classes=2",
                                  "model.in_chans=3", "data.source=image_folder", "data.root=" + dir.path(),
                                  "data.train_split=set", "data.eval_split=", "data.train_crop=rrc",
                                  "data.image_size=32", "data.batch_size=4", "data.workers=1", "data.decode=" + decode,
                                  "train.epochs=" + std::to_string(epochs), "train.eval_interval=0",
                                  "checkpoint.resume=auto", "run.name=decode", "run.out_dir=" + dir.file("runs")});
  };
  const CheckpointDir ckpts(dir.file("runs/decode/checkpoints"));
  {
    Trainer t(config("gpu", 1), RunContext{torch::Device(torch::kCUDA, 0)});
    t.fit();
  }
  const CheckpointState first = read_checkpoint(ckpts.latest_valid());
  ASSERT_EQ(first.extra.count("data.decode"), 1u);
  EXPECT_EQ(first.extra.at("data.decode"), "gpu");

  Trainer t(config("auto", 2), RunContext{torch::Device(torch::kCUDA, 0)});
  EXPECT_TRUE(t.train_loader().deciding()) << "before the resume auto starts on the CPU path, undecided";
  t.fit();
  EXPECT_FALSE(t.train_loader().deciding());
  EXPECT_NE(dynamic_cast<GpuImageLoader*>(&t.train_loader()), nullptr) << "the resumed run decodes on the GPU";
  const CheckpointState second = read_checkpoint(ckpts.latest_valid());
  EXPECT_EQ(second.epoch, 2);
  EXPECT_EQ(second.extra.at("data.decode"), "gpu");
  EXPECT_NE(fs::read_text(dir.file("runs/decode/train.log")).find("data.decode auto: gpu, as the run decided"),
            std::string::npos);
}

// SyncBatchNorm's training forward and backward never wait on the GPU from the host (it read the count with
// .item() in every layer: about 53 syncs a ResNet-50 step). CUDA's sync debug mode turns any sync into an error.
TEST(Gpu, SyncBatchNormNeverSyncsTheHost) {
  REQUIRE_GPU();
  const torch::Device dev(torch::kCUDA, 0);
  SyncableBatchNorm2d bn(16);
  bn->to(dev);
  int calls = 0;
  enable_sync_batchnorm(*bn, [&calls](torch::Tensor&) { ++calls; });  // one rank: the sum is the tensor itself
  auto x = torch::randn({8, 16, 12, 12}, torch::TensorOptions().device(dev)).requires_grad_(true);
  torch::cuda::synchronize();
  c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
  try {
    torch::Tensor y = bn->forward(x);
    y.square().sum().backward();
  } catch (const std::exception& e) {
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
    FAIL() << "a host sync: " << e.what();
  }
  c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
  EXPECT_EQ(calls, 2);  // statistics forward, their gradient backward
  // the running variance is the unbiased one over the whole batch, as torch's
  const auto xf = x.detach().cpu();
  const auto var = xf.transpose(0, 1).reshape({16, -1}).var(1, /*unbiased=*/true);
  EXPECT_TRUE(torch::allclose(bn->running_var.cpu(), 0.9 + 0.1 * var, 1e-4, 1e-5));
}

// A rank under `trainer launch` (the NCCL path, one GPU) with log points far apart: SIGTERM to the launcher, which
// forwards it, is agreed on within about a second, the checkpoint written, exit 3. Ranks on GPUs used to agree
// only at log points, so this run trained on until the launcher's SIGKILL.
TEST(Gpu, StopUnderLaunchIsAgreedSoonWhateverTheLogInterval) {
  REQUIRE_GPU();
  test::TempDir dir;
  const std::string cmd =
      test::shell_quote(test::trainer_binary()) + " launch --nproc-per-node 1 --master-port " +
      std::to_string(21000 + ::getpid() % 20000) + " -- --config " + test::source_dir() + "/configs/bench.yaml" +
      " --set model.name=resnet18 --set data.image_size=64 --set data.synthetic_samples=2048 --set data.batch_size=64" +
      " --set train.epochs=100000 --set run.log_interval=100000 --set checkpoint.every_epoch=false" +
      " --set train.eval_interval=0 --set run.out_dir=" + dir.path();
  const pid_t pid = test::spawn(cmd, dir.file("log"));
  const std::string train_log = dir.file("default/train.log");
  auto t0 = std::chrono::steady_clock::now();
  while ((!fs::exists(train_log) || fs::read_text(train_log).find("epoch 3 done") == std::string::npos) &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_NE(fs::read_text(train_log).find("epoch 3 done"), std::string::npos) << fs::read_text(dir.file("log"));
  ::kill(pid, SIGTERM);
  t0 = std::chrono::steady_clock::now();
  int status = 0;
  ::waitpid(pid, &status, 0);
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(WIFEXITED(status)) << fs::read_text(dir.file("log"));
  EXPECT_EQ(WEXITSTATUS(status), 3) << fs::read_text(dir.file("log"));
  EXPECT_LT(sec, 8.0) << "the stop took " << sec << " s";
  EXPECT_FALSE(CheckpointDir(dir.file("default/checkpoints")).latest_valid().empty());
}

// ---- fused batch norm (model.fused_norm); the kernels alone: tests/models/fused_batchnorm_gpu_test.cpp ----

// ResNet-50 bf16: a few steps with the fused kernels follow the same losses as with model.fused_norm off, from the
// same weights and batch (the paths differ in rounding only), and the fused path ran.
TEST(FusedBatchNorm, ResNetStepsFollowTheUnfusedOnes) {
  REQUIRE_GPU();
  if (!fused_batchnorm_built()) GTEST_SKIP() << "this build has no CUDA kernels of its own (no nvcc)";
  RunContext ctx;
  ctx.device = torch::Device(torch::kCUDA, 0);
  Config c = gpu_config("resnet50", "bf16");
  Trainer fused(c, ctx, false);
  c.model.fused_norm = "off";
  Trainer plain(c, ctx, false);
  load_state_dict(*plain.model(), state_dict(*fused.model()), LoadMode::strict, "copy");
  torch::manual_seed(2);
  auto x = torch::randn({32, 3, 224, 224}, torch::TensorOptions().device(ctx.device)).contiguous(torch::MemoryFormat::ChannelsLast);
  auto y = torch::randint(1000, {32}, torch::TensorOptions().device(ctx.device).dtype(torch::kInt64));
  for (int i = 0; i < 6; ++i) {
    fused.train_step(Batch{x, y, {}});
    plain.train_step(Batch{x, y, {}});
    const double a = fused.take_train_loss(), b = plain.take_train_loss();
    EXPECT_NEAR(a, b, 0.02 * std::fabs(b) + 0.02) << "step " << i;
    std::printf("  step %d: loss fused %.4f, unfused %.4f\n", i, a, b);
  }
  int ran = 0;
  for (auto& m : fused.model()->modules(/*include_self=*/false))
    if (auto* bn = m->as<SyncableBatchNorm2dImpl>()) ran += bn->ran_fused() ? 1 : 0;
  EXPECT_EQ(ran, 53) << "every batch norm of ResNet-50 should run fused";
}

// Training equivalence on real data: ResNet-18 on Fashion-MNIST (configs/fashion_mnist.yaml, 10 epochs, 1,170
// steps, bf16 channels_last) with the fused kernels follows the run with model.fused_norm off from the same seed no
// further than a second off run with another seed does (mean distance of the per-interval train losses), and ends
// within 0.3 points of its test top-1.
TEST(FusedBatchNorm, TrainingFollowsTheUnfusedRunOnFashionMnist) {
  REQUIRE_GPU();
  if (!fused_batchnorm_built()) GTEST_SKIP() << "this build has no CUDA kernels of its own (no nvcc)";
  const char* env = std::getenv("TRAINER_FMNIST");
  const std::string root = env ? env : "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(root)) GTEST_SKIP() << root << " missing (TRAINER_FMNIST or dataset-fashion-mnist)";
  struct Run {
    std::vector<double> losses;
    double top1 = 0;
    int fused = 0;
  };
  auto train = [&](const std::string& fused_norm, int seed) {
    test::TempDir dir;
    Config c = load_config(test::source_dir() + "/configs/fashion_mnist.yaml",
                           {"data.root=" + root, "run.out_dir=" + dir.path(), "train.epochs=10",
                            "train.eval_interval=10", "run.log_interval=20", "checkpoint.every_epoch=false",
                            "model.fused_norm=" + fused_norm, "run.seed=" + std::to_string(seed)});
    Run r;
    Trainer t(c, RunContext{torch::Device(torch::kCUDA, 0)});
    r.top1 = t.fit().eval.top1;
    r.fused = fused_batchnorm_layers(*t.model()).first;
    std::istringstream rows(fs::read_text(dir.file("fashion_mnist/metrics.jsonl")));
    for (std::string line; std::getline(rows, line);)
      if (line.find("\"kind\":\"train\"") != std::string::npos) {
        const auto at = line.find("\"loss\":") + 7;
        r.losses.push_back(std::stod(line.substr(at)));
      }
    return r;
  };
  const Run fused = train("auto", 1), off = train("off", 1), other = train("off", 2);
  EXPECT_EQ(fused.fused, 20);
  EXPECT_EQ(off.fused, 0);
  ASSERT_GE(fused.losses.size(), 50u);
  ASSERT_EQ(fused.losses.size(), off.losses.size());
  ASSERT_EQ(other.losses.size(), off.losses.size());
  double d_fused = 0, d_seed = 0;
  for (size_t i = 0; i < off.losses.size(); ++i) {
    d_fused += std::fabs(fused.losses[i] - off.losses[i]) / off.losses.size();
    d_seed += std::fabs(other.losses[i] - off.losses[i]) / off.losses.size();
  }
  std::printf("  train loss distance fused-off %.4f, off-off(seed 2) %.4f; top1 fused %.2f%%, off %.2f%%, "
              "off seed 2 %.2f%%\n",
              d_fused, d_seed, fused.top1, off.top1, other.top1);
  EXPECT_LE(d_fused, d_seed);
  EXPECT_NEAR(fused.top1, off.top1, 0.3);
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

TEST(Gpu, ImageLoaderBatchesSurviveQueuedComputeWork) {
  // The side-stream copy must never write memory that queued compute work still reads: every batch is read on the
  // compute stream only behind a queue of matrix products, with no host sync in the epoch (a .cpu() per batch
  // would drain the stream first), and compared with the CPU loader's batches at the epoch's end.
  REQUIRE_GPU();
  const std::string fx = test::python_fixtures("data", "tests/data/make_images.py", "");
  test::TempDir dir;
  for (int c = 0; c < 5; ++c) {
    const std::string d = dir.file("set/c" + std::to_string(c));
    fs::make_dirs(d);
    for (int i = 0; i < 13; ++i)
      test::write_file(d + "/" + std::to_string(i) + ".jpg", test::read_file(fx + (i % 2 ? "/baseline.jpg" : "/progressive.jpg")));
  }
  const auto list = scan_image_folder(dir.file("set"));
  ImageLoaderOptions o;
  o.batch_size = 8;
  o.image_size = 64;
  o.workers = 4;
  o.prefetch = 2;
  o.channels_last = true;
  ImageLoader cpu(list.samples, o, torch::kCPU), gpu(list.samples, o, torch::Device(torch::kCUDA, 0));
  const auto big = torch::randn({4096, 4096}, torch::TensorOptions().device(torch::kCUDA));
  torch::Tensor work;
  for (int64_t e : {0, 1}) {
    cpu.set_epoch(e);
    gpu.set_epoch(e);
    Batch a, b;
    std::vector<Batch> want;
    std::vector<torch::Tensor> images, labels;  // device copies, made behind the queued work
    while (cpu.next(a)) {
      ASSERT_TRUE(gpu.next(b));
      for (int k = 0; k < 3; ++k) work = torch::mm(big, big);  // about 1 ms each, queued
      images.push_back(b.images.clone());
      labels.push_back(b.labels.clone());
      want.push_back(a);
    }
    EXPECT_FALSE(gpu.next(b));
    ASSERT_EQ(images.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_TRUE(torch::equal(want[i].labels, labels[i].cpu())) << "epoch " << e << " batch " << i;
      EXPECT_TRUE(torch::allclose(want[i].images, images[i].cpu(), 1e-5, 1e-5)) << "epoch " << e << " batch " << i;
    }
  }
  EXPECT_TRUE(work.isfinite().all().item<bool>());  // the queued work ran and was real: entries of std 64
  EXPECT_GT(work.abs().mean().item<double>(), 10.0);
}

}  // namespace
}  // namespace trainer
