#include "distributed/rank_env.h"

#include <algorithm>
#include <cstdlib>

#include "core/check.h"
#include "core/strings.h"

extern char** environ;

namespace trainer {
namespace {

int to_int(const std::map<std::string, std::string>& env, const std::string& key, int fallback) {
  auto it = env.find(key);
  if (it == env.end() || it->second.empty()) return fallback;
  try {
    size_t pos = 0;
    const int v = std::stoi(it->second, &pos);
    if (pos == it->second.size()) return v;
  } catch (...) {
  }
  throw ConfigError(str_cat("environment variable ", key, "='", it->second, "' is not an integer"));
}

std::string get(const std::map<std::string, std::string>& env, const std::string& key, const std::string& fallback) {
  auto it = env.find(key);
  return it == env.end() || it->second.empty() ? fallback : it->second;
}

}  // namespace

std::vector<int> slurm_tasks_per_node(const std::string& v) {
  std::vector<int> out;
  for (const std::string& part : split(v, ',')) {
    const size_t paren = part.find('(');
    int count = 0, times = 1;
    try {
      size_t pos = 0;
      count = std::stoi(part.substr(0, paren), &pos);
      if (pos != part.substr(0, paren).size()) throw std::invalid_argument(part);
      if (paren != std::string::npos) {
        const std::string rep = part.substr(paren + 1);  // "x2)"
        if (rep.size() < 3 || rep[0] != 'x' || rep.back() != ')') throw std::invalid_argument(part);
        times = std::stoi(rep.substr(1, rep.size() - 2), &pos);
        if (pos != rep.size() - 2) throw std::invalid_argument(part);
      }
    } catch (const std::exception&) {
      throw ConfigError(str_cat("Slurm's tasks per node '", v, "': expected counts like 4(x2),3"));
    }
    if (count < 1 || times < 1) throw ConfigError(str_cat("Slurm's tasks per node '", v, "': counts must be >= 1"));
    out.insert(out.end(), static_cast<size_t>(times), count);
  }
  return out;
}

std::string first_slurm_host(const std::string& nodelist) {
  // the first entry ends at a comma outside brackets
  std::string first;
  int depth = 0;
  for (char c : nodelist) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) break;
    first += c;
  }
  const size_t b = first.find('[');
  if (b == std::string::npos) return first;
  std::string range = first.substr(b + 1, first.find(']') - b - 1);
  range = range.substr(0, range.find(','));
  range = range.substr(0, range.find('-'));
  return first.substr(0, b) + range;
}

DistEnv parse_dist_env(const std::map<std::string, std::string>& env) {
  DistEnv d;
  if (env.count("RANK") && env.count("WORLD_SIZE")) {
    d.launcher = "torchrun";
    d.rank = to_int(env, "RANK", 0);
    d.world_size = to_int(env, "WORLD_SIZE", 1);
    d.local_rank = to_int(env, "LOCAL_RANK", d.rank);
    d.local_world_size = to_int(env, "LOCAL_WORLD_SIZE", d.world_size);
    d.restart_count = to_int(env, "TORCHELASTIC_RESTART_COUNT", 0);
    const auto agent = env.find("TORCHELASTIC_USE_AGENT_STORE");
    d.agent_store = agent != env.end() && (agent->second == "True" || agent->second == "true" || agent->second == "1");
  } else if (env.count("OMPI_COMM_WORLD_RANK")) {
    d.launcher = "openmpi";
    d.rank = to_int(env, "OMPI_COMM_WORLD_RANK", 0);
    d.world_size = to_int(env, "OMPI_COMM_WORLD_SIZE", 1);
    d.local_rank = to_int(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0);
    d.local_world_size = to_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", d.world_size);
  } else if (env.count("SLURM_PROCID") && env.count("SLURM_NTASKS")) {
    d.launcher = "slurm";
    d.rank = to_int(env, "SLURM_PROCID", 0);
    d.world_size = to_int(env, "SLURM_NTASKS", 1);
    d.local_rank = to_int(env, "SLURM_LOCALID", 0);
    // ranks on this node: --ntasks-per-node when given, else this node's entry of the step's (the job's) counts
    // in Slurm's "4(x2),3" form; the world size only where Slurm says nothing else (one node)
    const int node = to_int(env, "SLURM_NODEID", 0);
    const std::string per_node = get(env, "SLURM_STEP_TASKS_PER_NODE", get(env, "SLURM_TASKS_PER_NODE", ""));
    d.local_world_size = d.world_size;
    if (env.count("SLURM_NTASKS_PER_NODE")) {
      d.local_world_size = to_int(env, "SLURM_NTASKS_PER_NODE", d.world_size);
    } else if (!per_node.empty()) {
      const std::vector<int> counts = slurm_tasks_per_node(per_node);
      if (node < 0 || node >= static_cast<int>(counts.size()))
        throw ConfigError(str_cat("slurm environment: SLURM_NODEID ", node, " but tasks per node '", per_node,
                                  "' lists ", counts.size(), " node(s)"));
      d.local_world_size = counts[static_cast<size_t>(node)];
    }
    if (!env.count("MASTER_ADDR") && env.count("SLURM_NODELIST"))
      d.master_addr = first_slurm_host(env.at("SLURM_NODELIST"));
  }
  d.master_addr = get(env, "MASTER_ADDR", d.master_addr);
  d.master_port = to_int(env, "MASTER_PORT", d.master_port);
  if (d.world_size < 1 || d.rank < 0 || d.rank >= d.world_size)
    throw ConfigError(str_cat(d.launcher, " environment: rank ", d.rank, " is not in [0, world size ", d.world_size,
                              ")"));
  if (d.local_rank < 0 || d.local_rank >= std::max(d.local_world_size, 1))
    throw ConfigError(str_cat(d.launcher, " environment: local rank ", d.local_rank, " is not below the local world size ",
                              d.local_world_size));
  if (d.master_port <= 0 || d.master_port > 65535)
    throw ConfigError(str_cat("MASTER_PORT ", d.master_port, " is not a port number"));
  return d;
}

std::map<std::string, std::string> process_env() {
  std::map<std::string, std::string> m;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) m[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return m;
}

int cpu_threads_per_rank(const DistEnv& d, const std::map<std::string, std::string>& env, int cores) {
  if (d.local_world_size <= 1 || env.count("OMP_NUM_THREADS")) return 0;
  return std::max(1, cores / d.local_world_size);
}

}  // namespace trainer
