// The CPU input pipeline for image files. A pool of decode threads fills a ring of reused pinned host
// buffers, one batch each, uint8 NHWC; a slot is only refilled after the consumer released it (bounded
// memory, back-pressure). Per sample: read the file, draw RandomResizedCrop + flip from (seed, epoch, index),
// decode just the crop window at the smallest DCT scale that still covers the output size, resize
// (antialiased bilinear) and flip straight into the batch slot. The consumer copies a finished slot to the GPU
// on a side stream (an event orders it before use, no device-wide sync), and the GPU turns it into normalised
// float NCHW with channels_last strides. Order and pixels do not depend on the number of threads.
#pragma once
#include <torch/types.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "data/image_folder.h"
#include "data/image_ops.h"
#include "data/augment.h"
#include "data/bad_samples.h"
#include "data/loader.h"
#include "data/jpeg_decoder.h"
#include "data/sample_read.h"

namespace trainer {

struct ImageLoaderOptions {
  int64_t batch_size = 256;
  bool train = true;            // RRC + flip and shuffling; false: centre crop, dataset order, no padding
  uint64_t seed = 0;
  int rank = 0;
  int world_size = 1;
  bool drop_last = true;        // train only
  int64_t image_size = 224;     // output side
  double crop_pct = 0.875;      // eval centre crop
  Interpolation eval_filter = Interpolation::bilinear;  // the eval resize's (training resizes bilinear)
  std::vector<double> rrc_scale = {0.08, 1.0};
  std::vector<double> rrc_ratio = {3.0 / 4.0, 4.0 / 3.0};
  double hflip = 0.5;
  std::vector<double> mean = {0.485, 0.456, 0.406};  // 0..1 scale
  std::vector<double> std = {0.229, 0.224, 0.225};
  AugmentOptions augment;       // train: colour jitter and random erasing on the device
  bool channels_last = true;
  torch::ScalarType dtype = torch::kFloat32;  // of the normalised batch: float32 or bfloat16 (data.dtype)
  int workers = 4;              // decode threads
  int prefetch = 4;             // batches decoded ahead (ring slots = prefetch + 1)
  bool dct_scale = true;        // decode at 1/2, 1/4, 1/8 when the crop allows
  bool crop_decode = true;      // decode only the crop window
  bool normalize = true;        // false: next() returns the raw uint8 NHWC batch (bench-data, tests)
  double cache_gb = 0;          // > 0: keep samples in RAM after their first read, up to this many GiB
  bool cache_decoded = false;   // cache decoded full images (no decode in later epochs) instead of the files
  // cache each JPEG rewritten losslessly with a restart marker after every MCU (as `trainer pack` writes shards),
  // so that later epochs entropy-decode only the crop window's MCUs; files that have usable markers already, or
  // cannot be rewritten (CMYK), are cached as they are
  bool cache_restart = false;
  // GPU decode (GpuImageLoader), training only: the share of each batch's JPEGs that nvJPEG could take which the CPU
  // threads decode instead, into their final output as this loader makes it, while the engines decode the batch
  // before (data.decode: hybrid); < 0: adapted to the two sides' measured rates (decode_split.h); 0: nvJPEG takes
  // all it can. Evaluation batches go to nvJPEG whole.
  double host_share = 0;
  // GPU decode (GpuImageLoader) only: > 0 runs the loader's side stream (the crop-resize-normalise kernel, the
  // decoder's launches, the copies) on a CUDA green context of this many SMs (rounded up to the GPU's
  // granularity, 8 on Hopper), so that its many short blocks cannot take the whole GPU from the training step's
  // kernels; 0: the side stream may use every SM (the default: no partition was faster, bench/NOTES.md)
  int decode_sms = 0;
  bool decode_high_priority = false;  // the GPU path's side stream from CUDA's high-priority pool
  int decode_calls = 1;  // the GPU path's nvJPEG calls in flight, each batch's on a decoder and thread of its own
  // GPU decode, training with crop_decode: the crop windows of up to this many JPEGs laid out as one mosaic JPEG
  // (jpeg_mosaic.h) that nvJPEG decodes whole, for files that can be tiled together; 0: each file on its own
  int decode_mosaic = 0;
};

// The crop window of sample `index` in `epoch` on a w x h image and whether it is flipped: RandomResizedCrop +
// flip drawn from (seed, epoch, index) when training, the centre crop otherwise. Both image loaders use it.
Rect sample_window(const ImageLoaderOptions& o, int64_t index, int64_t epoch, int w, int h, bool* flip);

// One epoch of an image loader: this rank's sample order (shuffled by (seed, epoch) when training), the samples
// made into batches (after drop_last) and how many batches. Both image loaders plan epochs with it.
struct EpochPlan {
  int64_t epoch = 0;
  std::shared_ptr<const std::vector<int64_t>> order;
  int64_t total = 0, batches = 0;
  // samples in batch b of the epoch (the last one may be short)
  int64_t batch_size_of(int64_t b, int64_t batch_size) const { return std::min(batch_size, total - b * batch_size); }
};
EpochPlan plan_epoch(const ImageLoaderOptions& o, int64_t dataset_size, int64_t epoch);

// One sample's encoded bytes (JPEG or PNG) into its (S, S, 3) uint8 output at `dst` as the CPU loader makes it:
// training, the drawn window only at the smallest DCT scale that still covers the output (o.dct_scale, o.crop_decode),
// resized and flipped; evaluation, the resize then the centre crop. `jpeg` and `img` are scratch reused between
// calls. Throws Error naming `name`. The GPU loader's hybrid share uses it too.
struct SampleDecodeTimes {
  int64_t decode_ns = 0, resize_ns = 0;
  bool cut = false;  // the decode read only the window's restart intervals (jpeg_cut.h)
};
SampleDecodeTimes decode_sample_output(const ImageLoaderOptions& o, int64_t index, int64_t epoch,
                                       const uint8_t* data, size_t size, const std::string& name, JpegDecoder& jpeg,
                                       RgbImage& img, uint8_t* dst);

// Decode threads fill a ring of pinned batch slots. Training: once every task of an epoch is handed out, the
// threads go on with the next epoch's first batches (the order and draws set_epoch(epoch + 1) gives), so no epoch
// starts from an empty ring; set_epoch(epoch + 1) after the whole epoch was taken keeps them, any other call
// starts over.
class ImageLoader : public Loader {
 public:
  ImageLoader(std::vector<ImageSample> samples, ImageLoaderOptions opt, torch::Device device);
  ~ImageLoader();
  ImageLoader(const ImageLoader&) = delete;
  ImageLoader& operator=(const ImageLoader&) = delete;

  void set_epoch(int64_t epoch, int64_t start_batch = 0) override;
  int64_t batches_per_epoch() const override;
  int64_t samples_per_epoch() const override { return static_cast<int64_t>(current_.order->size()); }
  // images: (B,3,S,S) float normalised on the device (or uint8 (B,S,S,3) when !normalize); labels (B,) int64.
  bool next(Batch& out) override;
  int64_t bad_samples() const override { return bad_.count(); }  // distinct files that failed
  double copy_seconds() const override { return copy_ns_.load() * 1e-9; }
  StageTotals stage_totals() const;
  PipelineStats pipeline_stats() const override;
  int64_t cached_bytes() const { return cache_bytes_.load(); }  // data.cache_gb: bytes held

 private:
  struct Slot;
  using Order = std::shared_ptr<const std::vector<int64_t>>;
  // One epoch's sample tasks. Batches are numbered across epochs (`base` is this epoch's first), so the ring's
  // slots go on from one epoch into the next.
  struct Pass : EpochPlan {
    int64_t base = 0;  // the number of its batch 0
  };
  Pass make_pass(int64_t epoch, int64_t base) const;
  bool take_task_ready();  // under mu_: a task can be handed out now (may go on into the next epoch)
  void worker_loop();
  void process(int64_t task, int64_t epoch, const std::vector<int64_t>& order, Slot& slot, std::vector<uint8_t>& file,
               RgbImage& img, JpegDecoder& jpeg);
  void decode_sample(int64_t index, int64_t epoch, uint8_t* dst, std::vector<uint8_t>& file, RgbImage& img,
                     JpegDecoder& jpeg);

  std::vector<ImageSample> samples_;
  ImageLoaderOptions opt_;
  torch::Device device_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<std::thread> threads_;
  torch::Tensor mean255_, inv_std255_;

  Pass current_;  // the consumer's epoch: passes_[0] as of the last set_epoch (read without the lock)

  // ---- shared state, guarded by mu_ ----
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  // [0]: the consumer's epoch; [1]: the next one, once training workers have handed out all of [0]'s tasks
  std::deque<Pass> passes_;
  size_t work_pass_ = 0;      // the pass tasks are handed out from
  int64_t next_task_ = 0;     // its next sample task
  int64_t released_ = 0;      // batches the consumer is done with (their slots are free)
  int64_t cursor_ = 0;        // next batch next() returns
  int64_t in_flight_ = 0;     // tasks being processed
  bool resetting_ = false;    // set_epoch waits for the tasks in flight: none handed out meanwhile
  bool stop_ = false;
  std::exception_ptr error_;
  BadSamples bad_;

  std::atomic<int64_t> read_ns_{0}, decode_ns_{0}, resize_ns_{0}, done_samples_{0}, cut_{0};
  std::atomic<int64_t> copy_ns_{0};  // device time of finished H2D copies
  // cache_gb: each sample's encoded bytes or decoded image after the first read, published once (lock-free)
  struct CacheEntry {
    std::vector<uint8_t> bytes;  // encoded
    RgbImage image;              // decoded
  };
  const CacheEntry* publish(int64_t index, std::unique_ptr<CacheEntry> e, int64_t size);  // null: over budget
  // cache_restart: `file` rewritten with restart markers into `out`; false: cache the file as it is
  bool with_restart_markers(const std::vector<uint8_t>& file, std::vector<uint8_t>& out, const std::string& name);
  std::unique_ptr<std::atomic<const CacheEntry*>[]> cache_;
  std::atomic<int64_t> cache_bytes_{0};
  std::atomic<bool> cache_full_logged_{false};
};

}  // namespace trainer
