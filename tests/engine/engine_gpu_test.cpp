// GPU-only checks (ctest label `gpu`): bf16/fp16 steps of the big models, the scaler on CUDA, and the
// GPU-resident loader against its CPU twin. Skipped, with a message, where no CUDA device is usable.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <c10/cuda/CUDAFunctions.h>

#include <chrono>
#include <functional>
#include <sstream>
#include <thread>

#include "checkpoint/checkpoint.h"
#include "core/fs.h"
#include "data/auto_loader.h"
#include "data/gpu_jpeg.h"
#include "data/image_folder.h"
#include "data/image_ops.h"
#include "data/jpeg_decoder.h"
#include "data/image_loader.h"
#include "data/memory_loader.h"
#include "test_support/test_support.h"
#include "engine/trainer.h"
#include "models/batchnorm.h"
#include "models/fused_batchnorm.h"
#include "models/registry.h"
#include "models/weights.h"
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

// dir/set/c<k>/<i>.jpg: `classes` x `per_class` copies of the fixture JPEGs (baseline, EXIF, odd size in turn)
ImageList jpeg_folder(test::TempDir& dir, int classes, int per_class) {
  const std::string fx = test::python_fixtures("data", "tests/data/make_images.py", "");
  const char* src[] = {"baseline.jpg", "exif.jpg", "odd.jpg"};
  for (int c = 0; c < classes; ++c) {
    const std::string d = dir.file("set/c" + std::to_string(c));
    fs::make_dirs(d);
    for (int i = 0; i < per_class; ++i)
      test::write_file(d + "/" + std::to_string(i) + ".jpg", test::read_file(fx + "/" + src[(i + c) % 3]));
  }
  return scan_image_folder(dir.file("set"));
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

// ---- data.decode: gpu ----

#define REQUIRE_NVJPEG()                                                                     \
  REQUIRE_GPU();                                                                             \
  if (!gpu_decode_available()) GTEST_SKIP() << "this build has no nvJPEG"

// The batched crop-resize kernel gives what ATen's per-sample crop + _upsample_bilinear2d_aa + flip gives, for
// shrinking (antialiased), enlarging, thin and full windows, odd sizes and flips, with its weights tabled (short
// filters) and computed in place (long ones).
TEST(GpuDecode, BatchedCropResizeKernelMatchesAtenPerSample) {
  REQUIRE_GPU();
  if (!gpu_crop_resize_kernel_available()) GTEST_SKIP() << "this build has no CUDA kernels of its own (no nvcc)";
  torch::manual_seed(3);
  torch::Device dev(torch::kCUDA, 0);
  const int64_t S = 56;
  struct Case { int64_t h, w; Rect r; bool flip; bool planar = false; };
  const std::vector<Case> cases = {
      {480, 640, {0, 0, 640, 480}, false},   // whole image, shrink 11x (wide antialias support)
      {480, 640, {100, 37, 301, 250}, true}, // shrink about 5x, flipped
      {33, 47, {3, 5, 20, 17}, false},       // enlarge (plain bilinear)
      {33, 47, {0, 0, 47, 33}, true},        // enlarge, flipped
      {200, 90, {10, 0, 7, 200}, false},     // thin: enlarge one way, shrink the other
      {57, 57, {1, 1, 56, 56}, true},        // nearly the identity
      {120, 90, {5, 9, 80, 100}, true, true},  // a planar decode's (H, W, 3) view
      {900, 60, {0, 20, 60, 870}, false},    // tall: enlarge across, shrink 16x down (weights computed in place)
      {300, 300, {2, 3, 290, 291}, true},    // shrink about 5x both ways (the kernel's tabled weights)
  };
  std::vector<torch::Tensor> images;
  std::vector<Rect> windows;
  std::vector<char> flips;
  for (const Case& c : cases) {
    const auto u8 = torch::TensorOptions().dtype(torch::kUInt8);
    images.push_back(c.planar ? torch::randint(0, 256, {3, c.h, c.w}, u8).to(dev).permute({1, 2, 0})
                              : torch::randint(0, 256, {c.h, c.w, 3}, u8).to(dev));
    windows.push_back(c.r);
    flips.push_back(c.flip ? 1 : 0);
  }
  for (const int64_t size : {S, int64_t{45}}) {  // 45: tiles cut off at both edges
    const torch::Tensor fast = gpu_crop_resize(images, windows, flips, size, /*batched_kernel=*/true).cpu();
    const torch::Tensor ref = gpu_crop_resize(images, windows, flips, size, /*batched_kernel=*/false).cpu();
    ASSERT_EQ(fast.sizes(), ref.sizes());
    for (size_t i = 0; i < cases.size(); ++i) {
      const double worst = (fast[static_cast<int64_t>(i)] - ref[static_cast<int64_t>(i)]).abs().max().item<double>();
      std::printf("  size %lld case %zu: max |kernel - ATen| %.2e (0..255 scale)\n", static_cast<long long>(size), i,
                  worst);
      EXPECT_LT(worst, 2e-3) << "size " << size << " case " << i;
    }
  }
  const torch::Tensor fast = gpu_crop_resize(images, windows, flips, S, /*batched_kernel=*/true).cpu();
  // normalisation and the channels_last layout folded into the kernel: as normalising its plain output
  const GpuResizeOutput norm = GpuResizeOutput::normalized({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}, true);
  const torch::Tensor mean = torch::tensor({norm.mean255[0], norm.mean255[1], norm.mean255[2]}).view({1, 3, 1, 1});
  const torch::Tensor inv = torch::tensor({norm.inv_std255[0], norm.inv_std255[1], norm.inv_std255[2]}).view({1, 3, 1, 1});
  const torch::Tensor folded = gpu_crop_resize(images, windows, flips, S, true, norm);
  EXPECT_TRUE(folded.is_contiguous(torch::MemoryFormat::ChannelsLast));
  const torch::Tensor by_hand = (fast - mean) * inv;
  EXPECT_LT((folded.cpu() - by_hand).abs().max().item<double>(), 1e-4);
  const torch::Tensor folded_ref = gpu_crop_resize(images, windows, flips, S, false, norm).cpu();
  EXPECT_LT((folded.cpu() - folded_ref).abs().max().item<double>(), 1e-4);
  // bfloat16 out (data.dtype): the float32 result rounded as a cast would, kernel and ATen path alike
  GpuResizeOutput norm16 = norm;
  norm16.dtype = torch::kBFloat16;
  for (const bool batched : {true, false}) {
    const torch::Tensor f = gpu_crop_resize(images, windows, flips, S, batched, norm);
    const torch::Tensor h = gpu_crop_resize(images, windows, flips, S, batched, norm16);
    ASSERT_EQ(h.scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(h.is_contiguous(torch::MemoryFormat::ChannelsLast));
    EXPECT_TRUE(torch::equal(h, f.to(torch::kBFloat16))) << (batched ? "kernel" : "ATen path");
  }
  // the ATen reference itself flips: the unflipped kernel output of case 1 mirrors the flipped one
  std::vector<char> none(flips.size(), 0);
  const torch::Tensor unflipped = gpu_crop_resize(images, windows, none, S, true).cpu();
  EXPECT_TRUE(torch::allclose(unflipped[1].flip({2}), fast[1]));
  EXPECT_FALSE(torch::allclose(unflipped[1], fast[1]));
}

// nvJPEG's hardware path writes a batch's pixels when the call is made, not in stream order (torchcodec #1634).
// So a block the caching allocator frees on the decode's stream while a read of it is still queued must never
// become the decode's output: queue ~50 ms of work, then a sum over a buffer of exactly the decode's output size,
// free the buffer and decode on the same stream; the sum must still see the buffer's own bytes.
TEST(GpuDecode, DecodeNeverOverwritesMemoryQueuedWorkStillReads) {
  REQUIRE_NVJPEG();
  const std::string fx = test::python_fixtures("data", "tests/data/make_images.py", "");
  torch::Device dev(torch::kCUDA, 0);
  GpuJpegDecoder gpu(dev);
  const std::string bytes = test::read_file(fx + "/baseline.jpg");
  const GpuJpegDecoder::Files in = {{reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}};
  const auto info = gpu.inspect(in);
  ASSERT_TRUE(info[0].supported);
  const int64_t n = int64_t(info[0].width) * info[0].height * 3;  // bytes of the decode's output buffer
  const torch::Tensor a = torch::randn({4096, 4096}, torch::TensorOptions().device(dev)).div_(64);
  int wrong = 0;
  for (int it = 0; it < 20; ++it) {
    torch::Tensor victim = torch::full({n}, 7, torch::TensorOptions().dtype(torch::kUInt8).device(dev));
    torch::Tensor b = a;
    for (int k = 0; k < 20; ++k) b = torch::tanh(b.matmul(a));  // queued ahead of the read
    const torch::Tensor sum = victim.sum(torch::kInt64);        // the read, still queued
    victim.reset();                                             // freed on this stream meanwhile
    const auto out = gpu.decode(in, info);
    ASSERT_TRUE(out[0].defined());
    if (sum.item<int64_t>() != 7 * n) ++wrong;
  }
  EXPECT_EQ(wrong, 0) << "the decode wrote into memory a queued read still used, in " << wrong << " of 20 tries ("
                      << (gpu.hardware() ? "hardware engines" : "default backend") << ")";
}

TEST(GpuDecode, NvjpegPixelsMatchTheCpuDecoder) {
  REQUIRE_NVJPEG();
  const std::string fx = test::python_fixtures("data", "tests/data/make_images.py", "");
  torch::Device dev(torch::kCUDA, 0);
  GpuJpegDecoder gpu(dev);
  std::vector<std::string> names = {"baseline", "odd", "exif", "gray", "progressive", "cmyk"};
  std::vector<std::string> bytes;
  for (const auto& n : names) bytes.push_back(test::read_file(fx + "/" + n + ".jpg"));
  std::vector<std::pair<const uint8_t*, size_t>> in;
  for (const auto& b : bytes) in.push_back({reinterpret_cast<const uint8_t*>(b.data()), b.size()});
  const auto out = gpu.decode(in);
  torch::cuda::synchronize();
  ASSERT_EQ(out.size(), names.size());
  int decoded = 0;
  JpegDecoder cpu;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!out[i].defined()) {
      std::printf("  %s: not taken by nvJPEG (%s backend): CPU fallback\n", names[i].c_str(),
                  gpu.hardware() ? "hardware" : "default");
      continue;
    }
    ++decoded;
    RgbImage ref;
    cpu.decode(reinterpret_cast<const uint8_t*>(bytes[i].data()), bytes[i].size(), JpegDecodeOptions{}, ref, names[i]);
    const auto want = torch::from_blob(ref.pixels.data(), {ref.height, ref.width, 3}, torch::kUInt8).to(torch::kFloat32);
    ASSERT_EQ(out[i].sizes(), want.sizes()) << names[i];
    const auto diff = (out[i].cpu().to(torch::kFloat32) - want).abs();
    const double mean = diff.mean().item<double>();
    std::printf("  %s: nvJPEG vs libjpeg-turbo mean |diff| %.3f, max %.0f\n", names[i].c_str(), mean,
                diff.max().item<double>());
    EXPECT_LT(mean, 2.0) << names[i] << ": nvJPEG and libjpeg-turbo differ by more than IDCT/upsampling rounding";
  }
  EXPECT_GE(decoded, 3) << "baseline, odd and exif JPEGs are plain baseline files";
  EXPECT_FALSE(out[5].defined()) << "CMYK goes to the CPU decoder";
}

// Shards from `trainer pack` hold JPEGs rewritten with a restart marker after every MCU (same coefficients): the
// engines take them and give the same pixels as for the files they came from (the progressive original, which
// the engines do not take, against the CPU decoder).
TEST(GpuDecode, RestartMarkerRewritesDecodeLikeTheirSources) {
  REQUIRE_NVJPEG();
  const std::string fx = test::python_fixtures("data", "tests/data/make_images.py", "");
  torch::Device dev(torch::kCUDA, 0);
  GpuJpegDecoder gpu(dev);
  const std::vector<std::string> names = {"baseline", "odd", "exif", "gray", "s444", "s422", "progressive"};
  std::vector<std::vector<uint8_t>> orig, rst(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string b = test::read_file(fx + "/" + names[i] + ".jpg");
    orig.emplace_back(b.begin(), b.end());
    ASSERT_TRUE(transcode_with_restarts(orig[i].data(), orig[i].size(), rst[i], names[i]));
  }
  GpuJpegDecoder::Files a, b;
  for (size_t i = 0; i < names.size(); ++i) {
    a.push_back({orig[i].data(), orig[i].size()});
    b.push_back({rst[i].data(), rst[i].size()});
  }
  const auto from_orig = gpu.decode(a), from_rst = gpu.decode(b);
  torch::cuda::synchronize();
  JpegDecoder cpu;
  for (size_t i = 0; i < names.size(); ++i) {
    SCOPED_TRACE(names[i]);
    if (gpu.hardware()) EXPECT_TRUE(from_rst[i].defined()) << "the engines refused a restart-marker rewrite";
    if (!from_rst[i].defined()) continue;
    torch::Tensor want;
    RgbImage ref;
    if (from_orig[i].defined() && names[i] != "progressive") {
      want = from_orig[i].cpu();
    } else {
      cpu.decode(orig[i].data(), orig[i].size(), JpegDecodeOptions{}, ref, names[i]);
      want = torch::from_blob(ref.pixels.data(), {ref.height, ref.width, 3}, torch::kUInt8);
    }
    ASSERT_EQ(from_rst[i].sizes(), want.sizes());
    const auto diff = (from_rst[i].cpu().to(torch::kFloat32) - want.to(torch::kFloat32)).abs();
    std::printf("  %s: restart rewrite vs %s: mean |diff| %.4f, max %.0f\n", names[i].c_str(),
                names[i] == "progressive" ? "libjpeg-turbo" : "the source on nvJPEG", diff.mean().item<double>(),
                diff.max().item<double>());
    if (names[i] == "progressive") EXPECT_LT(diff.mean().item<double>(), 2.0);
    else EXPECT_EQ(diff.max().item<double>(), 0.0) << "same coefficients, same decoder: the pixels must agree";
  }
}

// Crop-only decode on the engines (nvJPEG regions) gives the pixels of the whole-image decode's crop: the region
// decode starts at the region's first MCU, so only chroma upsampling at the region's edges may round differently.
TEST(GpuDecode, RegionDecodeMatchesTheWholeImageCrop) {
  REQUIRE_NVJPEG();
  const std::string fx = test::python_fixtures("data", "tests/data/make_images.py", "");
  torch::Device dev(torch::kCUDA, 0);
  GpuJpegDecoder gpu(dev);
  if (!gpu.hardware()) GTEST_SKIP() << "region decode is a hardware-engine feature; this device has none";
  gpu.preallocate(8);
  std::vector<std::string> bytes;
  for (const char* n : {"baseline", "odd", "exif", "baseline"}) bytes.push_back(test::read_file(fx + "/" + n + ".jpg"));
  GpuJpegDecoder::Files in;
  for (const auto& b : bytes) in.push_back({reinterpret_cast<const uint8_t*>(b.data()), b.size()});
  const auto whole = gpu.decode(in);
  // regions with odd corners and sizes, one touching the far corner, one the whole image (decoded whole)
  auto region = [](size_t i, int w, int h) {
    switch (i) {
      case 0: return Rect{7, 13, w / 2 + 1, h / 3 + 2};
      case 1: return Rect{w - 9, h - 11, 9, 11};
      case 2: return Rect{1, 0, w - 3, h - 5};
      default: return Rect{0, 0, w, h};
    }
  };
  const auto info = gpu.inspect(in, 2, region);
  const auto part = gpu.decode(in, info);
  torch::cuda::synchronize();
  int cropped = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_TRUE(whole[i].defined() && part[i].defined()) << "file " << i << " is a plain baseline JPEG";
    const Rect r = region(i, info[i].width, info[i].height);
    if (i == 3) {
      EXPECT_EQ(info[i].roi.w, 0) << "the whole image is decoded whole";
      EXPECT_TRUE(torch::equal(whole[i], part[i]));
      continue;
    }
    if (info[i].roi.w == 0) {  // the engines refused this region: decoded whole, still correct
      std::printf("  file %zu: region refused by the engines, decoded whole\n", i);
      EXPECT_TRUE(torch::equal(whole[i], part[i]));
      continue;
    }
    ++cropped;
    ASSERT_EQ(part[i].size(0), r.h);
    ASSERT_EQ(part[i].size(1), r.w);
    const auto want = whole[i].narrow(0, r.y, r.h).narrow(1, r.x, r.w).to(torch::kFloat32);
    const auto diff = (part[i].to(torch::kFloat32) - want).abs();
    std::printf("  file %zu region %d,%d %dx%d: mean |diff| %.3f, max %.0f\n", i, r.x, r.y, r.w, r.h,
                diff.mean().item<double>(), diff.max().item<double>());
    EXPECT_LT(diff.mean().item<double>(), 1.0) << "file " << i;
  }
  EXPECT_GE(cropped, 1) << "the engines took none of the regions";
}

// The GPU path gives the CPU path's batches: same order, labels, crop boxes and flips, pixels within the
// difference of the two resize implementations; PNG, CMYK and corrupt files go through the fallback.
TEST(GpuDecode, LoaderMatchesTheCpuLoaderAndFallsBack) {
  REQUIRE_NVJPEG();
  const std::string fx = test::python_fixtures("data", "tests/data/make_images.py", "");
  test::TempDir dir;
  const char* src[] = {"baseline.jpg", "exif.jpg", "odd.jpg", "cmyk.jpg", "alpha.png", "baseline.jpg"};
  for (int c = 0; c < 3; ++c) {
    const std::string d = dir.file("set/c" + std::to_string(c));
    fs::make_dirs(d);
    for (int i = 0; i < 6; ++i) {
      const std::string ext = std::string(src[i]).substr(std::string(src[i]).find('.'));
      test::write_file(d + "/" + std::to_string(i) + ext, test::read_file(fx + "/" + src[i]));
    }
  }
  test::write_file(dir.file("set/c0/zz_bad.jpg"), "\xff\xd8\xff not really a jpeg");
  const auto list = scan_image_folder(dir.file("set"));
  torch::Device dev(torch::kCUDA, 0);
  for (const bool crop : {false, true})
  for (const bool train : {false, true}) {
    ImageLoaderOptions o;
    o.batch_size = 8;
    o.image_size = 48;
    o.workers = 3;
    o.train = train;
    o.drop_last = false;
    o.dct_scale = false;  // the GPU path resizes from the full-resolution crop
    o.crop_decode = false;
    o.seed = 17;
    o.channels_last = false;
    ImageLoader cpu(list.samples, o, dev);  // reference: whole-image decode on the CPU
    o.crop_decode = crop;                   // the GPU path: whole image, or the crop window on the engines
    o.channels_last = crop;                 // and NCHW or channels_last out of its resize kernel
    GpuImageLoader gpu(list.samples, o, dev);
    o.dtype = torch::kBFloat16;  // data.dtype bfloat16: the same batches rounded
    GpuImageLoader gpu16(list.samples, o, dev);
    for (int64_t e : {0, 1}) {
      cpu.set_epoch(e);
      gpu.set_epoch(e);
      gpu16.set_epoch(e);
      Batch a, b, h;
      int batches = 0;
      while (cpu.next(a)) {
        ASSERT_TRUE(gpu.next(b));
        ASSERT_TRUE(gpu16.next(h));
        ASSERT_EQ(h.images.scalar_type(), torch::kBFloat16);
        EXPECT_EQ(h.images.strides(), b.images.strides());
        EXPECT_TRUE(torch::equal(h.images, b.images.to(torch::kBFloat16))) << "bfloat16 batch " << batches;
        EXPECT_EQ(h.indices, b.indices);
        ++batches;
        ASSERT_EQ(a.images.sizes(), b.images.sizes());
        for (int64_t i = 0; i < a.images.size(0); ++i) {
          const int64_t ia = a.indices[static_cast<size_t>(i)], ib = b.indices[static_cast<size_t>(i)];
          if (ia < 0 || ib < 0) {  // evaluation leaves a bad file out, on both paths at the same place
            EXPECT_FALSE(train) << "training replaces bad files";
            EXPECT_EQ(ia, ib) << "epoch " << e << " batch " << batches << " sample " << i;
            EXPECT_EQ(b.labels[i].item<int64_t>(), -1);
            continue;
          }
          if (ia != ib) continue;  // a bad file replaced (training), differently on the two paths
          const double d = (a.images[i] - b.images[i]).abs().mean().item<double>();
          EXPECT_LT(d, 0.08) << (train ? "train" : "eval") << " epoch " << e << " sample "
                             << list.samples[static_cast<size_t>(a.indices[static_cast<size_t>(i)])].path
                             << ": mean |diff| " << d << " (normalised units)";
        }
        EXPECT_TRUE(torch::equal(a.labels.cpu(), b.labels.cpu()) ||
                    a.indices != b.indices);  // replacements may differ between the paths
      }
      EXPECT_FALSE(gpu.next(b));
      EXPECT_FALSE(gpu16.next(h));
      EXPECT_GT(batches, 1);
    }
    const GpuDecodeStats st = gpu.stats();
    EXPECT_GT(st.gpu, 0);
    EXPECT_GE(st.cpu_fallback, 6 * 2) << "CMYK and PNG files go to the CPU decoder";
    EXPECT_GE(st.bad, 1) << "the corrupt file is replaced (training) or left out (evaluation)";
    if (!crop || !gpu.hardware()) EXPECT_EQ(st.gpu_cropped, 0);
    else EXPECT_GT(st.gpu_cropped, 0) << "crop_decode on the hardware engines decodes crop windows";
    std::printf("  crop_decode %d, %s: %lld by nvJPEG (%s; %lld crop window only), %lld by the CPU "
                "fallback, %lld replaced\n", crop ? 1 : 0, train ? "train" : "eval",
                static_cast<long long>(st.gpu), gpu.hardware() ? "hardware engines" : "default backend",
                static_cast<long long>(st.gpu_cropped), static_cast<long long>(st.cpu_fallback),
                static_cast<long long>(st.bad));
  }
}

// Training: the producer goes on into the next epoch once an epoch is made. What it hands out after
// set_epoch(e + 1) equals what a loader started at epoch e + 1 gives; a call after a partly taken epoch, or one
// that resumes mid-epoch, starts over and gives the same. Prefetch deeper than an epoch: at most one epoch ahead.
TEST(GpuDecode, LoaderGoesOnIntoTheNextEpochAsSetEpochWould) {
  REQUIRE_NVJPEG();
  test::TempDir dir;
  const auto list = jpeg_folder(dir, 3, 6);
  torch::Device dev(torch::kCUDA, 0);
  ImageLoaderOptions o;
  o.batch_size = 4;  // 18 samples: 4 batches an epoch (drop_last)
  o.image_size = 32;
  o.workers = 2;
  o.prefetch = 6;    // deeper than an epoch
  o.seed = 5;
  using Epoch = std::vector<Batch>;
  auto take = [](GpuImageLoader& l, int64_t at_most) {
    Epoch out;
    Batch b;
    while (static_cast<int64_t>(out.size()) < at_most && l.next(b)) out.push_back(b);
    return out;
  };
  auto fresh = [&](int64_t epoch, int64_t start_batch) {
    GpuImageLoader l(list.samples, o, dev);
    l.set_epoch(epoch, start_batch);
    return take(l, 1 << 20);
  };
  auto expect_same = [](const Epoch& a, const Epoch& b, const std::string& what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    for (size_t k = 0; k < a.size(); ++k) {
      EXPECT_EQ(a[k].indices, b[k].indices) << what << " batch " << k;
      EXPECT_TRUE(torch::equal(a[k].labels.cpu(), b[k].labels.cpu())) << what << " batch " << k;
      EXPECT_TRUE(torch::allclose(a[k].images.cpu(), b[k].images.cpu(), 1e-5, 1e-5)) << what << " batch " << k;
    }
  };
  GpuImageLoader l(list.samples, o, dev);
  for (int64_t e = 0; e < 3; ++e) {  // whole epochs: the producer's next epoch is kept
    if (e > 0) l.set_epoch(e);
    const Epoch got = take(l, 1 << 20);
    EXPECT_EQ(got.size(), 4u);
    expect_same(got, fresh(e, 0), "epoch " + std::to_string(e) + " after a whole epoch");
    if (e > 0) {  // a new shuffle each epoch
      const Epoch before = fresh(e - 1, 0);
      EXPECT_NE(got[0].indices, before[0].indices);
    }
  }
  l.set_epoch(3);
  ASSERT_EQ(take(l, 1).size(), 1u);  // epoch 3 partly taken: the next call starts over
  l.set_epoch(4);
  expect_same(take(l, 1 << 20), fresh(4, 0), "epoch 4 after a partly taken epoch");
  l.set_epoch(5, 2);  // resume mid-epoch
  const Epoch whole = fresh(5, 0);
  expect_same(take(l, 1 << 20), Epoch(whole.begin() + 2, whole.end()), "epoch 5 from batch 2");
  l.set_epoch(6);
  expect_same(take(l, 1 << 20), fresh(6, 0), "epoch 6 after a resumed epoch");
  l.set_epoch(6);  // the same epoch again: starts over
  expect_same(take(l, 1 << 20), fresh(6, 0), "epoch 6 again");
}

// data.decode auto with the real loaders: the GPU loader takes over mid-epoch (and, when it loses, the CPU one
// comes back) with the same samples in the same order, pixels within the paths' tolerance, the same dtype and
// layout. With the real rules on the pipeline alone (no training: training takes all it gets) it decides within
// its windows and says which.
TEST(GpuDecode, AutoSwitchesMidEpochWithTheSameSamples) {
  REQUIRE_NVJPEG();
  test::TempDir dir;
  const auto list = jpeg_folder(dir, 3, 6);  // 18 samples: 4 batches of 4 an epoch
  torch::Device dev(torch::kCUDA, 0);
  ImageLoaderOptions o;
  o.batch_size = 4;
  o.image_size = 48;
  o.workers = 2;
  o.seed = 23;
  o.dct_scale = false;  // the GPU path resizes from the full-resolution crop
  std::vector<Batch> want;
  {
    ImageLoader plain(list.samples, o, dev);
    for (int64_t e = 0; e < 3; ++e) {
      plain.set_epoch(e);
      Batch b;
      while (plain.next(b)) want.push_back(b);
    }
  }
  ASSERT_EQ(want.size(), 12u);
  auto make_cpu = [&]() -> std::unique_ptr<Loader> { return std::make_unique<ImageLoader>(list.samples, o, dev); };
  auto make_gpu = [&]() -> std::unique_ptr<Loader> { return std::make_unique<GpuImageLoader>(list.samples, o, dev); };
  for (const bool keep_gpu : {true, false}) {
    AutoDecodeOptions ao;
    ao.warm_batches = 2;  // switch after epoch 0 batch 2 (mid-epoch), GPU window into epoch 1
    ao.window_batches = 1;
    ao.gpu_warm_batches = 2;
    ao.keep_cpu = [](const DecodeWindow&, const AutoDecodeOptions&) { return false; };
    ao.keep_gpu = [&](const DecodeWindow&, const DecodeWindow&) { return keep_gpu; };
    AutoDecodeLoader l(make_cpu, make_gpu, o.workers, ao);
    size_t k = 0;
    bool seen_gpu = false;
    for (int64_t e = 0; e < 3; ++e) {
      l.set_epoch(e);
      Batch b;
      while (l.next(b)) {
        ASSERT_LT(k, want.size());
        seen_gpu = seen_gpu || l.on_gpu();
        const Batch& a = want[k];
        EXPECT_EQ(b.indices, a.indices) << "batch " << k;
        EXPECT_TRUE(torch::equal(b.labels.cpu(), a.labels.cpu())) << "batch " << k;
        EXPECT_EQ(b.images.scalar_type(), a.images.scalar_type()) << "batch " << k;
        EXPECT_EQ(b.images.strides(), a.images.strides()) << "batch " << k;
        const double d = (b.images.to(torch::kFloat32) - a.images.to(torch::kFloat32)).abs().mean().item<double>();
        EXPECT_LT(d, 0.08) << "batch " << k << ": mean |diff| " << d << " (normalised units)";
        ++k;
      }
    }
    EXPECT_EQ(k, want.size());
    EXPECT_TRUE(seen_gpu) << "the GPU loader was never tried";
    EXPECT_TRUE(l.decided());
    EXPECT_EQ(l.on_gpu(), keep_gpu);
    EXPECT_EQ(l.gpu_window().images, 4);
    std::printf("  keep_gpu %d: %s\n", keep_gpu ? 1 : 0, l.why().c_str());
  }
  // the real rules, through make_image_loader: decided within its windows on the pipeline alone
  std::string why;
  auto automatic = make_image_loader(list.samples, o, "auto", dev, &why);
  auto* a = dynamic_cast<AutoDecodeLoader*>(automatic.get());
  ASSERT_NE(a, nullptr) << why;
  const AutoDecodeOptions defaults;  // windows count no epoch's first batch: 3 of every 4 here, plus epoch ends
  const int64_t needed = 2 * (defaults.warm_batches + 2 * defaults.window_batches + defaults.gpu_warm_batches);
  int64_t e = 0;
  a->set_epoch(e);
  Batch b;
  for (int64_t i = 0; i < needed && !a->decided(); ++i)
    if (!a->next(b)) a->set_epoch(++e);
  EXPECT_TRUE(a->decided()) << "not decided after " << needed << " batches";
  EXPECT_NE(a->why().find("data.decode auto: "), std::string::npos) << a->why();
  std::printf("  real rules, pipeline alone: %s\n", a->why().c_str());
}

}  // namespace
}  // namespace trainer
