// `trainer launch`: starts one process per local GPU with torchrun's variables set (RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), each in a process group of its own, prefixes every
// output line with the rank, forwards SIGINT/SIGTERM to all ranks' process groups, and when any rank exits
// non-zero stops the others (SIGTERM, then SIGKILL after --grace-s) and exits non-zero itself. No hang: a rank
// that ignores SIGTERM is killed with everything it started.
#pragma once
#include <string>
#include <vector>

namespace trainer {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::vector<std::string> argv;  // program and its arguments, run once per local rank
  int grace_seconds = 30;         // between SIGTERM and SIGKILL when stopping ranks: time for the preemption
                                  // checkpoint of a large model (torchrun waits 30 s too)
  bool help = false;              // --help / -h: print launch_usage()
};

std::string launch_usage();

// Parses `--nproc-per-node N [--nnodes M --node-rank R --master-addr A --master-port P] -- args...` (the words
// after "launch"); `program` is prepended to args. Throws ConfigError.
LaunchOptions parse_launch_args(const std::vector<std::string>& words, const std::string& program);
// Runs the ranks; returns the launcher's exit code (0 when every rank exited 0).
int launch(const LaunchOptions& opt);

}  // namespace trainer
