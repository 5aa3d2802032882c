// nvJPEG's batched decode of JPEG bytes into (H, W, 3) uint8 device tensors: on the GPU's hardware JPEG engines
// where the device has them (A100, H100, H200), else nvJPEG's default backend; with the engines, optionally only
// a region of each image (the training crop). What the batched decoder does not take (PNG, CMYK, progressive on
// the engines, corrupt files) comes back undefined for the caller's CPU decoder.
// Built when nvJPEG is found (the CUDA toolkit's or the nvidia-nvjpeg wheel's); elsewhere gpu_decode_available()
// is false and constructing a decoder is a clear error.
#pragma once
#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "data/jpeg_decoder.h"

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

}  // namespace trainer
