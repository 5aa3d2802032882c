// Rendezvous variables of each launcher, table-driven.
#include <gtest/gtest.h>

#include "core/check.h"
#include "distributed/rank_env.h"
#include "distributed/process_group.h"

namespace trainer {
namespace {

struct Case {
  const char* name;
  std::map<std::string, std::string> env;
  DistEnv want;
};

TEST(DistEnv, LaunchersTable) {
  const std::vector<Case> cases = {
      {"none", {}, DistEnv{}},
      {"torchrun",
       {{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.5"},
        {"MASTER_PORT", "29400"}},
       {"torchrun", 3, 8, 1, 2, "10.0.0.5", 29400}},
      {"openmpi",
       {{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "16"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "5"},
        {"OMPI_COMM_WORLD_LOCAL_SIZE", "8"}, {"MASTER_ADDR", "head"}},
       {"openmpi", 5, 16, 5, 8, "head", 29500}},
      {"slurm",
       {{"SLURM_PROCID", "9"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "1"}, {"SLURM_NTASKS_PER_NODE", "8"},
        {"SLURM_NODELIST", "gpu[07-08,12],login1"}},
       {"slurm", 9, 16, 1, 8, "gpu07", 29500}},
      {"torchrun with its agent's store",
       {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29401"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"}},
       {"torchrun", 1, 2, 1, 2, "127.0.0.1", 29401, true}},
      {"torchrun, restarted twice",
       {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"},
        {"TORCHELASTIC_RESTART_COUNT", "2"}},
       {"torchrun", 1, 2, 1, 2, "127.0.0.1", 29500, true, 2}},
      {"slurm without --ntasks-per-node: this node's entry of the step's counts",
       {{"SLURM_PROCID", "9"}, {"SLURM_NTASKS", "11"}, {"SLURM_LOCALID", "1"}, {"SLURM_NODEID", "2"},
        {"SLURM_STEP_TASKS_PER_NODE", "4(x2),3"}, {"SLURM_TASKS_PER_NODE", "8(x2)"}, {"MASTER_ADDR", "h"}},
       {"slurm", 9, 11, 1, 3, "h", 29500}},
      {"slurm with the job's counts only",
       {{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"}, {"SLURM_NODEID", "1"},
        {"SLURM_TASKS_PER_NODE", "4(x2)"}, {"MASTER_ADDR", "h"}},
       {"slurm", 5, 8, 1, 4, "h", 29500}},
      {"torchrun wins over slurm",
       {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "4"}},
       {"torchrun", 0, 2, 0, 2, "127.0.0.1", 29500}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const DistEnv d = parse_dist_env(c.env);
    EXPECT_EQ(d.launcher, c.want.launcher);
    EXPECT_EQ(d.rank, c.want.rank);
    EXPECT_EQ(d.world_size, c.want.world_size);
    EXPECT_EQ(d.local_rank, c.want.local_rank);
    EXPECT_EQ(d.local_world_size, c.want.local_world_size);
    EXPECT_EQ(d.master_addr, c.want.master_addr);
    EXPECT_EQ(d.master_port, c.want.master_port);
    EXPECT_EQ(d.agent_store, c.want.agent_store);
    EXPECT_EQ(d.restart_count, c.want.restart_count);
  }
}

TEST(DistEnv, BadValuesAreConfigErrors) {
  EXPECT_THROW(parse_dist_env({{"RANK", "4"}, {"WORLD_SIZE", "4"}}), ConfigError);
  EXPECT_THROW(parse_dist_env({{"RANK", "x"}, {"WORLD_SIZE", "4"}}), ConfigError);
  EXPECT_THROW(parse_dist_env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}), ConfigError);
  EXPECT_THROW(parse_dist_env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_TASKS_PER_NODE", "2(y2)"}}),
               ConfigError);
  EXPECT_THROW(parse_dist_env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_NODEID", "3"},
                               {"SLURM_TASKS_PER_NODE", "1(x2)"}}),
               ConfigError);
}

// torchrun's agent keeps its store across restarts: each attempt's keys (Gloo addresses, NCCL ids) live under a
// prefix of their own, so a restarted rank never reads the failed attempt's.
TEST(DistEnv, EachTorchrunAttemptHasItsOwnStoreKeys) {
  DistEnv a, b;
  b.restart_count = 1;
  EXPECT_EQ(store_prefix(a), "trainer/attempt_0");
  EXPECT_EQ(store_prefix(b), "trainer/attempt_1");
}

TEST(DistEnv, SlurmTasksPerNode) {
  EXPECT_EQ(slurm_tasks_per_node("4(x2),3"), (std::vector<int>{4, 4, 3}));
  EXPECT_EQ(slurm_tasks_per_node("8"), (std::vector<int>{8}));
  EXPECT_EQ(slurm_tasks_per_node("2,1(x3)"), (std::vector<int>{2, 1, 1, 1}));
  EXPECT_THROW(slurm_tasks_per_node("4(x)"), ConfigError);
  EXPECT_THROW(slurm_tasks_per_node("0"), ConfigError);
  EXPECT_THROW(slurm_tasks_per_node("a"), ConfigError);
}

TEST(DistEnv, SlurmNodelists) {
  EXPECT_EQ(first_slurm_host("node[003-005]"), "node003");
  EXPECT_EQ(first_slurm_host("a,b"), "a");
  EXPECT_EQ(first_slurm_host("x[1,4]"), "x1");
  EXPECT_EQ(first_slurm_host("single"), "single");
}

TEST(DistEnv, CpuRanksShareTheMachinesCores) {
  const auto four_here = parse_dist_env({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"},
                                         {"LOCAL_WORLD_SIZE", "4"}});
  EXPECT_EQ(cpu_threads_per_rank(four_here, {}, 16), 4);
  EXPECT_EQ(cpu_threads_per_rank(four_here, {}, 6), 1) << "6 cores among 4 ranks: one each, not 1.5";
  EXPECT_EQ(cpu_threads_per_rank(four_here, {}, 2), 1) << "never fewer than one thread";
  EXPECT_EQ(cpu_threads_per_rank(four_here, {{"OMP_NUM_THREADS", "3"}}, 16), 0) << "the user's choice stands";
  EXPECT_EQ(cpu_threads_per_rank(parse_dist_env({}), {}, 16), 0) << "a process alone keeps torch's default";
}

}  // namespace
}  // namespace trainer
