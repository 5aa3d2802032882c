// What the engine sees of any data source: epochs of batches already on the training device.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace trainer {

struct Batch {
  torch::Tensor images;  // (B,C,H,W) normalised, in data.dtype (bfloat16 or float32); channels_last when requested
  torch::Tensor labels;  // (B,) int64
  std::vector<int64_t> indices;  // dataset indices of the batch (host); -1: a bad file left out (evaluation)
};

// What makes a loader's batches: nothing to decode (data held in memory), CPU decode threads, or nvJPEG.
enum class DecodeKind { none, cpu, gpu };

// The CPU image pipeline's time per stage, summed over threads (nanoseconds), and counts.
struct StageTotals {
  int64_t read_ns = 0, decode_ns = 0, resize_ns = 0, samples = 0, bad = 0;
  int64_t cut = 0;  // JPEG windows cut out of files with restart markers (jpeg_cut.h)
};

// The GPU image pipeline's counts and times.
struct GpuDecodeStats {
  int64_t gpu = 0, cpu_fallback = 0;  // samples decoded by nvJPEG, by the CPU decoder (what nvJPEG cannot take)
  int64_t cpu_hybrid = 0;             // samples nvJPEG could take that the CPU threads decoded (data.decode: hybrid)
  double host_share = 0;              // hybrid: the share of a batch the CPU threads take now
  int64_t bad = 0;                    // distinct files that failed to read or decode (bad_samples.h)
  int64_t gpu_cropped = 0;            // of `gpu`: only their crop window decoded (data.crop_decode)
  int64_t gpu_tiled = 0;              // of `gpu_cropped`: as tiles of mosaic JPEGs (data.gpu_decode_mosaic)
  int64_t gpu_mosaics = 0;            // those mosaics
  int64_t mosaic_mcus = 0, mosaic_filler_mcus = 0;  // their MCUs, and of them fillers (no tile)
  int64_t batches = 0;                // batches whose device time is in the two figures below
  // side-stream span of the batched nvJPEG decode, from the start of its submission (host header parsing included
  // where the device is idle) to the end of the decode on the engines/SMs
  double decode_ms = 0;
  double augment_ms = 0;  // side-stream time of crop + resize + flip + jitter + normalise + erase
  // the producer thread's time per stage (host): waiting for the batch's files, header parsing + nvJPEG submission
  // (and the CPU fallbacks), crop/resize/normalise launches
  int64_t host_batches = 0;
  double host_read_wait_ms = 0, host_decode_ms = 0, host_augment_ms = 0;
  // of host_decode_ms: the nvJPEG call, the wait after it for the CPU threads' part (hybrid, fallbacks), the uploads
  // of what they decoded
  double host_nvjpeg_call_ms = 0, host_after_call_ms = 0, host_upload_ms = 0;
  // the read-ahead of each batch (beside the producer's work on the batch before; wait_for_files is what it adds):
  // its wall time, and of it finding the files' sizes and taking the pinned buffer, reading the files into it,
  // parsing their headers for nvJPEG and (hybrid, beside the parsing) the CPU threads' share: its wall time, and
  // the threads' time in its images
  double ahead_ms = 0, ahead_read_ms = 0, ahead_size_ms = 0, ahead_parse_ms = 0, ahead_share_ms = 0;
  double ahead_share_cpu_ms = 0;
  int64_t ahead_share_images = 0;
  double ahead_mosaic_ms = 0;  // laying the crop windows out as mosaics (data.gpu_decode_mosaic), with their parsing
};

// The image pipeline making a loader's batches now and its counters so far: `cpu` for DecodeKind::cpu, `gpu` for
// DecodeKind::gpu.
struct PipelineStats {
  DecodeKind decode = DecodeKind::none;
  bool hardware = false;  // gpu: on the hardware JPEG engines
  int threads = 0;        // the decode threads (cpu), the reading and parsing threads (gpu)
  StageTotals cpu;
  GpuDecodeStats gpu;
};

class Loader {
 public:
  virtual ~Loader() = default;
  // Fixes the epoch's order; the first `start_batch` batches are skipped (resuming mid-epoch). Call before next().
  virtual void set_epoch(int64_t epoch, int64_t start_batch = 0) = 0;
  virtual int64_t batches_per_epoch() const = 0;
  virtual int64_t samples_per_epoch() const = 0;
  virtual bool next(Batch& out) = 0;          // false at the end of the epoch
  virtual int64_t bad_samples() const { return 0; }  // samples replaced because they failed to decode
  // Device time of host-to-device copies so far (GPU events on the copy stream, read once complete); 0 when
  // the loader copies nothing (CPU, GPU-resident data).
  virtual double copy_seconds() const { return 0; }
  virtual PipelineStats pipeline_stats() const { return {}; }
  // data.decode auto: true while it is still trying both paths; then decision() says what it chose and why.
  virtual bool deciding() const { return false; }
  virtual std::string decision() const { return {}; }
};

}  // namespace trainer
