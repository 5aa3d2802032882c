#include "models/global_pool.h"

#include <torch/torch.h>

namespace trainer {
namespace {

struct GlobalAvgPoolChannelsLast : public torch::autograd::Function<GlobalAvgPoolChannelsLast> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x) {
    ctx->saved_data["sizes"] = x.sizes().vec();
    return x.mean({2, 3});
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const std::vector<int64_t> sizes = ctx->saved_data["sizes"].toIntVector();
    const torch::Tensor& g = grads[0];
    torch::Tensor dx = torch::empty(sizes, g.options().memory_format(torch::MemoryFormat::ChannelsLast));
    dx.copy_((g / static_cast<double>(sizes[2] * sizes[3])).view({sizes[0], sizes[1], 1, 1}).expand(sizes));
    return {dx};
  }
};

}  // namespace

torch::Tensor global_avg_pool(const torch::Tensor& x) {
  if (x.is_cuda() && x.dim() == 4 && x.is_contiguous(torch::MemoryFormat::ChannelsLast) &&
      !x.is_contiguous(torch::MemoryFormat::Contiguous))
    return GlobalAvgPoolChannelsLast::apply(x);
  return x.mean({2, 3});
}

}  // namespace trainer
