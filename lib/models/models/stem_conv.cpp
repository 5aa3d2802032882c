#include "models/stem_conv.h"

#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/torch.h>

#include "models/fused_batchnorm.h"

#ifdef TRAINER_WITH_KERNELS
#include "kernels/pad_channels.h"
#include "models/internal/kernel_glue.h"
#endif

namespace trainer {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// t (N, C, H, W) in `dtype`, channels_last, zero-padded to at least `channels` channels. cuDNN (9.19, H200) pads the
// stem's 3 channels itself (nhwcAddPaddingKernel, 0.29 ms of ResNet-50's bf16 step at bs 256) before its fast kernels:
// the fp16 forward's takes 4 channels (0.41 ms against 0.56 for 3), the bf16 weight gradient's 8 (0.89 against 1.11:
// bench/results/2026-12-02_h200/run61_stem_probe_wrn16); the zero channels add nothing to the sums.
torch::Tensor padded(const torch::Tensor& t, int64_t channels, torch::ScalarType dtype) {
  const auto cl = torch::MemoryFormat::ChannelsLast;
  if (t.size(1) >= channels) return t.to(dtype).contiguous(cl);
  std::vector<int64_t> sizes = t.sizes().vec();
  sizes[1] = channels;
  torch::Tensor out = torch::empty(sizes, t.options().dtype(dtype).memory_format(cl));
#ifdef TRAINER_WITH_KERNELS
  kernels::ElemType src;
  if (t.is_cuda() && t.is_contiguous(cl) && (channels == 4 || channels == 8) && glue::elem_type_of(t, &src)) {
    glue::check_launch(kernels::pad_channels(t.data_ptr(), src, t.numel() / t.size(1), static_cast<int>(t.size(1)),
                                             out.data_ptr(), glue::half_type_of(out), static_cast<int>(channels),
                                             glue::stream_of(t)),
                       "stem convolution", "input channels padded");
    return out;
  }
#endif
  out.narrow(1, 0, t.size(1)).copy_(t);
  out.narrow(1, t.size(1), channels - t.size(1)).zero_();
  return out;
}

constexpr int64_t kForwardChannels = 4, kWgradChannels = 8;

// the convolution's fp16 output from x's fp16 copy padded to 4 channels (x16), outside autocast
torch::Tensor conv_fp16(const torch::Tensor& x16, const torch::Tensor& weight, int64_t stride, int64_t padding) {
  return at::conv2d(x16, padded(weight, x16.size(1), torch::kHalf), {}, {stride, stride}, {padding, padding});
}

// what the backward keeps of x: x itself where it is bf16 (no cast back), else its padded fp16 copy
torch::Tensor x_for_backward(const torch::Tensor& x, const torch::Tensor& x16) {
  return x.scalar_type() == torch::kBFloat16 ? x : x16;
}

// The convolution's gradients (x's, the weight's) in bf16 as autocast's convolution computes them, from x (bf16) or
// its fp16 copy (otherwise: within bf16's rounding of x), both padded to 8 channels, then cut to x's channels and cast
// back to x's and the weight's dtypes.
std::pair<torch::Tensor, torch::Tensor> conv_backward_bf16(const torch::Tensor& dy, const torch::Tensor& x_saved,
                                                           const torch::Tensor& weight, int64_t s, int64_t p,
                                                           torch::ScalarType x_dtype, bool need_dx, bool need_dw) {
  const int64_t c = weight.size(1);
  auto [dx, dw, db] = at::convolution_backward(
      dy.to(torch::kBFloat16), padded(x_saved, kWgradChannels, torch::kBFloat16),
      padded(weight, kWgradChannels, torch::kBFloat16), c10::nullopt, {s, s}, {p, p}, {1, 1},
      /*transposed=*/false, {0, 0}, /*groups=*/1, {need_dx, need_dw, false});
  (void)db;
  return {need_dx ? dx.narrow(1, 0, c).to(x_dtype) : torch::Tensor(),
          need_dw ? dw.narrow(1, 0, c).to(weight.scalar_type()) : torch::Tensor()};
}

void save_conv(AutogradContext* ctx, const torch::Tensor& x, int64_t stride, int64_t padding) {
  ctx->saved_data["stride"] = stride;
  ctx->saved_data["padding"] = padding;
  ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
}

std::pair<torch::Tensor, torch::Tensor> saved_conv_backward(AutogradContext* ctx, const torch::Tensor& dy,
                                                            const torch::Tensor& x_saved,
                                                            const torch::Tensor& weight) {
  return conv_backward_bf16(dy, x_saved, weight, ctx->saved_data["stride"].toInt(),
                            ctx->saved_data["padding"].toInt(),
                            static_cast<torch::ScalarType>(ctx->saved_data["x_dtype"].toInt()),
                            ctx->needs_input_grad(0), ctx->needs_input_grad(1));
}

struct StemConvFp16 : public torch::autograd::Function<StemConvFp16> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               int64_t stride, int64_t padding) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    torch::Tensor x16 = padded(x, kForwardChannels, torch::kHalf);
    torch::Tensor y = conv_fp16(x16, weight, stride, padding);
    ctx->save_for_backward({x_for_backward(x, x16), weight});
    save_conv(ctx, x, stride, padding);
    return y.to(torch::kBFloat16);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto saved = ctx->get_saved_variables();
    auto [dx, dw] = saved_conv_backward(ctx, grads[0], saved[0], saved[1]);
    return {dx, dw, torch::Tensor(), torch::Tensor()};
  }
};

// The stem convolution (fp16 forward) and its batch norm + ReLU (the fused kernels) as one function: the norm reads
// the convolution's fp16 output and writes bf16, so that no cast of the stem's output to bf16 runs (0.6 ms of
// ResNet-50's bf16 step at bs 256: bench/results/2026-12-03_h200/run72_relu_bits), and the norm's input gradient
// reaches the convolution's backward in bf16 (as two functions, autograd would cast it to the fp16 output's type).
struct StemConvBnFp16 : public torch::autograd::Function<StemConvBnFp16> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bn_weight, const torch::Tensor& bn_bias,
                               torch::Tensor running_mean, torch::Tensor running_var, double momentum, double eps,
                               int64_t stride, int64_t padding) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    torch::Tensor x16 = padded(x, kForwardChannels, torch::kHalf);
    torch::Tensor y16 = conv_fp16(x16, weight, stride, padding).contiguous(torch::MemoryFormat::ChannelsLast);
    FusedBnSaved bn;
    torch::Tensor y = fused_batchnorm_train_forward(y16, bn_weight, bn_bias, running_mean, running_var, momentum, eps,
                                                    /*relu=*/true, torch::kBFloat16, bn);
    ctx->save_for_backward({x_for_backward(x, x16), weight, bn_weight, bn.x, bn.mean, bn.invstd, bn.scale, bn.shift});
    save_conv(ctx, x, stride, padding);
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto s = ctx->get_saved_variables();
    const FusedBnSaved bn{s[3], s[4], s[5], s[6], s[7], /*relu=*/true};
    const FusedBnGrads g = fused_batchnorm_train_backward(bn, s[2], grads[0].to(torch::kBFloat16));
    auto [dx, dw] = saved_conv_backward(ctx, g.dx, s[0], s[1]);
    const torch::Tensor none;
    return {dx, dw, g.dweight, g.dbias, none, none, none, none, none, none};
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

torch::Tensor stem_conv_bn_relu(const torch::Tensor& x, const torch::Tensor& weight, int64_t stride, int64_t padding,
                                bool fp16_forward, SyncableBatchNorm2dImpl& bn) {
  if (!stem_conv_fp16_applies(x, fp16_forward) || !bn.fuses_inside(x))
    return bn.forward_act(stem_conv(x, weight, stride, padding, fp16_forward), torch::Tensor(), /*relu=*/true);
  bn.count_fused_batch();
  return StemConvBnFp16::apply(x, weight, bn.weight, bn.bias, bn.running_mean, bn.running_var,
                               *bn.options.momentum(), bn.options.eps(), stride, padding);
}

}  // namespace trainer
