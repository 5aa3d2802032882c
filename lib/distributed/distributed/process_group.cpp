#include "distributed/process_group.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>

#if defined(TRAINER_WITH_CUDA) && defined(USE_C10D_NCCL) && __has_include(<nccl.h>)
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#define TRAINER_WITH_NCCL 1
#endif

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <map>

#include "core/check.h"
#include "core/log.h"
#include "core/strings.h"

namespace trainer {

struct DistContext::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> pg;
  std::chrono::milliseconds timeout{0};
  bool nccl = false;
  bool failed = false;  // a collective failed or timed out: peers may be gone
};

namespace {

// The local address that routes to `host` (a UDP connect sends nothing; getsockname names the source address
// the kernel would use). Empty when it cannot be found.
std::string address_towards(const std::string& host, int port) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res) return "";
  std::string out;
  const int fd = ::socket(res->ai_family, SOCK_DGRAM, 0);
  if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    char text[INET6_ADDRSTRLEN] = {0};
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      const void* a = local.ss_family == AF_INET6 ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
                                                  : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
      if (::inet_ntop(local.ss_family, a, text, sizeof(text))) out = text;
    }
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(res);
  return out;
}

// Gloo's devices: GLOO_SOCKET_IFNAME's interfaces when set (comma-separated, as PyTorch reads it), else the address
// that routes to the master. Never the hostname's address, which Debian's /etc/hosts maps to loopback, so peers
// on other hosts would dial 127.0.0.1.
std::vector<std::shared_ptr<::gloo::transport::Device>> gloo_devices(const DistEnv& env, std::string* said) {
  std::vector<std::shared_ptr<::gloo::transport::Device>> out;
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  if (ifname && *ifname) {
    for (const std::string& name : split(ifname, ','))
      if (!name.empty()) out.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
    *said = str_cat("GLOO_SOCKET_IFNAME=", ifname);
    return out;
  }
  const std::string local = address_towards(env.master_addr, env.master_port);
  TRAINER_CHECK(!local.empty(), "rank ", env.rank, ": no local address routes to MASTER_ADDR ", env.master_addr,
                " (hint: set GLOO_SOCKET_IFNAME to the interface the ranks share)");
  out.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(local));
  *said = local;
  return out;
}

void wait(const c10::intrusive_ptr<c10d::Work>& w, const char* op, int rank, DistContext::Impl& impl) {
  try {
    // NCCL: wait() without a timeout only makes the compute stream wait (no host sync; the process group's
    // own timeout and watchdog end a stuck collective). With a timeout it would block the host every step.
    if (impl.nccl) {
      w->wait();
      return;
    }
    if (!w->wait(impl.timeout)) {
      impl.failed = true;
      TRAINER_FAIL("rank ", rank, ": ", op, " did not finish within ", impl.timeout.count(), " ms");
    }
  } catch (const Error&) {
    impl.failed = true;
    throw;
  } catch (const std::exception& e) {
    impl.failed = true;
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
  std::string transport;  // Gloo: the address or interfaces it binds (NCCL reads NCCL_SOCKET_IFNAME itself)
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
    opts->devices = gloo_devices(env, &transport);
    impl_->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(impl_->store, env.rank, env.world_size, opts);
  }
  log::info("rank ", env.rank, "/", env.world_size, " joined (", env.launcher, ", ", env.master_addr, ":",
            env.master_port, ", ", device.is_cuda() ? "NCCL" : "Gloo", transport.empty() ? "" : " on " + transport, ")");
}

DistContext::~DistContext() {
  // After a failed collective the process group's threads may sit in a receive from a host that is gone, and its
  // destructor would join them: the process would hang past run.dist_timeout_s on its way out. It is left to the
  // process's exit instead.
  if (impl_ && impl_->failed) {
    (void)impl_->pg.release();
    (void)impl_->store.release();
  }
}

void DistContext::broadcast_module(torch::nn::Module& m) {
  torch::NoGradGuard ng;
  std::vector<torch::Tensor> all;
  for (auto& p : m.parameters()) all.push_back(p);
  for (auto& b : m.buffers()) all.push_back(b);
  for (auto& t : all) {
    std::vector<torch::Tensor> one{t.data()};
    c10d::BroadcastOptions o;
    o.rootRank = 0;
    wait(impl_->pg->broadcast(one, o), "broadcast of parameters", env_.rank, *impl_);
  }
}

std::function<void()> DistContext::all_reduce_async(torch::Tensor t, const char* op) {
  std::vector<torch::Tensor> one{t};
  auto work = impl_->pg->allreduce(one);
  return [work, op, this]() { wait(work, op, env_.rank, *impl_); };
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
    wait(impl_->pg->broadcast(flat, o), "broadcast of buffers", env_.rank, *impl_);
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
  wait(impl_->pg->broadcast(root, o), "broadcast for the replica check", env_.rank, *impl_);
  torch::Tensor differs = root[0].equal(flat) ? torch::zeros({1}, flat.options()) : torch::ones({1}, flat.options());
  all_reduce_sum(differs);
  return static_cast<int64_t>(differs.item<double>());
}

void DistContext::all_reduce_sum(torch::Tensor& t) {
  std::vector<torch::Tensor> one{t};
  wait(impl_->pg->allreduce(one), "all-reduce of metrics", env_.rank, *impl_);
}

}  // namespace trainer
