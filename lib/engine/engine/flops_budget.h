// What MFU is measured against, for the run log and for `trainer bench` alike: the training FLOPs of one image
// (forward + backward, 3x the forward) and the device's dense tensor-core peak at the step's precision.
#pragma once
#include <torch/types.h>

#include <string>

namespace trainer {

struct FlopsBudget {
  std::string gpu;                   // the device's name; "cpu" off CUDA
  double train_flops_per_image = 0;  // forward + backward
  double peak_flops = 0;             // 0: unknown (the CPU, fp32, a GPU not in the table)
  // model FLOPs utilisation of one GPU training img_per_s images a second; 0 when the peak is unknown
  double mfu(double img_per_s) const { return peak_flops > 0 ? img_per_s * train_flops_per_image / peak_flops : 0; }
};

FlopsBudget flops_budget(double forward_flops_per_image, torch::Device device, bool low_precision);

}  // namespace trainer
