#include "crop_resize.h"

#include <cuda_bf16.h>
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

__device__ __forceinline__ void store(float* q, float v) { *q = v; }
__device__ __forceinline__ void store(__nv_bfloat16* q, float v) { *q = __float2bfloat16_rn(v); }  // as ATen's cast

constexpr int kTileW = 32, kTileH = 8;  // output pixels per block (a warp per row)
constexpr int kMaxTaps = 16;            // weights tabled per block while a filter has at most this many taps

// The taps' weights of output index i, normalised (ATen normalises each axis by its sum); returns their count.
__device__ __forceinline__ int weights(int i, int in, int out, float* w, int stride, int* first) {
  const Span s = span(i, in, out);
  float sum = 0.f;
  for (int k = 0; k < s.last - s.first; ++k) {
    const float v = triangle((s.first + k - s.center + 0.5f) * s.inv_width);
    w[k * stride] = v;
    sum += v;
  }
  const float inv = 1.f / sum;
  for (int k = 0; k < s.last - s.first; ++k) w[k * stride] *= inv;
  *first = s.first;
  return s.last - s.first;
}

// One block: a kTileW x kTileH tile of one output image. Where the filters are short (windows up to 7x the output
// size, which is every crop of a decoded region) the block tables both axes' weights once in shared memory and
// each thread sums its taps with them; longer filters (a whole large photo to a small output) compute each weight
// where it is used.
template <typename Out>
__global__ void __launch_bounds__(kTileW * kTileH) crop_resize_kernel(const CropResizeJob* __restrict__ jobs,
                                                                      int size, Out* __restrict__ out,
                                                                      CropResizeOutput o) {
  __shared__ float wx_s[kMaxTaps][kTileW];  // [tap][column]: a warp reads consecutive banks
  __shared__ float wy_s[kTileH][kMaxTaps];  // [row][tap]: a warp (one row) reads one word, broadcast
  __shared__ int fx_s[kTileW], nx_s[kTileW], fy_s[kTileH], ny_s[kTileH];
  const CropResizeJob job = jobs[blockIdx.z];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int ox = blockIdx.x * kTileW + tx;
  const int oy = blockIdx.y * kTileH + ty;
  const float sup_x = fmaxf(static_cast<float>(job.w) / static_cast<float>(size), 1.f);
  const float sup_y = fmaxf(static_cast<float>(job.h) / static_cast<float>(size), 1.f);
  const bool tabled = 2.f * sup_x + 2.f <= static_cast<float>(kMaxTaps) &&
                      2.f * sup_y + 2.f <= static_cast<float>(kMaxTaps);  // the same for the whole block
  if (tabled) {
    if (ty == 0 && ox < size) nx_s[tx] = weights(ox, job.w, size, &wx_s[0][tx], kTileW, &fx_s[tx]);
    const int ry = blockIdx.y * kTileH + tx;
    if (ty == 1 && tx < kTileH && ry < size) ny_s[tx] = weights(ry, job.h, size, &wy_s[tx][0], 1, &fy_s[tx]);
    __syncthreads();
  }
  if (ox >= size || oy >= size) return;
  const int64_t cs = job.channel_step;
  const int ps = job.pixel_step;
  float r = 0.f, g = 0.f, b = 0.f;
  if (tabled) {
    const int nx = nx_s[tx], ny = ny_s[ty];
    const uint8_t* base = job.src + static_cast<int64_t>(job.y + fy_s[ty]) * job.pitch +
                          static_cast<int64_t>(job.x + fx_s[tx]) * ps;
    for (int k = 0; k < ny; ++k) {
      const uint8_t* p = base + static_cast<int64_t>(k) * job.pitch;
      float rr = 0.f, gg = 0.f, bb = 0.f;
      for (int j = 0; j < nx; ++j, p += ps) {
        const float wx = wx_s[j][tx];
        rr += wx * p[0];
        gg += wx * p[cs];
        bb += wx * p[2 * cs];
      }
      const float wy = wy_s[ty][k];
      r += wy * rr;
      g += wy * gg;
      b += wy * bb;
    }
  } else {
    const Span sx = span(ox, job.w, size), sy = span(oy, job.h, size);
    float wsum_x = 0.f;
    for (int x = sx.first; x < sx.last; ++x) wsum_x += triangle((x - sx.center + 0.5f) * sx.inv_width);
    float wsum_y = 0.f;
    for (int y = sy.first; y < sy.last; ++y) wsum_y += triangle((y - sy.center + 0.5f) * sy.inv_width);
    for (int y = sy.first; y < sy.last; ++y) {
      const float wy = triangle((y - sy.center + 0.5f) * sy.inv_width);
      if (wy == 0.f) continue;
      const uint8_t* row = job.src + static_cast<int64_t>(job.y + y) * job.pitch + static_cast<int64_t>(job.x) * ps;
      float rr = 0.f, gg = 0.f, bb = 0.f;
      for (int x = sx.first; x < sx.last; ++x) {
        const float wx = triangle((x - sx.center + 0.5f) * sx.inv_width);
        const uint8_t* p = row + static_cast<int64_t>(ps) * x;
        rr += wx * p[0];
        gg += wx * p[cs];
        bb += wx * p[2 * cs];
      }
      r += wy * rr;
      g += wy * gg;
      b += wy * bb;
    }
    const float norm = 1.f / (wsum_x * wsum_y);
    r *= norm;
    g *= norm;
    b *= norm;
  }
  const int col = job.flip ? size - 1 - ox : ox;
  const int64_t plane = static_cast<int64_t>(size) * size;
  const float v[3] = {(r - o.mean[0]) * o.inv_std[0], (g - o.mean[1]) * o.inv_std[1], (b - o.mean[2]) * o.inv_std[2]};
  if (o.channels_last) {
    Out* q = out + ((static_cast<int64_t>(blockIdx.z) * size + oy) * size + col) * 3;
    store(q, v[0]);
    store(q + 1, v[1]);
    store(q + 2, v[2]);
  } else {
    Out* q = out + static_cast<int64_t>(blockIdx.z) * 3 * plane + static_cast<int64_t>(oy) * size + col;
    store(q, v[0]);
    store(q + plane, v[1]);
    store(q + 2 * plane, v[2]);
  }
}

}  // namespace

int launch_crop_resize(const CropResizeJob* jobs, int batch, int size, void* out, bool bf16, void* stream,
                       const CropResizeOutput& o) {
  if (batch <= 0 || size <= 0) return 0;
  const dim3 block(kTileW, kTileH);
  const dim3 grid((size + block.x - 1) / block.x, (size + block.y - 1) / block.y, batch);
  const auto s = static_cast<cudaStream_t>(stream);
  if (bf16)
    crop_resize_kernel<<<grid, block, 0, s>>>(jobs, size, static_cast<__nv_bfloat16*>(out), o);
  else
    crop_resize_kernel<<<grid, block, 0, s>>>(jobs, size, static_cast<float*>(out), o);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace trainer
