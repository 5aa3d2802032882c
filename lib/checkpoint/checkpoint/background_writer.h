// Checkpoints written off the training thread. submit() copies the state's tensors to host memory (training then
// goes on changing its own) and hands the copy to one thread, which writes it atomically (write_checkpoint) and
// then runs the job's follow-up (e.g. pruning older files). One write at a time: submit() first waits for the one
// before. A failed write's exception is kept and rethrown, once, by the next wait() or submit(); the destructor
// waits for the write in flight, so a file being written when the run stops is finished, not cut off.
#pragma once
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "checkpoint/checkpoint.h"

namespace trainer {

class BackgroundCheckpointWriter {
 public:
  BackgroundCheckpointWriter();
  ~BackgroundCheckpointWriter();
  BackgroundCheckpointWriter(const BackgroundCheckpointWriter&) = delete;
  BackgroundCheckpointWriter& operator=(const BackgroundCheckpointWriter&) = delete;

  // Waits for the previous write (rethrowing its error: `state` is then not written), copies `state` to host
  // memory and queues it for `path`; `then` runs on the writer thread after a successful write.
  void submit(const std::string& path, const CheckpointState& state, std::function<void()> then = {});
  // Returns once no write is in flight; rethrows the last failed write's exception.
  void wait();

 private:
  struct Job {
    std::string path;
    CheckpointState state;
    std::function<void()> then;
  };
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  bool busy_ = false, stop_ = false;
  Job job_;
  std::exception_ptr error_;
  std::thread thread_;
};

// `s` with every tensor copied to host memory (never sharing storage with the original).
CheckpointState host_copy(const CheckpointState& s);

}  // namespace trainer
