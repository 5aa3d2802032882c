#include "models/max_pool.h"

#include <torch/torch.h>

#include "core/check.h"

#ifdef TRAINER_WITH_KERNELS
#include "kernels/max_pool_nhwc.h"
#include "models/internal/kernel_glue.h"
#endif

namespace trainer {

#ifdef TRAINER_WITH_KERNELS
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

kernels::PoolShape shape_of(const torch::Tensor& x, int64_t k, int64_t s, int64_t p) {
  return {static_cast<int>(x.size(0)), static_cast<int>(x.size(2)), static_cast<int>(x.size(3)),
          static_cast<int>(x.size(1)), static_cast<int>(k), static_cast<int>(s), static_cast<int>(p)};
}

using glue::stream_of;
kernels::HalfType half_of(const torch::Tensor& t) { return glue::half_type_of(t); }
void check(cudaError_t e, const char* what) { glue::check_launch(e, "max pool", what); }

// y (n, c, out_h, out_w), channels_last; arg: the window position of each maximum, or null
torch::Tensor pool_forward(const torch::Tensor& x, const kernels::PoolShape& sh, uint8_t* arg) {
  torch::Tensor y = torch::empty({x.size(0), x.size(1), sh.out_h(), sh.out_w()},
                                 x.options().memory_format(torch::MemoryFormat::ChannelsLast));
  check(kernels::max_pool_forward(x.data_ptr(), y.data_ptr(), arg, half_of(x), sh, stream_of(x)), "forward");
  return y;
}

struct MaxPoolNhwc : public torch::autograd::Function<MaxPoolNhwc> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, int64_t k, int64_t s, int64_t p) {
    const kernels::PoolShape sh = shape_of(x, k, s, p);
    torch::Tensor arg = torch::empty({x.size(0), sh.out_h(), sh.out_w(), x.size(1)}, x.options().dtype(torch::kUInt8));
    torch::Tensor y = pool_forward(x, sh, arg.data_ptr<uint8_t>());
    ctx->save_for_backward({arg});
    ctx->saved_data["shape"] = std::vector<int64_t>{x.size(0), x.size(1), x.size(2), x.size(3), k, s, p};
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const torch::Tensor arg = ctx->get_saved_variables()[0];
    const auto d = ctx->saved_data["shape"].toIntVector();
    const torch::Tensor dy = grads[0].contiguous(torch::MemoryFormat::ChannelsLast);
    torch::Tensor dx = torch::empty({d[0], d[1], d[2], d[3]}, dy.options().memory_format(torch::MemoryFormat::ChannelsLast));
    const kernels::PoolShape sh{static_cast<int>(d[0]), static_cast<int>(d[2]), static_cast<int>(d[3]),
                                static_cast<int>(d[1]), static_cast<int>(d[4]), static_cast<int>(d[5]),
                                static_cast<int>(d[6])};
    check(kernels::max_pool_backward(dy.data_ptr(), arg.data_ptr<uint8_t>(), dx.data_ptr(), half_of(dy), sh,
                                     stream_of(dy)),
          "backward");
    return {dx, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace
#endif

bool max_pool_nhwc_applies(const torch::Tensor& x, int64_t k, int64_t s, int64_t p, FusedNorm policy) {
#ifndef TRAINER_WITH_KERNELS
  return false;
#endif
  if (policy == FusedNorm::off || !x.defined() || !x.is_cuda() || x.dim() != 4) return false;
  if (x.scalar_type() != torch::kBFloat16 && x.scalar_type() != torch::kHalf) return false;
  if (!x.is_contiguous(torch::MemoryFormat::ChannelsLast) || x.numel() == 0 || x.numel() >= (int64_t(1) << 31))
    return false;
  // ATen's own limits (pad at most half the window) stay ATen's errors
  return k >= 1 && k <= 15 && s >= 1 && p >= 0 && 2 * p <= k && x.size(2) + 2 * p >= k && x.size(3) + 2 * p >= k;
}

torch::Tensor max_pool2d_nhwc(const torch::Tensor& x, int64_t k, int64_t s, int64_t p, FusedNorm policy) {
#ifdef TRAINER_WITH_KERNELS
  if (max_pool_nhwc_applies(x, k, s, p, policy)) {
    if (torch::GradMode::is_enabled() && x.requires_grad()) return MaxPoolNhwc::apply(x, k, s, p);
    return pool_forward(x, shape_of(x, k, s, p), nullptr);
  }
#endif
  return torch::max_pool2d(x, k, s, p);
}

}  // namespace trainer
