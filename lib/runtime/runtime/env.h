// The torch-level environment of a run: which device, seeds, deterministic mode, and the version report
// printed by `trainer --version` and stored with benchmark results.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace trainer {

struct GpuInfo {
  int index = 0;
  std::string name;          // "NVIDIA H200"
  double memory_gib = 0;     // total device memory
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
};

struct EnvInfo {
  std::string trainer_version;  // "0.1.0"
  std::string git_sha;          // short commit of the build
  std::string torch_version;    // "2.11.0"
  bool cuda_built = false;      // LibTorch built with CUDA
  std::string cuda_runtime;     // "13.0", empty without CUDA
  std::string cuda_driver;      // driver's CUDA version, empty when no driver
  std::string cuda_work_queues; // CUDA_DEVICE_MAX_CONNECTIONS in effect; "8 (CUDA's default)" when unset
  std::string cudnn;            // "9.19.0"
  std::string nccl;             // "2.28.9"
  std::string compiler;         // "GNU 12.2.0"
  std::vector<GpuInfo> gpus;
};

EnvInfo query_env();
std::string format_env(const EnvInfo& env);  // the multi-line --version text

// Asks CUDA for `queues` hardware work queues (CUDA_DEVICE_MAX_CONNECTIONS) unless the environment already names a
// number; call before CUDA starts. With fewer queues than streams, the GPU loader's side streams can share one with
// the training stream and its decode then waits behind queued steps (bench/NOTES.md). Returns the value in effect.
std::string request_cuda_work_queues(int queues);
std::string cuda_work_queues();  // the value in effect, "8 (CUDA's default)" when none is named

// run.cuda_sync: how this process's threads wait for `device` (CUDA's scheduling flag; "auto" leaves CUDA's own).
// Returns the flag set, cudaDeviceSchedule* (auto 0, spin 1, yield 2, blocking 4); a CPU device: nothing, 0.
unsigned set_cuda_sync(const std::string& mode, torch::Device device);

bool cuda_available();
// "auto" -> cuda:0 when a GPU is there, else cpu; "cuda" without a GPU throws with a hint.
torch::Device select_device(const std::string& choice, int local_rank = 0);
// Seeds torch's CPU and CUDA generators.
void seed_all(uint64_t seed);
// Deterministic algorithms on, cudnn.benchmark off; or cudnn.benchmark per `benchmark`.
void set_determinism(bool deterministic, bool cudnn_benchmark);

struct GpuMemory {
  double allocated_gib = 0;  // live tensors now
  double reserved_gib = 0;   // held by the caching allocator
  double peak_gib = 0;       // max allocated since the last reset
};
// Waits for all work on `device` (no-op on CPU). Not for the hot loop.
void synchronize(torch::Device device);
GpuMemory gpu_memory(torch::Device device);  // zeros on CPU
void reset_peak_memory(torch::Device device);

}  // namespace trainer
