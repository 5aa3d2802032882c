#include "models/fused_bias_gelu.h"

#include <torch/torch.h>

#include <utility>

#ifdef TRAINER_WITH_KERNELS
#include "kernels/bias_gelu.h"
#include "models/internal/grad_ownership.h"
#include "models/internal/kernel_glue.h"
#endif

namespace trainer {

#ifdef TRAINER_WITH_KERNELS
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

void check(cudaError_t e, const char* what) { glue::check_launch(e, "fused bias + GELU", what); }

// h: the GEMM's output without the bias (bf16/fp16, contiguous); bias fp32. Saves h and bias, not h + bias.
struct BiasGelu : public torch::autograd::Function<BiasGelu> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor h, torch::Tensor bias) {
    const int64_t C = h.size(-1), rows = h.numel() / C;
    torch::Tensor y = torch::empty_like(h);
    check(kernels::bias_gelu_forward(h.data_ptr(), bias.data_ptr<float>(), y.data_ptr(), glue::half_type_of(h), rows,
                                     C, glue::stream_of(h)),
          "forward");
    ctx->save_for_backward({h, bias});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &h = saved[0], &bias = saved[1];
    torch::Tensor dy = std::move(grads[0]);
    dy = dy.to(h.scalar_type()).contiguous();
    if (!glue::aligned(dy, 16)) dy = dy.clone();
    const int64_t C = h.size(-1), rows = h.numel() / C;
    // dh over dy where nobody else reaches dy (fc2's input gradient in a ViT): one rows x C buffer less in the last
    // block's MLP backward, the first to run, where every activation is still alive beside dy and dh
    torch::Tensor dh = glue::sole_gradient(dy) ? dy.view(h.sizes()) : torch::empty_like(h);
    torch::Tensor dbias = torch::empty({C}, bias.options());
    torch::Tensor ws = torch::empty({kernels::bias_gelu_workspace_floats(rows, C)}, bias.options());
    check(kernels::bias_gelu_backward(dy.data_ptr(), h.data_ptr(), bias.data_ptr<float>(), glue::half_type_of(h),
                                      rows, C, dh.data_ptr(), dbias.data_ptr<float>(), ws.data_ptr<float>(),
                                      glue::stream_of(h)),
          "backward");
    return {dh, dbias};
  }
};

}  // namespace
#endif

bool linear_gelu_fuses(const torch::Tensor& x, const torch::Tensor& bias) {
#ifdef TRAINER_WITH_KERNELS
  return glue::fusable_bias(x, bias) && kernels::bias_gelu_supports(bias.size(0));
#else
  (void)x, (void)bias;
  return false;
#endif
}

torch::Tensor linear_gelu(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias, bool fused) {
#ifdef TRAINER_WITH_KERNELS
  if (fused && linear_gelu_fuses(x, bias)) {
    torch::Tensor h = torch::linear(x, weight).contiguous();  // autocast: the GEMM in bf16/fp16, no bias epilogue
    if (!glue::aligned(h, 16)) h = h.clone();
    return BiasGelu::apply(h, bias.contiguous());
  }
#endif
  (void)fused;
  return torch::gelu(torch::linear(x, weight, bias));
}

}  // namespace trainer
