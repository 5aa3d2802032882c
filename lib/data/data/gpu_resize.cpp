#include "data/gpu_resize.h"

#include <torch/torch.h>

#include <cstring>

#include "core/check.h"

#ifdef TRAINER_WITH_KERNELS
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "crop_resize.h"
#endif

namespace trainer {

GpuResizeOutput GpuResizeOutput::normalized(const std::vector<double>& mean, const std::vector<double>& std,
                                            bool channels_last, torch::ScalarType dtype) {
  TRAINER_CHECK(mean.size() == 3 && std.size() == 3, "GpuResizeOutput: three means and three stds");
  GpuResizeOutput o;
  o.normalize = true;
  for (size_t c = 0; c < 3; ++c) {
    o.mean255[c] = static_cast<float>(255.0 * mean[c]);
    o.inv_std255[c] = static_cast<float>(1.0 / (255.0 * std[c]));
  }
  o.channels_last = channels_last;
  o.dtype = dtype;
  return o;
}

bool gpu_crop_resize_kernel_available() {
#ifdef TRAINER_WITH_KERNELS
  return true;
#else
  return false;
#endif
}

namespace {

// ATen's antialiased resize of a (1, 3, h, w) float image to (out_h, out_w) with the output's filter (the bicubic's
// overshoot clamped to 0..255 as the CPU path's uint8 is)
torch::Tensor aa_resize(const torch::Tensor& c, int64_t out_h, int64_t out_w, const GpuResizeOutput& o) {
  return o.filter == Interpolation::bicubic
             ? at::_upsample_bicubic2d_aa(c, {out_h, out_w}, /*align_corners=*/false).clamp_(0, 255)
             : at::_upsample_bilinear2d_aa(c, {out_h, out_w}, /*align_corners=*/false);
}

torch::Tensor float_batch(int64_t B, int64_t size, const torch::Device& device, const GpuResizeOutput& o) {
  const auto format = o.channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous;
  return torch::empty({B, 3, size, size}, torch::TensorOptions().dtype(torch::kFloat32).device(device).memory_format(format));
}

// the per-sample paths' end: normalised as `o` says, in its dtype
torch::Tensor finish(torch::Tensor x, const GpuResizeOutput& o) {
  if (o.normalize) {
    const auto f = torch::TensorOptions().dtype(torch::kFloat32);
    x.sub_(torch::tensor({o.mean255[0], o.mean255[1], o.mean255[2]}, f).view({1, 3, 1, 1}).to(x.device()))
        .mul_(torch::tensor({o.inv_std255[0], o.inv_std255[1], o.inv_std255[2]}, f).view({1, 3, 1, 1}).to(x.device()));
  }
  return x.to(o.dtype);
}

}  // namespace

torch::Tensor gpu_eval_resize(const std::vector<torch::Tensor>& images, int64_t size, double crop_pct,
                              const GpuResizeOutput& out) {
  TRAINER_CHECK(!images.empty(), "gpu_eval_resize: no images");
  const int64_t B = static_cast<int64_t>(images.size());
  torch::Tensor x = float_batch(B, size, images[0].device(), out);
  for (int64_t i = 0; i < B; ++i) {
    const torch::Tensor& t = images[static_cast<size_t>(i)];
    TRAINER_CHECK(t.dim() == 3 && t.size(2) == 3 && t.scalar_type() == torch::kUInt8,
                  "gpu_eval_resize: image ", i, " is not an (H, W, 3) uint8 tensor");
    const EvalResize e = eval_resize(static_cast<int>(t.size(1)), static_cast<int>(t.size(0)), static_cast<int>(size),
                                     crop_pct);
    torch::Tensor y = aa_resize(t.permute({2, 0, 1}).unsqueeze(0).to(torch::kFloat32), e.h, e.w, out);
    x[i].copy_(y[0].narrow(1, e.top, size).narrow(2, e.left, size));
  }
  return finish(x, out);
}

torch::Tensor gpu_crop_resize(const std::vector<torch::Tensor>& images, const std::vector<Rect>& windows,
                              const std::vector<char>& flips, int64_t size, bool batched_kernel,
                              const GpuResizeOutput& norm) {
  TRAINER_CHECK(!images.empty() && images.size() == windows.size() && images.size() == flips.size(),
                "gpu_crop_resize: one window and one flip per image");
  const int64_t B = static_cast<int64_t>(images.size());
  const torch::Device device = images[0].device();
  TRAINER_CHECK(norm.dtype == torch::kFloat32 || norm.dtype == torch::kBFloat16,
                "gpu_crop_resize: the output is float32 or bfloat16, not ", norm.dtype);
  for (size_t i = 0; i < images.size(); ++i) {
    const torch::Tensor& t = images[i];
    const Rect& r = windows[i];
    TRAINER_CHECK(t.dim() == 3 && t.size(2) == 3 && t.scalar_type() == torch::kUInt8 && t.stride(0) > 0 &&
                      t.stride(1) > 0 && t.stride(2) > 0 && t.device() == device,
                  "gpu_crop_resize: image ", i, " is not an (H, W, 3) uint8 tensor on ", device.str());
    TRAINER_CHECK(r.w > 0 && r.h > 0 && r.x >= 0 && r.y >= 0 && r.x + r.w <= t.size(1) && r.y + r.h <= t.size(0),
                  "gpu_crop_resize: window ", r.x, ",", r.y, " ", r.w, "x", r.h, " of image ", i, " is outside its ",
                  t.size(1), "x", t.size(0), " pixels");
  }
#ifdef TRAINER_WITH_KERNELS
  if (batched_kernel && norm.filter == Interpolation::bilinear) {
    const auto format = norm.channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous;
    torch::Tensor x = torch::empty({B, 3, size, size},
                                   torch::TensorOptions().dtype(norm.dtype).device(device).memory_format(format));
    TRAINER_CHECK(device.is_cuda(), "gpu_crop_resize: the batched kernel needs CUDA tensors");
    std::vector<CropResizeJob> jobs(static_cast<size_t>(B));
    for (size_t i = 0; i < jobs.size(); ++i) {
      jobs[i].src = images[i].data_ptr<uint8_t>();
      jobs[i].pitch = images[i].stride(0);
      jobs[i].pixel_step = static_cast<int32_t>(images[i].stride(1));
      jobs[i].channel_step = images[i].stride(2);
      jobs[i].x = windows[i].x;
      jobs[i].y = windows[i].y;
      jobs[i].w = windows[i].w;
      jobs[i].h = windows[i].h;
      jobs[i].flip = flips[i] ? 1 : 0;
    }
    const int64_t bytes = B * static_cast<int64_t>(sizeof(CropResizeJob));
    // pinned staging: the caching host allocator keeps it alive until the copy has run
    torch::Tensor host = torch::empty({bytes}, torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(true));
    std::memcpy(host.data_ptr<uint8_t>(), jobs.data(), static_cast<size_t>(bytes));
    torch::Tensor dev = host.to(device, /*non_blocking=*/true);
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device.index()).stream();
    CropResizeOutput o;
    for (int c = 0; c < 3 && norm.normalize; ++c) {
      o.mean[c] = norm.mean255[c];
      o.inv_std[c] = norm.inv_std255[c];
    }
    o.channels_last = norm.channels_last ? 1 : 0;
    const int err = launch_crop_resize(reinterpret_cast<const CropResizeJob*>(dev.data_ptr<uint8_t>()),
                                       static_cast<int>(B), static_cast<int>(size), x.data_ptr(),
                                       norm.dtype == torch::kBFloat16, stream, o);
    TRAINER_CHECK(err == 0, "gpu_crop_resize: kernel launch failed: ", cudaGetErrorString(static_cast<cudaError_t>(err)));
    return x;
  }
#else
  TRAINER_CHECK(!batched_kernel, "gpu_crop_resize: this build has no CUDA kernels of its own (nvcc not found)");
#endif
  torch::Tensor x = float_batch(B, size, device, norm);
  for (int64_t i = 0; i < B; ++i) {
    const torch::Tensor& t = images[static_cast<size_t>(i)];
    const Rect& r = windows[static_cast<size_t>(i)];
    torch::Tensor c = t.narrow(0, r.y, r.h).narrow(1, r.x, r.w).permute({2, 0, 1}).unsqueeze(0).to(torch::kFloat32);
    torch::Tensor y = aa_resize(c, size, size, norm);
    if (flips[static_cast<size_t>(i)]) y = y.flip({3});
    x[i].copy_(y[0]);
  }
  return finish(x, norm);
}

}  // namespace trainer
