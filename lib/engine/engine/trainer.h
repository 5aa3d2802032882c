// The training engine: builds model, data, optimizer, scaler and schedule from a Config and runs the loop.
// The hot path, Trainer::train_step, reads top-down: forward under autocast, scaled backward, then on the
// accumulation's last micro-batch unscale + non-finite check, optional clipping, fused optimizer step, scaler update. Loss and accuracy
// accumulate on the device and are read only every log_interval steps.
#pragma once
#include <torch/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/background_writer.h"
#include "checkpoint/checkpoint.h"
#include "config/config.h"
#include "data/loader.h"
#include "engine/amp.h"
#include "engine/data_setup.h"
#include "engine/flops_budget.h"
#include "engine/run_context.h"
#include "engine/optimizer.h"
#include "engine/schedule.h"
#include "models/classifier.h"
#include "runtime/steps_ahead.h"

namespace trainer {

class RunDir;
class GradReducer;
class BatchMixer;
class StepGraph;
struct EpochTimings;

struct EvalResult {
  double loss = 0, top1 = 0, top5 = 0;  // mean loss, accuracies in percent
  int64_t samples = 0;                   // images evaluated
  int64_t bad_samples = 0;               // unreadable files left out (not counted in samples)
  double top1_hflip = -1;                // train.eval_hflip: top-1 of the mean softmax of image and mirror; else -1
};

struct FitResult {
  bool preempted = false;           // stopped by SIGTERM/SIGINT after writing a checkpoint
  int64_t steps = 0;                // optimizer steps taken
  int64_t skipped_steps = 0;        // steps skipped for non-finite gradients
  double train_seconds = 0;         // wall time of the training epochs (eval excluded)
  double last_train_loss = 0;
  EvalResult eval;                  // final evaluation (samples == 0 when there is no eval split)
};

class Trainer {
 public:
  // with_data=false skips loading datasets (benchmarks feed train_step themselves).
  Trainer(const Config& cfg, RunContext ctx, bool with_data = true);
  ~Trainer();
  FitResult fit();
  EvalResult evaluate();
  // One micro-batch; the last of each accumulation ends with an optimizer step. Returns true when it stepped.
  // group_size (read at an accumulation's first micro-batch): its micro-batches, min(accum_steps, what is left
  // of the epoch); each one's loss is divided by it. 0 = accum_steps.
  bool train_step(const Batch& batch, int64_t group_size = 0);
  // Device scalar: sum of micro-batch losses since the last take_train_loss(); reading it syncs.
  double take_train_loss();

  // The whole training state at a step boundary, and back (model, optimizer, scaler, RNG, position).
  CheckpointState capture_state(int64_t epoch, int64_t batch) const;
  void restore_state(const CheckpointState& s);

  Classifier model() const { return model_; }
  Optimizer& optimizer() { return *optimizer_; }
  // Data parallel: every rank holds rank 0's weights bit for bit, or this throws.
  void check_replicas();
  GradScaler& scaler() { return *scaler_; }
  Loader& train_loader() { return *train_loader_; }
  Loader* eval_loader() { return eval_loader_.get(); }  // null without an eval split
  int64_t steps() const { return step_; }
  const Config& config() const { return cfg_; }
  Precision precision() const { return precision_; }
  bool step_graph_active() const { return graph_ != nullptr; }  // train.cuda_graph: the step is captured
  // train.ema_decay: the averaged parameters and floating buffers, in the order of ema_names().
  const std::vector<torch::Tensor>& ema() const { return ema_; }
  const std::vector<std::string>& ema_names() const { return ema_names_; }
  // Evaluates the EMA weights (swapped into the model for the pass). Empty result when EMA is off.
  EvalResult evaluate_ema();

 private:
  struct IntervalReport {  // one log interval of fit()
    int64_t epoch = 0, images = 0, micro_steps = 0;
    double loss = 0, seconds = 0, wait_s = 0, copy_s = 0, compute_s = 0;  // host wait, copy and GPU time
    const FlopsBudget* flops = nullptr;                                     // for MFU
  };
  FitResult fit_epochs();  // fit() less its last word on a fatal error
  double report_interval(const IntervalReport& r);  // log line, metrics, scalars; returns this rank's img/s
  std::string evaluate_and_record(int64_t epoch, bool done, int64_t batch_in_epoch, FitResult& res);
  // steps: the epoch's optimizer steps (et.steps counts its micro-batches)
  void report_epoch(int64_t epoch, const EpochTimings& et, int64_t steps, double compute_s,
                    const std::string& eval_text);
  // Progressive resizing: new loaders where the epoch's training side (train_image_size) differs from the last.
  void use_train_size(int64_t epoch);
  // data.decode auto: the kind the training loader settled on ("cpu", "gpu"; "" while undecided or without data)
  std::string decided_decode() const;
  // (re)builds both loaders at `size` px with decode_ (evaluation's first: under auto it follows training's)
  void build_data(int64_t size);
  // a resumed run with data.decode auto takes the kind its checkpoint records instead of deciding again
  void resume_decode(const CheckpointState& s);
  void save_final_weights();
  // Queues the state for the background writer (written while training goes on); settle_checkpoint() waits for
  // it and reports a failed write (checkpoint.stop_on_error: throw, else warn).
  void save_checkpoint(int64_t epoch, int64_t batch);
  void settle_checkpoint();
  void save_best(int64_t epoch, int64_t batch, const EvalResult& e);  // checkpoint.keep_best
  // The checkpoint to resume from, read into *state ("" = none); agreed by all ranks.
  std::string find_resume(CheckpointState* state);
  void seed_model_noise(uint64_t micro_batch);
  void forward_backward(const torch::Tensor& images, const torch::Tensor& targets, bool last_micro);
  void optimizer_step();
  void check_nonfinite_run();  // reads the device counter: call at log points only
  // Whether to stop for a signal, agreed by all ranks at the same step, within about a second of the signal.
  bool stop_agreed();

  Config cfg_;
  RunContext ctx_;
  Precision precision_;
  Classifier model_;
  std::unique_ptr<Loader> train_loader_, eval_loader_;
  PipelineStats pipeline_at_epoch_;  // the training loader's counters at the epoch's start
  int64_t train_size_ = 0;  // the training batches' side
  std::string decode_;      // data.decode for the loaders built next: the config's, or what auto settled on
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<GradReducer> reducer_;  // data parallel: overlapped, bucketed gradient averaging
  std::unique_ptr<GradScaler> scaler_;
  std::unique_ptr<LrSchedule> schedule_;
  std::unique_ptr<RunDir> run_dir_;
  std::unique_ptr<BatchMixer> mixer_;    // train.mixup_alpha / cutmix_alpha
  std::unique_ptr<StepGraph> graph_;     // train.cuda_graph: the captured step
  std::unique_ptr<StepsAhead> ahead_;    // train.steps_ahead
  torch::Tensor lr_device_;              // CUDA: this step's lr, read by the optimizer kernels
  int64_t start_epoch_ = 0;      // where fit() begins (set by resume)
  int64_t start_batch_ = 0;
  int64_t step_ = 0;             // optimizer steps taken
  int64_t steps_per_epoch_ = 0;  // optimizer steps in an epoch of the training loader (0: no loader)
  int64_t start_step_ = 0;       // step_ when this process started (after a resume)
  int64_t micro_ = 0;            // micro-batches since the last optimizer step
  int64_t group_ = 1;            // micro-batches of the current accumulation (accum_steps, fewer at an epoch's end)
  double lr_ = 0;                // lr of the current step
  int64_t next_stop_check_ = 0;  // data parallel: the step of the next stop agreement (stop_agreed)
  int64_t stop_checked_steps_ = 0;                         // step_ at the last agreement
  std::chrono::steady_clock::time_point last_stop_check_;  // and its time
  torch::Tensor loss_sum_;       // device: sum of unscaled micro-batch losses since last read
  torch::Tensor loss_count_;     // device: micro-batches since last read
  torch::Tensor skipped_;        // device: steps skipped for non-finite grads
  torch::Tensor consecutive_;    // device: current run of consecutive skipped steps
  std::vector<torch::Tensor> ema_, ema_src_;  // EMA copies and the model tensors they follow
  std::vector<std::string> ema_names_;
  std::unique_ptr<BackgroundCheckpointWriter> checkpoints_ = std::make_unique<BackgroundCheckpointWriter>();
  // Runs f with the EMA weights in the model, then puts the trained weights back.
  template <class F> void with_ema_weights(F&& f);
};

}  // namespace trainer
