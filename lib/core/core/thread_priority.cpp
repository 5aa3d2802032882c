#include "core/thread_priority.h"

#include <atomic>
#include <cerrno>

#ifdef __linux__
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace trainer {

namespace {
std::atomic<int> g_nice{0};
thread_local int t_taken = 0;  // what this thread last set (threads start at the process's, taken as 0)
}  // namespace

void set_data_thread_nice(int nice) { g_nice.store(nice < 0 ? 0 : nice > 19 ? 19 : nice); }

int data_thread_nice() { return g_nice.load(); }

void become_data_thread() {
  const int want = g_nice.load();
  if (want == t_taken) return;
#ifdef __linux__
  // raising one's own niceness needs no privilege; lowering it back may fail, which leaves the thread lower
  if (::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), want) == 0) t_taken = want;
#endif
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
