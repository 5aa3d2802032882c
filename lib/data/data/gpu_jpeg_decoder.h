// nvJPEG's batched decode of JPEG bytes into (H, W, 3) uint8 device tensors: on the GPU's hardware JPEG engines
// where the device has them (A100, H100, H200), else nvJPEG's default backend; with the engines, optionally only
// a region of each image (the training crop). What the batched decoder does not take (PNG, CMYK, progressive on
// the engines, corrupt files) comes back undefined for the caller's CPU decoder.
// With the engines the bitstreams may also be read from device memory (NVJPEG_BACKEND_HARDWARE_DEVICE): the caller
// copies a batch's files over in one transfer, and nvJPEG makes no per-image copies of its own.
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
  // device_input: the engines read the bitstreams from device memory where this nvJPEG and GPU allow it
  // (device_input() says whether they do); decode() is then given where each file's bytes are on the device.
  explicit GpuJpegDecoder(torch::Device device, bool device_input = false);
  ~GpuJpegDecoder();
  GpuJpegDecoder(const GpuJpegDecoder&) = delete;
  GpuJpegDecoder& operator=(const GpuJpegDecoder&) = delete;
  bool hardware() const;      // the hardware JPEG engines are in use
  bool device_input() const;  // they read the bitstreams from device memory
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
  // With device_input(), the files' bytes also lie on the device: file i's at on_device + (files[i].first - host),
  // copied there before the call (the engines read them during it) and kept until the current stream is past it.
  std::vector<torch::Tensor> decode(const Files& files, const std::vector<Info>& info, const uint8_t* host = nullptr,
                                    const uint8_t* on_device = nullptr);
  std::vector<torch::Tensor> decode(const Files& files) { return decode(files, inspect(files)); }
  // Lets the engines' memory pool be set up for batches of up to `batch` files (nvjpegDecodeBatchedPreAllocate).
  void preallocate(int batch);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  torch::Device device_;
};

}  // namespace trainer
