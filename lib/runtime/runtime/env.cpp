#include "runtime/env.h"

#include <cstdlib>

#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/cuda.h>
#include <torch/version.h>
#include <torch/utils.h>

#ifdef TRAINER_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>
namespace torch::cuda::nccl {
std::uint64_t version();  // libtorch_cuda (torch/csrc/cuda/nccl.h, which drags in nccl.h)
}
#endif

#include "core/check.h"
#include "core/strings.h"
#include "core/version_info.h"

namespace trainer {

namespace {
constexpr const char* kWorkQueuesVar = "CUDA_DEVICE_MAX_CONNECTIONS";
std::string cuda_version_string(int v) { return str_cat(v / 1000, ".", (v % 1000) / 10); }
}  // namespace

std::string request_cuda_work_queues(int queues) {
  if (const char* set = std::getenv(kWorkQueuesVar); set && *set) return set;
  const std::string v = std::to_string(queues);
  ::setenv(kWorkQueuesVar, v.c_str(), 1);  // unset or empty (which CUDA reads as its default): ours
  return v;
}

std::string cuda_work_queues() {
  const char* set = std::getenv(kWorkQueuesVar);
  return set && *set ? set : "8 (CUDA's default)";
}

unsigned set_cuda_sync(const std::string& mode, torch::Device device) {
  const unsigned flag = mode == "spin" ? 1u : mode == "yield" ? 2u : mode == "blocking" ? 4u : 0u;
  TRAINER_CHECK(flag != 0 || mode == "auto", "key 'run.cuda_sync': '", mode,
                "' is not one of auto, spin, yield, blocking");
  if (flag == 0 || !device.is_cuda()) return 0;
#ifdef TRAINER_WITH_CUDA
  // on an initialised device the new flag replaces the old (cudaSetDeviceFlags); the device's own, not the thread's
  static_assert(cudaDeviceScheduleSpin == 1 && cudaDeviceScheduleYield == 2 && cudaDeviceScheduleBlockingSync == 4);
  cudaError_t e = cudaSetDevice(device.index());
  if (e == cudaSuccess) e = cudaSetDeviceFlags(flag);
  TRAINER_CHECK(e == cudaSuccess, "key 'run.cuda_sync': ", mode, " could not be set on ", device.str(), ": ",
                cudaGetErrorString(e));
#endif
  return flag;
}

bool cuda_available() { return torch::cuda::is_available(); }

EnvInfo query_env() {
  EnvInfo e;
  e.trainer_version = TRAINER_VERSION;
  e.git_sha = TRAINER_GIT_SHA;
  e.torch_version = TORCH_VERSION;
  e.cuda_work_queues = cuda_work_queues();
#if defined(__clang__)
  e.compiler = str_cat("Clang ", __clang_major__, ".", __clang_minor__, ".", __clang_patchlevel__);
#elif defined(__GNUC__)
  e.compiler = str_cat("GNU ", __GNUC__, ".", __GNUC_MINOR__, ".", __GNUC_PATCHLEVEL__);
#endif
#ifdef TRAINER_WITH_CUDA
  e.cuda_built = true;
  int rt = 0;
  if (cudaRuntimeGetVersion(&rt) == cudaSuccess) e.cuda_runtime = cuda_version_string(rt);
  int drv = 0;
  if (cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0) e.cuda_driver = cuda_version_string(drv);
  const long cudnn = at::detail::getCUDAHooks().versionCuDNN();
  if (cudnn > 0) e.cudnn = str_cat(cudnn / 10000, ".", (cudnn % 10000) / 100, ".", cudnn % 100);
  const uint64_t nccl = torch::cuda::nccl::version();
  // torch packs it as (major << 32) | (minor << 16) | patch
  if (nccl > 0) e.nccl = str_cat(nccl >> 32, ".", (nccl >> 16) & 0xffff, ".", nccl & 0xffff);
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // no driver / no device: clear the sticky error
    n = 0;
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    GpuInfo g;
    g.index = i;
    g.name = p.name;
    g.memory_gib = static_cast<double>(p.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0);
    g.cc_major = p.major;
    g.cc_minor = p.minor;
    g.sm_count = p.multiProcessorCount;
    e.gpus.push_back(g);
  }
#endif
  return e;
}

std::string format_env(const EnvInfo& e) {
  auto or_none = [](const std::string& s) { return s.empty() ? std::string("none") : s; };
  std::string s;
  s += str_cat("trainer  ", e.trainer_version, " (git ", e.git_sha, ")\n");
  s += str_cat("LibTorch ", e.torch_version, e.cuda_built ? " (CUDA build)" : " (CPU build)", "\n");
  s += str_cat("CUDA     runtime ", or_none(e.cuda_runtime), ", driver ", or_none(e.cuda_driver), ", ",
               e.cuda_work_queues, " hardware work queues\n");
  s += str_cat("cuDNN    ", or_none(e.cudnn), "\n");
  s += str_cat("NCCL     ", or_none(e.nccl), "\n");
  s += str_cat("compiler ", e.compiler, "\n");
  if (e.gpus.empty()) s += "GPUs     none found\n";
  for (const auto& g : e.gpus)
    s += strprintf("GPU %d    %s, %.1f GiB, compute capability %d.%d, %d SMs\n", g.index, g.name.c_str(),
                   g.memory_gib, g.cc_major, g.cc_minor, g.sm_count);
  return s;
}

torch::Device select_device(const std::string& choice, int local_rank) {
  if (choice == "cpu") return torch::Device(torch::kCPU);
  const bool have = cuda_available();
  if (choice == "cuda") {
    TRAINER_CHECK(have, "run.device is 'cuda' but no CUDA device is usable here "
                        "(hint: check nvidia-smi, or set run.device=auto/cpu)");
  }
  if (!have) return torch::Device(torch::kCPU);
  const int n = static_cast<int>(torch::cuda::device_count());
  TRAINER_CHECK(local_rank < n, "local rank ", local_rank, " has no GPU: only ", n, " visible");
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
}

void seed_all(uint64_t seed) {
  torch::manual_seed(seed);
  if (cuda_available()) torch::cuda::manual_seed_all(seed);
}

void set_determinism(bool deterministic, bool cudnn_benchmark) {
  auto& ctx = at::globalContext();
  ctx.setDeterministicAlgorithms(deterministic, /*warn_only=*/false);
  ctx.setDeterministicCuDNN(deterministic);
  ctx.setBenchmarkCuDNN(!deterministic && cudnn_benchmark);
}

void synchronize(torch::Device device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

GpuMemory gpu_memory(torch::Device device) {
  GpuMemory m;
#ifdef TRAINER_WITH_CUDA
  if (!device.is_cuda()) return m;
  const auto st = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  const size_t all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  m.allocated_gib = st.allocated_bytes[all].current / kGiB;
  m.reserved_gib = st.reserved_bytes[all].current / kGiB;
  m.peak_gib = st.allocated_bytes[all].peak / kGiB;
#endif
  return m;
}

void reset_peak_memory(torch::Device device) {
#ifdef TRAINER_WITH_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
#endif
}

}  // namespace trainer
