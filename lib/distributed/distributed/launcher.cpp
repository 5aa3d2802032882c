#include "distributed/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "core/check.h"
#include "core/strings.h"

namespace trainer {
namespace {

std::atomic<int> g_forward{0};
void on_signal(int sig) { g_forward = sig; }

int to_int(const std::string& opt, const std::string& v) {
  try {
    size_t pos = 0;
    const int x = std::stoi(v, &pos);
    if (pos == v.size()) return x;
  } catch (...) {
  }
  throw ConfigError(str_cat("launch: ", opt, " needs an integer, got '", v, "'"));
}

struct Rank {
  pid_t pid = -1;
  int fd = -1;         // read end of its stdout+stderr
  std::string partial;  // an unfinished output line
  bool exited = false;
  int code = 0;
};

void emit(int rank, const std::string& line) {
  const std::string out = str_cat("[rank ", rank, "] ", line, "\n");
  (void)!::write(1, out.data(), out.size());
}

}  // namespace

std::string launch_usage() {
  return "usage: trainer launch --nproc-per-node N [--nnodes M --node-rank R --master-addr A --master-port P]\n"
         "                      [--grace-s S] -- <trainer args>\n"
         "Starts N ranks of trainer on this machine with torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK,\n"
         "LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT); their output lines carry the rank. SIGINT/SIGTERM go to every\n"
         "rank, which writes a checkpoint and exits 3; when a rank fails the others are stopped. A rank still running\n"
         "S seconds (default 30) after it was told to stop is killed with all it started.\n";
}

LaunchOptions parse_launch_args(const std::vector<std::string>& w, const std::string& program) {
  LaunchOptions o;
  size_t i = 0;
  auto value = [&](const std::string& opt) -> std::string {
    if (i + 1 >= w.size()) throw ConfigError(str_cat("launch: ", opt, " needs a value"));
    return w[++i];
  };
  for (; i < w.size(); ++i) {
    const std::string& a = w[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a == "--help" || a == "-h") o.help = true;
    else if (a == "--nproc-per-node") o.nproc_per_node = to_int(a, value(a));
    else if (a == "--nnodes") o.nnodes = to_int(a, value(a));
    else if (a == "--node-rank") o.node_rank = to_int(a, value(a));
    else if (a == "--master-addr") o.master_addr = value(a);
    else if (a == "--master-port") o.master_port = to_int(a, value(a));
    else if (a == "--grace-s") o.grace_seconds = to_int(a, value(a));
    else throw ConfigError(str_cat("launch: unknown option '", a, "'\n", launch_usage()));
  }
  if (o.help) return o;
  if (o.grace_seconds < 0) throw ConfigError("launch: --grace-s needs seconds >= 0");
  if (o.nproc_per_node < 1 || o.nnodes < 1 || o.node_rank < 0 || o.node_rank >= o.nnodes)
    throw ConfigError(str_cat("launch: need --nproc-per-node >= 1 and 0 <= --node-rank < --nnodes"));
  o.argv.push_back(program);
  for (; i < w.size(); ++i) o.argv.push_back(w[i]);
  return o;
}

int launch(const LaunchOptions& o) {
  const int world = o.nnodes * o.nproc_per_node;
  std::vector<Rank> ranks(static_cast<size_t>(o.nproc_per_node));
  struct sigaction sa {}, old_int {}, old_term {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  g_forward = 0;

  for (int lr = 0; lr < o.nproc_per_node; ++lr) {
    int p[2];
    TRAINER_CHECK(::pipe(p) == 0, "launch: pipe failed: ", std::strerror(errno));
    const pid_t pid = ::fork();
    TRAINER_CHECK(pid >= 0, "launch: fork failed: ", std::strerror(errno));
    if (pid == 0) {
      ::setpgid(0, 0);  // a terminal's Ctrl-C reaches the launcher only; it forwards
      ::dup2(p[1], 1);
      ::dup2(p[1], 2);
      ::close(p[0]);
      ::close(p[1]);
      const int rank = o.node_rank * o.nproc_per_node + lr;
      ::setenv("RANK", std::to_string(rank).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(lr).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node).c_str(), 1);
      ::setenv("MASTER_ADDR", o.master_addr.c_str(), 1);
      ::setenv("MASTER_PORT", std::to_string(o.master_port).c_str(), 1);
      std::vector<char*> args;
      for (const auto& s : o.argv) args.push_back(const_cast<char*>(s.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      std::fprintf(stderr, "launch: cannot run %s: %s\n", args[0], std::strerror(errno));
      ::_exit(127);
    }
    ::setpgid(pid, pid);  // also here, so that no signal can come before the child's own call
    ::close(p[1]);
    ranks[static_cast<size_t>(lr)].pid = pid;
    ranks[static_cast<size_t>(lr)].fd = p[0];
  }

  int result = 0;
  bool stopping = false;
  auto t_stop = std::chrono::steady_clock::now();
  auto stop_all = [&](int sig) {  // each rank's process group: what it started (decode helpers, shells) too
    for (auto& r : ranks)
      if (!r.exited) ::kill(-r.pid, sig);
  };
  for (;;) {
    // ---- forward signals; escalate a stop that takes too long ----
    if (const int sig = g_forward.exchange(0)) {
      stop_all(sig);
      if (!stopping) {
        stopping = true;
        t_stop = std::chrono::steady_clock::now();
      }
    }
    if (stopping && std::chrono::steady_clock::now() - t_stop > std::chrono::seconds(o.grace_seconds)) stop_all(SIGKILL);

    // ---- relay output, line by line, with the rank in front ----
    std::vector<pollfd> fds;
    std::vector<size_t> who;
    for (size_t i = 0; i < ranks.size(); ++i)
      if (ranks[i].fd >= 0) {
        fds.push_back({ranks[i].fd, POLLIN, 0});
        who.push_back(i);
      }
    if (!fds.empty()) ::poll(fds.data(), fds.size(), 100);
    else ::usleep(50000);
    for (size_t k = 0; k < fds.size(); ++k) {
      if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Rank& r = ranks[who[k]];
      char buf[4096];
      const ssize_t n = ::read(r.fd, buf, sizeof(buf));
      if (n <= 0) {
        if (!r.partial.empty()) emit(static_cast<int>(who[k]) + o.node_rank * o.nproc_per_node, r.partial);
        ::close(r.fd);
        r.fd = -1;
        continue;
      }
      r.partial.append(buf, static_cast<size_t>(n));
      size_t nl;
      while ((nl = r.partial.find('\n')) != std::string::npos) {
        emit(static_cast<int>(who[k]) + o.node_rank * o.nproc_per_node, r.partial.substr(0, nl));
        r.partial.erase(0, nl + 1);
      }
    }

    // ---- reap; the first failure stops everyone ----
    bool all_done = true;
    for (size_t i = 0; i < ranks.size(); ++i) {
      Rank& r = ranks[i];
      if (r.exited) continue;
      int status = 0;
      if (::waitpid(r.pid, &status, WNOHANG) == r.pid) {
        r.exited = true;
        r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (r.code != 0 && result == 0) {
          result = r.code;
          emit(static_cast<int>(i) + o.node_rank * o.nproc_per_node,
               str_cat("exited with code ", r.code, ": stopping the other ranks"));
          if (!stopping) {
            stop_all(SIGTERM);
            stopping = true;
            t_stop = std::chrono::steady_clock::now();
          }
        }
      } else {
        all_done = false;
      }
    }
    bool pipes_open = false;
    for (auto& r : ranks) pipes_open = pipes_open || r.fd >= 0;
    if (all_done && !pipes_open) break;
    // a grandchild that outlives its rank may hold the pipe: give it 2 s of output, then stop listening
    static thread_local std::chrono::steady_clock::time_point t_all_done;
    if (!all_done) t_all_done = std::chrono::steady_clock::now();
    if (all_done && std::chrono::steady_clock::now() - t_all_done > std::chrono::seconds(2)) {
      for (auto& r : ranks)
        if (r.fd >= 0) ::close(r.fd), r.fd = -1;
      break;
    }
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  return result;
}

}  // namespace trainer
