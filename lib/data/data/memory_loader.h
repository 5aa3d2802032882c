// Batches from a dataset held in memory (IDX, CIFAR, synthetic): the whole uint8 set lives on the device,
// and each batch is gathered, augmented (random crop with zero padding, horizontal flip), converted and
// normalised there in a handful of batched kernels: no per-sample host work besides drawing its random
// numbers, and no host synchronisation. Each sample's draws come from (seed, epoch, sample index).
#pragma once
#include <torch/types.h>

#include <string>
#include <vector>

#include "data/idx.h"
#include "data/augment.h"
#include "data/loader.h"
#include "data/sharding.h"

namespace trainer {

struct MemoryLoaderOptions {
  int64_t batch_size = 256;
  bool train = true;             // shuffle + augment; false: dataset order, no augmentation, no padding
  uint64_t seed = 0;
  int rank = 0;
  int world_size = 1;
  bool drop_last = true;         // train only
  std::string crop = "pad_crop"; // none | pad_crop
  int64_t crop_pad = 4;          // pad_crop: zero padding on each side
  double hflip = 0.5;            // flip probability
  int64_t image_size = 0;        // output side; 0 = the stored size (else bilinear resize on the device)
  std::vector<double> mean;      // per channel, 0..1 scale
  std::vector<double> std;
  AugmentOptions augment;       // train: colour jitter and random erasing on the device
  bool channels_last = true;     // return NHWC-strided (B,C,H,W) tensors
  torch::ScalarType dtype = torch::kFloat32;  // of the normalised batch: float32 or bfloat16 (data.dtype)
};

// Random draws of one training sample, made before any pixel moves (testable apart from pixel math).
struct CropFlip {
  int64_t dy = 0, dx = 0;  // crop offset into the padded image, in [0, 2*pad]
  bool flip = false;
};
CropFlip draw_crop_flip(uint64_t seed, int64_t epoch, int64_t index, int64_t pad, double hflip);

class MemoryLoader : public Loader {
 public:
  MemoryLoader(InMemoryDataset data, MemoryLoaderOptions opt, torch::Device device);
  void set_epoch(int64_t epoch, int64_t start_batch = 0) override;
  int64_t batches_per_epoch() const override;
  int64_t samples_per_epoch() const override { return static_cast<int64_t>(order_.size()); }
  bool next(Batch& out) override;
  int64_t dataset_size() const { return images_.size(0); }
  int64_t num_classes() const { return num_classes_; }

 private:
  MemoryLoaderOptions opt_;
  torch::Device device_;
  torch::Tensor images_;  // (N,H,W,C) uint8 on device_
  torch::Tensor labels_;  // (N,) int64 on device_
  torch::Tensor mean255_, inv_std255_;  // (1,C,1,1) float on device_
  int64_t num_classes_ = 0;
  int64_t epoch_ = 0;
  std::vector<int64_t> order_;
  size_t cursor_ = 0;
};

}  // namespace trainer
