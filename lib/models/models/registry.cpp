#include "models/registry.h"

#include <functional>
#include <map>

#include "core/check.h"
#include "core/log.h"
#include "models/resnet.h"
#include "models/vit.h"
#include "models/weights.h"
#include "models/wide_resnet.h"

namespace trainer {
namespace {

using Factory = std::function<Classifier(const ModelConfig&, int64_t)>;

Factory resnet(bool bottleneck, std::vector<int64_t> layers, int64_t groups = 1, int64_t base_width = 64) {
  return [=](const ModelConfig& c, int64_t input_size) -> Classifier {
    ResNetOptions o;
    o.bottleneck = bottleneck;
    o.layers = layers;
    o.groups = groups;
    o.base_width = base_width;
    o.num_classes = c.num_classes;
    o.in_chans = c.in_chans;
    o.small_stem = c.small_stem;
    o.zero_init_last = c.zero_init_last;
    o.fused_norm = fused_norm_from(c.fused_norm);
    o.stem_fp16 = c.stem_fp16;
    o.stem_s2d = c.stem_s2d;
    o.drop_rate = c.drop_rate;
    o.drop_path_rate = c.drop_path_rate;
    o.input_size = input_size;
    return make_resnet(o);
  };
}

Factory wide_resnet(int64_t depth, int64_t widen) {
  return [=](const ModelConfig& c, int64_t input_size) -> Classifier {
    WideResNetOptions o;
    o.depth = depth;
    o.widen = widen;
    o.num_classes = c.num_classes;
    o.in_chans = c.in_chans;
    o.fused_norm = fused_norm_from(c.fused_norm);
    o.drop_rate = c.drop_rate;
    o.drop_path_rate = c.drop_path_rate;
    o.input_size = input_size;
    return make_wide_resnet(o);
  };
}

Factory vit(int64_t patch, int64_t dim, int64_t depth, int64_t heads) {
  return [=](const ModelConfig& c, int64_t input_size) -> Classifier {
    ViTOptions o;
    o.img_size = input_size;
    o.patch_size = patch;
    o.in_chans = c.in_chans;
    o.num_classes = c.num_classes;
    o.embed_dim = dim;
    o.depth = depth;
    o.num_heads = heads;
    o.drop_rate = c.drop_rate;
    o.drop_path_rate = c.drop_path_rate;
    o.fused_norm = fused_norm_from(c.fused_norm);
    return std::make_shared<VisionTransformerImpl>(o);
  };
}

const std::map<std::string, Factory>& registry() {
  static const std::map<std::string, Factory> r = {
      {"resnet18", resnet(false, {2, 2, 2, 2})},
      {"resnet34", resnet(false, {3, 4, 6, 3})},
      {"resnet50", resnet(true, {3, 4, 6, 3})},
      {"resnet101", resnet(true, {3, 4, 23, 3})},
      {"resnet152", resnet(true, {3, 8, 36, 3})},
      {"wide_resnet50_2", resnet(true, {3, 4, 6, 3}, 1, 128)},
      {"resnext50_32x4d", resnet(true, {3, 4, 6, 3}, 32, 4)},
      {"wrn16_4", wide_resnet(16, 4)},
      {"wrn16_8", wide_resnet(16, 8)},
      {"wrn28_10", wide_resnet(28, 10)},
      {"wrn40_4", wide_resnet(40, 4)},
      {"vit_tiny_patch16_224", vit(16, 192, 12, 3)},
      {"vit_small_patch16_224", vit(16, 384, 12, 6)},
      {"vit_small_patch32_224", vit(32, 384, 12, 6)},
      {"vit_base_patch16_224", vit(16, 768, 12, 12)},
      {"vit_base_patch32_224", vit(32, 768, 12, 12)},
      {"vit_large_patch16_224", vit(16, 1024, 24, 16)},
      {"vit_large_patch32_224", vit(32, 1024, 24, 16)},
  };
  return r;
}

}  // namespace

std::vector<std::string> model_names() {
  std::vector<std::string> out;
  for (const auto& kv : registry()) out.push_back(kv.first);
  return out;
}

Classifier create_model(const ModelConfig& cfg, int64_t input_size) {
  const auto& r = registry();
  auto it = r.find(cfg.name);
  if (it == r.end())
    throw ConfigError(str_cat("key 'model.name': unknown model '", cfg.name, "' (known: ", join(model_names(), ", "), ")"));
  Classifier m = it->second(cfg, input_size);
  if (!cfg.pretrained.empty()) {
    const LoadReport rep = load_weights(*m, cfg.pretrained, LoadMode::finetune);
    log::info("loaded ", rep.loaded, " tensors from ", cfg.pretrained,
              rep.reinitialised.empty() ? "" : str_cat("; re-initialised ", join(rep.reinitialised, ", "),
                                                       " (shape differs: new classifier)"));
  }
  return m;
}

}  // namespace trainer
