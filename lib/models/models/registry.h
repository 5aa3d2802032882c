// Models by name, as timm names them: resnet50, wide_resnet50_2, vit_base_patch16_224, ...
#pragma once
#include <string>
#include <vector>

#include "config/config.h"
#include "models/classifier.h"

namespace trainer {

// Builds cfg.name for inputs of `input_size` px; loads cfg.pretrained if set (classifier re-initialised when
// its shape differs). An unknown name throws ConfigError listing the known ones.
Classifier create_model(const ModelConfig& cfg, int64_t input_size);
std::vector<std::string> model_names();

}  // namespace trainer
