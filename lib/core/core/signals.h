// Graceful stop on SIGTERM / SIGINT (preemption): the first signal sets a flag that the training loop checks
// after each step (it then writes a checkpoint and exits with kExitPreempted); a second signal exits at once.
#pragma once

namespace trainer {

constexpr int kExitPreempted = 3;  // the process stopped on a signal after saving a checkpoint

void install_stop_handlers();
bool stop_requested();
void request_stop();  // as if a signal arrived (tests)

}  // namespace trainer
