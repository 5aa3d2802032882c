#include "checkpoint/background_writer.h"

#include <torch/torch.h>

#include <utility>

namespace trainer {

CheckpointState host_copy(const CheckpointState& s) {
  CheckpointState out = s;
  // layout as it is: write_checkpoint makes each tensor contiguous itself, on the writer thread
  for (auto& kv : out.tensors) kv.second = kv.second.detach().to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true);
  return out;
}

BackgroundCheckpointWriter::BackgroundCheckpointWriter() : thread_([this] { loop(); }) {}

BackgroundCheckpointWriter::~BackgroundCheckpointWriter() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !busy_; });
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void BackgroundCheckpointWriter::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !busy_; });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void BackgroundCheckpointWriter::submit(const std::string& path, const CheckpointState& state,
                                        std::function<void()> then) {
  wait();
  Job job{path, host_copy(state), std::move(then)};
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = std::move(job);
    busy_ = true;
  }
  cv_.notify_all();
}

void BackgroundCheckpointWriter::loop() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return busy_ || stop_; });
      if (!busy_) return;  // stopping, nothing queued
      job = std::move(job_);
    }
    std::exception_ptr error;
    try {
      write_checkpoint(job.path, job.state);
      if (job.then) job.then();
    } catch (...) {
      error = std::current_exception();
    }
    job = Job{};  // the host copy's memory goes before the next submit can make another
    {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = error;
      busy_ = false;
    }
    cv_.notify_all();
  }
}

}  // namespace trainer
