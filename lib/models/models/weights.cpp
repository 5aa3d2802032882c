#include "models/weights.h"

#include <torch/torch.h>

#include <map>

#include "core/check.h"
#include "models/safetensors.h"

namespace trainer {

std::vector<std::pair<std::string, torch::Tensor>> state_dict(const torch::nn::Module& model) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& kv : model.named_parameters(/*recurse=*/true)) out.emplace_back(kv.key(), kv.value());
  for (const auto& kv : model.named_buffers(/*recurse=*/true)) out.emplace_back(kv.key(), kv.value());
  return out;
}

LoadReport load_state_dict(ClassifierImpl& model, std::vector<std::pair<std::string, torch::Tensor>> tensors,
                           LoadMode mode, const std::string& source) {
  model.adapt_state_dict(tensors);
  std::map<std::string, torch::Tensor> incoming;
  for (auto& kv : tensors) incoming[kv.first] = kv.second;
  const std::string head = model.classifier_name() + ".";

  std::vector<std::string> missing, mismatched;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;  // (dst, src)
  LoadReport rep;
  std::map<std::string, bool> seen;
  for (auto& kv : state_dict(model)) {
    seen[kv.first] = true;
    auto it = incoming.find(kv.first);
    if (it == incoming.end()) {
      missing.push_back(kv.first);
      continue;
    }
    if (it->second.sizes() != kv.second.sizes()) {
      if (mode == LoadMode::finetune && starts_with(kv.first, head)) {
        rep.reinitialised.push_back(kv.first);
        continue;
      }
      mismatched.push_back(str_cat(kv.first, " (file ", it->second.sizes(), " vs model ", kv.second.sizes(), ")"));
      continue;
    }
    copies.emplace_back(kv.second, it->second);
  }
  std::vector<std::string> unexpected;
  for (auto& kv : incoming)
    if (!seen.count(kv.first)) unexpected.push_back(kv.first);

  std::string problems;
  auto list = [](const std::vector<std::string>& v) {
    const size_t shown = std::min<size_t>(v.size(), 12);
    std::string s = join(std::vector<std::string>(v.begin(), v.begin() + shown), ", ");
    if (v.size() > shown) s += str_cat(", ... (", v.size() - shown, " more)");
    return s;
  };
  if (!missing.empty()) problems += str_cat("\n  missing keys: ", list(missing));
  if (!unexpected.empty()) problems += str_cat("\n  unexpected keys: ", list(unexpected));
  if (!mismatched.empty()) problems += str_cat("\n  shape mismatch: ", list(mismatched));
  if (!problems.empty()) {
    std::string hint;
    for (const auto& m : mismatched)
      if (starts_with(m, head)) hint = "\n  hint: the classifier differs; model.num_classes must match the weights, "
                                      "or set model.pretrained to fine-tune with a new classifier";
    TRAINER_FAIL(source, ": weights do not fit the model:", problems, hint);
  }
  torch::NoGradGuard ng;
  for (auto& c : copies) c.first.copy_(c.second.to(c.first.dtype()));
  rep.loaded = static_cast<int64_t>(copies.size());
  return rep;
}

LoadReport load_weights(ClassifierImpl& model, const std::string& path, LoadMode mode) {
  SafeTensors st = read_safetensors(path);
  return load_state_dict(model, std::move(st.tensors), mode, path);
}

void save_weights(const torch::nn::Module& model, const std::string& path,
                  const std::map<std::string, std::string>& metadata) {
  write_safetensors(path, state_dict(model), metadata);
}

}  // namespace trainer
