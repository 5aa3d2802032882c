// The GPU decode path (data.decode: gpu): nvJPEG batched decode -- on the GPU's hardware JPEG engines where the
// device has them (A100, H100, H200), else nvJPEG's default backend -- then RandomResizedCrop + flip (or the eval
// centre crop), antialiased bilinear resize and normalisation for the whole batch on the device. The crop boxes
// come from the same (seed, epoch, index) draws as the CPU path. What nvJPEG's batched decoder does not take
// (PNG, CMYK, progressive on the hardware engine, corrupt files) is decoded per sample by the CPU decoder and
// counted. Decode runs on its own stream; the batch is handed to the compute stream with an event.
// Built when nvJPEG is found (the CUDA toolkit's or the nvidia-nvjpeg wheel's); elsewhere gpu_decode_available()
// is false and asking for data.decode: gpu is a clear error.
#pragma once
#include <torch/types.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <memory>
#include <string>
#include <vector>

#include "data/image_folder.h"
#include "data/image_loader.h"
#include "data/loader.h"

namespace trainer {

bool gpu_decode_available();  // built with nvJPEG

// Decodes JPEG bytes to (H, W, 3) uint8 tensors on the device, batched. Entries nvJPEG cannot decode come back
// undefined (the caller decodes them on the CPU).
class GpuJpegDecoder {
 public:
  explicit GpuJpegDecoder(torch::Device device);
  ~GpuJpegDecoder();
  GpuJpegDecoder(const GpuJpegDecoder&) = delete;
  GpuJpegDecoder& operator=(const GpuJpegDecoder&) = delete;
  bool hardware() const;  // the hardware JPEG engines are in use
  using Files = std::vector<std::pair<const uint8_t*, size_t>>;
  struct Info {
    int width = 0, height = 0;  // the whole image
    bool supported = false;     // a JPEG this decoder's batched path takes
    Rect roi;                   // w > 0: only this region is decoded (hardware engines only); else the whole image
    int chroma = 0;             // nvJPEG's chroma subsampling (submission order groups alike files)
  };
  // The region of file i (a w x h image) worth decoding; {0,0,0,0} or the whole image: all of it.
  using RoiFn = std::function<Rect(size_t i, int w, int h)>;
  // Header parsing only (no device work), on up to `threads` threads; callable from another thread than decode().
  // With `roi_of` on the hardware engines, each file's region is checked with the engines and kept where they
  // take it (crop-only decode); elsewhere the whole image is decoded.
  std::vector<Info> inspect(const Files& files, int threads = 1, const RoiFn& roi_of = {});
  // Decodes the files with info.supported (their roi where set: the tensor is roi.h x roi.w), queued on the current
  // CUDA stream; the rest come back undefined. The host data must stay valid until the call returns.
  std::vector<torch::Tensor> decode(const Files& files, const std::vector<Info>& info);
  std::vector<torch::Tensor> decode(const Files& files) { return decode(files, inspect(files)); }
  // Lets the engines' memory pool be set up for batches of up to `batch` files (nvjpegDecodeBatchedPreAllocate).
  void preallocate(int batch);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  torch::Device device_;
};

struct GpuDecodeStats {
  int64_t gpu = 0, cpu_fallback = 0, bad = 0;  // samples decoded by nvJPEG, by the CPU decoder, replaced
  int64_t gpu_cropped = 0;                     // of `gpu`: only their crop window decoded (data.crop_decode)
  int64_t batches = 0;                         // batches whose device time is in the two figures below
  // side-stream span of the batched nvJPEG decode, from the start of its submission (host header parsing included
  // where the device is idle) to the end of the decode on the engines/SMs
  double decode_ms = 0;
  double augment_ms = 0;  // side-stream time of crop + resize + flip + jitter + normalise + erase
  // the producer thread's time per stage (host): waiting for the batch's files, header parsing + nvJPEG submission
  // (and the CPU fallbacks), crop/resize/normalise launches
  int64_t host_batches = 0;
  double host_read_wait_ms = 0, host_decode_ms = 0, host_augment_ms = 0;
};

// Crop + antialiased bilinear resize (ATen's _upsample_bilinear2d_aa) + horizontal flip of (H, W, 3) uint8 device
// images into one (B, 3, size, size) float32 (or bfloat16) batch, 0..255 unless normalised, on the current stream. With `batched_kernel` one CUDA
// kernel does the whole batch (where this build has it: gpu_crop_resize_kernel_available()); otherwise ATen ops
// per sample.
// Images may be strided (H, W, 3) views, e.g. of planar decodes. `out` may fold the normalisation and the
// channels_last layout into the same pass.
struct GpuResizeOutput {
  bool normalize = false;  // (v - mean255[c]) * inv_std255[c]
  float mean255[3] = {0.f, 0.f, 0.f}, inv_std255[3] = {1.f, 1.f, 1.f};
  bool channels_last = false;
  torch::ScalarType dtype = torch::kFloat32;  // or kBFloat16: the float32 result rounded as a cast would
  // Normalised by a per-channel mean and std given on the 0..1 scale (data.mean, data.std).
  static GpuResizeOutput normalized(const std::vector<double>& mean, const std::vector<double>& std,
                                    bool channels_last, torch::ScalarType dtype = torch::kFloat32);
};
bool gpu_crop_resize_kernel_available();
torch::Tensor gpu_crop_resize(const std::vector<torch::Tensor>& images, const std::vector<Rect>& windows,
                              const std::vector<char>& flips, int64_t size, bool batched_kernel,
                              const GpuResizeOutput& out = GpuResizeOutput{});

// A Loader over image files/shards with GPU decode. A producer thread prepares up to `opt.prefetch` batches
// ahead (its host work -- nvJPEG submission, one resize launch per sample -- stays off the training thread);
// `opt.workers` threads read files and decode fallbacks. Output as ImageLoader's: normalised (B,3,S,S) of
// opt.dtype on the device, channels_last when asked; the compute stream waits on each batch's event.
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
  int64_t bad_samples() const override { return stats().bad; }
  GpuDecodeStats stats() const;
  bool hardware() const;
  // The crop window of sample `index` in epoch `epoch` on a w x h image (what the CPU path uses too).
  Rect window(int64_t index, int64_t epoch, int w, int h, bool* flip) const;

 private:
  struct Pool;
  struct Ready;
  // One epoch's pass of the producer: its plan and the next sample it makes a batch from.
  struct Pass : EpochPlan {
    int64_t cursor = 0;
  };
  Pass make_pass(int64_t epoch, int64_t start_batch) const;
  const Pass& following(int64_t epoch);  // producer thread: the pass of epoch + 1 from its start, planned once
  void produce(const Pass& p, Batch& out, std::shared_ptr<void>& done_event);  // the batch at p.cursor, side stream
  void start();
  void stop();
  void loop();

  std::vector<ImageSample> samples_;
  ImageLoaderOptions opt_;
  torch::Device device_;
  std::unique_ptr<GpuJpegDecoder> decoder_;
  std::unique_ptr<Pool> pool_;
  // the consumer's epoch (what next() hands out) and its batches taken so far
  EpochPlan current_;
  int64_t taken_ = 0;
  GpuResizeOutput normalized_;           // what the resize kernel does when nothing runs between it and normalising
  torch::Tensor mean255_, inv_std255_;  // the same figures on the device, for the unfused path
  // ---- producer thread and its queue, guarded by mu_ ----
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Ready>> queue_;
  Pass pass_;  // the producer's (the consumer's epoch, or the next one once that is made)
  bool stop_ = false;
  std::exception_ptr error_;
  GpuDecodeStats stats_;
  struct Timing {
    std::shared_ptr<void> started, decoded, done;  // at::cuda::CUDAEvents on the side stream
  };
  std::deque<Timing> timings_;
};

}  // namespace trainer
