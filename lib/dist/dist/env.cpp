#include "dist/env.h"

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
    d.local_world_size = to_int(env, "SLURM_NTASKS_PER_NODE", d.world_size);
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

}  // namespace trainer
