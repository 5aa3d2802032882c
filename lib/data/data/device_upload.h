// A small host tensor (draws, indices, labels, kernel arguments) onto the device without a host sync: a plain
// .to() from pageable memory waits for the stream, stalling the calling loader thread behind everything queued
// before it. The pinned staging copy is kept alive by the caching host allocator until the copy has run.
#pragma once
#include <torch/torch.h>

namespace trainer {

inline torch::Tensor upload(const torch::Tensor& host, const torch::Device& device) {
  if (!device.is_cuda()) return host;
  return host.pin_memory().to(device, /*non_blocking=*/true);
}

}  // namespace trainer
