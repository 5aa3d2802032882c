// The whole train step (forward, backward, unscale, optimizer, EMA) captured once as a CUDA graph and replayed:
// one launch per step instead of ~1,000, so the CPU never limits a fast GPU. Inputs are copied into static
// buffers before each replay; everything the step reads per step (learning rate, grad scale) lives in device
// tensors. Capture runs on a side stream with autocast's weight cache off, as torch.cuda.graph requires.
#pragma once
#include <torch/types.h>

#include <functional>
#include <memory>

namespace trainer {

class StepGraph {
 public:
  using Body = std::function<void(const torch::Tensor& images, const torch::Tensor& targets)>;
  StepGraph();
  ~StepGraph();
  bool captured() const { return captured_; }
  // Records body on static copies of images/targets. The body's kernels do not run: replay() runs them.
  void capture(const torch::Tensor& images, const torch::Tensor& targets, const Body& body);
  // Copies this step's inputs into the static buffers and launches the graph on the current stream.
  void replay(const torch::Tensor& images, const torch::Tensor& targets);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  torch::Tensor images_, targets_;
  bool captured_ = false;
};

}  // namespace trainer
