// What the engine sees of any data source: epochs of batches already on the training device.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace trainer {

struct Batch {
  torch::Tensor images;  // (B,C,H,W) normalised, in data.dtype (bfloat16 or float32); channels_last when requested
  torch::Tensor labels;  // (B,) int64
  std::vector<int64_t> indices;  // dataset indices of the batch (host); -1: a bad file left out (evaluation)
};

class Loader {
 public:
  virtual ~Loader() = default;
  // Fixes the epoch's order; the first `start_batch` batches are skipped (resuming mid-epoch). Call before next().
  virtual void set_epoch(int64_t epoch, int64_t start_batch = 0) = 0;
  virtual int64_t batches_per_epoch() const = 0;
  virtual int64_t samples_per_epoch() const = 0;
  virtual bool next(Batch& out) = 0;          // false at the end of the epoch
  virtual int64_t bad_samples() const { return 0; }  // samples replaced because they failed to decode
  // Device time of host-to-device copies so far (GPU events on the copy stream, read once complete); 0 when
  // the loader copies nothing (CPU, GPU-resident data).
  virtual double copy_seconds() const { return 0; }
};

}  // namespace trainer
