#include "crop_resize.h"

#include <cuda_runtime.h>

namespace trainer {
namespace {

__device__ __forceinline__ float triangle(float x) {
  x = fabsf(x);
  return x < 1.f ? 1.f - x : 0.f;
}

// The taps of output index i along one axis of an `in`-long window resized to `out`: [first, last) and the
// filter's centre and width, as ATen's antialiased bilinear computes them.
struct Span {
  int first, last;
  float center, inv_width;
};

__device__ __forceinline__ Span span(int i, int in, int out) {
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  const float support = scale >= 1.f ? scale : 1.f;
  Span s;
  s.center = scale * (static_cast<float>(i) + 0.5f);
  s.first = max(static_cast<int>(s.center - support + 0.5f), 0);
  s.last = min(static_cast<int>(s.center + support + 0.5f), in);
  s.inv_width = 1.f / support;
  return s;
}

__global__ void crop_resize_kernel(const CropResizeJob* __restrict__ jobs, int size, float* __restrict__ out,
                                   CropResizeOutput o) {
  const int ox = blockIdx.x * blockDim.x + threadIdx.x;
  const int oy = blockIdx.y * blockDim.y + threadIdx.y;
  if (ox >= size || oy >= size) return;
  const CropResizeJob job = jobs[blockIdx.z];
  const Span sx = span(ox, job.w, size), sy = span(oy, job.h, size);
  float wsum_x = 0.f;
  for (int x = sx.first; x < sx.last; ++x) wsum_x += triangle((x - sx.center + 0.5f) * sx.inv_width);
  float wsum_y = 0.f;
  for (int y = sy.first; y < sy.last; ++y) wsum_y += triangle((y - sy.center + 0.5f) * sy.inv_width);
  float r = 0.f, g = 0.f, b = 0.f;
  for (int y = sy.first; y < sy.last; ++y) {
    const float wy = triangle((y - sy.center + 0.5f) * sy.inv_width);
    if (wy == 0.f) continue;
    const uint8_t* row = job.src + static_cast<int64_t>(job.y + y) * job.pitch +
                         static_cast<int64_t>(job.x) * job.pixel_step;
    const int64_t cs = job.channel_step;
    float rr = 0.f, gg = 0.f, bb = 0.f;
    for (int x = sx.first; x < sx.last; ++x) {
      const float wx = triangle((x - sx.center + 0.5f) * sx.inv_width);
      const uint8_t* p = row + static_cast<int64_t>(job.pixel_step) * x;
      rr += wx * p[0];
      gg += wx * p[cs];
      bb += wx * p[2 * cs];
    }
    r += wy * rr;
    g += wy * gg;
    b += wy * bb;
  }
  const float norm = 1.f / (wsum_x * wsum_y);
  const int col = job.flip ? size - 1 - ox : ox;
  const int64_t plane = static_cast<int64_t>(size) * size;
  const float v[3] = {(r * norm - o.mean[0]) * o.inv_std[0], (g * norm - o.mean[1]) * o.inv_std[1],
                      (b * norm - o.mean[2]) * o.inv_std[2]};
  if (o.channels_last) {
    float* p = out + ((static_cast<int64_t>(blockIdx.z) * size + oy) * size + col) * 3;
    p[0] = v[0];
    p[1] = v[1];
    p[2] = v[2];
  } else {
    float* p = out + static_cast<int64_t>(blockIdx.z) * 3 * plane + static_cast<int64_t>(oy) * size + col;
    p[0] = v[0];
    p[plane] = v[1];
    p[2 * plane] = v[2];
  }
}

}  // namespace

int launch_crop_resize(const CropResizeJob* jobs, int batch, int size, float* out, void* stream,
                       const CropResizeOutput& o) {
  if (batch <= 0 || size <= 0) return 0;
  const dim3 block(32, 8);
  const dim3 grid((size + block.x - 1) / block.x, (size + block.y - 1) / block.y, batch);
  crop_resize_kernel<<<grid, block, 0, static_cast<cudaStream_t>(stream)>>>(jobs, size, out, o);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace trainer
