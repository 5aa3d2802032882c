#include "models/stem_conv.h"

#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/torch.h>

namespace trainer {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct StemConvFp16 : public torch::autograd::Function<StemConvFp16> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               int64_t stride, int64_t padding) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    torch::Tensor x16 = x.to(torch::kHalf);
    torch::Tensor y = at::conv2d(x16, weight.to(torch::kHalf), {}, {stride, stride}, {padding, padding});
    // the weight gradient's bf16 copy of x: x itself where it is bf16 (no cast back in the backward)
    ctx->save_for_backward({x.scalar_type() == torch::kBFloat16 ? x : x16, weight});
    ctx->saved_data["stride"] = stride;
    ctx->saved_data["padding"] = padding;
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    return y.to(torch::kBFloat16);
  }

  // the gradients in bf16 as autocast's convolution computes them, from x (bf16) or its fp16 copy (otherwise: within
  // bf16's rounding of x)
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto saved = ctx->get_saved_variables();
    const int64_t s = ctx->saved_data["stride"].toInt(), p = ctx->saved_data["padding"].toInt();
    const auto x_dtype = static_cast<torch::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    const torch::Tensor& x_saved = saved[0];
    const torch::Tensor& weight = saved[1];
    const bool need_dx = ctx->needs_input_grad(0), need_dw = ctx->needs_input_grad(1);
    torch::Tensor dy = grads[0].to(torch::kBFloat16);
    auto [dx, dw, db] = at::convolution_backward(dy, x_saved.to(torch::kBFloat16), weight.to(torch::kBFloat16),
                                                 c10::nullopt, {s, s}, {p, p}, {1, 1}, /*transposed=*/false, {0, 0},
                                                 /*groups=*/1, {need_dx, need_dw, false});
    (void)db;
    return {need_dx ? dx.to(x_dtype) : torch::Tensor(), need_dw ? dw.to(weight.scalar_type()) : torch::Tensor(),
            torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

bool stem_conv_fp16_applies(const torch::Tensor& x, bool enabled) {
  return enabled && x.is_cuda() && x.dim() == 4 && x.size(1) <= 4 &&
         at::autocast::is_autocast_enabled(at::kCUDA) && at::autocast::get_autocast_dtype(at::kCUDA) == at::kBFloat16;
}

torch::Tensor stem_conv(const torch::Tensor& x, const torch::Tensor& weight, int64_t stride, int64_t padding,
                        bool fp16_forward) {
  if (stem_conv_fp16_applies(x, fp16_forward)) return StemConvFp16::apply(x, weight, stride, padding);
  return at::conv2d(x, weight, {}, {stride, stride}, {padding, padding});
}

}  // namespace trainer
