// What every image loader does with a sample that cannot be read or decoded, in training and in evaluation:
// - the file is reported once (a warning naming it and why) and counted once, however often it is drawn;
// - training replaces it by substitute_sample(): a draw from the failed index alone, chained when the substitute
//   fails too (at most kMaxBadInARow), so the CPU and GPU paths, any thread count and a rerun agree;
// - evaluation leaves it out: index and label -1 and black pixels (zero before normalisation), so no image
//   counts twice and the accuracy is over the samples that were seen.
#pragma once
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>

namespace trainer {

constexpr int kMaxBadInARow = 16;

// The sample standing in for `index` after its `attempt`-th failure (1, 2, ...) in a dataset of `size`.
int64_t substitute_sample(int64_t index, int attempt, size_t size);

// Distinct bad files seen so far; thread-safe.
class BadSamples {
 public:
  // Records that sample `name` failed with `why`; warns the first time this file fails.
  void report(const std::string& name, const std::string& why);
  int64_t count() const;

 private:
  mutable std::mutex mu_;
  std::set<std::string> names_;
};

}  // namespace trainer
