#include "engine/step_graph.h"

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include "core/check.h"
#ifdef TRAINER_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace trainer {

#ifdef TRAINER_WITH_CUDA
struct StepGraph::Impl {
  at::cuda::CUDAGraph graph;
};
#else
struct StepGraph::Impl {};
#endif

StepGraph::StepGraph() : impl_(std::make_unique<Impl>()) {}
StepGraph::~StepGraph() = default;

void StepGraph::capture(const torch::Tensor& images, const torch::Tensor& targets, const Body& body) {
  TRAINER_CHECK(!captured_, "the train step is already captured");
  TRAINER_CHECK(images.is_cuda(), "train.cuda_graph needs the batch on a CUDA device");
#ifdef TRAINER_WITH_CUDA
  images_ = images.clone(at::MemoryFormat::Preserve);
  targets_ = targets.clone();
  const c10::cuda::CUDAStream main = c10::cuda::getCurrentCUDAStream(images.device().index());
  // captured on a stream of the main stream's priority: the graph's kernels keep it when replayed
  const c10::cuda::CUDAStream side =
      c10::cuda::getStreamFromPool(/*isHighPriority=*/main.priority() < 0, images.device().index());
  at::cuda::CUDAEvent ready;
  ready.record(main);
  ready.block(side);
  const bool cache = at::autocast::is_autocast_cache_enabled();
  at::autocast::set_autocast_cache_enabled(false);
  try {
    c10::cuda::CUDAStreamGuard guard(side);
    // thread-local: the capture forbids unsafe CUDA calls (event queries, synchronisations, allocations) on this
    // thread only; the loaders' threads go on with theirs (in global mode one of them invalidates the capture)
    impl_->graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
    body(images_, targets_);
    impl_->graph.capture_end();
  } catch (...) {
    at::autocast::set_autocast_cache_enabled(cache);
    throw;
  }
  at::autocast::set_autocast_cache_enabled(cache);
  at::cuda::CUDAEvent done;
  done.record(side);
  done.block(main);
  // The eager steps before the capture left a step's worth of blocks cached in the ordinary pool, which the
  // replays never use (the graph has a pool of its own, which this keeps): give them back, so that what the run
  // reserves is the graph's step, not two steps' worth.
  c10::cuda::CUDACachingAllocator::emptyCache();
  captured_ = true;
#else
  (void)body;
  TRAINER_FAIL("train.cuda_graph: this build has no CUDA");
#endif
}

void StepGraph::replay(const torch::Tensor& images, const torch::Tensor& targets) {
  TRAINER_CHECK(captured_, "replay before capture");
  TRAINER_CHECK(images.sizes() == images_.sizes() && targets.sizes() == targets_.sizes(),
                "train.cuda_graph replays fixed shapes: the step was captured for images ", images_.sizes(),
                " and targets ", targets_.sizes(), ", got ", images.sizes(), " and ", targets.sizes(),
                " (set data.drop_last: true)");
  images_.copy_(images, /*non_blocking=*/true);
  targets_.copy_(targets, /*non_blocking=*/true);
#ifdef TRAINER_WITH_CUDA
  impl_->graph.replay();
#endif
}

}  // namespace trainer
