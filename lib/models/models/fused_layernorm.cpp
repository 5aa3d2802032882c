#include "models/fused_layernorm.h"

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include "core/check.h"

#ifdef TRAINER_WITH_KERNELS
#include "kernels/layernorm.h"
#include "models/internal/kernel_glue.h"
#endif

namespace trainer {

#ifdef TRAINER_WITH_KERNELS
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

void check(cudaError_t e, const char* what) { glue::check_launch(e, "fused layer norm", what); }
float* f32(const torch::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }

// the same storage as t, not a view of it: autograd gives it a gradient of its own
torch::Tensor alias_of(const torch::Tensor& t) { return torch::empty({0}, t.options()).set_(t); }

struct FusedAddLayerNorm : public torch::autograd::Function<FusedAddLayerNorm> {
  // a: the branch or an empty tensor; out_dtype: the normalised output's (bf16 or fp16)
  static variable_list forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor a, torch::Tensor weight,
                               torch::Tensor bias, double eps, int64_t out_dtype, bool want_stream) {
    const int64_t D = x.size(-1), rows = x.numel() / D;
    const auto dtype = static_cast<torch::ScalarType>(out_dtype);
    const bool has_a = a.numel() > 0;
    torch::Tensor s = has_a ? torch::empty_like(x) : x;
    torch::Tensor y = torch::empty(x.sizes(), x.options().dtype(dtype));
    const auto f = x.options().dtype(torch::kFloat32);
    torch::Tensor mean = torch::empty({rows}, f), rstd = torch::empty({rows}, f);
    check(kernels::ln_forward(x.data_ptr<float>(), has_a ? a.data_ptr() : nullptr, f32(s), y.data_ptr(),
                              glue::half_type_of(y), rows, D, weight.data_ptr<float>(), bias.data_ptr<float>(),
                              static_cast<float>(eps), f32(mean), f32(rstd), glue::stream_of(x)),
          "forward");
    ctx->save_for_backward({s, mean, rstd, weight});
    ctx->saved_data["has_a"] = has_a;
    ctx->saved_data["a_dtype"] = static_cast<int64_t>(has_a ? a.scalar_type() : dtype);
    ctx->set_materialize_grads(false);
    if (!want_stream) return {y};
    return {y, has_a ? s : alias_of(x)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &s = saved[0], &mean = saved[1], &rstd = saved[2], &weight = saved[3];
    const bool has_a = ctx->saved_data["has_a"].toBool();
    const auto a_dtype = static_cast<torch::ScalarType>(ctx->saved_data["a_dtype"].toInt());
    torch::Tensor ds = grads.size() > 1 && grads[1].defined() ? grads[1].to(torch::kFloat32).contiguous()
                                                                : torch::Tensor();
    const variable_list none(7);
    if (!grads[0].defined()) {  // the normalised output went nowhere: the stream's gradient passes through
      if (!ds.defined()) return none;
      return {ds, has_a ? ds.to(a_dtype) : torch::Tensor(), torch::Tensor(), torch::Tensor(),
              torch::Tensor(), torch::Tensor(), torch::Tensor()};
    }
    const torch::Tensor dy = grads[0].contiguous();
    const int64_t D = s.size(-1), rows = s.numel() / D;
    torch::Tensor dx = torch::empty_like(s);
    torch::Tensor da = has_a ? torch::empty(s.sizes(), s.options().dtype(a_dtype)) : torch::Tensor();
    const auto f = s.options().dtype(torch::kFloat32);
    torch::Tensor dweight = torch::empty({D}, f), dbias = torch::empty({D}, f);
    torch::Tensor ws = torch::empty(
        {kernels::ln_workspace_floats(rows, D, glue::half_type_of(dy), ds.defined(), has_a)}, f);
    TRAINER_CHECK(!has_a || a_dtype == dy.scalar_type(),
                  "fused layer norm: the branch and the output gradient must share a dtype");
    check(kernels::ln_backward(dy.data_ptr(), f32(ds), f32(s), f32(mean), f32(rstd), f32(weight),
                               glue::half_type_of(dy), rows, D, f32(dx), has_a ? da.data_ptr() : nullptr,
                               f32(dweight), f32(dbias), f32(ws), glue::stream_of(s)),
          "backward");
    return {dx, da, dweight, dbias, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace
#endif

bool fused_layernorm_applies(const torch::Tensor& x, FusedNorm policy) {
#ifdef TRAINER_WITH_KERNELS
  if (policy == FusedNorm::off || !x.defined() || !x.is_cuda() || x.scalar_type() != torch::kFloat32) return false;
  if (!x.is_contiguous() || x.dim() < 2 || !kernels::ln_supports(x.size(-1)) || !glue::aligned(x, 8)) return false;
  return glue::autocast_half();
#else
  (void)x;
  (void)policy;
  return false;
#endif
}

std::pair<torch::Tensor, torch::Tensor> fused_add_layernorm(const torch::Tensor& x, const torch::Tensor& a,
                                                            const torch::Tensor& weight, const torch::Tensor& bias,
                                                            double eps, bool want_stream) {
#ifdef TRAINER_WITH_KERNELS
  const auto dtype = at::autocast::get_autocast_dtype(at::kCUDA);
  TRAINER_CHECK(weight.scalar_type() == torch::kFloat32 && bias.scalar_type() == torch::kFloat32 &&
                    weight.numel() == x.size(-1) && bias.numel() == x.size(-1),
                "fused layer norm: weight and bias must be float32 of the last dimension's size");
  torch::Tensor branch = a.defined() ? a.to(dtype).contiguous() : x.new_empty({0});
  TRAINER_CHECK(!a.defined() || (a.sizes() == x.sizes() && glue::aligned(branch, 4)),
                "fused layer norm: the branch must have the stream's shape");
  const variable_list out = FusedAddLayerNorm::apply(x, branch, weight.contiguous(), bias.contiguous(), eps,
                                                     static_cast<int64_t>(dtype), want_stream);
  return {out[0], want_stream ? out[1] : torch::Tensor()};
#else
  (void)x, (void)a, (void)weight, (void)bias, (void)eps, (void)want_stream;
  TRAINER_FAIL("fused layer norm: this build has no CUDA kernels of its own (no nvcc)");
#endif
}

}  // namespace trainer
