#include "dist/process_group.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>

#if defined(TRAINER_WITH_CUDA) && defined(USE_C10D_NCCL) && __has_include(<nccl.h>)
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#define TRAINER_WITH_NCCL 1
#endif

#include <map>

#include "core/check.h"
#include "core/log.h"

namespace trainer {

struct DistContext::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> pg;
  std::chrono::milliseconds timeout{0};
  bool nccl = false;
};

namespace {
void wait(const c10::intrusive_ptr<c10d::Work>& w, const char* op, int rank, std::chrono::milliseconds timeout,
          bool nccl) {
  try {
    // NCCL: wait() without a timeout only makes the compute stream wait (no host sync; the process group's
    // own timeout and watchdog end a stuck collective). With a timeout it would block the host every step.
    if (nccl) {
      w->wait();
      return;
    }
    if (!w->wait(timeout)) TRAINER_FAIL("rank ", rank, ": ", op, " did not finish within ", timeout.count(), " ms");
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    TRAINER_FAIL("rank ", rank, ": ", op, " failed (a peer died or timed out): ", e.what());
  }
}
}  // namespace

std::string store_prefix(const DistEnv& env) { return str_cat("trainer/attempt_", env.restart_count); }

DistContext::DistContext(const DistEnv& env, torch::Device device, std::chrono::milliseconds timeout)
    : env_(env), impl_(std::make_unique<Impl>()) {
  impl_->timeout = timeout;
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(env.master_port);
  so.isServer = env.rank == 0 && !env.agent_store;  // under torchrun the agent already serves this port
  so.numWorkers = env.world_size;
  so.timeout = timeout;
  try {
    // our keys under a prefix: a torchrun agent's store holds its own, and outlives an attempt that failed, so
    // the prefix names the attempt (as torch's env:// rendezvous does): a restart never reads the last one's ids
    impl_->store = c10::make_intrusive<c10d::PrefixStore>(
        store_prefix(env), c10::make_intrusive<c10d::TCPStore>(env.master_addr, so));
  } catch (const std::exception& e) {
    TRAINER_FAIL("rank ", env.rank, ": rendezvous at ", env.master_addr, ":", env.master_port, " failed: ", e.what());
  }
  if (device.is_cuda()) {
#ifdef TRAINER_WITH_NCCL
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = timeout;
    impl_->pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(impl_->store, env.rank, env.world_size, opts);
    impl_->nccl = true;
#else
    TRAINER_FAIL("this build has no NCCL: multi-GPU runs need a CUDA LibTorch with NCCL");
#endif
  } else {
    auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
    const bool loopback = env.master_addr == "127.0.0.1" || env.master_addr == "localhost";
    opts->devices.push_back(loopback ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                     : c10d::ProcessGroupGloo::createDefaultDevice());
    impl_->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(impl_->store, env.rank, env.world_size, opts);
  }
  log::info("rank ", env.rank, "/", env.world_size, " joined (", env.launcher, ", ", env.master_addr, ":",
            env.master_port, ", ", device.is_cuda() ? "NCCL" : "Gloo", ")");
}

DistContext::~DistContext() = default;

void DistContext::broadcast_module(torch::nn::Module& m) {
  torch::NoGradGuard ng;
  std::vector<torch::Tensor> all;
  for (auto& p : m.parameters()) all.push_back(p);
  for (auto& b : m.buffers()) all.push_back(b);
  for (auto& t : all) {
    std::vector<torch::Tensor> one{t.data()};
    c10d::BroadcastOptions o;
    o.rootRank = 0;
    wait(impl_->pg->broadcast(one, o), "broadcast of parameters", env_.rank, impl_->timeout, impl_->nccl);
  }
}

std::function<void()> DistContext::all_reduce_async(torch::Tensor t, const char* op) {
  std::vector<torch::Tensor> one{t};
  auto work = impl_->pg->allreduce(one);
  return [work, op, this]() { wait(work, op, env_.rank, impl_->timeout, impl_->nccl); };
}

void DistContext::broadcast_buffers(torch::nn::Module& m) {
  torch::NoGradGuard ng;
  std::map<c10::ScalarType, std::vector<torch::Tensor>> by_type;
  for (auto& b : m.buffers()) by_type[b.scalar_type()].push_back(b);
  for (auto& [type, bufs] : by_type) {
    std::vector<torch::Tensor> views;
    for (auto& b : bufs) views.push_back(b.reshape({-1}));
    std::vector<torch::Tensor> flat{torch::cat(views)};
    c10d::BroadcastOptions o;
    o.rootRank = 0;
    wait(impl_->pg->broadcast(flat, o), "broadcast of buffers", env_.rank, impl_->timeout, impl_->nccl);
    int64_t off = 0;
    for (auto& b : bufs) {
      b.copy_(flat[0].narrow(0, off, b.numel()).view_as(b));
      off += b.numel();
    }
  }
}

int64_t DistContext::count_diverged_replicas(torch::nn::Module& m) {
  torch::NoGradGuard ng;
  std::vector<torch::Tensor> mine;
  for (auto& p : m.parameters()) mine.push_back(p.detach().reshape({-1}).to(torch::kFloat64));
  for (auto& b : m.buffers())
    if (b.is_floating_point()) mine.push_back(b.detach().reshape({-1}).to(torch::kFloat64));
  torch::Tensor flat = torch::cat(mine);
  std::vector<torch::Tensor> root{flat.clone()};
  c10d::BroadcastOptions o;
  o.rootRank = 0;
  wait(impl_->pg->broadcast(root, o), "broadcast for the replica check", env_.rank, impl_->timeout, impl_->nccl);
  torch::Tensor differs = root[0].equal(flat) ? torch::zeros({1}, flat.options()) : torch::ones({1}, flat.options());
  all_reduce_sum(differs);
  return static_cast<int64_t>(differs.item<double>());
}

void DistContext::all_reduce_sum(torch::Tensor& t) {
  std::vector<torch::Tensor> one{t};
  wait(impl_->pg->allreduce(one), "all-reduce of metrics", env_.rank, impl_->timeout, impl_->nccl);
}

}  // namespace trainer
