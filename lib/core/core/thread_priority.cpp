#include "core/thread_priority.h"

#include <atomic>
#include <cerrno>
#include <fstream>
#include <mutex>
#include <string>

#ifdef __linux__
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace trainer {

namespace {
std::atomic<int> g_nice{0};
thread_local int t_taken = 0;  // what this thread last set (threads start at the process's, taken as 0)
// the data threads' CPUs: a new generation each time they change, taken by each data thread once
std::atomic<int> g_reserved{0}, g_generation{0};
thread_local int t_generation = 0;
#ifdef __linux__
std::mutex g_mask_mu;
cpu_set_t g_mask;
#endif

void take_data_cpus() {
#ifdef __linux__
  const int gen = g_generation.load(std::memory_order_acquire);
  if (gen == t_generation) return;
  std::lock_guard<std::mutex> lock(g_mask_mu);
  ::sched_setaffinity(0, sizeof(g_mask), &g_mask);  // a set the process may not use fails and changes nothing
  t_generation = gen;
#endif
}
}  // namespace

void set_data_thread_nice(int nice) { g_nice.store(nice < 0 ? 0 : nice > 19 ? 19 : nice); }

int data_thread_nice() { return g_nice.load(); }

void become_data_thread() {
  take_data_cpus();
  const int want = g_nice.load();
  if (want == t_taken) return;
#ifdef __linux__
  // raising one's own niceness needs no privilege; lowering it back may fail, which leaves the thread lower
  if (::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), want) == 0) t_taken = want;
#endif
}

void set_data_thread_reserved_cpus(int n) {
#ifdef __linux__
  cpu_set_t all, rest;
  CPU_ZERO(&all);
  if ((n <= 0 && g_generation.load() == 0) || ::sched_getaffinity(0, sizeof(all), &all) != 0) return;
  rest = all;
  int kept = 0;
  for (int c = 0; c < CPU_SETSIZE && kept < n; ++c)
    if (CPU_ISSET(c, &rest)) {
      CPU_CLR(c, &rest);
      ++kept;
    }
  const bool keep = n > 0 && CPU_COUNT(&rest) > 0;
  std::lock_guard<std::mutex> lock(g_mask_mu);
  const cpu_set_t& want = keep ? rest : all;
  if (g_generation.load() > 0 && CPU_EQUAL(&want, &g_mask)) return;  // loaders made again with the same setting
  g_mask = want;
  g_reserved.store(keep ? n : 0);
  g_generation.fetch_add(1, std::memory_order_release);
#else
  (void)n;
#endif
}

int data_thread_reserved_cpus() { return g_reserved.load(); }

ThreadSwitches this_thread_switches() {
  ThreadSwitches s;
  std::ifstream in("/proc/thread-self/status");
  for (std::string line; std::getline(in, line);) {
    const auto value = [&](const char* key) -> int64_t {
      const std::string k = std::string(key) + ":";
      return line.rfind(k, 0) == 0 ? std::stoll(line.substr(k.size())) : -1;
    };
    if (const int64_t v = value("voluntary_ctxt_switches"); v >= 0) s.voluntary = v;
    if (const int64_t v = value("nonvoluntary_ctxt_switches"); v >= 0) s.involuntary = v;
  }
  return s;
}

std::vector<int> this_thread_cpus() {
  std::vector<int> out;
#ifdef __linux__
  cpu_set_t s;
  CPU_ZERO(&s);
  if (::sched_getaffinity(0, sizeof(s), &s) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &s)) out.push_back(c);
#endif
  return out;
}

int this_thread_nice() {
#ifdef __linux__
  errno = 0;
  const int n = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)));
  return errno == 0 ? n : 0;
#else
  return 0;
#endif
}

}  // namespace trainer
