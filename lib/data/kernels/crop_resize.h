// One CUDA kernel for the GPU decode path's crop + antialiased bilinear resize + flip of a whole batch (instead of
// a crop, a conversion, a resize and a flip launched per sample). Weights follow ATen's _upsample_bilinear2d_aa
// (PIL's triangle filter, support widened by the scale when shrinking, taps clipped to the crop window, normalised),
// computed per output pixel. Plain CUDA runtime, no torch headers: a target of its own, built where nvcc is found.
#pragma once
#include <cstdint>

namespace trainer {

struct CropResizeJob {
  const uint8_t* src = nullptr;  // an RGB uint8 image on the device: pixel (y, x) channel c at
  int64_t pitch = 0;             //   src[y * pitch + x * pixel_step + c * channel_step]
  int64_t channel_step = 1;      //   (interleaved: pixel_step 3, channel_step 1; planar: 1 and the plane's size)
  int32_t pixel_step = 3;
  int32_t x = 0, y = 0, w = 0, h = 0;  // crop window inside the image
  int32_t flip = 0;                    // mirror the output horizontally
};

// What the output pixels become: (v - mean[c]) * inv_std[c] on the 0..255 scale (identity by default), written
// NCHW or NHWC (channels_last).
struct CropResizeOutput {
  float mean[3] = {0.f, 0.f, 0.f};
  float inv_std[3] = {1.f, 1.f, 1.f};
  int32_t channels_last = 0;
};

// out: (batch, 3, size, size) on the device, float32, or bfloat16 where `bf16` (rounded to nearest even, as a cast
// of the float32 result); memory order per `o`. jobs: `batch` jobs in device memory. Queued on `stream` (a
// cudaStream_t); returns the launch's cudaError_t (0 = success). One launch per batch: smaller launches were no
// faster end to end (bench/NOTES.md).
int launch_crop_resize(const CropResizeJob* jobs, int batch, int size, void* out, bool bf16, void* stream,
                       const CropResizeOutput& o = CropResizeOutput{});

}  // namespace trainer
