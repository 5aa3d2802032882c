// Moving weights in and out of a model by name: the model's state dict (parameters and buffers, timm names)
// to and from safetensors, with errors that name every offending key.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "models/classifier.h"

namespace trainer {

enum class LoadMode {
  strict,    // every key present on both sides with equal shapes
  finetune,  // like strict, but a classifier of another shape is skipped (kept freshly initialised)
};

struct LoadReport {
  int64_t loaded = 0;                       // tensors copied into the model
  std::vector<std::string> reinitialised;   // finetune: classifier keys left at their fresh init
};

// (name, tensor) of every parameter and buffer, in registration order.
std::vector<std::pair<std::string, torch::Tensor>> state_dict(const torch::nn::Module& model);
LoadReport load_state_dict(ClassifierImpl& model, std::vector<std::pair<std::string, torch::Tensor>> tensors,
                           LoadMode mode, const std::string& source);
LoadReport load_weights(ClassifierImpl& model, const std::string& path, LoadMode mode = LoadMode::strict);
void save_weights(const torch::nn::Module& model, const std::string& path,
                  const std::map<std::string, std::string>& metadata = {});

}  // namespace trainer
