// The GPU decode path (data.decode: gpu) as a Loader: files read ahead on CPU threads, nvJPEG batched decode
// (gpu_jpeg_decoder.h) with the CPU decoder for what it does not take (and, hybrid, a share of each training batch
// made by the CPU threads one batch ahead as the CPU path makes it), then RandomResizedCrop + flip (or the eval
// centre crop), antialiased bilinear resize and normalisation for the whole batch on the device (gpu_resize.h).
// The crop boxes come from the same (seed, epoch, index) draws as the CPU path, and bad files follow the same
// policy (bad_samples.h), so both paths give the same batches up to the two resize implementations' rounding.
// Decode runs on a side stream; the compute stream waits on each batch's event.
#pragma once
#include <torch/types.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "data/bad_samples.h"
#include "data/decode_split.h"
#include "data/gpu_jpeg_decoder.h"
#include "data/gpu_resize.h"
#include "data/image_folder.h"
#include "data/image_loader.h"
#include "data/loader.h"

namespace at::cuda {
class GreenContext;
}

namespace trainer {

// A producer thread prepares up to `opt.prefetch` batches ahead (its host work -- nvJPEG submission, the resize
// launch -- stays off the training thread); `opt.workers` threads read files and decode fallbacks. Output as
// ImageLoader's: normalised (B,3,S,S) of opt.dtype on the device, channels_last when asked.
// Training: once the producer has made the last batch of an epoch it goes on with the first batches of the
// next one (the same order and draws set_epoch(epoch + 1) gives), so that the engines' decode latency is not paid
// at every epoch start; set_epoch(epoch + 1) after the whole epoch was taken keeps them, any other call starts
// over.
class GpuImageLoader : public Loader {
 public:
  GpuImageLoader(std::vector<ImageSample> samples, ImageLoaderOptions opt, torch::Device device);
  ~GpuImageLoader() override;
  void set_epoch(int64_t epoch, int64_t start_batch = 0) override;
  int64_t batches_per_epoch() const override;
  int64_t samples_per_epoch() const override { return static_cast<int64_t>(current_.order->size()); }
  bool next(Batch& out) override;
  int64_t bad_samples() const override { return bad_.count(); }
  GpuDecodeStats stats() const;
  PipelineStats pipeline_stats() const override;
  bool hardware() const;
  // The crop window of sample `index` in epoch `epoch` on a w x h image (what the CPU path uses too).
  Rect window(int64_t index, int64_t epoch, int w, int h, bool* flip) const;

 private:
  struct FileBatch;   // a batch's encoded files in pinned memory, headers parsed
  struct ReadAhead;   // the next batch's files, read while the current one decodes
  struct Decoded;     // a batch's images on the device before their crop
  struct Ready;       // a finished batch and the event behind its last kernel
  struct BatchTimes;  // a batch's timed side-stream events, read back once passed
  // Where the producer is in one epoch: its plan and the next sample it makes a batch from.
  struct EpochCursor : EpochPlan {
    int64_t cursor = 0;
  };
  EpochCursor make_cursor(int64_t epoch, int64_t start_batch) const;
  const EpochCursor& following(int64_t epoch);  // producer thread: epoch + 1 from its start, planned once
  void start();
  void stop();
  void loop();
  // the batch at p.cursor, on the side stream, in four phases: take_files on the producer thread, the rest
  // (make) on it too or, with opt.decode_calls > 1, on a thread of its own beside the batches before
  void produce(const EpochCursor& p, Ready& out);
  void make(const EpochCursor& p, FileBatch& files, GpuJpegDecoder& decoder, Ready& out);
  // 1. read (ahead) and parse headers; hybrid: the CPU threads' share (the k JPEGs cheapest for them to crop-decode)
  // decoded beside the parsing
  FileBatch read_files(const EpochCursor& p, int64_t count) const;
  std::vector<int64_t> pick_share(const EpochCursor& p, FileBatch& files) const;
  // training, opt.decode_mosaic: the crop windows of files that can be tiled together as mosaics, parsed
  void lay_out_mosaics(const EpochCursor& p, FileBatch& files, int threads) const;
  void decode_share(const EpochCursor& p, const std::vector<int64_t>& at, FileBatch& files) const;
  FileBatch& take_files(const EpochCursor& p, int64_t count);  //    this batch's, and start the next's
  // 2. nvJPEG, the CPU threads for what it cannot take, then the hybrid share's outputs onto the device
  Decoded decode(const FileBatch& files, const std::vector<int64_t>& indices, GpuJpegDecoder& decoder,
                 BatchTimes& times);
  static bool in_share(const FileBatch& files, size_t i);
  static bool in_mosaic(const FileBatch& files, size_t i);
  void take_share(const FileBatch& files, Decoded& d) const;
  void substitute_failures(Decoded& d);                                         // 3. bad_samples.h policy
  torch::Tensor crop_resize_normalize(const Decoded& d, int64_t epoch);         // 4. the batch tensor
  void collect_times();  // under mu_: adds the passed batches' device times to stats_

  std::vector<ImageSample> samples_;
  ImageLoaderOptions opt_;
  torch::Device device_;
  std::unique_ptr<GpuJpegDecoder> decoder_;               // parses every batch's headers; decodes with 1 call
  std::vector<std::unique_ptr<GpuJpegDecoder>> callers_;  // opt.decode_calls > 1: one decoder a call in flight
  std::shared_ptr<at::cuda::GreenContext> sms_;  // opt.decode_sms > 0: the SMs the side stream runs on
  std::unique_ptr<ReadAhead> ahead_;
  BadSamples bad_;
  // the consumer's epoch (what next() hands out) and its batches taken so far
  EpochPlan current_;
  int64_t taken_ = 0;
  GpuResizeOutput normalized_;           // what the resize kernel does when nothing runs between it and normalising
  torch::Tensor mean255_, inv_std255_;  // the same figures on the device, for the unfused path
  torch::Tensor black_;                 // a 1x1 black image: what evaluation shows for a bad file
  // ---- producer thread and its queue, guarded by mu_ ----
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Ready>> queue_;
  EpochCursor producing_;  // the producer's (the consumer's epoch, or the next one once that is made)
  bool stop_ = false;
  std::exception_ptr error_;
  GpuDecodeStats stats_;
  DecodeSplit split_;  // how many of a batch the CPU threads decode (opt_.host_share)
  std::deque<std::unique_ptr<BatchTimes>> times_;
};

}  // namespace trainer
