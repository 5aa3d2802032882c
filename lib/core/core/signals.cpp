#include "core/signals.h"

#include <unistd.h>

#include <atomic>
#include <csignal>

namespace trainer {
namespace {
std::atomic<int> g_signals{0};

void on_signal(int sig) {
  if (g_signals.fetch_add(1) >= 1) {
    // second signal: leave now, without unwinding (async-signal-safe)
    const char msg[] = "trainer: second signal, exiting immediately\n";
    (void)!::write(2, msg, sizeof(msg) - 1);
    ::_exit(128 + sig);
  }
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

bool stop_requested() { return g_signals.load() > 0; }
void request_stop() { g_signals.fetch_add(1); }

}  // namespace trainer
