#include "models/weight_cast.h"

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

namespace trainer {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// copies of src in `dtype` with src's sizes and strides, written by one multi-tensor copy
std::vector<torch::Tensor> cast_all(const std::vector<torch::Tensor>& src, torch::ScalarType dtype) {
  std::vector<torch::Tensor> out;
  out.reserve(src.size());
  for (const auto& t : src) out.push_back(at::empty_like(t, t.options().dtype(dtype)));
  at::_foreach_copy_(out, src);
  return out;
}

struct CastWeights : public torch::autograd::Function<CastWeights> {
  static variable_list forward(AutogradContext* ctx, at::TensorList ws, int64_t dtype) {
    ctx->saved_data["from"] = static_cast<int64_t>(ws[0].scalar_type());
    return cast_all(ws.vec(), static_cast<torch::ScalarType>(dtype));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto from = static_cast<torch::ScalarType>(ctx->saved_data["from"].toInt());
    std::vector<torch::Tensor> defined;
    for (const auto& g : grads)
      if (g.defined()) defined.push_back(g);
    std::vector<torch::Tensor> cast = defined.empty() ? defined : cast_all(defined, from);
    variable_list out(grads.size() + 1);  // the last: the dtype argument's
    size_t k = 0;
    for (size_t i = 0; i < grads.size(); ++i)
      if (grads[i].defined()) out[i] = cast[k++];
    return out;
  }
};

}  // namespace

bool weight_cast_applies(const torch::Tensor& x) {
  if (!x.is_cuda() || !at::autocast::is_autocast_enabled(at::kCUDA)) return false;
  const auto dt = at::autocast::get_autocast_dtype(at::kCUDA);
  return dt == torch::kBFloat16 || dt == torch::kHalf;
}

std::vector<torch::Tensor> cast_weights_for_autocast(const torch::Tensor& x, const std::vector<torch::Tensor>& ws) {
  if (!weight_cast_applies(x)) return ws;
  std::vector<torch::Tensor> present;
  for (const auto& w : ws) {
    if (!w.defined()) continue;
    if (w.scalar_type() != torch::kFloat32 || w.device() != x.device()) return ws;
    present.push_back(w);
  }
  if (present.empty()) return ws;
  const int64_t dtype = static_cast<int64_t>(at::autocast::get_autocast_dtype(at::kCUDA));
  const variable_list cast = CastWeights::apply(at::TensorList(present), dtype);
  std::vector<torch::Tensor> out(ws.size());
  size_t k = 0;
  for (size_t i = 0; i < ws.size(); ++i)
    if (ws[i].defined()) out[i] = cast[k++];
  return out;
}

}  // namespace trainer
