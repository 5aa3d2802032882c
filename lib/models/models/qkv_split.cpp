#include "models/qkv_split.h"

#include <torch/torch.h>

#ifdef TRAINER_WITH_KERNELS
#include "kernels/qkv_grad.h"
#include "models/internal/kernel_glue.h"
#endif

namespace trainer {

namespace {

std::vector<torch::Tensor> split(const torch::Tensor& qkv) {
  const int64_t B = qkv.size(0), N = qkv.size(1), D = qkv.size(2) / 3;
  return qkv.view({B, N, 3, D}).unbind(2);
}

#ifdef TRAINER_WITH_KERNELS
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// qkv: the projection's output (its bias already added by the GEMM, whose autograd does not see the bias); bias:
// the projection's bias, an input here only for its gradient. Forward: views; backward: one stacking kernel.
struct QkvSplit : public torch::autograd::Function<QkvSplit> {
  static variable_list forward(AutogradContext* ctx, torch::Tensor qkv, torch::Tensor bias) {
    ctx->saved_data["dtype"] = static_cast<int64_t>(qkv.scalar_type());
    ctx->saved_data["shape"] = qkv.sizes().vec();
    ctx->set_materialize_grads(false);
    (void)bias;
    return split(qkv);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    const auto shape = ctx->saved_data["shape"].toIntVector();
    const int64_t D = shape[2] / 3, rows = shape[0] * shape[1];
    torch::Tensor g[3];
    const torch::Tensor* any = nullptr;
    for (int i = 0; i < 3; ++i) {
      if (!grads[i].defined()) continue;
      g[i] = grads[i].to(dtype).contiguous();
      if (!glue::aligned(g[i], 16)) g[i] = g[i].clone();
      any = &g[i];
    }
    if (any == nullptr) return {torch::Tensor(), torch::Tensor()};
    torch::Tensor out = torch::empty(shape, any->options());
    const auto f = any->options().dtype(torch::kFloat32);
    torch::Tensor dbias = torch::empty({3 * D}, f);
    torch::Tensor ws = torch::empty({kernels::qkv_grad_workspace_floats(rows, D)}, f);
    auto ptr = [](const torch::Tensor& t) -> const void* { return t.defined() ? t.data_ptr() : nullptr; };
    glue::check_launch(kernels::qkv_grad(ptr(g[0]), ptr(g[1]), ptr(g[2]), glue::half_type_of(out), rows, D,
                                         out.data_ptr(), dbias.data_ptr<float>(), ws.data_ptr<float>(),
                                         glue::stream_of(out)),
                       "q/k/v gradient", "stack");
    return {out, dbias};
  }
};
#endif

}  // namespace

bool qkv_projection_fuses(const torch::Tensor& x, const torch::Tensor& bias) {
#ifdef TRAINER_WITH_KERNELS
  return glue::fusable_bias(x, bias) && x.dim() == 3 && bias.size(0) % 3 == 0 &&
         kernels::qkv_grad_supports(bias.size(0) / 3);
#else
  (void)x, (void)bias;
  return false;
#endif
}

std::vector<torch::Tensor> qkv_projection(const torch::Tensor& x, const torch::Tensor& weight,
                                          const torch::Tensor& bias, bool fused) {
#ifdef TRAINER_WITH_KERNELS
  if (fused && qkv_projection_fuses(x, bias) && bias.requires_grad()) {
    return QkvSplit::apply(torch::linear(x, weight, bias.detach()).contiguous(), bias);
  }
#endif
  (void)fused;
  return split(torch::linear(x, weight, bias));
}

}  // namespace trainer
