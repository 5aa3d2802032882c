// data.decode: auto. Chooses between the CPU decode path and the GPU one by what training gets end to end, not by
// the pipelines alone: a GPU that trains slower than the CPU threads decode needs no GPU decode (and the GPU path
// takes some GPU time from training), while one that trains faster must not wait for them.
//
// It starts on the CPU loader. After a few warm-up batches it watches a window of batches from the consumer's
// side: the time between next() calls (training: the host runs ahead of the GPU until the launch queue throttles
// it, so in steady state that is the GPU's step) and the time blocked in next() (waiting for data), from the decode
// threads' busy time what they could make, and what they made over the window's wall time (the batches it hands
// out may come from the prefetch ring, filled before it: not what the path sustains). Where it is given a way to
// wait for the device (the trainer's), each window starts and ends with the device idle, so that its end-to-end
// rate is what the GPU took for its batches' steps, not the host's run-ahead (which hides what GPU decode takes
// from the step). The CPU path stays when it waits almost never and its threads could make more than training
// takes, with a margin. Otherwise the GPU loader takes over at the same batch (both
// give the same samples in the same order with the same crop boxes), runs a window of its own, and stays if its
// measured end-to-end rate beats what the CPU path would give; else the CPU path comes back (as it does when the
// GPU loader cannot start or fails on trial, and at once where an epoch is one batch: nothing to measure). One
// decision per run, logged with its figures. The follower form (evaluation) takes the decided kind at its next
// set_epoch. The decision is each rank's own; all kinds give the same samples, so ranks that decide differently
// stay correct.
#pragma once
#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "data/loader.h"

namespace trainer {

// What one measurement window saw from the consumer's side.
struct DecodeWindow {
  int64_t images = 0;
  double work_s = 0;      // consumer time between next() calls: training
  double wait_s = 0;      // consumer time blocked in next(): waiting for data
  double capacity = 0;    // img/s the decode threads could make at their busy-time rate (CPU path); 0 if unknown
  double produced = 0;    // img/s the decode threads made over the window's wall time (CPU path); 0 if unknown
  // the window between two waits for the device: the images whose steps ran in it and its time; 0 = not measured
  // (no wait given, or the window crossed an epoch's end, whose gap is not training)
  int64_t synced_images = 0;
  double synced_s = 0;
  double rate() const {  // end to end, img/s
    return synced_s > 0 ? synced_images / synced_s : images / std::max(work_s + wait_s, 1e-9);
  }
  double demand() const { return images / std::max(work_s, 1e-9); }        // what training takes, img/s
  double wait_fraction() const { return wait_s / std::max(work_s + wait_s, 1e-9); }
};

struct AutoDecodeOptions {
  int warm_batches = 16;     // before the CPU window: the first steps (autotuning, a full ring) say nothing
  int window_batches = 12;   // batches per measurement window
  int gpu_warm_batches = 4;  // after switching, before the GPU window (its ring starts empty)
  double max_wait = 0.02;    // the CPU path keeps up: waits under this fraction of the window ...
  double margin = 1.1;       // ... and its threads could make this much more than training takes
  std::function<void()> sync;  // waits for the device's queued work (the windows' edges); unset: host time only
  // whole epochs (from the first this loader is set to) before the CPU window may start: 1 where a RAM cache of
  // decoded or rewritten images serves the CPU path from its second epoch on, so that the first epoch's decode
  // does not decide
  int epochs_before_measuring = 0;
  // the rules (tests replace them): keep the CPU path after its window; keep the GPU path after both windows
  std::function<bool(const DecodeWindow& cpu, const AutoDecodeOptions&)> keep_cpu;
  std::function<bool(const DecodeWindow& cpu, const DecodeWindow& gpu)> keep_gpu;
};

// The default rules. keep_cpu: waits < max_wait and capacity >= margin x demand. keep_gpu: the GPU window's
// end-to-end rate beats what the CPU path gives, min(demand, max(produced, capacity)) of its window.
bool cpu_decode_keeps_up(const DecodeWindow& cpu, const AutoDecodeOptions& o);
bool gpu_decode_is_faster(const DecodeWindow& cpu, const DecodeWindow& gpu);
// min(demand, the larger of what the threads made over the window and their busy-time capacity: both understate
// them, the first where the ring was full for part of the window, the second where they share the cores); demand
// where neither is known
double cpu_decode_expected_rate(const DecodeWindow& cpu);

class AutoDecodeLoader : public Loader {
 public:
  using Factory = std::function<std::unique_ptr<Loader>()>;
  // make_cpu: the CPU path (an ImageLoader, whose stage totals give its capacity; another Loader gives none);
  // make_gpu: the GPU path, made only when tried. `workers`: the CPU path's decode threads.
  AutoDecodeLoader(Factory make_cpu, Factory make_gpu, int workers, AutoDecodeOptions opt = {});
  // Evaluation: follows `leader`'s decision (from the next set_epoch on), measures nothing.
  AutoDecodeLoader(Factory make_cpu, Factory make_gpu, const Loader* leader);
  ~AutoDecodeLoader() override;

  void set_epoch(int64_t epoch, int64_t start_batch = 0) override;
  int64_t batches_per_epoch() const override { return active_->batches_per_epoch(); }
  int64_t samples_per_epoch() const override { return active_->samples_per_epoch(); }
  bool next(Batch& out) override;
  int64_t bad_samples() const override {
    return bad_before_ + active_->bad_samples() + (standby_ ? standby_->bad_samples() : 0);
  }
  double copy_seconds() const override {
    return copy_before_ + active_->copy_seconds() + (standby_ ? standby_->copy_seconds() : 0);
  }

  // the active path's counters, its kind the path this loader made it as (the factory it came from)
  PipelineStats pipeline_stats() const override {
    PipelineStats s = active_->pipeline_stats();
    s.decode = on_gpu_ ? DecodeKind::gpu : DecodeKind::cpu;
    return s;
  }
  bool deciding() const override { return !decided(); }
  std::string decision() const override { return why_; }

  bool decided() const { return state_ == State::decided; }
  bool on_gpu() const { return on_gpu_; }
  Loader& active() { return *active_; }
  const std::string& why() const { return why_; }  // the decision and its figures, once decided
  const DecodeWindow& cpu_window() const { return cpu_window_; }
  const DecodeWindow& gpu_window() const { return gpu_window_; }

 private:
  enum class State { cpu_warm, cpu_window, gpu_warm, gpu_window, decided };
  using Clock = std::chrono::steady_clock;
  void switch_to(bool gpu);  // the other kind takes over at the current position
  void measured(const Batch& b, Clock::time_point call, Clock::time_point ret);
  void open_window(DecodeWindow& w, const Batch& b);  // b, about to be returned, trains in the window
  double close_window(DecodeWindow& w);  // the window's wall time, s (after the closing wait)
  bool cpu_totals(int64_t& samples, int64_t& busy_ns);  // the CPU loader's stage totals; false if it has none
  void decide(bool gpu, std::string why);
  void retire(std::unique_ptr<Loader>& l);  // destroys a loader, keeping its counts

  Factory make_cpu_, make_gpu_;
  int workers_ = 1;
  AutoDecodeOptions opt_;
  const Loader* leader_ = nullptr;
  bool leader_on_gpu() const;  // the leader has decided, for the GPU
  std::unique_ptr<Loader> active_;
  std::unique_ptr<Loader> standby_;  // during the GPU window: the CPU loader, in case it comes back
  bool on_gpu_ = false;
  State state_ = State::cpu_warm;
  int batches_in_state_ = 0;
  DecodeWindow cpu_window_, gpu_window_;
  int64_t samples0_ = 0, busy_ns0_ = 0;  // the CPU loader's stage totals at the CPU window's start
  Clock::time_point window0_;            // when the window started (after the wait for the device)
  bool crossed_ = false;                 // the window crossed an epoch's end
  std::string why_, cpu_text_;  // the decision; what the CPU window saw
  // where the consumer is (the other kind starts there)
  int64_t epoch_ = 0, batch_ = 0;
  bool epoch_set_ = false;
  int64_t first_epoch_ = 0;  // the first epoch this loader was set to
  Clock::time_point last_return_;
  bool have_last_ = false;  // last_return_ is in this epoch (no epoch end or set_epoch since)
  int64_t bad_before_ = 0;
  double copy_before_ = 0;
};

}  // namespace trainer
