#include "core/signals.h"

#include <time.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdint>

namespace trainer {
namespace {
std::atomic<int64_t> g_first_ns{0};  // CLOCK_MONOTONIC of the first signal; 0 = none yet

int64_t now_ns() {  // clock_gettime is async-signal-safe
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void say(const char* msg, size_t n) { (void)!::write(2, msg, n); }

void on_signal(int sig) {
  const int64_t t = now_ns();
  int64_t none = 0;
  if (g_first_ns.compare_exchange_strong(none, t)) {  // the first (also when two threads take signals at once)
    const char msg[] = "trainer: stop requested: finishing the step and writing a checkpoint (a signal more than "
                       "2 s from now exits at once, without it)\n";
    say(msg, sizeof(msg) - 1);
    return;
  }
  if (t - none < static_cast<int64_t>(kRepeatWindowSeconds * 1e9)) return;  // the same request
  const char msg[] = "trainer: second signal, exiting immediately without the checkpoint\n";
  say(msg, sizeof(msg) - 1);
  ::_exit(128 + sig);  // without unwinding (async-signal-safe)
}
}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

bool stop_requested() { return g_first_ns.load() != 0; }
}  // namespace trainer
