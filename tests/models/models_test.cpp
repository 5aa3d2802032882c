// Models against timm/torchvision on the CPU: same names and shapes, logits within 1e-4 relative, same
// gradients, same FLOPs and parameter counts; weights exported here load in Python unchanged.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "config/config.h"
#include "core/check.h"
#include "core/strings.h"
#include "models/batchnorm.h"
#include "models/fused_batchnorm.h"
#include "models/internal/grad_ownership.h"
#include "models/max_pool.h"
#include "models/registry.h"
#include "models/safetensors.h"
#include "models/vit.h"
#include "models/weights.h"
#include "test_support/test_support.h"

namespace trainer {
namespace {

const std::vector<std::string> kParityModels = {"resnet18", "resnet50", "vit_tiny_patch16_224",
                                                "vit_base_patch16_224", "wrn16_4"};
const std::vector<std::string> kGradModels = {"resnet18", "vit_tiny_patch16_224", "wrn16_4"};

// Fixtures made once per test run by make_parity.py (timm on the CPU).
class Parity : public test::FixtureSuite {
 protected:
  static void SetUpTestSuite() {
    std::string args;
    for (const auto& n : kParityModels) args += " " + n;
    args += " --grads";
    for (const auto& n : kGradModels) args += " " + n;
    load_fixtures("models", "tests/models/make_parity.py", args);
  }
  static std::string path(const std::string& f) { return fixture_path(f); }
  static torch::Tensor io(const std::string& name, const std::string& key) {
    for (auto& kv : read_safetensors(path(name + ".io.safetensors")).tensors)
      if (kv.first == key) return kv.second;
    ADD_FAILURE() << "no " << key << " in fixture of " << name;
    return {};
  }
  static nlohmann::json meta(const std::string& name) {
    std::ifstream f(path(name + ".json"));
    return nlohmann::json::parse(f);
  }
  static Classifier imagenet_model(const std::string& name) { return model_of(name, 1000, 224); }
  static Classifier model_of(const std::string& name, int64_t num_classes, int64_t input_size) {
    ModelConfig c;
    c.name = name;
    c.num_classes = num_classes;
    c.in_chans = 3;
    c.small_stem = false;
    return create_model(c, input_size);
  }
  // the model the fixture was made for: ImageNet's 1000 classes at 224 px, the Wide ResNets 10 at 32 px
  static Classifier fixture_model(const std::string& name) {
    const auto m = meta(name);
    return model_of(name, m["num_classes"].get<int64_t>(), m["input_size"].get<int64_t>());
  }
};

double rel_err(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item<double>();
}

TEST_F(Parity, LogitsMatchTimm) {
  for (const auto& name : kParityModels) {
    SCOPED_TRACE(name);
    Classifier m = fixture_model(name);
    load_weights(*m, path(name + ".weights.safetensors"), LoadMode::strict);
    m->eval();
    torch::NoGradGuard ng;
    const auto logits = m->forward(io(name, "input"));
    EXPECT_LT(rel_err(logits, io(name, "logits")), 1e-4);
    EXPECT_EQ(m->parameter_count(), meta(name)["params"].get<int64_t>());
  }
}

TEST_F(Parity, FlopsMatchTorchFlopCounter) {
  for (const auto& name : kParityModels) {
    SCOPED_TRACE(name);
    const double ref = meta(name)["flops"].get<double>();
    const double ours = fixture_model(name)->flops_per_image();
    // flop_counter ignores elementwise ops and pooling, as we do; allow 1% for the classifier bias etc.
    EXPECT_NEAR(ours / ref, 1.0, 0.01) << "ours " << ours << " ref " << ref;
  }
}

TEST_F(Parity, GradientsMatchTimm) {
  for (const auto& name : kGradModels) {
    SCOPED_TRACE(name);
    Classifier m = fixture_model(name);
    load_weights(*m, path(name + ".weights.safetensors"), LoadMode::strict);
    m->train();
    auto target = torch::arange(2) % m->num_classes();
    auto loss = torch::nn::functional::cross_entropy(m->forward(io(name, "input")), target);
    loss.backward();
    EXPECT_LT(rel_err(loss.reshape({1}), io(name, "loss")), 1e-5);
    int checked = 0;
    for (const auto& kv : m->named_parameters()) {
      const auto ref = io(name, "grad." + kv.key());
      ASSERT_TRUE(kv.value().grad().defined()) << kv.key();
      if (ref.abs().max().item<double>() == 0) continue;  // e.g. zero-init paths
      EXPECT_LT(rel_err(kv.value().grad(), ref), 1e-3) << kv.key();
      ++checked;
    }
    EXPECT_GT(checked, 10);
  }
}

TEST_F(Parity, ResNetNamesEqualTorchvision) {
  for (const std::string name : {"resnet18", "resnet50"}) {
    std::ifstream f(path(name + ".torchvision_keys.json"));
    const auto keys = nlohmann::json::parse(f).get<std::vector<std::string>>();
    std::vector<std::string> ours;
    for (auto& kv : state_dict(*imagenet_model(name))) ours.push_back(kv.first);
    std::sort(ours.begin(), ours.end());
    auto sorted = keys;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(ours, sorted) << name;
  }
}

TEST_F(Parity, ExportLoadsInTimmWithSameLogits) {
  test::TempDir dir;
  for (const std::string name : {"resnet18", "vit_tiny_patch16_224"}) {
    SCOPED_TRACE(name);
    torch::manual_seed(3);
    Classifier m = imagenet_model(name);
    {  // make BN statistics non-trivial so that buffers matter
      torch::NoGradGuard ng;
      for (auto& kv : m->named_buffers())
        if (ends_with(kv.key(), "running_var")) kv.value().uniform_(0.5, 1.5);
      for (auto& p : m->parameters()) p.add_(torch::randn_like(p) * 0.01);
    }
    m->eval();
    auto x = torch::randn({2, 3, 224, 224});
    torch::Tensor logits;
    {
      torch::NoGradGuard ng;
      logits = m->forward(x);
    }
    save_weights(*m, dir.file(name + ".safetensors"), {{"format", "pt"}});
    write_safetensors(dir.file(name + ".io.safetensors"), {{"input", x}, {"logits", logits}});
    const auto r = test::run_command(test::shell_quote(test::python()) + " " +
                                     test::shell_quote(test::source_dir() + "/tests/models/check_export.py") + " " +
                                     name + " " + dir.file(name + ".safetensors") + " " +
                                     dir.file(name + ".io.safetensors"));
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }
}

TEST_F(Parity, PosEmbedResampleMatchesTimm) {
  const std::string name = "vit_tiny_patch16_224";
  torch::Tensor pos;
  for (auto& kv : read_safetensors(path(name + ".weights.safetensors")).tensors)
    if (kv.first == "pos_embed") pos = kv.second;
  torch::Tensor ref = read_safetensors(path(name + ".pos160.safetensors")).tensors.at(0).second;
  EXPECT_LT(rel_err(resample_pos_embed(pos, 10), ref), 1e-5);
  // and a 224-px checkpoint loads into a 160-px model through adapt_state_dict
  ModelConfig c;
  c.name = name;
  c.num_classes = 1000;
  c.in_chans = 3;
  Classifier m = create_model(c, 160);
  load_weights(*m, path(name + ".weights.safetensors"));
  torch::NoGradGuard ng;
  EXPECT_EQ(m->forward(torch::randn({1, 3, 160, 160})).sizes(), (std::vector<int64_t>{1, 1000}));
}

// ---- errors ----

TEST(Models, UnknownNameListsKnown) {
  ModelConfig c;
  c.name = "resnet17";
  try {
    create_model(c, 32);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("resnet17"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("resnet50"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("vit_base_patch16_224"), std::string::npos);
  }
}

std::string load_error(ClassifierImpl& m, std::vector<std::pair<std::string, torch::Tensor>> sd,
                       LoadMode mode = LoadMode::strict) {
  try {
    load_state_dict(m, std::move(sd), mode, "w.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Models, LoadErrorsNameTheKeys) {
  ModelConfig c;  // resnet18, 10 classes, 1 channel, small stem
  Classifier src = create_model(c, 28);
  auto sd = state_dict(*src);

  ModelConfig c100 = c;
  c100.num_classes = 100;
  Classifier other = create_model(c100, 28);
  std::string m = load_error(*other, sd);
  EXPECT_NE(m.find("fc.weight (file [10, 512] vs model [100, 512])"), std::string::npos) << m;
  EXPECT_NE(m.find("num_classes"), std::string::npos) << m;

  auto missing = sd;
  missing.erase(missing.begin() + 3);
  m = load_error(*create_model(c, 28), missing);
  EXPECT_NE(m.find("missing keys: " + sd[3].first), std::string::npos) << m;

  auto extra = sd;
  extra.emplace_back("bogus.weight", torch::zeros({1}));
  m = load_error(*create_model(c, 28), extra);
  EXPECT_NE(m.find("unexpected keys: bogus.weight"), std::string::npos) << m;

  auto bad = sd;
  bad[0].second = torch::zeros({3, 3});
  m = load_error(*create_model(c, 28), bad);
  EXPECT_NE(m.find("shape mismatch: conv1.weight"), std::string::npos) << m;
}

TEST(Models, FinetuneReinitialisesOnlyTheClassifier) {
  ModelConfig c;
  Classifier src = create_model(c, 28);
  ModelConfig c5 = c;
  c5.num_classes = 5;
  Classifier dst = create_model(c5, 28);
  const auto rep = load_state_dict(*dst, state_dict(*src), LoadMode::finetune, "w");
  EXPECT_EQ(rep.reinitialised, (std::vector<std::string>{"fc.weight", "fc.bias"}));
  EXPECT_TRUE(torch::equal(dst->named_parameters()["conv1.weight"], src->named_parameters()["conv1.weight"]));
}

TEST(Models, ResetClassifierChangesOutputs) {
  ModelConfig c;
  c.name = "vit_tiny_patch16_224";
  c.in_chans = 3;
  Classifier m = create_model(c, 32);
  m->reset_classifier(7);
  m->eval();
  torch::NoGradGuard ng;
  EXPECT_EQ(m->forward(torch::randn({2, 3, 32, 32})).size(1), 7);
  EXPECT_EQ(m->no_weight_decay(), (std::vector<std::string>{"pos_embed", "cls_token"}));
}

TEST(Models, ChannelsLastConvertsAndKeepsOutputs) {
  ModelConfig c;
  Classifier m = create_model(c, 28);
  m->eval();
  auto x = torch::randn({2, 1, 28, 28});
  torch::NoGradGuard ng;
  auto ref = m->forward(x);
  to_channels_last(*m);
  for (auto& p : m->parameters())
    if (p.dim() == 4) EXPECT_TRUE(p.is_contiguous(torch::MemoryFormat::ChannelsLast));
  auto out = m->forward(x.contiguous(torch::MemoryFormat::ChannelsLast));
  EXPECT_LT(rel_err(out, ref), 1e-5);
}

TEST(Models, EveryRegisteredModelRuns) {
  for (const auto& name : model_names()) {
    SCOPED_TRACE(name);
    ModelConfig c;
    c.name = name;
    c.in_chans = 3;
    const bool vit = starts_with(name, "vit");
    c.small_stem = !vit;
    Classifier m = create_model(c, vit ? 64 : 32);
    m->eval();
    torch::NoGradGuard ng;
    EXPECT_EQ(m->forward(torch::randn({1, 3, vit ? 64 : 32, vit ? 64 : 32})).sizes(), (std::vector<int64_t>{1, 10}));
    EXPECT_GT(m->flops_per_image(), 0);
  }
}

// The Wide ResNet paper's Table 1 (CIFAR-10): WRN-40-4 8.9M, WRN-16-8 11.0M, WRN-28-10 36.5M parameters.
TEST(Models, WideResNetsHaveThePublishedSizes) {
  for (const auto& [name, millions] : std::vector<std::pair<std::string, double>>{
           {"wrn40_4", 8.9}, {"wrn16_8", 11.0}, {"wrn28_10", 36.5}}) {
    SCOPED_TRACE(name);
    ModelConfig c;
    c.name = name;
    c.in_chans = 3;
    c.num_classes = 10;
    EXPECT_NEAR(create_model(c, 32)->parameter_count() / 1e6, millions, 0.05);
  }
  ModelConfig mnist;  // one channel, 28 px (Fashion-MNIST): the last stage pools a 7x7 grid
  mnist.name = "wrn16_4";
  mnist.in_chans = 1;
  Classifier m = create_model(mnist, 28);
  m->eval();
  torch::NoGradGuard ng;
  EXPECT_EQ(m->forward(torch::randn({2, 1, 28, 28})).sizes(), (std::vector<int64_t>{2, 10}));
  EXPECT_EQ(m->forward_features(torch::randn({1, 1, 28, 28})).sizes(), (std::vector<int64_t>{1, 256, 7, 7}));
}

TEST(Safetensors, RejectsHostileFiles) {
  std::vector<uint8_t> buf(8, 0);
  buf[7] = 0x7f;  // header length ~ 9e18
  EXPECT_THROW(parse_safetensors(buf.data(), buf.size(), "x"), Error);
  std::string h = R"({"a":{"dtype":"F32","shape":[100000,100000],"data_offsets":[0,4]}})";
  std::vector<uint8_t> f(8 + h.size() + 4, 0);
  f[0] = static_cast<uint8_t>(h.size());
  std::copy(h.begin(), h.end(), f.begin() + 8);
  try {
    parse_safetensors(f.data(), f.size(), "x");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'a'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_safetensors(f.data(), 5, "x"), Error);
}

TEST(Safetensors, RoundTripKeepsDtypesAndMetadata) {
  test::TempDir dir;
  std::vector<std::pair<std::string, torch::Tensor>> t = {
      {"a", torch::randn({3, 4})}, {"b", torch::arange(5)}, {"c", torch::randn({2}).to(torch::kBFloat16)}};
  write_safetensors(dir.file("x.safetensors"), t, {{"k", "v"}});
  const auto back = read_safetensors(dir.file("x.safetensors"));
  ASSERT_EQ(back.tensors.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(torch::equal(back.tensors[i].second, t[i].second));
  EXPECT_EQ(back.metadata.at("k"), "v");
}


// timm's ViT init draws Linear weights and pos_embed from trunc_normal_(std=.02) with absolute bounds +-2: in
// effect untruncated. Sample std and extremes of ours equal those of a timm model made in Python.
TEST(Models, VitInitMatchesTimmsDistribution) {
  test::TempDir dir;
  const std::string script = dir.file("init.py");
  test::write_file(script, R"(import timm, torch
torch.manual_seed(0)
m = timm.create_model("vit_base_patch16_224", num_classes=10)
for name in ["pos_embed", "blocks.0.attn.qkv.weight", "blocks.0.mlp.fc1.weight", "head.weight"]:
    t = dict(m.named_parameters())[name].detach()
    print(name, f"{t.std().item():.6f}", f"{(t.abs() > 0.04).float().mean().item():.6f}")
)");
  const auto r = test::run_command(test::python() + " " + test::shell_quote(script));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ModelConfig c;
  c.name = "vit_base_patch16_224";
  c.num_classes = 10;
  auto model = create_model(c, 224);
  auto params = model->named_parameters();
  for (const auto& line : split(r.output, '\n')) {
    const auto f = split(line, ' ');
    if (f.size() != 3) continue;
    const torch::Tensor t = params[f[0]].detach();
    const double std = t.std().item<double>(), beyond = (t.abs() > 0.04).to(torch::kFloat).mean().item<double>();
    // two samples of n values each: 6 standard errors of their difference
    const double n = static_cast<double>(t.numel()), p = std::stod(f[2]);
    EXPECT_NEAR(std, std::stod(f[1]), 6 * std::stod(f[1]) / std::sqrt(n)) << f[0];
    // beyond 2 std: about 4.6% for a normal distribution, none when clamped at +-2 std
    EXPECT_GT(p, 0.03) << f[0];
    EXPECT_LT(t.abs().max().item<double>(), 0.2) << f[0] << ": a draw at the bound (10 std)";
    EXPECT_NEAR(beyond, p, 6 * std::sqrt(2 * p * (1 - p) / n)) << f[0];
  }
  EXPECT_NE(r.output.find("blocks.0.attn.qkv.weight"), std::string::npos) << r.output;
}


// model.fused_norm only changes CUDA bf16 channels_last runs: on the CPU both settings give the same outputs and
// gradients bit for bit through ATen's ops, and no layer reports the fused kernels.
TEST(Models, FusedNormKeepsTheCpuPath) {
  ModelConfig c;
  c.name = "resnet18";
  c.num_classes = 10;
  c.in_chans = 3;
  auto fused = create_model(c, 64);
  c.fused_norm = "off";
  auto plain = create_model(c, 64);
  load_state_dict(*plain, state_dict(*fused), LoadMode::strict, "copy");
  torch::manual_seed(3);
  const auto x = torch::randn({2, 3, 64, 64});
  const auto a = fused->forward(x), b = plain->forward(x);
  EXPECT_TRUE(torch::equal(a, b));
  a.sum().backward();
  b.sum().backward();
  auto pb = plain->named_parameters();
  for (const auto& kv : fused->named_parameters()) EXPECT_TRUE(torch::equal(kv.value().grad(), pb[kv.key()].grad())) << kv.key();
  EXPECT_EQ(fused_batchnorm_layers(*fused), std::make_pair(0, 20));
  EXPECT_FALSE(fused_batchnorm_applies(x, /*training=*/true, FusedNorm::on));
  EXPECT_FALSE(fused_batchnorm_applies(x.to(torch::kBFloat16).contiguous(torch::MemoryFormat::ChannelsLast),
                                       /*training=*/true, FusedNorm::on));
  EXPECT_FALSE(max_pool_nhwc_applies(x.to(torch::kBFloat16).contiguous(torch::MemoryFormat::ChannelsLast), 3, 2, 1,
                                     FusedNorm::on));
  EXPECT_EQ(config_from_overrides({"model.fused_norm=on"}).model.fused_norm, "on");
  EXPECT_THROW(config_from_overrides({"model.fused_norm=yes"}), ConfigError);
}

// glue::sole_gradient, what lets a fused backward write over its incoming gradient (fc1's bias + GELU over fc2's
// input gradient): true for the gradient a 3-D linear's backward hands on (a view of its matmul's output), false
// wherever anyone else can see the memory: a gradient the caller passed and holds, a temporary view of a tensor
// the caller holds, a gradient a hook kept.
struct GradProbe : torch::autograd::Function<GradProbe> {
  static bool* sole;
  static torch::Tensor forward(torch::autograd::AutogradContext*, torch::Tensor x) { return x.clone(); }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list grads) {
    torch::Tensor g = std::move(grads[0]);
    *sole = glue::sole_gradient(g);
    return {g};
  }
};
bool* GradProbe::sole = nullptr;

TEST(GradOwnership, OnlyAGradientNobodyElseReachesIsOverwritable) {
  bool sole = false;
  GradProbe::sole = &sole;
  torch::manual_seed(0);
  const torch::Tensor h = torch::randn({2, 5, 16}, torch::requires_grad()), w2 = torch::randn({8, 16});
  auto probed = [&] { return GradProbe::apply(h); };

  torch::linear(probed(), w2).sum().backward();
  EXPECT_TRUE(sole) << "the gradient out of fc2's backward";

  const torch::Tensor held = torch::randn({2, 5, 16});
  probed().backward(held);
  EXPECT_FALSE(sole) << "a gradient the caller holds";

  const torch::Tensor held_base = torch::randn({10, 16});
  probed().backward(held_base.view({2, 5, 16}));
  EXPECT_FALSE(sole) << "a view of a tensor the caller holds";

  torch::Tensor kept;
  torch::Tensor p = probed();
  p.register_hook([&](torch::Tensor g) { kept = g; });
  torch::linear(p, w2).sum().backward();
  EXPECT_FALSE(sole) << "a gradient a hook kept";
  EXPECT_TRUE(kept.defined());
}

}  // namespace
}  // namespace trainer
