// Gradient averaging that overlaps backward, as DistributedDataParallel does but on c10d from C++.
//
// Parameters are grouped into flat buckets in reverse registration order (the order backward produces their
// gradients): a small first bucket so that communication starts early, then buckets of `bucket_bytes`. A
// post-accumulate-grad hook on every parameter counts it ready; when a bucket is complete it is flattened and its
// all-reduce launched at once on the process group's stream while backward goes on. Buckets are launched strictly
// in order so that every rank issues the same collectives in the same sequence. finish() launches what is left
// (parameters that got no gradient, or everything when overlap is off), waits for all buckets (device-side on
// NCCL) and writes the averages back into .grad.
//
// Accumulation: prepare(false) before the backward of a micro-step that is not the last makes the hooks do nothing
// (no_sync); gradients then accumulate locally and only the last micro-step's backward communicates.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace trainer {

class DistContext;

struct ReducerOptions {
  int64_t bucket_bytes = 25ll << 20;      // bucket size after the first
  int64_t first_bucket_bytes = 1ll << 20; // the first bucket (last layers), small so the first launch is early
  bool overlap = true;                    // launch from autograd hooks during backward (else all after it)
  bool bf16 = false;                      // send gradients as bf16 (halves the bytes; sums in bf16)
};

class GradReducer {
 public:
  GradReducer(DistContext& ctx, std::vector<torch::Tensor> params, ReducerOptions opts);
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // Before each backward: sync = true when this backward ends an optimizer step (the gradients are reduced).
  void prepare(bool sync);
  // After the backward of a sync step: every gradient holds the mean over ranks.
  void finish();

  // Bucket layout, for tests and logs: parameter indices (registration order) per bucket, in launch order.
  std::vector<std::vector<size_t>> buckets() const;
  // Buckets launched from hooks during the last backward (the rest were launched by finish()).
  int64_t launched_in_backward() const { return launched_in_backward_; }

 private:
  struct Bucket {
    std::vector<size_t> params;
    c10::ScalarType dtype;
    size_t pending = 0;
    torch::Tensor flat;
    std::function<void()> wait;
  };
  void on_ready(size_t param);
  void launch_ready_prefix();
  void launch(Bucket& b);

  DistContext& ctx_;
  std::vector<torch::Tensor> params_;
  ReducerOptions opts_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;
  std::vector<bool> seen_;
  size_t next_ = 0;  // first bucket not launched yet
  bool sync_ = false;
  int64_t launched_in_backward_ = 0;
  std::mutex mu_;
  struct Hooks;
  std::unique_ptr<Hooks> hooks_;
};

}  // namespace trainer
