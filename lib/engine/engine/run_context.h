// Where this process trains: its device and its place among the data-parallel ranks.
#pragma once
#include <torch/types.h>

namespace trainer {

class DistContext;

struct RunContext {
  torch::Device device = torch::kCPU;
  int rank = 0;
  int world_size = 1;
  int local_world_size = 1;     // ranks on this machine (they share its cores)
  DistContext* dist = nullptr;  // set when world_size > 1; owned by the caller
  bool writer() const { return rank == 0; }
};

}  // namespace trainer
