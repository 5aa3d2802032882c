// Data parallelism on c10d: a TCPStore rendezvous and one process group (Gloo on CPUs, NCCL on GPUs), with the
// collectives the engine needs: broadcast of parameters and buffers from rank 0, asynchronous all-reduce for
// the gradient reducer (dist/reducer.h), and exact sums for metrics. Every wait has a timeout; a dead or
// stuck peer ends the run with the rank and the operation.
#pragma once
#include <torch/nn/module.h>
#include <torch/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "distributed/rank_env.h"

namespace trainer {

// The prefix of this job's keys in the rendezvous store: one per torchrun attempt.
std::string store_prefix(const DistEnv& env);

class DistContext {
 public:
  // Connects to the store at env.master_addr:port (rank 0 hosts it) and builds the process group for `device`.
  DistContext(const DistEnv& env, torch::Device device, std::chrono::milliseconds timeout);
  ~DistContext();
  int rank() const { return env_.rank; }
  int world_size() const { return env_.world_size; }
  const DistEnv& env() const { return env_; }

  void broadcast_module(torch::nn::Module& m);                     // params and buffers from rank 0
  void all_reduce_sum(torch::Tensor& t);                           // in place, waits
  // Buffers (batch-norm running statistics, which each rank estimates on its own batches) from rank 0.
  void broadcast_buffers(torch::nn::Module& m);
  // How many ranks hold parameters and buffers that differ bit for bit from rank 0's (0 = all identical).
  int64_t count_diverged_replicas(torch::nn::Module& m);
  // Starts an in-place sum of `t` over ranks; the returned function waits for it (on NCCL: makes the current
  // stream wait, no host sync). `op` names the operation in timeout and failure messages.
  std::function<void()> all_reduce_async(torch::Tensor t, const char* op);

  struct Impl;

 private:
  DistEnv env_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainer
