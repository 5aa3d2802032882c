// Who am I in a multi-process job: read from the launcher's environment, whichever is present:
// torchrun (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), OpenMPI
// (OMPI_COMM_WORLD_RANK/_SIZE/_LOCAL_RANK/_LOCAL_SIZE) or Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID,
// first host of SLURM_NODELIST). None of them: a single process.
#pragma once
#include <map>
#include <string>
#include <vector>

namespace trainer {

struct DistEnv {
  std::string launcher = "none";  // none | torchrun | openmpi | slurm
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool agent_store = false;  // torchrun hosts the TCPStore itself (TORCHELASTIC_USE_AGENT_STORE): every rank is a client
  int restart_count = 0;      // torchrun's TORCHELASTIC_RESTART_COUNT: the attempt, which keys the store's entries
};

// Throws ConfigError on inconsistent values (rank >= world size, non-numbers).
DistEnv parse_dist_env(const std::map<std::string, std::string>& env);
std::map<std::string, std::string> process_env();
// Intra-op (OpenMP) threads for a rank computing on the CPU: the machine's cores shared among the ranks on it, at
// least one each (with every rank's OpenMP team as large as the machine, the teams spin against each other: two
// ranks on two cores ran 4.5x slower). 0 means keep torch's default: the rank is alone on its machine, or
// OMP_NUM_THREADS says what the user wants.
int cpu_threads_per_rank(const DistEnv& d, const std::map<std::string, std::string>& env, int cores);
// Slurm's SLURM_TASKS_PER_NODE form, one count per node: "4(x2),3" -> {4, 4, 3}. Throws ConfigError.
std::vector<int> slurm_tasks_per_node(const std::string& value);
// "node[03-05,9],other" -> "node03"; "a,b" -> "a".
std::string first_slurm_host(const std::string& nodelist);

}  // namespace trainer
