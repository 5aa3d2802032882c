#include "models/stem_s2d.h"

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include "core/check.h"

#ifdef TRAINER_WITH_KERNELS
#include "kernels/space_to_depth.h"
#include "models/internal/kernel_glue.h"
#endif

namespace trainer {
namespace {

// the dtype the rearranged input is written in: autocast's on CUDA under autocast, else x's
torch::ScalarType conv_dtype(const torch::Tensor& x) {
  if (x.is_cuda() && at::autocast::is_autocast_enabled(at::kCUDA)) return at::autocast::get_autocast_dtype(at::kCUDA);
  return x.scalar_type();
}

// ATen's rearrangement (CPU, or inputs our kernel does not take)
torch::Tensor space_to_depth_aten(const torch::Tensor& x, int64_t pad, torch::ScalarType dtype) {
  const int64_t N = x.size(0), C = x.size(1);
  const torch::Tensor xp = at::constant_pad_nd(x, {pad, pad, pad, pad});
  const int64_t Ho = xp.size(2) / 2, Wo = xp.size(3) / 2;
  torch::Tensor y = xp.reshape({N, C, Ho, 2, Wo, 2}).permute({0, 3, 5, 1, 2, 4}).reshape({N, 4 * C, Ho, Wo});
  y = at::constant_pad_nd(y, {0, 0, 0, 0, 0, stem_s2d_channels(C) - 4 * C});
  return y.to(dtype).contiguous(torch::MemoryFormat::ChannelsLast);
}

}  // namespace

int64_t stem_s2d_channels(int64_t c) { return (4 * c + 7) / 8 * 8; }

torch::Tensor stem_space_to_depth(const torch::Tensor& x, int64_t pad, torch::ScalarType dtype) {
  TRAINER_CHECK(x.dim() == 4 && (x.size(2) + 2 * pad) % 2 == 0 && (x.size(3) + 2 * pad) % 2 == 0,
                "stem space-to-depth: expected (N, C, H, W) with H + 2 pad and W + 2 pad even, got ", x.sizes());
#ifdef TRAINER_WITH_KERNELS
  const bool half = dtype == torch::kBFloat16 || dtype == torch::kHalf;
  kernels::ElemType src;
  if (x.is_cuda() && half && x.is_contiguous(torch::MemoryFormat::ChannelsLast) && x.size(1) <= 4 &&
      glue::elem_type_of(x, &src)) {
    const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), Co = stem_s2d_channels(C);
    torch::Tensor y = torch::empty({N, Co, (H + 2 * pad) / 2, (W + 2 * pad) / 2},
                                   x.options().dtype(dtype).memory_format(torch::MemoryFormat::ChannelsLast));
    glue::check_launch(kernels::space_to_depth(x.data_ptr(), src, N, H, W, static_cast<int>(C), static_cast<int>(pad),
                                               y.data_ptr(), glue::half_type_of(y), static_cast<int>(Co),
                                               glue::stream_of(x)),
                       "stem convolution", "space-to-depth");
    return y;
  }
#endif
  return space_to_depth_aten(x, pad, dtype);
}

torch::Tensor stem_s2d_weight(const torch::Tensor& w) {
  const int64_t K = w.size(0), C = w.size(1);
  TRAINER_CHECK(w.dim() == 4 && w.size(2) == 7 && w.size(3) == 7, "stem space-to-depth: expected a 7x7 weight, got ",
                w.sizes());
  torch::Tensor w8 = at::constant_pad_nd(w, {0, 1, 0, 1});  // (K, C, 8, 8), zero at r = 7 and s = 7
  torch::Tensor ws = w8.reshape({K, C, 4, 2, 4, 2}).permute({0, 3, 5, 1, 2, 4}).reshape({K, 4 * C, 4, 4});
  ws = at::constant_pad_nd(ws, {0, 0, 0, 0, 0, stem_s2d_channels(C) - 4 * C});
  return ws.contiguous(torch::MemoryFormat::ChannelsLast);
}

bool stem_s2d_applies(const torch::Tensor& x, const torch::Tensor& w, int64_t stride, int64_t pad) {
  return x.dim() == 4 && w.dim() == 4 && stride == 2 && w.size(2) == 7 && w.size(3) == 7 && x.size(1) <= 4 &&
         w.size(1) == x.size(1) && (x.size(2) + 2 * pad) % 2 == 0 && (x.size(3) + 2 * pad) % 2 == 0 &&
         !x.requires_grad();
}

torch::Tensor stem_conv_s2d(const torch::Tensor& x, const torch::Tensor& w, int64_t pad) {
  const torch::Tensor xs = stem_space_to_depth(x, pad, conv_dtype(x));
  return at::conv2d(xs, stem_s2d_weight(w));  // stride 1, no padding
}

}  // namespace trainer
