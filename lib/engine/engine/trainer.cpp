#include "engine/trainer.h"

#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>
#ifdef TRAINER_WITH_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#endif

#include <algorithm>
#include <chrono>
#include <thread>

#include "core/check.h"
#include "core/fs.h"
#include "core/random.h"
#include "core/signals.h"
#include "core/log.h"
#include "data/auto_loader.h"
#include "data/gpu_jpeg_decoder.h"
#include "data/image_loader.h"
#include "data/pipeline_report.h"
#include "distributed/process_group.h"
#include "distributed/reducer.h"
#include "models/batchnorm.h"
#include "observe/progress.h"
#include "observe/verdict.h"
#include "runtime/step_timer.h"
#include "engine/mix.h"
#include "engine/profiler.h"
#include "engine/step_graph.h"
#include <ATen/record_function.h>
#include "engine/run_dir.h"
#include "models/registry.h"
#include "models/weights.h"
#include "runtime/env.h"

namespace trainer {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Optimizer steps in an epoch of `batches` micro-batches: the last accumulation may be shorter than accum_steps
// and still steps (as timm does), so no gradient carries into the next epoch.
int64_t steps_in_epoch(int64_t batches, int64_t accum_steps) {
  return std::max<int64_t>((batches + accum_steps - 1) / accum_steps, 1);
}

}  // namespace

Trainer::Trainer(const Config& cfg, RunContext ctx, bool with_data) : cfg_(cfg), ctx_(ctx) {
  validate_config_for_run(cfg, ctx_.device.is_cuda(), ctx_.world_size);
  precision_ = parse_precision(cfg.train.precision);
  if (!ctx_.device.is_cuda() && precision_ == Precision::fp16) {
    log::warn("fp16 autocast needs CUDA; training in fp32 on the CPU");
    precision_ = Precision::fp32;
  }
  if (!ctx_.device.is_cuda() && precision_ == Precision::bf16) precision_ = Precision::fp32;  // CPU: fp32
  seed_all(cfg.run.seed);
  set_determinism(cfg.run.deterministic, cfg.train.cudnn_benchmark);

  // ---- model ----
  model_ = create_model(cfg.model, cfg.data.image_size);
  model_->to(ctx_.device);
  if (ctx_.device.is_cuda() && cfg.model.channels_last) to_channels_last(*model_);
  if (ctx_.dist) ctx_.dist->broadcast_module(*model_);  // every rank starts from rank 0's weights
  if (cfg.train.ema_decay > 0) {
    torch::NoGradGuard ng;
    for (const auto& kv : model_->named_parameters()) {
      ema_names_.push_back(kv.key());
      ema_src_.push_back(kv.value());
    }
    for (const auto& kv : model_->named_buffers())
      if (kv.value().is_floating_point()) {
        ema_names_.push_back(kv.key());
        ema_src_.push_back(kv.value());
      }
    for (const auto& t : ema_src_) ema_.push_back(t.detach().clone());
  }
  if (ctx_.dist && cfg.dist.sync_bn) {
    DistContext* d = ctx_.dist;
    const int n = enable_sync_batchnorm(*model_, [d](torch::Tensor& t) { d->all_reduce_sum(t); });
    if (n == 0) log::warn("dist.sync_bn: ", cfg.model.name, " has no batch norm layers");
    else log::info("dist.sync_bn: ", n, " batch norm layers compute statistics over ", d->world_size(), " ranks");
  }

  // ---- data ----
  if (with_data) {
    decode_ = cfg_.data.decode;
    build_data(train_image_size(cfg_.data, 0));
  }

  // ---- optimizer, scaler, schedule ----
  auto groups = make_param_groups(*model_, cfg.optim.weight_decay, cfg.optim.wd_exclude_norm_bias,
                                  model_->no_weight_decay());
  optimizer_ = std::make_unique<Optimizer>(std::move(groups), cfg.optim);
  if (ctx_.dist) {
    ReducerOptions ro;
    ro.bucket_bytes = cfg.dist.bucket_mb << 20;
    ro.first_bucket_bytes = static_cast<int64_t>(cfg.dist.first_bucket_mb * (1 << 20));
    ro.overlap = cfg.dist.overlap;
    ro.bf16 = cfg.dist.grad_compression == "bf16";
    reducer_ = std::make_unique<GradReducer>(*ctx_.dist, model_->parameters(), ro);
  }
  scaler_ = std::make_unique<GradScaler>(ctx_.device, precision_ == Precision::fp16);
  // optimizer steps an epoch, once; without a loader (bench on a resident batch, export) a nominal 1,000 batches
  // give the schedule its shape
  steps_per_epoch_ = train_loader_ ? steps_in_epoch(train_loader_->batches_per_epoch(), cfg.train.accum_steps) : 0;
  const int64_t steps_per_epoch =
      steps_per_epoch_ > 0 ? steps_per_epoch_ : steps_in_epoch(1000, cfg.train.accum_steps);
  const int64_t global_batch = cfg.data.batch_size * ctx_.world_size * cfg.train.accum_steps;
  const double peak_lr = scaled_lr(cfg.optim, global_batch);
  if (cfg.optim.lr_base_batch > 0 && ctx_.rank == 0)
    log::info("lr ", cfg.optim.lr, " x global batch ", global_batch, " / optim.lr_base_batch ", cfg.optim.lr_base_batch,
              " = ", peak_lr);
  ahead_ = std::make_unique<StepsAhead>(ctx_.device, static_cast<int>(cfg.train.steps_ahead));
  schedule_ = std::make_unique<LrSchedule>(cfg.optim, steps_per_epoch, steps_per_epoch * cfg.train.epochs, peak_lr);
  auto f = torch::TensorOptions().dtype(torch::kFloat32).device(ctx_.device);
  if (ctx_.device.is_cuda()) lr_device_ = torch::zeros({}, f);
  mixer_ = std::make_unique<BatchMixer>(cfg.train, cfg.run.seed);
  loss_sum_ = torch::zeros({}, f);
  loss_count_ = torch::zeros({}, f);
  skipped_ = torch::zeros({}, f);
  consecutive_ = torch::zeros({}, f);
}

Trainer::~Trainer() = default;

// ---- the train step ----
bool Trainer::train_step(const Batch& batch, int64_t group_size) {
  const int64_t k = cfg_.train.accum_steps;
  torch::Tensor images = batch.images.device() == ctx_.device ? batch.images : batch.images.to(ctx_.device, true);
  torch::Tensor targets = batch.labels.device() == ctx_.device ? batch.labels : batch.labels.to(ctx_.device, true);
  if (micro_ == 0) {
    group_ = group_size > 0 ? std::min(group_size, k) : k;
    lr_ = schedule_->lr_at(step_);
    if (lr_device_.defined()) lr_device_.fill_(lr_);  // what the kernels (and a captured graph) read
  }
  seed_model_noise(static_cast<uint64_t>(step_ * k + micro_));
  if (mixer_->enabled()) {  // MixUp/CutMix: soft targets; parameters from (seed, micro-batch number)
    const MixParams p = mixer_->draw(static_cast<uint64_t>(step_ * k + micro_), images.size(2), images.size(3));
    std::tie(images, targets) = mix_batch(images, targets, cfg_.model.num_classes, p);
  }
  if (cfg_.train.cuda_graph) {
    // a few eager steps first (cuDNN autotuning, optimizer state, allocator warm), then capture once, replay after
    constexpr int64_t kEagerSteps = 3;
    if (!graph_ && step_ >= start_step_ + kEagerSteps) {
      graph_ = std::make_unique<StepGraph>();
      graph_->capture(images, targets, [this](const torch::Tensor& x, const torch::Tensor& y) {
        forward_backward(x, y, /*last_micro=*/true);
        optimizer_step();
      });
      log::info("train.cuda_graph: step ", step_, " captured; later steps replay it");
    }
    if (graph_) {
      graph_->replay(images, targets);
      ahead_->mark();
      ++step_;
      return true;
    }
  }
  const bool last_micro = micro_ + 1 == group_;
  forward_backward(images, targets, last_micro);
  if (++micro_ < group_) return false;
  micro_ = 0;
  optimizer_step();
  ahead_->mark();
  ++step_;
  return true;
}

// Dropout and drop-path draw from the global generators, reseeded before every micro-batch from (run.seed, rank,
// micro-batch number): every rank draws its own masks (as timm's seed + rank), a run repeats itself, and a resumed
// run draws what the uninterrupted one drew, on every rank, without any generator state in the checkpoint.
void Trainer::seed_model_noise(uint64_t micro_batch) {
  const uint64_t s = mix_seed(mix_seed(cfg_.run.seed, static_cast<uint64_t>(ctx_.rank) + 1), micro_batch + 1) >> 1;
  {
    at::Generator g = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(g.mutex());
    g.set_current_seed(s);
  }
#ifdef TRAINER_WITH_CUDA
  if (ctx_.device.is_cuda()) {
    at::Generator g = at::cuda::detail::getDefaultCUDAGenerator(ctx_.device.index());
    std::lock_guard<std::mutex> lock(g.mutex());
    g.set_current_seed(s);  // a captured step reads the seed at each replay
  }
#endif
}

// Forward under autocast (cross-entropy runs in fp32 by autocast's policy; hard labels or soft targets), then
// the backward of loss / (micro-batches in this accumulation), scaled for fp16. Data parallel: only the last
// micro-step's backward communicates.
void Trainer::forward_backward(const torch::Tensor& images, const torch::Tensor& targets, bool last_micro) {
  const int64_t k = group_;
  torch::Tensor loss;
  {
    RECORD_USER_SCOPE("forward");
    AutocastGuard autocast(ctx_.device, precision_);
    torch::Tensor logits = model_->forward(images);
    loss = torch::nn::functional::cross_entropy(
        logits, targets, torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(cfg_.train.label_smoothing));
  }
  if (reducer_) reducer_->prepare(last_micro);
  {
    RECORD_USER_SCOPE("backward");
    scaler_->scale(k > 1 ? loss / k : loss).backward();
  }
  loss_sum_.add_(loss.detach());
  loss_count_.add_(1);
}

// Unscale (fp16) and check for inf/nan in one pass, clip, step (skipped on device when found), update the
// scale, free the grads, EMA. Nothing here reads the device from the host.
void Trainer::optimizer_step() {
  if (reducer_) {
    RECORD_USER_SCOPE("all-reduce");
    reducer_->finish();  // data parallel: the mean over ranks, before unscaling
  }
  RECORD_USER_SCOPE("optimizer");
  std::vector<torch::Tensor> grads = optimizer_->grads();
  scaler_->unscale_(grads);
  if (cfg_.optim.clip_grad_norm > 0) {
    torch::NoGradGuard ng;
    auto norms = at::_foreach_norm(grads, 2);
    auto total = torch::stack(norms).norm();
    auto coef = (cfg_.optim.clip_grad_norm / (total + 1e-6)).clamp_max(1.0);
    at::_foreach_mul_(grads, coef);
  }
  optimizer_->step(lr_, scaler_->found_inf(), lr_device_);
  skipped_.add_(scaler_->found_inf().squeeze());
  consecutive_.mul_(scaler_->found_inf().squeeze()).add_(scaler_->found_inf().squeeze());  // 0 after a good step
  scaler_->update();
  optimizer_->zero_grad();
  if (!ema_.empty()) {
    torch::NoGradGuard ng;
    at::_foreach_lerp_(ema_, ema_src_, 1.0 - cfg_.train.ema_decay);  // ema = d * ema + (1 - d) * weights
  }
}

double Trainer::take_train_loss() {
  const double count = loss_count_.item<double>();
  const double v = count > 0 ? loss_sum_.item<double>() / count : 0.0;
  loss_sum_.zero_();
  loss_count_.zero_();
  return v;
}

template <class F> void Trainer::with_ema_weights(F&& f) {
  torch::NoGradGuard ng;
  std::vector<torch::Tensor> trained;
  for (auto& t : ema_src_) trained.push_back(t.detach().clone());
  for (size_t i = 0; i < ema_.size(); ++i) ema_src_[i].detach().copy_(ema_[i]);
  try {
    f();
  } catch (...) {
    for (size_t i = 0; i < ema_.size(); ++i) ema_src_[i].detach().copy_(trained[i]);
    throw;
  }
  for (size_t i = 0; i < ema_.size(); ++i) ema_src_[i].detach().copy_(trained[i]);
}

EvalResult Trainer::evaluate_ema() {
  EvalResult r;
  if (ema_.empty()) return r;
  with_ema_weights([&] { r = evaluate(); });
  return r;
}

EvalResult Trainer::evaluate() {
  EvalResult r;
  if (!eval_loader_) return r;
  torch::NoGradGuard ng;
  model_->eval();
  auto f = torch::TensorOptions().dtype(torch::kFloat64).device(ctx_.device);
  auto loss_sum = torch::zeros({}, f), top1 = torch::zeros({}, f), top5 = torch::zeros({}, f);
  auto top1_hflip = torch::zeros({}, f);
  const bool hflip = cfg_.train.eval_hflip;
  int64_t n = 0, left_out = 0;
  eval_loader_->set_epoch(0);
  Batch b;
  while (eval_loader_->next(b)) {
    torch::Tensor images = b.images.to(ctx_.device, true), labels = b.labels.to(ctx_.device, true);
    // bad files come marked (index -1), not replaced: every readable image counts once
    std::vector<int64_t> good;
    for (size_t i = 0; i < b.indices.size(); ++i)
      if (b.indices[i] >= 0) good.push_back(static_cast<int64_t>(i));
    if (good.size() < b.indices.size()) {
      left_out += static_cast<int64_t>(b.indices.size() - good.size());
      if (good.empty()) continue;
      const torch::Tensor keep = torch::tensor(good, torch::kInt64).to(ctx_.device);
      images = images.index_select(0, keep);
      labels = labels.index_select(0, keep);
    }
    torch::Tensor logits, mirrored;
    {
      AutocastGuard autocast(ctx_.device, precision_);
      logits = model_->forward(images);
      if (hflip) mirrored = model_->forward(images.flip({3}));
    }
    logits = logits.to(torch::kFloat32);
    if (hflip) {
      const torch::Tensor p = logits.softmax(1) + mirrored.to(torch::kFloat32).softmax(1);
      top1_hflip.add_(p.argmax(1).eq(labels).sum());
    }
    loss_sum.add_(torch::nn::functional::cross_entropy(
        logits, labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)));
    const int64_t kk = std::min<int64_t>(5, logits.size(1));
    auto topk = std::get<1>(logits.topk(kk, 1));
    auto hit = topk.eq(labels.unsqueeze(1));
    top1.add_(hit.select(1, 0).sum());
    top5.add_(hit.any(1).sum());
    n += labels.size(0);
  }
  model_->train();
  // exact over ranks: sums of losses, hits and counts, never averages of percentages
  auto sums = torch::stack({loss_sum, top1, top5, torch::full({}, static_cast<double>(n), f),
                            torch::full({}, static_cast<double>(left_out), f), top1_hflip});
  if (ctx_.dist) ctx_.dist->all_reduce_sum(sums);
  sums = sums.cpu();
  const double total = sums[3].item<double>();
  r.samples = static_cast<int64_t>(total);
  r.bad_samples = static_cast<int64_t>(sums[4].item<double>());
  if (total > 0) {
    r.loss = sums[0].item<double>() / total;
    r.top1 = 100.0 * sums[1].item<double>() / total;
    r.top5 = 100.0 * sums[2].item<double>() / total;
    if (hflip) r.top1_hflip = 100.0 * sums[5].item<double>() / total;
  }
  return r;
}

bool Trainer::stop_agreed() {
  const bool local = stop_requested();
  if (!ctx_.dist) return local;
  // Ranks run the same steps in lockstep, so a check at a step chosen from values every rank holds alike is a
  // matching collective on every rank. The checks come about kStopCheckSeconds apart whatever the step time:
  // each one sums [stop flags, seconds since the last check] over ranks, and the next check's step follows from
  // those sums, the same on every rank. The one host sync each costs is negligible at that rate.
  constexpr double kStopCheckSeconds = 0.5;
  if (step_ < next_stop_check_) return false;
  const auto now = Clock::now();
  const bool timed = last_stop_check_ != Clock::time_point{};
  const double since = timed ? std::chrono::duration<double>(now - last_stop_check_).count() : 0;
  auto v = torch::tensor({local ? 1.0 : 0.0, since}, torch::TensorOptions().dtype(torch::kFloat64).device(ctx_.device));
  ctx_.dist->all_reduce_sum(v);
  v = v.cpu();
  const double seconds = v[1].item<double>() / ctx_.world_size;
  const int64_t steps = step_ - stop_checked_steps_;
  const double per_step = steps > 0 && seconds > 0 ? seconds / static_cast<double>(steps) : 0;
  const int64_t every = per_step > 0 ? std::clamp<int64_t>(static_cast<int64_t>(kStopCheckSeconds / per_step), 1, 10000) : 1;
  next_stop_check_ = step_ + every;
  stop_checked_steps_ = step_;
  last_stop_check_ = now;
  return v[0].item<double>() > 0;
}

void Trainer::check_nonfinite_run() {
  const int64_t k = cfg_.train.max_nonfinite_steps;
  if (k <= 0 || precision_ == Precision::fp16) return;  // fp16: the grad scaler owns skipping
  const int64_t run = static_cast<int64_t>(consecutive_.item<double>());
  if (run < k) return;
  std::string last = run_dir_ ? CheckpointDir(run_dir_->file("checkpoints")).latest_valid() : std::string();
  TRAINER_FAIL("the last ", run, " optimizer steps (up to step ", step_, ") all had non-finite gradients (limit ",
               "train.max_nonfinite_steps=", k, "): the run diverged; hint: lower optim.lr or enable ",
               "optim.clip_grad_norm. ", last.empty() ? std::string("No checkpoint was written.")
                                                      : "The last checkpoint is intact: " + last);
}

void Trainer::check_replicas() {
  const int64_t bad = ctx_.dist->count_diverged_replicas(*model_);
  TRAINER_CHECK(bad == 0, bad, " of ", ctx_.world_size, " ranks hold weights that differ from rank 0's after ", step_,
                " steps: data parallelism is broken (non-deterministic collective or a rank-local update)");
  log::info("weights identical on all ", ctx_.world_size, " ranks after ", step_, " steps");
}

// ---- checkpoints ----

CheckpointState Trainer::capture_state(int64_t epoch, int64_t batch) const {
  TRAINER_CHECK(micro_ == 0, "checkpoints are taken at optimizer-step boundaries");
  CheckpointState s;
  s.epoch = epoch;
  s.batch = batch;
  s.step = step_;
  s.config_yaml = config_to_yaml(cfg_);
  static const EnvInfo env = query_env();
  s.extra["trainer_version"] = env.trainer_version;
  s.extra["git_sha"] = env.git_sha;
  if (const std::string d = decided_decode(); !d.empty()) s.extra["data.decode"] = d;  // resume_decode
  for (auto& kv : state_dict(*model_)) s.tensors.emplace_back("model." + kv.first, kv.second);
  for (auto& kv : optimizer_->state()) s.tensors.emplace_back("optim." + kv.first, kv.second);
  for (size_t i = 0; i < ema_.size(); ++i) s.tensors.emplace_back("ema." + ema_names_[i], ema_[i]);
  s.tensors.emplace_back("scaler.scale", scaler_->scale_tensor());
  s.tensors.emplace_back("scaler.growth_tracker", scaler_->growth_tracker());
  s.tensors.emplace_back("train.skipped", skipped_);
  s.tensors.emplace_back("train.world_size", torch::tensor(static_cast<int64_t>(ctx_.world_size)));
  s.tensors.emplace_back("rng.cpu", at::detail::getDefaultCPUGenerator().get_state());
#ifdef TRAINER_WITH_CUDA
  if (ctx_.device.is_cuda())
    s.tensors.emplace_back("rng.cuda", at::cuda::detail::getDefaultCUDAGenerator(ctx_.device.index()).get_state());
#endif
  return s;
}

void Trainer::restore_state(const CheckpointState& s) {
  std::vector<std::pair<std::string, torch::Tensor>> model;
  std::map<std::string, torch::Tensor> optim, rest;
  for (const auto& kv : s.tensors) {
    if (starts_with(kv.first, "model.")) model.emplace_back(kv.first.substr(6), kv.second);
    else if (starts_with(kv.first, "optim.")) optim[kv.first.substr(6)] = kv.second;
    else rest[kv.first] = kv.second;
  }
  load_state_dict(*model_, std::move(model), LoadMode::strict, "checkpoint");
  {
    torch::NoGradGuard ng;
    for (size_t i = 0; i < ema_.size(); ++i) {
      auto it = rest.find("ema." + ema_names_[i]);
      if (it == rest.end()) {  // a checkpoint from a run without EMA: start the average here
        ema_[i].copy_(ema_src_[i]);
        continue;
      }
      TRAINER_CHECK(it->second.sizes() == ema_[i].sizes(), "checkpoint: ema.", ema_names_[i], " has shape ",
                    it->second.sizes(), ", the model ", ema_[i].sizes());
      ema_[i].copy_(it->second);
    }
  }
  optimizer_->load_state(optim);
  TRAINER_CHECK(rest.count("scaler.scale") && rest.count("scaler.growth_tracker") && rest.count("rng.cpu"),
                "checkpoint lacks scaler or RNG state");
  scaler_->load(rest.at("scaler.scale"), rest.at("scaler.growth_tracker"));
  if (rest.count("train.skipped")) skipped_.copy_(rest.at("train.skipped"));
  {
    at::Generator g = at::detail::getDefaultCPUGenerator();  // a handle: shares the default generator
    std::lock_guard<std::mutex> lock(g.mutex());
    g.set_state(rest.at("rng.cpu"));
  }
#ifdef TRAINER_WITH_CUDA
  if (ctx_.device.is_cuda() && rest.count("rng.cuda")) {
    at::Generator g = at::cuda::detail::getDefaultCUDAGenerator(ctx_.device.index());
    std::lock_guard<std::mutex> lock(g.mutex());
    g.set_state(rest.at("rng.cuda"));
  }
#endif
  step_ = s.step;
  micro_ = 0;
  start_epoch_ = s.epoch;
  start_batch_ = s.batch;
  const int64_t saved_world = rest.count("train.world_size") ? rest.at("train.world_size").item<int64_t>() : 1;
  if (saved_world != ctx_.world_size) {
    // Rank r trains on every W-th sample of the epoch's permutation, so after b batches of B the job has used
    // the first b*B*W samples: on W' ranks that is batch b*W/W'. Steps are re-based on the new steps per epoch.
    const int64_t used = s.batch * saved_world;
    start_batch_ = used / ctx_.world_size / cfg_.train.accum_steps * cfg_.train.accum_steps;
    if (start_batch_ * ctx_.world_size != used)
      log::warn("resuming ", saved_world, " ranks' checkpoint on ", ctx_.world_size, " ranks: the epoch position ",
                s.batch, " x ", saved_world, " is not a whole number of batches; ",
                "some samples are trained again");
    const int64_t spe = std::max<int64_t>(steps_per_epoch_, 1);
    step_ = s.epoch * spe + start_batch_ / cfg_.train.accum_steps;
    log::info("checkpoint written by ", saved_world, " rank(s), resumed on ", ctx_.world_size, ": epoch ",
              s.epoch + 1, " continues at batch ", start_batch_, ", step ", step_);
  }  start_step_ = step_;
  graph_.reset();  // a captured step would use the optimizer state just replaced
}

void Trainer::save_checkpoint(int64_t epoch, int64_t batch) {
  if (!ctx_.writer()) return;
  settle_checkpoint();
  const CheckpointDir dir(run_dir_->file("checkpoints"));
  const std::string path = dir.path_for(step_);
  const int64_t keep = cfg_.checkpoint.keep_last;
  try {
    fs::make_dirs(dir.dir());
    checkpoints_->submit(path, capture_state(epoch, batch), [dir, keep] { dir.prune(keep); });
    log::debug("checkpoint ", path, " queued");
  } catch (const Error& e) {
    if (cfg_.checkpoint.stop_on_error) throw;
    log::warn("checkpoint failed, the previous one is kept: ", e.what());
  }
}

void Trainer::settle_checkpoint() {
  try {
    checkpoints_->wait();
  } catch (const Error& e) {
    if (cfg_.checkpoint.stop_on_error) throw;
    log::warn("checkpoint failed, the previous one is kept: ", e.what());
  }
}

void Trainer::save_best(int64_t epoch, int64_t batch, const EvalResult& e) {
  if (!ctx_.writer()) return;
  const std::string& m = cfg_.checkpoint.best_metric;
  const double value = m == "top1" ? e.top1 : m == "top5" ? e.top5 : e.loss;
  BestCheckpoints best(run_dir_->file("checkpoints/best"), m, cfg_.checkpoint.keep_best);
  if (!best.qualifies(value)) return;
  const std::string path = best.path_for(value, step_);
  try {
    fs::make_dirs(fs::parent_path(path));
    write_checkpoint(path, capture_state(epoch, batch));
    best.prune();
    log::info("best checkpoint (", m, " ", value, "): ", path);
  } catch (const Error& err) {
    if (cfg_.checkpoint.stop_on_error) throw;
    log::warn("best checkpoint failed, the previous ones are kept: ", err.what());
  }
}

// Rank 0 picks the checkpoint (checkpoint.resume: auto = the newest that verifies in the run folder) and tells the
// others its step; each of them reads that step from its own run folder (a shared filesystem, or a copy of rank
// 0's checkpoints/), or the named file, which must hold the same step. When any rank cannot, every rank stops
// with the reason: ranks never train on from different states.
std::string Trainer::find_resume(CheckpointState* state) {
  const std::string& r = cfg_.checkpoint.resume;
  if (r.empty()) return "";
  const CheckpointDir dir(fs::join_path(fs::join_path(cfg_.run.out_dir, cfg_.run.name), "checkpoints"));
  // reads `path` into *state; "" or why it could not
  auto load = [&](const std::string& path) -> std::string {
    try {
      *state = read_checkpoint(path);
      return "";
    } catch (const Error& e) {
      return e.what();
    }
  };
  std::string path, problem;
  if (ctx_.rank == 0) {
    path = r == "auto" ? dir.latest_valid() : r;
    if (path.empty()) log::info("resume auto: no checkpoint in ", dir.dir());
    else problem = load(path);
  }
  if (!ctx_.dist) {
    if (!problem.empty()) TRAINER_FAIL(problem);  // a named path must verify, or the run stops
    return path;
  }
  // rank 0's choice: [step or -1, whether it failed]
  auto f = torch::TensorOptions().dtype(torch::kFloat64).device(ctx_.device);
  auto choice = ctx_.rank == 0 ? torch::tensor({path.empty() || !problem.empty() ? -1.0 : double(state->step),
                                                problem.empty() ? 0.0 : 1.0}, f)
                               : torch::zeros({2}, f);
  ctx_.dist->all_reduce_sum(choice);
  choice = choice.cpu();
  const int64_t step = static_cast<int64_t>(choice[0].item<double>());
  if (choice[1].item<double>() > 0) {
    if (ctx_.rank == 0) TRAINER_FAIL(problem);
    TRAINER_FAIL("rank 0 could not read the checkpoint ", r, " (see its message); every rank stops");
  }
  if (ctx_.rank != 0 && step >= 0) {
    path = r == "auto" ? dir.path_for(step) : r;
    problem = load(path);
    if (problem.empty() && state->step != step)
      problem = str_cat(path, " holds step ", state->step, ", rank 0's checkpoint step ", step);
  } else if (ctx_.rank != 0 && r == "auto" && !dir.list().empty()) {
    log::warn("resume auto: rank 0 found no checkpoint, so this rank starts fresh too although ", dir.dir(),
              " holds some (each rank reads its own run folder)");
  }
  auto failed = torch::full({1}, problem.empty() ? 0.0 : 1.0, f);
  ctx_.dist->all_reduce_sum(failed);
  const int64_t bad = static_cast<int64_t>(failed.item<double>());
  if (!problem.empty())
    TRAINER_FAIL("rank ", ctx_.rank, " cannot resume from step ", step, ", which rank 0 resumes from: ", problem,
                 "; hint: every rank reads checkpoints from its own run folder: put run.out_dir on a shared ",
                 "filesystem or copy rank 0's checkpoints/ to every host");
  TRAINER_CHECK(bad == 0, bad, " rank(s) cannot resume from step ", step, ", which rank 0 resumes from (see their ",
                "messages); every rank stops");
  return path;
}

// ---- what fit() reports ----

// One log interval: the log line, a metrics.jsonl record and TensorBoard scalars. Returns this rank's img/s.
double Trainer::report_interval(const IntervalReport& r) {
  const int64_t epochs = cfg_.train.epochs;
  const double rate = r.images / r.seconds;  // this rank's; ranks run in lockstep, so global = rate x W
  const double per_step = 1e3 / std::max<int64_t>(r.micro_steps, 1);
  const GpuMemory mem = gpu_memory(ctx_.device);
  const double scale = scaler_->enabled() ? scaler_->scale_tensor().item<double>() : 0.0;
  const double mfu = r.flops ? r.flops->mfu(rate) : 0.0;
  std::string line = strprintf("epoch %lld/%lld step %lld loss %.4f lr %.4g | %.0f img/s",
                               static_cast<long long>(r.epoch + 1), static_cast<long long>(epochs),
                               static_cast<long long>(step_), r.loss, lr_, rate * ctx_.world_size);
  if (ctx_.world_size > 1) line += strprintf(" (%.0f per GPU)", rate);
  line += strprintf(" | step %.1f ms: data wait %.1f", r.seconds * per_step, per_step * r.wait_s);
  if (ctx_.device.is_cuda()) line += strprintf(", copy %.1f, GPU %.1f", per_step * r.copy_s, per_step * r.compute_s);
  else line += strprintf(", compute %.1f", per_step * r.compute_s);
  if (ctx_.device.is_cuda())
    line += strprintf(" | mem %.1f/%.1f GiB (peak %.1f)", mem.allocated_gib, mem.reserved_gib, mem.peak_gib);
  if (scale > 0) line += strprintf(" | scale %.0f", scale);
  if (mfu > 0) line += strprintf(" | MFU %.1f%%", 100 * mfu);
  log::info(line);
  run_dir_->append_metrics(MetricsRow("train", step_, r.epoch)
                               .add("loss", r.loss)
                               .add("lr", lr_)
                               .add("img_per_s", rate * ctx_.world_size)
                               .add("img_per_s_per_rank", rate)
                               .add("step_ms", r.seconds * per_step)
                               .add("data_wait_ms", per_step * r.wait_s)
                               .add("copy_ms", per_step * r.copy_s)
                               .add("compute_ms", per_step * r.compute_s)
                               .add("mem_allocated_gib", mem.allocated_gib)
                               .add("mem_reserved_gib", mem.reserved_gib)
                               .add("mem_peak_gib", mem.peak_gib)
                               .add("grad_scale", scale)
                               .add("mfu", mfu)
                               .line());
  std::vector<std::pair<std::string, double>> tb = {
      {"train/loss", r.loss}, {"train/lr", lr_}, {"perf/img_per_s", rate * ctx_.world_size},
      {"perf/data_wait_ms", per_step * r.wait_s}, {"perf/compute_ms", per_step * r.compute_s}};
  if (ctx_.device.is_cuda()) {
    tb.push_back({"perf/copy_ms", per_step * r.copy_s});
    tb.push_back({"memory/allocated_gib", mem.allocated_gib});
    tb.push_back({"memory/peak_gib", mem.peak_gib});
  }
  if (scale > 0) tb.push_back({"train/grad_scale", scale});
  if (mfu > 0) tb.push_back({"perf/mfu", mfu});
  run_dir_->scalars(step_, tb);
  return rate;
}

// The evaluation at the end of an epoch: metrics, scalars, the EMA's evaluation, keep_best. Returns the text
// the epoch's log line carries.
std::string Trainer::evaluate_and_record(int64_t epoch, bool done, int64_t batch_in_epoch, FitResult& res) {
  std::string eval_text;
  res.eval = evaluate();
  if (res.eval.samples == 0) return eval_text;
  eval_text = strprintf(" | eval loss %.4f top1 %.2f%% top5 %.2f%%", res.eval.loss, res.eval.top1, res.eval.top5);
  if (res.eval.top1_hflip >= 0) eval_text += strprintf(" (with mirror %.2f%%)", res.eval.top1_hflip);
  if (res.eval.bad_samples > 0) {
    eval_text += strprintf(" (%lld unreadable left out)", static_cast<long long>(res.eval.bad_samples));
    log::warn("evaluation left out ", res.eval.bad_samples, " unreadable file(s) (see the warnings above); its ",
              "figures are over the other ", res.eval.samples);
  }
  MetricsRow row("eval", step_, epoch);
  row.add("loss", res.eval.loss).add("top1", res.eval.top1).add("top5", res.eval.top5);
  row.add("samples", res.eval.samples).add("bad_samples", res.eval.bad_samples);
  if (res.eval.top1_hflip >= 0) row.add("top1_hflip", res.eval.top1_hflip);
  run_dir_->append_metrics(row.line());
  run_dir_->scalars(step_, {{"eval/loss", res.eval.loss}, {"eval/top1", res.eval.top1}, {"eval/top5", res.eval.top5}});
  if (!ema_.empty()) {
    const EvalResult e = evaluate_ema();
    eval_text += strprintf(" | EMA top1 %.2f%%", e.top1);
    if (e.top1_hflip >= 0) eval_text += strprintf(" (with mirror %.2f%%)", e.top1_hflip);
    MetricsRow ema_row("eval_ema", step_, epoch);
    ema_row.add("loss", e.loss).add("top1", e.top1).add("top5", e.top5).add("samples", e.samples);
    if (e.top1_hflip >= 0) ema_row.add("top1_hflip", e.top1_hflip);
    run_dir_->append_metrics(ema_row.line());
    run_dir_->scalars(step_, {{"eval_ema/loss", e.loss}, {"eval_ema/top1", e.top1}});
  }
  if (cfg_.checkpoint.keep_best > 0) save_best(done ? epoch : epoch + 1, done ? batch_in_epoch : 0, res.eval);
  return eval_text;
}

// The end of an epoch: its log line, a metrics.jsonl record, scalars, bottleneck verdicts, the bad-file count.
void Trainer::report_epoch(int64_t epoch, const EpochTimings& et, int64_t steps, double compute_s,
                           const std::string& eval_text) {
  const GpuMemory mem = gpu_memory(ctx_.device);
  const double img_per_s = ctx_.world_size * et.images / et.wall_s;
  const double wait_pct = et.wall_s > 0 ? 100.0 * et.data_wait_s / et.wall_s : 0.0;
  // the host's wait is not the GPU's: with a full launch queue (a CUDA graph) the host waits while the GPU works
  const std::string starved = et.starved_steps < 0 ? std::string()
                                                   : strprintf("; GPU idle for data before %lld of %lld batches",
                                                               static_cast<long long>(et.starved_steps),
                                                               static_cast<long long>(et.steps));
  log::info(strprintf("epoch %lld done in %.2f s (%.0f img/s, data wait %.1f%%%s)%s%s",
                      static_cast<long long>(epoch + 1), et.wall_s, img_per_s, wait_pct, starved.c_str(),
                      eval_text.c_str(),
                      ctx_.device.is_cuda() ? strprintf(" | GPU mem peak %.2f GiB", mem.peak_gib).c_str() : ""));
  run_dir_->append_metrics(MetricsRow("epoch", step_, epoch)
                               .add("seconds", et.wall_s)
                               .add("img_per_s", img_per_s)
                               .add("data_wait_pct", wait_pct)
                               .add("compute_s", compute_s)
                               .add("copy_s", et.copy_s)
                               .add("gpu_idle_steps", std::max<int64_t>(et.drained_steps, 0))
                               .add("gpu_starved_steps", std::max<int64_t>(et.starved_steps, 0))
                               .add("steps", steps)
                               .add("micro_batches", et.steps)
                               .add("bad_samples", train_loader_->bad_samples())
                               .line());
  run_dir_->scalars(step_, {{"epoch/img_per_s", img_per_s}, {"epoch/data_wait_pct", wait_pct}});
  const PipelineStats ps = train_loader_->pipeline_stats();
  if (ps.decode == DecodeKind::gpu) {
    const std::string d =
        gpu_decode_report(ps.gpu, pipeline_at_epoch_.gpu, 1e3 * et.wall_s / std::max<int64_t>(et.steps, 1));
    if (!d.empty()) log::info(d);
  }
  for (const auto& v : bottleneck_verdicts(et)) log::warn(v);
  if (train_loader_->bad_samples() > 0)
    log::warn(train_loader_->bad_samples(), " bad files so far were skipped and replaced (see the warnings above)");
}

void Trainer::use_train_size(int64_t epoch) {
  const int64_t size = train_image_size(cfg_.data, epoch);
  if (size == train_size_) return;
  if (ctx_.rank == 0)
    log::info("epoch ", epoch + 1, ": training at ", size, " px (progressive resizing, from ", train_size_,
              "; evaluation at ", cfg_.data.image_size, ")");
  if (const std::string d = decided_decode(); decode_ == "auto" && !d.empty()) decode_ = d;  // keep the decision
  build_data(size);
}

void Trainer::build_data(int64_t size) {
  eval_loader_.reset();  // first: with data.decode auto it follows the training loader
  train_loader_.reset();
  Config c = cfg_;
  c.data.decode = decode_;
  Loaders l = build_loaders(c, model_->data_defaults(), ctx_, size);
  train_loader_ = std::move(l.train);
  eval_loader_ = std::move(l.eval);
  train_size_ = size;
}

std::string Trainer::decided_decode() const {
  if (!train_loader_ || train_loader_->deciding()) return {};
  switch (train_loader_->pipeline_stats().decode) {
    case DecodeKind::cpu: return "cpu";
    case DecodeKind::gpu: return "gpu";
    default: return {};
  }
}

void Trainer::resume_decode(const CheckpointState& s) {
  const auto it = s.extra.find("data.decode");
  // on the CPU auto is the CPU path, nothing to carry over
  if (decode_ != "auto" || !train_loader_ || !ctx_.device.is_cuda() || it == s.extra.end()) return;
  const std::string& kind = it->second;
  if (kind != "cpu" && kind != "gpu") return;
  if (kind == "gpu" && !gpu_decode_available()) {  // resumed with a build that cannot
    log::info("data.decode auto: the checkpoint's run decoded on the GPU, which this run cannot; deciding again");
    return;
  }
  decode_ = kind;
  build_data(train_size_);
  log::info("data.decode auto: ", kind, ", as the run decided before its checkpoint");
}

// model.safetensors (and model_ema.safetensors) in the run folder
void Trainer::save_final_weights() {
  save_weights(*model_, run_dir_->file("model.safetensors"),
               {{"model", cfg_.model.name}, {"num_classes", std::to_string(cfg_.model.num_classes)}});
  if (!ema_.empty())
    with_ema_weights([&] {
      save_weights(*model_, run_dir_->file("model_ema.safetensors"),
                   {{"model", cfg_.model.name}, {"num_classes", std::to_string(cfg_.model.num_classes)},
                    {"ema_decay", strprintf("%g", cfg_.train.ema_decay)}});
    });
}

// ---- the loop ----
FitResult Trainer::fit() {
  try {
    return fit_epochs();
  } catch (const std::exception& e) {
    // main() prints it on the console; train.log gets it too while the run folder is open
    log::write_file(log::Level::error, str_cat("fatal: ", e.what()));
    throw;
  }
}

FitResult Trainer::fit_epochs() {
  CheckpointState resumed;
  const std::string from = find_resume(&resumed);
  const RunDir::Start start = !from.empty()                        ? RunDir::Start::resume
                              : cfg_.checkpoint.resume == "auto" ? RunDir::Start::restart
                                                                 : RunDir::Start::fresh;
  run_dir_ = std::make_unique<RunDir>(cfg_, ctx_.writer(), start);
  if (!from.empty()) {
    restore_state(resumed);
    resume_decode(resumed);
    log::info("resumed from ", from, " at epoch ", resumed.epoch + 1, ", batch ", resumed.batch, ", step ", step_);
  }
  if (start != RunDir::Start::fresh) run_dir_->supersede_after(step_);
  install_stop_handlers();
  const int64_t epochs = cfg_.train.epochs;
  const int64_t steps_per_epoch = steps_per_epoch_;
  log::info("run folder ", run_dir_->path(), " | model ", cfg_.model.name, " (", model_->parameter_count() / 1e6,
            "M params) on ", ctx_.device.str(),
            ctx_.device.is_cuda() ? str_cat(" (", cuda_work_queues(), " hardware work queues)") : "", ", ",
            precision_name(precision_), " | ",
            train_loader_->samples_per_epoch(), " samples/epoch, ", steps_per_epoch, " steps/epoch x ", epochs,
            " epochs");

  // ---- what the run reports: GPU-event step timing, MFU, progress bar, profiler ----
  StepTimer timer(ctx_.device);
  // the model's FLOPs at the training side (progressive resizing: convolutions scale with the pixel count)
  auto budget_now = [&] {
    const double side = static_cast<double>(train_size_ > 0 ? train_size_ : cfg_.data.image_size);
    const double area = side * side / (static_cast<double>(cfg_.data.image_size) * cfg_.data.image_size);
    return flops_budget(model_->flops_per_image() * area, ctx_.device, precision_ != Precision::fp32);
  };
  FlopsBudget flops;  // set at each epoch's start
  const bool show_bar = ctx_.writer() && cfg_.run.progress != "never";
  ProgressBar bar(stderr, show_bar && cfg_.run.progress == "always");
  if (!show_bar) bar.done();
  StepProfiler profiler(parse_profile_range(cfg_.run.profile), run_dir_->file("trace.json"), ctx_.device);
  const auto t_run = Clock::now();
  const int64_t step_at_start = step_;
  // the bar moves every step (drawn at most ten times a second); loss and img/s change at log points, the one sync
  ProgressState ps;
  const double total_steps = cfg_.train.max_steps > 0
                                 ? std::min<double>(cfg_.train.max_steps, epochs * steps_per_epoch)
                                 : static_cast<double>(epochs * steps_per_epoch);
  auto show_progress = [&](int64_t epoch, int64_t batch_in_epoch) {
    ps.epoch = epoch + 1;
    ps.epochs = epochs;
    ps.step = batch_in_epoch / cfg_.train.accum_steps;
    ps.steps = steps_per_epoch;
    const double done_steps = static_cast<double>(step_ - step_at_start);
    ps.eta_s = done_steps > 0 ? seconds_since(t_run) / done_steps * (total_steps - step_) : -1;
    bar.update(ps);
  };

  FitResult res;
  model_->train();
  bool done = false;
  for (int64_t epoch = start_epoch_; epoch < epochs && !done; ++epoch) {
    const int64_t first_batch = epoch == start_epoch_ ? start_batch_ : 0;
    use_train_size(epoch);
    flops = budget_now();
    train_loader_->set_epoch(epoch, first_batch);
    int64_t batch_in_epoch = first_batch;
    synchronize(ctx_.device);
    timer.take_seconds();
    const double copy_at_epoch = train_loader_->copy_seconds();
    pipeline_at_epoch_ = train_loader_->pipeline_stats();
    // data.decode auto: the epoch's stage figures mean something only if it used one path throughout
    const bool deciding_at_epoch = train_loader_->deciding();
    const std::string decision_at_epoch = train_loader_->decision();
    const auto t_epoch = Clock::now();
    auto t_log = t_epoch;
    int64_t images_since = 0, images_epoch = 0, micro_since = 0, micro_epoch = 0, drained_epoch = 0, steps_epoch = 0;
    int64_t starved_epoch = 0;
    double wait_s = 0, wait_since = 0;  // host time blocked on the input pipeline
    double compute_epoch = 0, copy_since = copy_at_epoch;
    Batch batch;
    for (;;) {
      profiler.at_step(step_);
      if (timer.idle()) ++drained_epoch;  // the GPU finished everything queued before we came back
      const auto t_wait = Clock::now();
      {
        RECORD_USER_SCOPE("data");
        if (!train_loader_->next(batch)) break;
      }
      const double waited = seconds_since(t_wait);
      if (timer.idle()) ++starved_epoch;  // the batch came after the GPU had finished everything queued
      wait_s += waited;
      wait_since += waited;
      timer.start();
      // the accumulation this micro-batch belongs to: accum_steps, or what is left of the epoch
      const int64_t left = train_loader_->batches_per_epoch() - (batch_in_epoch - micro_);
      const bool stepped = train_step(batch, left);
      timer.stop();
      ++batch_in_epoch;
      ++micro_since;
      ++micro_epoch;
      images_since += batch.labels.size(0);
      images_epoch += batch.labels.size(0);
      if (!stepped) continue;
      ++steps_epoch;
      if (step_ == step_at_start + 1 && ctx_.writer() && ctx_.device.is_cuda()) {  // once: which norm ran
        const auto fused = model_->fused_norm_layers();
        if (fused.second > 0)
          log::info("model.fused_norm ", cfg_.model.fused_norm, ": ", fused.first, " of ", fused.second,
                    " norm layers ran trainer's fused kernels",
                    fused.first < fused.second
                        ? " (the others: ATen's; fused needs CUDA, bf16 or fp16, channels_last for batch norm, and "
                          "fused_norm on with sync_bn)"
                        : "");
      }
      if (step_ % cfg_.run.log_interval == 0) {
        check_nonfinite_run();
        const double loss = take_train_loss();  // the one sync per interval: the step events are complete now
        const double dt = seconds_since(t_log);
        const double compute_s = timer.take_seconds();
        compute_epoch += compute_s;
        const double copy_now = train_loader_->copy_seconds();
        const double copy_s = copy_now - copy_since;
        copy_since = copy_now;
        res.last_train_loss = loss;
        IntervalReport r;
        r.epoch = epoch;
        r.loss = loss;
        r.seconds = dt;
        r.images = images_since;
        r.micro_steps = micro_since;
        r.wait_s = wait_since;
        r.copy_s = copy_s;
        r.compute_s = compute_s;
        r.flops = &flops;
        const double rate = report_interval(r);
        ps.img_per_s = rate * ctx_.world_size;
        ps.loss = loss;
        t_log = Clock::now();
        images_since = micro_since = 0;
        wait_since = 0;
      }
      if (show_bar) show_progress(epoch, batch_in_epoch);
      if (cfg_.checkpoint.every_steps > 0 && step_ % cfg_.checkpoint.every_steps == 0)
        save_checkpoint(epoch, batch_in_epoch);
      if (stop_agreed()) {  // preemption: save where we are and leave
        bar.done();
        profiler.finish();
        save_checkpoint(epoch, batch_in_epoch);
        settle_checkpoint();
        log::warn("stop requested: checkpoint written at step ", step_, "; exiting");
        res.preempted = true;
        res.steps = step_;
        return res;
      }
      if (cfg_.train.max_steps > 0 && step_ >= cfg_.train.max_steps) {
        done = true;
        break;
      }
    }
    synchronize(ctx_.device);
    const double epoch_s = seconds_since(t_epoch);
    const PipelineStats pipeline_epoch = pipeline_since(train_loader_->pipeline_stats(), pipeline_at_epoch_);
    const bool same_path = !deciding_at_epoch && !train_loader_->deciding() &&
                           train_loader_->decision() == decision_at_epoch &&
                           pipeline_epoch.decode == pipeline_at_epoch_.decode;
    compute_epoch += timer.take_seconds();
    res.train_seconds += epoch_s;
    const double loss = take_train_loss();
    if (loss > 0) res.last_train_loss = loss;
    // each rank estimated batch-norm statistics on its own samples: all take rank 0's, as DDP does, before
    // evaluation and the checkpoint
    if (ctx_.dist) ctx_.dist->broadcast_buffers(*model_);
    const bool last = done || epoch + 1 == epochs;
    const int64_t ei = cfg_.train.eval_interval;
    const std::string eval_text =
        last || (ei > 0 && (epoch + 1) % ei == 0) ? evaluate_and_record(epoch, done, batch_in_epoch, res) : "";
    if (cfg_.checkpoint.every_epoch || cfg_.checkpoint.every_steps > 0) {
      // the position "start of the next epoch" (or the end of the run)
      if (!done) save_checkpoint(epoch + 1, 0);
    }
    EpochTimings et;
    et.images = images_epoch;
    et.steps = micro_epoch;
    et.wall_s = epoch_s;
    et.data_wait_s = wait_s;
    et.copy_s = ctx_.device.is_cuda() ? train_loader_->copy_seconds() - copy_at_epoch : -1;
    et.drained_steps = ctx_.device.is_cuda() ? drained_epoch : -1;
    et.starved_steps = ctx_.device.is_cuda() ? starved_epoch : -1;
    if (same_path) {
      const InputLimit limit = input_limit(pipeline_epoch, epoch_s);
      if (!limit.stage.empty()) {
        et.input_limit = str_cat(limit.stage, ": ", limit.figures);
        et.input_advice = limit.advice;
      }
    }
    report_epoch(epoch, et, steps_epoch, compute_epoch, eval_text);
  }
  bar.done();
  profiler.finish();
  settle_checkpoint();
  res.steps = step_;
  res.skipped_steps = static_cast<int64_t>(skipped_.item<double>());
  if (res.skipped_steps > 0) log::warn(res.skipped_steps, " optimizer steps skipped for non-finite gradients");
  if (ctx_.dist) check_replicas();
  if (ctx_.writer()) save_final_weights();
  log::info(strprintf("trained %lld steps in %.1f s", static_cast<long long>(step_), res.train_seconds),
            res.eval.samples ? strprintf("; final eval top1 %.2f%% on %lld images", res.eval.top1,
                                         static_cast<long long>(res.eval.samples))
                             : std::string(),
            "; weights in ", fs::absolute_path(run_dir_->file("model.safetensors")));
  return res;
}

}  // namespace trainer
