// The engine against PyTorch on the CPU, fp32: 30 SGD, AdamW and LAMB steps give the same losses and weights as
// torch.optim; accumulation over 4 micro-batches equals one 4x batch; the grad scaler's scale sequence equals
// torch.amp.GradScaler's; schedules; and a short Fashion-MNIST run learns.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/fs.h"
#include "core/strings.h"
#include "data/image_loader.h"
#include "data/jpeg_decoder.h"
#include "data/jpeg_encoder.h"
#include "data/image_ops.h"
#include "engine/amp.h"
#include "engine/bench.h"
#include "engine/mix.h"
#include "engine/optimizer.h"
#include "engine/schedule.h"
#include "engine/trainer.h"
#include "models/registry.h"
#include "models/safetensors.h"
#include "models/weights.h"
#include "runtime/env.h"
#include "test_support/test_support.h"

namespace trainer {
namespace {

std::map<std::string, torch::Tensor> read_map(const std::string& path) {
  std::map<std::string, torch::Tensor> m;
  for (auto& kv : read_safetensors(path).tensors) m[kv.first] = kv.second;
  return m;
}

double rel_err(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max() /
          b.to(torch::kFloat64).abs().max().clamp_min(1e-12))
      .item<double>();
}

Config cpu_config(const std::string& model, int64_t in_chans, int64_t size) {
  Config c;
  c.run.device = "cpu";
  c.model.name = model;
  c.model.in_chans = in_chans;
  c.model.num_classes = 10;
  c.model.small_stem = false;
  c.data.image_size = size;
  c.optim.schedule = "constant";
  c.optim.warmup_epochs = 0;
  c.train.precision = "fp32";
  c.train.label_smoothing = 0.0;  // the references use plain cross-entropy
  return c;
}

class EngineParity : public test::FixtureSuite {
 protected:
  static void SetUpTestSuite() { load_fixtures("engine", "tests/engine/make_engine_parity.py", ""); }
  static std::string path(const std::string& f) { return fixture_path(f); }
  static nlohmann::json results() {
    std::ifstream f(path("engine.json"));
    return nlohmann::json::parse(f);
  }
  void run_parity(const std::string& opt) {
    at::set_num_threads(1);  // as the fixture script: the same kernels' rounding on both sides
    Config c = cpu_config("resnet18", 1, 32);
    c.optim.name = opt;
    c.optim.lr = opt == "sgd" ? 0.005 : opt == "lamb" ? 5e-4 : 1e-4;
    if (opt == "lamb") {  // timm.optim.Lamb(lr=5e-4, eps=1e-6, max_grad_norm=1.0), weight decay 0.05
      c.optim.eps = 1e-6;
      c.optim.weight_decay = 0.05;
      c.optim.clip_grad_norm = 1.0;
    }
    c.optim.momentum = 0.9;
    c.optim.nesterov = true;
    if (opt != "lamb") c.optim.weight_decay = 5e-4;
    c.optim.wd_exclude_norm_bias = true;
    Trainer t(c, RunContext{torch::kCPU}, /*with_data=*/false);
    load_weights(*t.model(), path("init.safetensors"));
    auto data = read_map(path("batches.safetensors"));
    const auto ref = results()[opt].get<std::vector<double>>();
    ASSERT_EQ(ref.size(), 30u);
    for (int64_t i = 0; i < 30; ++i) {
      Batch b;
      b.images = data["images"][i];
      b.labels = data["labels"][i];
      ASSERT_TRUE(t.train_step(b));
      const double loss = t.take_train_loss();
      EXPECT_NEAR(loss / ref[i], 1.0, 1e-4) << opt << " step " << i << ": ours " << loss << " torch " << ref[i];
    }
    // Final weights: the difference must be small against how far 30 steps moved each tensor (a bias that
    // starts at zero has no scale of its own to be relative to). SGD: elementwise, the largest difference
    // against the largest move. AdamW and LAMB divide each element's step by its own gradient scale, so an
    // element whose gradient is near zero takes a sign-like step of about lr that the last bits of its gradient
    // decide (measured: single elements 8% of the largest move apart, the tensors 0.2-0.5% in L2): they compare
    // the L2 norm of the difference with the L2 norm of the move, where a wrong bias correction, epsilon or
    // gradient clip (every element's step off by a factor) shows as tens of percent.
    auto final_ref = read_map(path(opt + "_final.safetensors"));
    auto init = read_map(path("init.safetensors"));
    for (auto& kv : state_dict(*t.model())) {
      if (kv.second.dtype() != torch::kFloat32) continue;
      const auto& ref = final_ref.at(kv.first);
      const torch::Tensor move = ref - init.at(kv.first), off = kv.second - ref;
      const bool sgd = opt == "sgd";
      const double moved = (sgd ? move.abs().max() : move.norm()).item<double>();
      const double diff = (sgd ? off.abs().max() : off.norm()).item<double>();
      EXPECT_LE(diff, 2e-2 * moved + 1e-7) << opt << " " << kv.first << " moved " << moved;
    }
  }
};

TEST_F(EngineParity, SgdMatchesTorchOptim) { run_parity("sgd"); }
TEST_F(EngineParity, AdamWMatchesTorchOptim) { run_parity("adamw"); }
TEST_F(EngineParity, LambMatchesTimmLamb) { run_parity("lamb"); }

TEST_F(EngineParity, MixUpAndCutMixMatchTorchvision) {
  const auto ref = results()["mix"];
  const int64_t classes = ref["classes"].get<int64_t>();
  auto data = read_map(path("mix.safetensors"));
  const auto& images = data["images"];
  const auto& labels = data["labels"];
  const int64_t H = images.size(2), W = images.size(3);
  int i = 0;
  for (const auto& c : ref["cases"]) {
    MixParams p;
    if (c["kind"] == "mixup") {
      p.kind = MixParams::mixup;
      p.lam = c["lam"].get<double>();
    } else {
      p = cutmix_box(c["lam"].get<double>(), c["rx"].get<int64_t>(), c["ry"].get<int64_t>(), H, W);
    }
    auto [x, y] = mix_batch(images, labels, classes, p);
    const std::string tag = str_cat("case ", i, " (", c["kind"].get<std::string>(), ")");
    EXPECT_TRUE(torch::allclose(x, data[str_cat("x", i)], 1e-6, 1e-6)) << tag << ": images differ";
    EXPECT_TRUE(torch::allclose(y, data[str_cat("y", i)], 1e-6, 1e-6)) << tag << ": targets differ\n" << y;
    ++i;
  }
  EXPECT_EQ(i, 6);
}

TEST_F(EngineParity, GradScalerMatchesTorchAmp) {
  const auto ref = results()["scaler"];
  const auto overflow = ref["overflow"].get<std::vector<int>>();
  const auto scales = ref["scales"].get<std::vector<double>>();
  const auto param0 = ref["param0"].get<std::vector<double>>();
  GradScalerOptions so;
  so.growth_interval = 3;
  GradScaler scaler(torch::kCPU, /*enabled=*/true, so);
  auto p = torch::ones({4}).requires_grad_(true);
  ParamGroup g;
  g.names = {"p"};
  g.params = {p};
  OptimConfig oc;
  oc.name = "sgd";
  oc.momentum = 0;
  oc.nesterov = false;
  Optimizer opt({g}, oc);
  for (size_t i = 0; i < overflow.size(); ++i) {
    const double scale = scaler.scale_tensor().item<double>();
    auto grad = torch::full({4}, 0.5 * scale);
    if (overflow[i]) grad[1] = std::numeric_limits<float>::infinity();
    p.mutable_grad() = grad;
    scaler.unscale_(opt.grads());
    opt.step(0.1, scaler.found_inf());
    scaler.update();
    EXPECT_EQ(scaler.scale_tensor().item<double>(), scales[i]) << "step " << i;
    EXPECT_NEAR(p[0].item<double>(), param0[i], 1e-6) << "step " << i;
  }
}

// The first step skipped for an inf gradient, then finite ones: SGD with Nesterov momentum and weight decay equals
// torch.optim.SGD under torch.amp.GradScaler (whose momentum buffer is made at the first step taken). The
// momentum buffer must not start from uninitialised memory: junk is left where it will be allocated.
TEST_F(EngineParity, SgdMomentumAfterASkippedFirstStepMatchesTorch) {
  const auto ref = results()["scaler_momentum"];
  const auto overflow = ref["overflow"].get<std::vector<int>>();
  const auto params = ref["params"].get<std::vector<std::vector<double>>>();
  GradScalerOptions so;
  so.growth_interval = 2;
  GradScaler scaler(torch::kCPU, /*enabled=*/true, so);
  auto p = torch::tensor({1.0f, -2.0f, 0.5f, 3.0f}).requires_grad_(true);
  ParamGroup g;
  g.names = {"p"};
  g.params = {p};
  g.weight_decay = 1e-2;
  OptimConfig oc;
  oc.name = "sgd";
  oc.momentum = 0.9;
  oc.nesterov = true;
  Optimizer opt({g}, oc);
  for (int i = 0; i < 64; ++i) torch::full({4}, 1e30f);  // freed memory full of junk, next to be allocated
  for (size_t i = 0; i < overflow.size(); ++i) {
    const double scale = scaler.scale_tensor().item<double>();
    auto grad = torch::tensor({0.5f, -0.25f, 1.0f, 0.125f}) * static_cast<float>((1 + 0.5 * i) * scale);
    if (overflow[i]) grad[2] = std::numeric_limits<float>::infinity();
    p.mutable_grad() = grad;
    scaler.unscale_(opt.grads());
    opt.step(0.1, scaler.found_inf());
    scaler.update();
    for (int j = 0; j < 4; ++j) EXPECT_NEAR(p[j].item<double>(), params[i][j], 1e-6) << "step " << i << " [" << j << "]";
  }
}

// One trainer without accumulation and one with accum_steps k, holding the same weights (ViT: no batch statistics,
// so micro-batches must equal their concatenation up to fp32 sums).
struct AccumulationPair {
  std::unique_ptr<Trainer> big, acc;
  explicit AccumulationPair(int64_t k) {
    Config c = cpu_config("vit_tiny_patch16_224", 1, 32);
    c.optim.name = "sgd";
    c.optim.lr = 0.1;
    big = std::make_unique<Trainer>(c, RunContext{torch::kCPU}, false);
    c.train.accum_steps = k;
    acc = std::make_unique<Trainer>(c, RunContext{torch::kCPU}, false);
    load_state_dict(*acc->model(), state_dict(*big->model()), LoadMode::strict, "copy");
  }
  void expect_same_weights() const {
    auto ref = big->model()->named_parameters();
    for (auto& kv : acc->model()->named_parameters())
      EXPECT_LT(rel_err(kv.value(), ref[kv.key()]), 1e-5) << kv.key();
  }
};

TEST(Engine, AccumulationEqualsLargeBatch) {
  AccumulationPair t(4);
  torch::manual_seed(5);
  auto x = torch::randn({32, 1, 32, 32});
  auto y = torch::randint(10, {32});
  EXPECT_TRUE(t.big->train_step(Batch{x, y, {}}));
  for (int i = 0; i < 4; ++i) {
    const bool stepped = t.acc->train_step(Batch{x.narrow(0, 8 * i, 8), y.narrow(0, 8 * i, 8), {}});
    EXPECT_EQ(stepped, i == 3);
  }
  EXPECT_EQ(t.acc->steps(), 1);
  t.expect_same_weights();
}

// The last accumulation of an epoch may hold fewer micro-batches than accum_steps: it still steps, each loss divided
// by its own count, so 2 micro-batches of 8 in a group of 2 (accum_steps 3) equal one batch of 16.
TEST(Engine, ShortLastAccumulationStepsLikeItsBatch) {
  AccumulationPair t(3);
  Trainer& acc = *t.acc;
  torch::manual_seed(6);
  auto x = torch::randn({16, 1, 32, 32});
  auto y = torch::randint(10, {16});
  EXPECT_TRUE(t.big->train_step(Batch{x, y, {}}));
  EXPECT_FALSE(acc.train_step(Batch{x.narrow(0, 0, 8), y.narrow(0, 0, 8), {}}, /*group_size=*/2));
  EXPECT_TRUE(acc.train_step(Batch{x.narrow(0, 8, 8), y.narrow(0, 8, 8), {}}, /*group_size=*/1));
  EXPECT_EQ(acc.steps(), 1);
  t.expect_same_weights();
  // and the next accumulation is a whole one again: two calls do not step
  EXPECT_FALSE(acc.train_step(Batch{x.narrow(0, 0, 8), y.narrow(0, 0, 8), {}}));
  EXPECT_FALSE(acc.train_step(Batch{x.narrow(0, 8, 8), y.narrow(0, 8, 8), {}}));
  EXPECT_TRUE(acc.train_step(Batch{x.narrow(0, 0, 8), y.narrow(0, 0, 8), {}}));
}

// Drop-path masks come from (run.seed, rank, micro-batch): two ranks with the same weights and batch take other
// steps, the same rank takes the same step again whatever the global generator held before.
TEST(Engine, ModelNoiseDiffersPerRankAndRepeats) {
  Config c = cpu_config("vit_tiny_patch16_224", 1, 32);
  c.optim.name = "sgd";
  c.optim.lr = 0.5;
  c.model.drop_path_rate = 0.5;
  torch::manual_seed(8);
  auto x = torch::randn({8, 1, 32, 32});
  auto y = torch::randint(10, {8});
  auto step_on_rank = [&](int rank, const Trainer& like, uint64_t global_seed) {
    RunContext ctx{torch::kCPU};
    ctx.rank = rank;
    ctx.world_size = 2;
    auto t = std::make_unique<Trainer>(c, ctx, false);
    load_state_dict(*t->model(), state_dict(*like.model()), LoadMode::strict, "copy");
    torch::manual_seed(global_seed);
    t->train_step(Batch{x, y, {}});
    return state_dict(*t->model());
  };
  Trainer base(c, RunContext{torch::kCPU}, false);
  const auto r0 = step_on_rank(0, base, 1), r0_again = step_on_rank(0, base, 2), r1 = step_on_rank(1, base, 1);
  bool ranks_differ = false;
  for (size_t i = 0; i < r0.size(); ++i) {
    EXPECT_TRUE(torch::equal(r0[i].second, r0_again[i].second)) << r0[i].first;
    ranks_differ = ranks_differ || !torch::equal(r0[i].second, r1[i].second);
  }
  EXPECT_TRUE(ranks_differ) << "ranks 0 and 1 drew the same drop-path masks";
}

class NonFinite : public ::testing::TestWithParam<std::string> {};
INSTANTIATE_TEST_SUITE_P(Optimizers, NonFinite, ::testing::Values("sgd", "adamw", "lamb"));

TEST_P(NonFinite, GradientSkipsStep) {
  Config c = cpu_config("resnet18", 1, 32);
  c.optim.name = GetParam();
  Trainer t(c, RunContext{torch::kCPU}, false);
  t.train_step(Batch{torch::randn({4, 1, 32, 32}), torch::randint(10, {4}), {}});  // optimizer state exists
  auto state_before = t.optimizer().state();
  std::vector<torch::Tensor> state_copies;
  for (auto& kv : state_before) state_copies.push_back(kv.second.clone());
  auto before = state_dict(*t.model());
  std::vector<torch::Tensor> copies;
  for (auto& kv : before) copies.push_back(kv.second.clone());
  auto x = torch::randn({4, 1, 32, 32});
  x[0][0][0][0] = std::numeric_limits<float>::quiet_NaN();
  t.train_step(Batch{x, torch::randint(10, {4}), {}});
  EXPECT_EQ(t.scaler().found_inf().item<double>(), 1.0);
  for (auto& kv : t.model()->named_parameters()) {
    auto it = std::find_if(before.begin(), before.end(), [&](auto& b) { return b.first == kv.key(); });
    ASSERT_NE(it, before.end());
    EXPECT_TRUE(torch::equal(kv.value(), copies[it - before.begin()])) << kv.key() << " moved on a NaN step";
  }
  auto state_after = t.optimizer().state();
  ASSERT_EQ(state_after.size(), state_before.size());
  for (size_t i = 0; i < state_after.size(); ++i)
    EXPECT_TRUE(torch::equal(state_after[i].second, state_copies[i])) << state_after[i].first << " changed on a NaN step";
}

// A first step skipped for a non-finite gradient leaves no trace: then a good step gives what the good step alone
// gives from the same start (for SGD the momentum must start at zero, not uninitialised; AdamW and LAMB must not
// count the skipped step).
TEST_P(NonFinite, SkippedFirstStepLeavesNoTrace) {
  Config c = cpu_config("vit_tiny_patch16_224", 1, 32);
  c.optim.name = GetParam();
  c.optim.lr = 0.01;
  Trainer skipped(c, RunContext{torch::kCPU}, false), clean(c, RunContext{torch::kCPU}, false);
  load_state_dict(*clean.model(), state_dict(*skipped.model()), LoadMode::strict, "copy");
  for (int i = 0; i < 64; ++i) torch::full({192}, 1e30f);  // junk in freed memory, as a long run leaves
  torch::manual_seed(4);
  auto x = torch::randn({4, 1, 32, 32}), y = torch::randint(10, {4});
  auto bad = x.clone();
  bad[0][0][0][0] = std::numeric_limits<float>::infinity();
  skipped.train_step(Batch{bad, y, {}});
  EXPECT_EQ(skipped.scaler().found_inf().item<double>(), 1.0);
  for (int k = 0; k < 2; ++k) {  // two good steps: the second reads the state the first wrote
    skipped.train_step(Batch{x, y, {}});
    clean.train_step(Batch{x, y, {}});
  }
  auto ref = clean.model()->named_parameters();
  for (auto& kv : skipped.model()->named_parameters())
    EXPECT_LT(rel_err(kv.value(), ref[kv.key()]), 1e-6) << kv.key();
}

TEST(Engine, DivergedRunStopsAndKeepsItsLastCheckpoint) {
  test::TempDir dir;
  Config c = config_from_overrides({"run.device=cpu", "run.out_dir=" + dir.path(), "model.name=vit_tiny_patch16_224",
                                    "model.in_chans=1", "data.source=synthetic", "data.synthetic_samples=256",
                                    "data.image_size=32", "data.batch_size=16", "optim.lr=1e6",
                                    "optim.warmup_epochs=0", "run.log_interval=1", "train.max_nonfinite_steps=3",
                                    "checkpoint.every_steps=1", "train.precision=fp32"});
  Trainer t(c, RunContext{torch::kCPU});
  try {
    t.fit();
    FAIL() << "a diverged run went on";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("non-finite gradients"), std::string::npos) << m;
    EXPECT_NE(m.find("The last checkpoint is intact"), std::string::npos) << m;
  }
  EXPECT_GT(t.steps(), 3);
  EXPECT_LT(t.steps(), 16) << "the stop came late";
}

TEST(Engine, ParamGroupsKeepNormsBiasesAndListedOutOfDecay) {
  Config c = cpu_config("vit_tiny_patch16_224", 3, 32);
  Trainer t(c, RunContext{torch::kCPU}, false);
  const auto& groups = t.optimizer().groups();
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_GT(groups[0].weight_decay, 0);
  EXPECT_EQ(groups[1].weight_decay, 0);
  auto in = [](const ParamGroup& g, const std::string& n) {
    return std::find(g.names.begin(), g.names.end(), n) != g.names.end();
  };
  EXPECT_TRUE(in(groups[0], "blocks.0.attn.qkv.weight"));
  EXPECT_TRUE(in(groups[1], "blocks.0.attn.qkv.bias"));
  EXPECT_TRUE(in(groups[1], "blocks.0.norm1.weight"));
  EXPECT_TRUE(in(groups[1], "pos_embed"));
  EXPECT_TRUE(in(groups[1], "cls_token"));
}

TEST(Mix, DrawsFollowTheConfigAndRepeat) {
  TrainConfig t;
  t.mixup_alpha = 0.8;
  t.cutmix_alpha = 1.0;
  t.mix_prob = 0.75;
  t.mix_switch_prob = 0.25;
  BatchMixer m(t, 7);
  int none = 0, mixup = 0, cutmix = 0;
  double lam_sum = 0, lam_sq = 0;
  const int n = 8000;
  for (int i = 0; i < n; ++i) {
    const MixParams p = m.draw(i, 32, 48);
    const MixParams again = m.draw(i, 32, 48);
    ASSERT_EQ(p.kind, again.kind);
    ASSERT_EQ(p.lam, again.lam);
    ASSERT_EQ(p.x1, again.x1);
    if (p.kind == MixParams::none) ++none;
    if (p.kind == MixParams::cutmix) {
      ++cutmix;
      ASSERT_TRUE(0 <= p.x1 && p.x1 <= p.x2 && p.x2 <= 48 && 0 <= p.y1 && p.y1 <= p.y2 && p.y2 <= 32);
      ASSERT_NEAR(p.lam, 1.0 - double((p.x2 - p.x1) * (p.y2 - p.y1)) / (32 * 48), 1e-12);
    }
    if (p.kind == MixParams::mixup) {
      ++mixup;
      lam_sum += p.lam;
      lam_sq += p.lam * p.lam;
    }
  }
  EXPECT_NEAR(none / double(n), 0.25, 0.02);
  EXPECT_NEAR(cutmix / double(n), 0.75 * 0.25, 0.02);
  // Beta(0.8, 0.8): mean 1/2, variance 1 / (4 (2a + 1)) = 0.0962
  const double mean = lam_sum / mixup, var = lam_sq / mixup - mean * mean;
  EXPECT_NEAR(mean, 0.5, 0.02);
  EXPECT_NEAR(var, 1.0 / (4 * (2 * 0.8 + 1)), 0.01);
  EXPECT_NE(BatchMixer(t, 8).draw(3, 32, 48).lam, m.draw(3, 32, 48).lam) << "the seed does not reach the draws";
  TrainConfig off;
  EXPECT_EQ(BatchMixer(off, 7).draw(0, 32, 32).kind, MixParams::none);
}

TEST(Mix, MixedBatchTrainsWithSoftTargets) {
  Config c = cpu_config("resnet18", 1, 32);
  c.train.mixup_alpha = 0.4;
  c.train.cutmix_alpha = 1.0;
  c.train.label_smoothing = 0.1;
  Trainer t(c, RunContext{torch::kCPU}, false);
  torch::manual_seed(3);
  // the same batch again and again (mixed anew at each step): the soft-target loss falls
  const Batch b{torch::randn({8, 1, 32, 32}), torch::randint(10, {8}), {}};
  ASSERT_TRUE(t.train_step(b));
  const double first = t.take_train_loss();
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(t.train_step(b));
  t.take_train_loss();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(t.train_step(b));
  const double last = t.take_train_loss();
  EXPECT_TRUE(std::isfinite(first) && std::isfinite(last)) << first << " " << last;
  EXPECT_GT(first, 1.5) << "10 classes start near ln 10";
  EXPECT_LT(last, 0.8 * first) << "first " << first << ", last " << last;
}

TEST(Schedule, LinearScalingRule) {
  OptimConfig o;
  o.lr = 0.1;
  EXPECT_DOUBLE_EQ(scaled_lr(o, 1024), 0.1);  // off
  o.lr_base_batch = 256;
  EXPECT_DOUBLE_EQ(scaled_lr(o, 1024), 0.4);
  EXPECT_DOUBLE_EQ(scaled_lr(o, 128), 0.05);
}

// A 40x30 grey JPEG's bytes.
std::string grey_jpeg() {
  RgbImage img;
  img.width = 40;
  img.height = 30;
  img.pixels.assign(40 * 30 * 3, 90);
  std::vector<uint8_t> jpg;
  encode_jpeg(img, 90, jpg, "test");
  return std::string(jpg.begin(), jpg.end());
}

TEST(DecodeChoice, GpuNeedsCudaAndAutoSaysWhy) {
  test::TempDir dir;
  const std::string jpg = grey_jpeg();
  std::vector<ImageSample> samples;
  for (int i = 0; i < 6; ++i) {
    ImageSample s;
    s.path = dir.file(std::to_string(i) + ".jpg");
    test::write_file(s.path, jpg);
    samples.push_back(s);
  }
  ImageLoaderOptions o;
  o.batch_size = 2;
  o.image_size = 16;
  o.workers = 1;
  EXPECT_THROW(make_image_loader(samples, o, "gpu", torch::kCPU), ConfigError);
  std::string why;
  auto l = make_image_loader(samples, o, "auto", torch::kCPU, &why);
  EXPECT_NE(dynamic_cast<ImageLoader*>(l.get()), nullptr);
  EXPECT_NE(why.find("cpu (no GPU)"), std::string::npos) << why;
  EXPECT_THROW(config_from_overrides({"data.decode=nvjpeg"}), ConfigError);
}

// data.decode defaults to auto; a checkpoint records the kind the training loader decodes with (on the CPU auto is
// the CPU path), which a run resumed with auto takes (the GPU side: engine_gpu_test's AutoDecodeResumes...).
TEST(DecodeChoice, AutoIsTheDefaultAndTheCheckpointRecordsTheKind) {
  EXPECT_EQ(Config{}.data.decode, "auto");
  test::TempDir dir;
  const std::string jpg = grey_jpeg();
  for (const char* cls : {"a", "b"}) {
    fs::make_dirs(dir.file(std::string("train/") + cls));
    for (int i = 0; i < 4; ++i) test::write_file(dir.file(str_cat("train/", cls, "/", i, ".jpg")), jpg);
  }
  Config c = config_from_overrides({"run.device=cpu", "model.name=resnet18", "model.num_classes=2", "model.in_chans=3",
                                    "data.source=image_folder", "data.root=" + dir.path(), "data.image_size=16",
                                    "data.batch_size=4", "data.workers=1", "data.eval_split=", "data.train_crop=rrc",
                                    "train.epochs=1", "train.precision=fp32", "train.eval_interval=0", "run.name=r",
                                    "run.out_dir=" + dir.file("runs")});
  {
    Trainer t(c, RunContext{torch::kCPU});
    t.fit();
  }
  const CheckpointState s = read_checkpoint(CheckpointDir(dir.file("runs/r/checkpoints")).latest_valid());
  ASSERT_EQ(s.extra.count("data.decode"), 1u);
  EXPECT_EQ(s.extra.at("data.decode"), "cpu");
}

// A bad file in the eval split is left out, not replaced by another sample: each readable image counts once and
// the unreadable one is reported.
TEST(Evaluation, BadFilesAreLeftOutAndCounted) {
  test::TempDir dir;
  const std::string jpg = grey_jpeg();
  for (const char* split : {"train", "val"})
    for (const char* cls : {"a", "b"}) {
      fs::make_dirs(dir.file(std::string(split) + "/" + cls));
      for (int i = 0; i < 5; ++i)
        test::write_file(dir.file(str_cat(split, "/", cls, "/", i, ".jpg")), jpg);
    }
  test::write_file(dir.file("val/b/3.jpg"), jpg.substr(0, 200));  // truncated
  Config c = config_from_overrides({"run.device=cpu", "model.name=resnet18", "model.num_classes=2", "model.in_chans=3",
                                    "data.source=image_folder", "data.root=" + dir.path(), "data.image_size=32",
                                    "data.batch_size=4", "data.workers=1", "data.eval_split=val",
                                    "data.train_split=train", "data.train_crop=rrc"});
  Trainer t(c, RunContext{torch::kCPU});
  const EvalResult e = t.evaluate();
  EXPECT_EQ(e.samples, 9);
  EXPECT_EQ(e.bad_samples, 1);
  const EvalResult again = t.evaluate();  // the same on every pass, not only the first
  EXPECT_EQ(again.samples, 9);
  EXPECT_EQ(again.bad_samples, 1);
}

// train.eval_hflip: beside the plain top-1, the top-1 of the mean of each image's and its mirror's softmax, counted
// here from the model and the eval loader's batches; off, the figure is absent (-1).
TEST(Evaluation, MirrorScoresTheMeanSoftmaxOfImageAndMirror) {
  test::TempDir dir;
  Config c = config_from_overrides({"run.device=cpu", "model.name=resnet18", "model.num_classes=10",
                                    "data.source=synthetic", "data.synthetic_samples=320", "data.image_size=16",
                                    "data.batch_size=32", "train.precision=fp32", "train.eval_hflip=true",
                                    "train.epochs=1", "checkpoint.every_epoch=false", "run.out_dir=" + dir.path()});
  Trainer t(c, RunContext{torch::kCPU});
  t.fit();  // an untrained model gives every image the same class, mirrored or not
  const EvalResult e = t.evaluate();
  ASSERT_EQ(e.samples, 32);
  ASSERT_NE(t.eval_loader(), nullptr);
  torch::NoGradGuard ng;
  t.model()->eval();
  int32_t plain = 0, mirrored = 0, flips_differ = 0;
  Loader& l = *t.eval_loader();
  l.set_epoch(0);
  Batch b;
  while (l.next(b)) {
    const torch::Tensor p = t.model()->forward(b.images).softmax(1);
    const torch::Tensor q = t.model()->forward(b.images.flip({3})).softmax(1);
    plain += p.argmax(1).eq(b.labels).sum().item<int32_t>();
    mirrored += (p + q).argmax(1).eq(b.labels).sum().item<int32_t>();
    flips_differ += p.argmax(1).ne((p + q).argmax(1)).sum().item<int32_t>();
  }
  EXPECT_DOUBLE_EQ(e.top1, 100.0 * plain / 32);
  EXPECT_DOUBLE_EQ(e.top1_hflip, 100.0 * mirrored / 32);
  EXPECT_GT(flips_differ, 0) << "the mirror changed no prediction: the test would not see it ignored";

  Trainer off(config_from_overrides({"run.device=cpu", "model.name=resnet18", "model.num_classes=10",
                                     "data.source=synthetic", "data.synthetic_samples=160", "data.image_size=16",
                                     "data.batch_size=8", "train.precision=fp32"}),
              RunContext{torch::kCPU});
  EXPECT_EQ(off.evaluate().top1_hflip, -1);
}

// bench-data's warm-up and timed batches run on across epochs (a set of a few batches is timed for many epochs,
// as the steady-state comparison with the DataLoader needs); a set without one full batch is refused by name.
TEST(BenchData, WarmUpAndTimedBatchesRunOnAcrossEpochs) {
  test::TempDir dir;
  RgbImage img;
  img.width = 48;
  img.height = 40;
  img.pixels.resize(48 * 40 * 3);
  for (size_t i = 0; i < img.pixels.size(); ++i) img.pixels[i] = static_cast<uint8_t>(i * 7 % 251);
  std::vector<uint8_t> jpg;
  encode_jpeg(img, 90, jpg, "test");
  for (const char* cls : {"a", "b"}) {
    std::filesystem::create_directories(dir.file(std::string("set/train/") + cls));
    for (int i = 0; i < 5; ++i)
      test::write_file(dir.file(std::string("set/train/") + cls + "/" + std::to_string(i) + ".jpg"),
                       std::string(jpg.begin(), jpg.end()));
  }
  Config c = config_from_overrides({"run.device=cpu", "model.name=resnet18", "model.in_chans=3",
                                    "data.source=image_folder", "data.root=" + dir.file("set"),
                                    "data.train_split=train", "data.eval_split=", "data.image_size=32",
                                    "data.train_crop=rrc", "data.batch_size=4", "data.workers=2",
                                    "bench.warmup_steps=5", "bench.steps=7"});
  const DataBenchResult r = run_bench_data(c, RunContext{});  // 2 batches per epoch: 6 epochs in all
  EXPECT_GT(r.img_per_s, 0);
  EXPECT_GT(r.decode_us, 0);
  EXPECT_GT(r.resize_us, 0);
  const auto j = nlohmann::json::parse(r.json);
  EXPECT_EQ(j["batches"], 7);
  EXPECT_EQ(j["bad_samples"], 0);
  EXPECT_EQ(j["workload"]["files"], 10);
  c.data.batch_size = 11;
  try {
    run_bench_data(c, RunContext{});
    FAIL() << "a set without a full batch was benchmarked";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("10 images"), std::string::npos) << e.what();
  }
}

TEST(BatchDtype, BfloatOnlyForBf16OnAGpuAndRefusedElsewhere) {
  const torch::Device cpu(torch::kCPU), gpu(torch::kCUDA, 0);  // a device name only: nothing runs on it
  Config c;                                                     // train.precision bf16, data.dtype auto
  EXPECT_EQ(batch_dtype(c, cpu), torch::kFloat32) << "the CPU trains in float32";
  EXPECT_EQ(batch_dtype(c, gpu), torch::kBFloat16);
  c.train.precision = "fp16";
  EXPECT_EQ(batch_dtype(c, gpu), torch::kFloat32);
  c.train.precision = "bf16";
  c.data.dtype = "float32";
  EXPECT_EQ(batch_dtype(c, gpu), torch::kFloat32);
  c.data.dtype = "bfloat16";
  EXPECT_EQ(batch_dtype(c, gpu), torch::kBFloat16);
  try {
    validate_config_for_run(c, /*cuda=*/false, 1);
    FAIL() << "bfloat16 batches accepted on the CPU";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'data.dtype'"), std::string::npos) << e.what();
  }
  try {
    config_from_overrides({"data.dtype=bfloat16", "train.precision=fp32"});
    FAIL() << "bfloat16 batches accepted with fp32 training";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'data.dtype': bfloat16 batches need train.precision bf16"),
              std::string::npos) << e.what();
  }
  EXPECT_THROW(config_from_overrides({"data.dtype=fp16"}), ConfigError);
  // the loaders' options carry it
  c.data.dtype = "auto";
  EXPECT_EQ(image_loader_options(c, DataDefaults{}, RunContext{gpu}).dtype, torch::kBFloat16);
  EXPECT_EQ(image_loader_options(c, DataDefaults{}, RunContext{cpu}).dtype, torch::kFloat32);
}

// data.interpolation auto takes the model's data config (timm's: bicubic for ViT), a set value overrides it; it is
// the evaluation's filter only.
TEST(DataSetup, EvalInterpolationFollowsTheModelUnlessSet) {
  Config c;
  const DataDefaults vit = create_model(config_from_overrides({"model.name=vit_tiny_patch16_224"}).model, 224)
                               ->data_defaults();
  const DataDefaults resnet = create_model(c.model, 28)->data_defaults();
  EXPECT_EQ(vit.interpolation, "bicubic");
  EXPECT_EQ(image_loader_options(c, vit, RunContext{}).eval_filter, Interpolation::bicubic);
  EXPECT_EQ(image_loader_options(c, resnet, RunContext{}).eval_filter, Interpolation::bilinear);
  c.data.interpolation = "bilinear";
  EXPECT_EQ(image_loader_options(c, vit, RunContext{}).eval_filter, Interpolation::bilinear);
  c.data.interpolation = "bicubic";
  EXPECT_EQ(image_loader_options(c, resnet, RunContext{}).eval_filter, Interpolation::bicubic);
  EXPECT_THROW(config_from_overrides({"data.interpolation=nearest"}), ConfigError);
}

// Progressive resizing in a run: the training batches change size at the epoch the ramp says (new loaders, logged),
// evaluation stays at data.image_size.
TEST(DataSetup, ProgressiveResizingChangesTheTrainingSizeAtItsEpoch) {
  test::TempDir dir;
  Config c = config_from_overrides({"run.device=cpu", "run.out_dir=" + dir.path(), "model.name=resnet18",
                                    "model.small_stem=false", "data.source=synthetic", "data.synthetic_samples=32",
                                    "data.image_size=64", "data.batch_size=16", "data.train_size_min=32",
                                    "data.train_size_ramp=[1, 2]", "train.epochs=3", "train.eval_interval=0",
                                    "checkpoint.every_epoch=false"});
  Trainer t(c, RunContext{torch::kCPU});
  Batch b;
  t.train_loader().set_epoch(0);
  ASSERT_TRUE(t.train_loader().next(b));
  EXPECT_EQ(b.images.size(2), 32);
  t.fit();
  t.train_loader().set_epoch(2);
  ASSERT_TRUE(t.train_loader().next(b));
  EXPECT_EQ(b.images.size(2), 64) << "the ramp ends at epoch 2 (from 0) at data.image_size";
  const std::string log = fs::read_text(dir.file("default/train.log"));
  EXPECT_NE(log.find("epoch 3: training at 64 px (progressive resizing, from 32; evaluation at 64)"), std::string::npos)
      << log;
  EXPECT_EQ(log.find("training at 32 px"), std::string::npos) << "epochs 1 and 2 keep the first loaders";
}

TEST(CudaGraphConfig, RefusedWithoutCudaOrWithAccumulation) {
  EXPECT_THROW(config_from_overrides({"train.cuda_graph=true", "train.accum_steps=2"}), ConfigError);
  Config c = cpu_config("resnet18", 1, 32);
  c.train.cuda_graph = true;
  try {
    Trainer t(c, RunContext{torch::kCPU}, false);
    FAIL() << "train.cuda_graph accepted on the CPU";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("needs a CUDA device"), std::string::npos) << e.what();
  }
}

TEST(Schedule, WarmupThenCosineStepMultistepPoly) {
  OptimConfig o;
  o.warmup_epochs = 1;
  o.warmup_factor = 0.1;
  o.schedule = "cosine";
  o.min_lr = 0.0;
  LrSchedule cos(o, /*steps_per_epoch=*/10, /*total_steps=*/110, /*base_lr=*/1.0);
  EXPECT_DOUBLE_EQ(cos.lr_at(0), 0.1);
  EXPECT_DOUBLE_EQ(cos.lr_at(5), 0.55);
  EXPECT_DOUBLE_EQ(cos.lr_at(10), 1.0);
  EXPECT_NEAR(cos.lr_at(60), 0.5, 1e-12);
  EXPECT_NEAR(cos.lr_at(110), 0.0, 1e-12);
  o.warmup_epochs = 0;
  o.schedule = "step";
  o.step_epochs = 2;
  o.gamma = 0.5;
  LrSchedule st(o, 10, 100, 1.0);
  EXPECT_DOUBLE_EQ(st.lr_at(19), 1.0);
  EXPECT_DOUBLE_EQ(st.lr_at(20), 0.5);
  EXPECT_DOUBLE_EQ(st.lr_at(45), 0.25);
  o.schedule = "multistep";
  o.milestones = {1, 3};
  LrSchedule ms(o, 10, 100, 1.0);
  EXPECT_DOUBLE_EQ(ms.lr_at(9), 1.0);
  EXPECT_DOUBLE_EQ(ms.lr_at(10), 0.5);
  EXPECT_DOUBLE_EQ(ms.lr_at(35), 0.25);
  o.schedule = "poly";
  o.poly_power = 2.0;
  LrSchedule po(o, 10, 100, 1.0);
  EXPECT_NEAR(po.lr_at(50), 0.25, 1e-12);
}

TEST(FashionMnist, ShortCpuRunLearns) {
  // Real data, bounded time: 4,000 training images, 2 epochs, ResNet-18 with the ImageNet stem (28 px -> 7 px
  // after the stem: the small stem costs 10x more on 2 CPU cores, too slow beside the other tests in CI).
  const std::string root = "/usr/share/datasets/fashion-mnist";
  ASSERT_TRUE(fs::exists(root)) << root << " missing: scripts/setup.sh installs dataset-fashion-mnist";
  test::TempDir dir;
  Config c = config_from_overrides({"run.device=cpu", "run.out_dir=" + dir.path(), "data.train_limit=4000",
                                    "data.eval_limit=1000", "data.batch_size=64", "train.epochs=2", "model.small_stem=false",
                                    "optim.name=adamw", "optim.lr=0.002", "optim.weight_decay=0.05",
                                    "optim.warmup_epochs=0.2", "run.log_interval=1000",
                                    "data.mean=[0.286]", "data.std=[0.353]"});
  Trainer t(c, RunContext{torch::kCPU});
  const FitResult r = t.fit();
  EXPECT_EQ(r.eval.samples, 1000);
  EXPECT_GE(r.eval.top1, 70.0) << "top-1 after 2 short epochs (measured here: 75.9%; chance is 10%)";
  EXPECT_TRUE(fs::exists(dir.file("default/model.safetensors")));
  EXPECT_TRUE(fs::exists(dir.file("default/config.yaml")));
  const std::string metrics = fs::read_text(dir.file("default/metrics.jsonl"));
  EXPECT_NE(metrics.find("\"kind\":\"eval\""), std::string::npos);
  EXPECT_NE(metrics.find("\"data_wait_pct\""), std::string::npos);
}

}  // namespace
}  // namespace trainer

namespace trainer {
namespace {

std::string tiny_run_args(const std::string& out) {
  return " --set run.device=cpu --set run.out_dir=" + test::shell_quote(out) +
         " --set model.name=vit_tiny_patch16_224 --set model.in_chans=1 --set data.source=synthetic"
         " --set data.synthetic_samples=128 --set data.image_size=32 --set data.batch_size=16 --set train.epochs=1"
         " --set run.log_interval=2 --set checkpoint.every_epoch=false";
}

// One short run, output to a file (not a terminal): every log interval carries the step split and lands in
// metrics.jsonl and the TensorBoard file; --profile writes a Chrome trace with the named ranges; the output
// holds no progress-bar control characters.
TEST(Observability, StepSplitMetricsTensorboardTraceAndCleanOutput) {
  test::TempDir dir;
  const auto r = test::run_command(test::shell_quote(test::trainer_binary()) + tiny_run_args(dir.path()) +
                                   " --profile 2:4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("| step "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ms: data wait "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(", compute "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find('\r'), std::string::npos) << "progress bar drawn into a file";
  EXPECT_EQ(r.output.find('\033'), std::string::npos) << "escape sequence in non-terminal output";

  const std::string run = dir.file("default");
  bool train_line = false;
  for (const auto& l : split(fs::read_text(run + "/metrics.jsonl"), '\n')) {
    if (l.empty()) continue;
    const auto j = nlohmann::json::parse(l);
    if (j["kind"] != "train") continue;
    train_line = true;
    for (const char* k : {"step", "loss", "lr", "img_per_s", "step_ms", "data_wait_ms", "compute_ms", "mem_peak_gib"})
      EXPECT_TRUE(j.contains(k)) << k << " missing in " << l;
    EXPECT_GT(j["compute_ms"].get<double>(), 0.0) << l;
    EXPECT_GE(j["step_ms"].get<double>(), j["compute_ms"].get<double>() * 0.5) << l;
  }
  EXPECT_TRUE(train_line);
  bool events = false;
  for (const auto& f : fs::list_dir(run)) events = events || f.find("events.out.tfevents.") == 0;
  EXPECT_TRUE(events) << "no TensorBoard event file in " << run;

  const std::string trace = fs::read_text(run + "/trace.json");
  const auto j = nlohmann::json::parse(trace);  // valid JSON
  ASSERT_TRUE(j.contains("traceEvents"));
  for (const char* name : {"\"data\"", "\"forward\"", "\"backward\"", "\"optimizer\""})
    EXPECT_NE(trace.find(name), std::string::npos) << name << " range missing from the trace";
}

TEST(Observability, BadProfileRangeIsAConfigError) {
  test::TempDir dir;
  const auto r = test::run_command(test::shell_quote(test::trainer_binary()) + tiny_run_args(dir.path()) +
                                   " --profile 5:2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("run.profile: expected START:END"), std::string::npos) << r.output;
}

// The bench JSON carries the figures and the environment a reader needs to reproduce it.
TEST(Observability, BenchJsonSchema) {
  test::TempDir dir;
  const auto r = test::run_command(test::shell_quote(test::trainer_binary()) + " bench" + tiny_run_args(dir.path()) +
                                   " --set bench.warmup_steps=1 --set bench.steps=2 --out " +
                                   test::shell_quote(dir.file("b.json")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(fs::read_text(dir.file("b.json")));
  EXPECT_EQ(j["tool"], "trainer");
  for (const char* k : {"model", "batch_size", "image_size", "precision", "channels_last", "optimizer", "accum_steps", "data"})
    EXPECT_TRUE(j["workload"].contains(k)) << "workload." << k;
  for (const char* k : {"warmup_steps", "steps", "img_per_s", "img_per_s_per_gpu", "world_size", "step_ms",
                        "peak_mem_gib", "train_flops_per_image", "mfu", "final_loss", "config_fnv1a64"})
    EXPECT_TRUE(j.contains(k)) << k;
  for (const char* k : {"gpu", "cuda_driver", "cuda_runtime", "cudnn", "nccl", "libtorch", "compiler", "trainer", "git_sha"})
    EXPECT_TRUE(j["env"].contains(k)) << "env." << k;
  const char* queues = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");  // the child inherits ours, or sets its 32
  EXPECT_EQ(j["env"]["cuda_work_queues"], queues && *queues ? std::string(queues) : "32");
  EXPECT_GT(j["img_per_s"].get<double>(), 0.0);
  EXPECT_EQ(j["steps"], 2);
  EXPECT_EQ(j["world_size"], 1);
  EXPECT_EQ(j["config_fnv1a64"].get<std::string>().size(), 16u);
  EXPECT_EQ(j["workload"]["data"], "synthetic, resident on the device");
  EXPECT_NE(r.output.find("img/s per GPU"), std::string::npos) << r.output;  // the printed table

  // end to end: batches from the configured loader (3 epochs of 8 batches: the bench wraps epochs)
  const auto p = test::run_command(test::shell_quote(test::trainer_binary()) + " bench" + tiny_run_args(dir.path()) +
                                   " --set bench.data=pipeline --set bench.warmup_steps=2 --set bench.steps=20 --out " +
                                   test::shell_quote(dir.file("p.json")));
  ASSERT_EQ(p.exit_code, 0) << p.output;
  const auto jp = nlohmann::json::parse(fs::read_text(dir.file("p.json")));
  EXPECT_EQ(jp["workload"]["data"].get<std::string>().rfind("pipeline: synthetic", 0), 0u) << jp.dump();
  EXPECT_GT(jp["img_per_s"].get<double>(), 0.0);
  ASSERT_TRUE(jp.contains("data_wait_fraction")) << jp.dump();
  EXPECT_GE(jp["data_wait_fraction"].get<double>(), 0.0);
  EXPECT_LT(jp["data_wait_fraction"].get<double>(), 1.0);
  EXPECT_FALSE(jp.contains("gpu_decode_timed")) << "no GPU decode here";
  EXPECT_EQ(jp["data_threads"]["workers"], -1) << jp.dump();  // as given: the default
  EXPECT_EQ(jp["data_threads"]["training_cores"], 0);
  for (const char* k : {"voluntary", "involuntary"})
    EXPECT_GE(jp["training_thread_switches_per_step"][k].get<double>(), 0.0) << k << ": " << jp.dump();
}

}  // namespace
}  // namespace trainer

namespace trainer {
namespace {

// train.ema_decay: after each optimizer step ema = d * ema + (1 - d) * weights, for parameters and float buffers;
// a run evaluates it beside the model, saves model_ema.safetensors, and checkpoints carry it.
TEST(Ema, FollowsTheWeightsAndIsEvaluatedSavedAndCheckpointed) {
  Config c = config_from_overrides({"run.device=cpu", "model.name=resnet18", "data.image_size=28",
                                    "train.ema_decay=0.75", "train.precision=fp32", "optim.warmup_epochs=0"});
  Trainer t(c, RunContext{torch::kCPU}, /*with_data=*/false);
  ASSERT_FALSE(t.ema().empty());
  std::vector<torch::Tensor> w0;
  for (const auto& e : t.ema()) w0.push_back(e.clone());
  torch::manual_seed(1);
  Batch b;
  b.images = torch::randn({8, 1, 28, 28});
  b.labels = torch::randint(10, {8});
  ASSERT_TRUE(t.train_step(b));
  std::map<std::string, torch::Tensor> now;
  for (const auto& kv : t.model()->named_parameters()) now[kv.key()] = kv.value().detach();
  for (const auto& kv : t.model()->named_buffers()) now[kv.key()] = kv.value().detach();
  bool some_moved = false;
  for (size_t i = 0; i < t.ema().size(); ++i) {
    const auto& w1 = now.at(t.ema_names()[i]);
    const auto want = 0.75 * w0[i] + 0.25 * w1;
    EXPECT_TRUE(torch::allclose(t.ema()[i], want, 1e-6, 1e-7)) << t.ema_names()[i];
    some_moved = some_moved || !torch::equal(w0[i], w1);
  }
  EXPECT_TRUE(some_moved);
  // the checkpoint carries it, and a restore puts it back
  const CheckpointState s = t.capture_state(0, 1);
  bool found = false;
  for (const auto& kv : s.tensors) found = found || kv.first == "ema." + t.ema_names()[0];
  EXPECT_TRUE(found);
  Trainer u(c, RunContext{torch::kCPU}, /*with_data=*/false);
  u.restore_state(s);
  for (size_t i = 0; i < u.ema().size(); ++i) EXPECT_TRUE(torch::equal(u.ema()[i], t.ema()[i])) << u.ema_names()[i];

  test::TempDir dir;
  const auto r = test::run_command(test::shell_quote(test::trainer_binary()) + tiny_run_args(dir.path()) +
                                   " --set train.ema_decay=0.9");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("| EMA top1 "), std::string::npos) << r.output;
  EXPECT_NE(fs::read_text(dir.file("default/metrics.jsonl")).find("\"kind\":\"eval_ema\""), std::string::npos);
  const auto ema = read_safetensors(dir.file("default/model_ema.safetensors"));
  const auto last = read_safetensors(dir.file("default/model.safetensors"));
  ASSERT_EQ(ema.tensors.size(), last.tensors.size());
  bool differs = false;
  for (size_t i = 0; i < ema.tensors.size(); ++i)
    differs = differs || !torch::equal(ema.tensors[i].second, last.tensors[i].second);
  EXPECT_TRUE(differs) << "model_ema.safetensors holds the trained weights, not their average";
}

// run.cuda_sync: a name outside the four is an error naming the key; on the CPU nothing is set
TEST(Env, CudaSyncNamesItsKeyAndLeavesTheCpuAlone) {
  try {
    set_cuda_sync("sleepy", torch::Device(torch::kCPU));
    FAIL() << "an unknown mode was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("run.cuda_sync"), std::string::npos) << e.what();
  }
  EXPECT_EQ(set_cuda_sync("blocking", torch::Device(torch::kCPU)), 0u);
  EXPECT_EQ(set_cuda_sync("auto", torch::Device(torch::kCPU)), 0u);
}

TEST(Env, RequestCudaWorkQueuesKeepsAValueTheUserSet) {
  const char* before = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  const std::string saved = before ? before : "";
  ::unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
  EXPECT_EQ(request_cuda_work_queues(32), "32");
  EXPECT_STREQ(std::getenv("CUDA_DEVICE_MAX_CONNECTIONS"), "32");
  ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", "", 1);  // set but empty: no number named
  EXPECT_EQ(request_cuda_work_queues(32), "32");
  EXPECT_STREQ(std::getenv("CUDA_DEVICE_MAX_CONNECTIONS"), "32");
  ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", "4", 1);
  EXPECT_EQ(request_cuda_work_queues(32), "4");
  EXPECT_STREQ(std::getenv("CUDA_DEVICE_MAX_CONNECTIONS"), "4");
  if (before) ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", saved.c_str(), 1);
  else ::unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
}

}  // namespace
}  // namespace trainer
