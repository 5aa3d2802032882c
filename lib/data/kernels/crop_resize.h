// One CUDA kernel for the GPU decode path's crop + antialiased bilinear resize + flip of a whole batch (instead of
// a crop, a conversion, a resize and a flip launched per sample). Weights follow ATen's _upsample_bilinear2d_aa
// (PIL's triangle filter, support widened by the scale when shrinking, taps clipped to the crop window, normalised),
// computed per output pixel. Plain CUDA runtime, no torch headers: a target of its own, built where nvcc is found.
#pragma once
#include <cstdint>

namespace trainer {

struct CropResizeJob {
  const uint8_t* src = nullptr;  // (H, W, 3) uint8 on the device, rows `pitch` bytes apart
  int64_t pitch = 0;
  int32_t x = 0, y = 0, w = 0, h = 0;  // crop window inside the image
  int32_t flip = 0;                    // mirror the output horizontally
  int32_t pad = 0;
};

// out: (batch, 3, size, size) float32 on the device, 0..255. jobs: `batch` jobs in device memory. Queued on `stream`
// (a cudaStream_t); returns the launch's cudaError_t (0 = success).
int launch_crop_resize(const CropResizeJob* jobs, int batch, int size, float* out, void* stream);

}  // namespace trainer
