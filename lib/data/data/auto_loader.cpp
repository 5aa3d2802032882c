#include "data/auto_loader.h"

#include <exception>
#include <utility>

#include "core/log.h"
#include "core/strings.h"
#include "data/image_loader.h"

namespace trainer {

double cpu_decode_expected_rate(const DecodeWindow& cpu) {
  // what the threads made, not what the window handed out (the ring filled before it can cover part of it):
  // bench/NOTES.md
  const double sustained = std::max(cpu.produced, cpu.capacity);
  return sustained > 0 ? std::min(cpu.demand(), sustained) : cpu.demand();
}

bool cpu_decode_keeps_up(const DecodeWindow& cpu, const AutoDecodeOptions& o) {
  if (cpu.images == 0) return true;  // nothing measured: stay where we are
  if (cpu.wait_fraction() >= o.max_wait) return false;
  return cpu.capacity <= 0 || cpu.capacity >= o.margin * cpu.demand();
}

bool gpu_decode_is_faster(const DecodeWindow& cpu, const DecodeWindow& gpu) {
  return gpu.images > 0 && gpu.rate() > cpu_decode_expected_rate(cpu);
}

AutoDecodeLoader::AutoDecodeLoader(Factory make_cpu, Factory make_gpu, int workers, AutoDecodeOptions opt)
    : make_cpu_(std::move(make_cpu)), make_gpu_(std::move(make_gpu)), workers_(std::max(1, workers)),
      opt_(std::move(opt)) {
  if (!opt_.keep_cpu) opt_.keep_cpu = cpu_decode_keeps_up;
  if (!opt_.keep_gpu) opt_.keep_gpu = gpu_decode_is_faster;
  active_ = make_cpu_();
}

AutoDecodeLoader::AutoDecodeLoader(Factory make_cpu, Factory make_gpu, const Loader* leader)
    : make_cpu_(std::move(make_cpu)), make_gpu_(std::move(make_gpu)), leader_(leader), state_(State::decided) {
  on_gpu_ = leader_on_gpu();
  active_ = on_gpu_ ? make_gpu_() : make_cpu_();
}

AutoDecodeLoader::~AutoDecodeLoader() = default;

bool AutoDecodeLoader::leader_on_gpu() const {
  return !leader_->deciding() && leader_->pipeline_stats().decode == DecodeKind::gpu;
}

void AutoDecodeLoader::set_epoch(int64_t epoch, int64_t start_batch) {
  if (leader_ && !leader_->deciding() && leader_on_gpu() != on_gpu_) {
    retire(active_);  // one loader at a time: the old one's threads and buffers go first
    on_gpu_ = leader_on_gpu();
    active_ = on_gpu_ ? make_gpu_() : make_cpu_();
    log::info("data.decode auto: evaluation decodes on the ", on_gpu_ ? "GPU" : "CPU", " too, as training does");
  }
  if (!epoch_set_) first_epoch_ = epoch;
  epoch_ = epoch;
  batch_ = start_batch;
  epoch_set_ = true;
  have_last_ = false;
  active_->set_epoch(epoch, start_batch);
  // the windows count batches with training time before them: none in an epoch of one batch
  if (!leader_ && state_ != State::decided && active_->batches_per_epoch() < 2) {
    if (on_gpu_) switch_to(false);
    retire(standby_);
    decide(false, "data.decode auto: cpu (an epoch of one batch leaves no training time between batches to measure)");
  }
}

bool AutoDecodeLoader::next(Batch& out) {
  if (state_ == State::decided) return active_->next(out);  // nothing left to measure or switch
  const Clock::time_point call = Clock::now();
  bool got = false;
  if (state_ == State::gpu_warm || state_ == State::gpu_window) {
    // on trial: a GPU path that fails (a driver or nvJPEG error) hands back to the CPU path, which takes the batch
    try {
      got = active_->next(out);
    } catch (const std::exception& e) {
      switch_to(false);
      decide(false, str_cat("data.decode auto: cpu (", cpu_text_, "; the GPU decoder failed on trial: ", e.what(), ")"));
      got = active_->next(out);
    }
  } else {
    got = active_->next(out);
  }
  if (!got) {
    have_last_ = false;  // the time until the next epoch's first batch is not training
    return false;
  }
  const Clock::time_point ret = Clock::now();
  ++batch_;
  measured(out, call, ret);
  // from here the consumer trains (a switch above is not counted as its time)
  last_return_ = Clock::now();
  have_last_ = true;
  return true;
}

bool AutoDecodeLoader::cpu_totals(int64_t& samples, int64_t& busy_ns) {
  const PipelineStats s = active_->pipeline_stats();
  if (s.decode != DecodeKind::cpu) return false;
  const StageTotals& t = s.cpu;
  samples = t.samples;
  busy_ns = t.read_ns + t.decode_ns + t.resize_ns;
  return true;
}

void AutoDecodeLoader::open_window(DecodeWindow& w, const Batch& b) {
  w = DecodeWindow{};
  if (opt_.sync) opt_.sync();
  window0_ = Clock::now();
  crossed_ = false;
  w.synced_images = b.labels.size(0);
}

double AutoDecodeLoader::close_window(DecodeWindow& w) {
  const bool synced = opt_.sync && !crossed_;
  if (synced) opt_.sync();
  const double s = std::chrono::duration<double>(Clock::now() - window0_).count();
  if (synced) w.synced_s = s;
  else w.synced_images = 0;
  return s;
}

void AutoDecodeLoader::measured(const Batch& b, Clock::time_point call, Clock::time_point ret) {
  // a window's batch: counted with the training time before it, and (but the last) as trained before its end
  auto add = [&](DecodeWindow& w) {
    if (!have_last_) {  // the first batch of an epoch: no training time before it
      crossed_ = true;
      return false;
    }
    if (batches_in_state_ + 1 < opt_.window_batches) w.synced_images += b.labels.size(0);
    w.images += b.labels.size(0);
    w.work_s += std::chrono::duration<double>(call - last_return_).count();
    w.wait_s += std::chrono::duration<double>(ret - call).count();
    return true;
  };
  switch (state_) {
    case State::cpu_warm:
      if (++batches_in_state_ >= opt_.warm_batches && epoch_ >= first_epoch_ + opt_.epochs_before_measuring) {
        state_ = State::cpu_window;
        batches_in_state_ = 0;
        open_window(cpu_window_, b);
        if (!cpu_totals(samples0_, busy_ns0_)) samples0_ = busy_ns0_ = -1;
      }
      return;
    case State::cpu_window: {
      if (!add(cpu_window_) || ++batches_in_state_ < opt_.window_batches) return;
      const double window_s = close_window(cpu_window_);
      int64_t samples1 = 0, busy1 = 0;
      if (samples0_ >= 0 && cpu_totals(samples1, busy1) && busy1 > busy_ns0_) {
        cpu_window_.capacity = (samples1 - samples0_) / ((busy1 - busy_ns0_) * 1e-9 / workers_);
        cpu_window_.produced = (samples1 - samples0_) / std::max(window_s, 1e-9);
      }
      const DecodeWindow& w = cpu_window_;
      const std::string cpu_text =
          strprintf("over %d batches training took %.0f img/s, %.0f end to end, and waited for data %.1f%% of the "
                    "time; ", opt_.window_batches, w.demand(), w.rate(), 100 * w.wait_fraction()) +
          (w.capacity > 0 ? strprintf("the %d decode threads made %.0f img/s and could make %.0f", workers_,
                                      w.produced, w.capacity)
                          : std::string("the decode threads' rate is not known"));
      if (opt_.keep_cpu(w, opt_)) {
        decide(false, "data.decode auto: cpu (" + cpu_text + ")");
        return;
      }
      try {
        switch_to(true);
      } catch (const std::exception& e) {
        decide(false, str_cat("data.decode auto: cpu (", cpu_text, "; the GPU decoder could not start: ", e.what(),
                              ")"));
        return;
      }
      state_ = State::gpu_warm;
      batches_in_state_ = 0;
      cpu_text_ = cpu_text;
      return;
    }
    case State::gpu_warm:
      if (++batches_in_state_ >= opt_.gpu_warm_batches) {
        state_ = State::gpu_window;
        batches_in_state_ = 0;
        open_window(gpu_window_, b);
      }
      return;
    case State::gpu_window: {
      if (!add(gpu_window_) || ++batches_in_state_ < opt_.window_batches) return;
      close_window(gpu_window_);
      const double expected = cpu_decode_expected_rate(cpu_window_);
      const bool gpu = opt_.keep_gpu(cpu_window_, gpu_window_);
      const std::string text = strprintf("%s: GPU decode gave %.0f img/s end to end over %d batches (data wait %.1f%%), "
                                         "the CPU path %.0f expected",
                                         gpu ? "gpu" : "cpu", gpu_window_.rate(), opt_.window_batches,
                                         100 * gpu_window_.wait_fraction(), expected);
      if (!gpu) switch_to(false);
      retire(standby_);  // the losing loader
      decide(gpu, "data.decode auto: " + text + " (CPU path: " + cpu_text_ + ")");
      return;
    }
    case State::decided:
      return;
  }
}

void AutoDecodeLoader::switch_to(bool gpu) {
  std::unique_ptr<Loader> next;
  if (gpu) {
    next = make_gpu_();
  } else {
    next = standby_ ? std::move(standby_) : make_cpu_();
  }
  if (epoch_set_) next->set_epoch(epoch_, batch_);  // the same epoch, from the batch after the one just taken
  if (gpu) {
    standby_ = std::move(active_);
  } else {
    retire(active_);
  }
  active_ = std::move(next);
  on_gpu_ = gpu;
}

void AutoDecodeLoader::retire(std::unique_ptr<Loader>& l) {
  if (!l) return;
  bad_before_ += l->bad_samples();
  copy_before_ += l->copy_seconds();
  l.reset();
}

void AutoDecodeLoader::decide(bool gpu, std::string why) {
  on_gpu_ = gpu;
  state_ = State::decided;
  why_ = std::move(why);
  log::info(why_);
  make_cpu_ = make_gpu_ = nullptr;  // their copy of the sample list is not needed any more
}

}  // namespace trainer
