// Graceful stop on SIGTERM / SIGINT (preemption): the first signal sets a flag that the training loop checks
// after each step (it then writes a checkpoint and exits with kExitPreempted). Launchers and schedulers often
// deliver the same SIGTERM twice within milliseconds (GNU timeout, scancel with a forwarding launcher, torchrun),
// so every signal within kRepeatWindowSeconds of the first is the same request; one that comes later (a person
// insisting) exits at once, without the checkpoint.
#pragma once

namespace trainer {

constexpr int kExitPreempted = 3;  // the process stopped on a signal after saving a checkpoint
constexpr double kRepeatWindowSeconds = 2.0;

void install_stop_handlers();
bool stop_requested();

}  // namespace trainer
