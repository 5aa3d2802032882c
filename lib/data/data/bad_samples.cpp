#include "data/bad_samples.h"

#include "core/log.h"
#include "core/random.h"

namespace trainer {

int64_t substitute_sample(int64_t index, int attempt, size_t size) {
  return static_cast<int64_t>(mix_seed(static_cast<uint64_t>(index), static_cast<uint64_t>(attempt)) % size);
}

void BadSamples::report(const std::string& name, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (names_.insert(name).second) log::warn("skipping a bad sample: ", why);
}

int64_t BadSamples::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(names_.size());
}

}  // namespace trainer
