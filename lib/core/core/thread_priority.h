// The data threads' CPU priority below the training thread's: a step whose host thread launches the GPU's work
// slows when the loader's threads take its core, though it never waits for a batch.
// Linux niceness per thread (setpriority on the thread id), and optionally CPUs the data threads keep off (affinity);
// elsewhere nothing changes.
#pragma once
#include <cstdint>
#include <vector>

namespace trainer {

// The niceness data threads take from now on (0 .. 19; 0 = the process's own): data.thread_nice.
void set_data_thread_nice(int nice);
int data_thread_nice();

// The calling thread takes the data threads' niceness, where it differs from what this thread last took. Each data
// thread calls it where it starts work (the pool's helpers at each call, which also serve `trainer pack`).
void become_data_thread();

// The calling thread's niceness (tests, logs); 0 where it cannot be read.
int this_thread_nice();

// The first `n` CPUs of the calling thread's CPU set kept for the training threads: data threads run on the rest from
// their next become_data_thread() (data.training_cores; Linux affinity). 0, or an `n` that leaves no CPU: the whole
// set again. The training threads are not pinned; the scheduler finds the kept CPUs idle.
void set_data_thread_reserved_cpus(int n);
int data_thread_reserved_cpus();

// The CPUs the calling thread may run on (tests, logs); empty where they cannot be read.
std::vector<int> this_thread_cpus();

// The calling thread's context switches so far (Linux /proc/thread-self/status; -1 where they cannot be read):
// voluntary (it waited), involuntary (the scheduler took its CPU for another thread).
struct ThreadSwitches {
  int64_t voluntary = -1, involuntary = -1;
};
ThreadSwitches this_thread_switches();

}  // namespace trainer
