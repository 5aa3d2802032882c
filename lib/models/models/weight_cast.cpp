#include "models/weight_cast.h"

#include <torch/torch.h>

#ifdef TRAINER_WITH_KERNELS
#include "kernels/cast.h"
#include "models/internal/kernel_glue.h"
#endif

namespace trainer {
namespace {

#ifdef TRAINER_WITH_KERNELS
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// copies of src (dense tensors on one device) in `dtype` with src's sizes and strides, written by one launch
std::vector<torch::Tensor> cast_all(const std::vector<torch::Tensor>& src, torch::ScalarType dtype) {
  std::vector<torch::Tensor> out;
  kernels::CastList list;
  for (const auto& t : src) {
    out.push_back(at::empty_like(t, t.options().dtype(dtype)));
    list.src[list.count] = t.data_ptr();
    list.dst[list.count] = out.back().data_ptr();
    list.n[list.count++] = t.numel();
  }
  const bool to_half = dtype != torch::kFloat32;
  glue::check_launch(kernels::cast_many(list, glue::half_type_of(to_half ? out[0] : src[0]), to_half,
                                        glue::stream_of(src[0])),
                     "weight cast", to_half ? "to autocast's dtype" : "gradients to fp32");
  return out;
}

struct CastWeights : public torch::autograd::Function<CastWeights> {
  static variable_list forward(AutogradContext* ctx, at::TensorList ws, int64_t dtype) {
    ctx->set_materialize_grads(false);  // an unused weight keeps no gradient, as with autocast's own casts
    return cast_all(ws.vec(), static_cast<torch::ScalarType>(dtype));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    (void)ctx;
    std::vector<torch::Tensor> dense;
    for (const auto& g : grads)
      if (g.defined()) dense.push_back(g.is_non_overlapping_and_dense() ? g : g.contiguous());
    const std::vector<torch::Tensor> cast = dense.empty() ? dense : cast_all(dense, torch::kFloat32);
    variable_list out(grads.size() + 1);  // the last: the dtype argument's
    size_t k = 0;
    for (size_t i = 0; i < grads.size(); ++i)
      if (grads[i].defined()) out[i] = cast[k++];
    return out;
  }
};
#endif

}  // namespace

bool weight_cast_applies(const torch::Tensor& x) {
#ifdef TRAINER_WITH_KERNELS
  return x.is_cuda() && glue::autocast_half();
#else
  (void)x;
  return false;
#endif
}

std::vector<torch::Tensor> cast_weights_for_autocast(const torch::Tensor& x, const std::vector<torch::Tensor>& ws) {
  if (!weight_cast_applies(x)) return ws;
#ifdef TRAINER_WITH_KERNELS
  std::vector<torch::Tensor> present;
  for (const auto& w : ws) {
    if (!w.defined()) continue;
    if (w.scalar_type() != torch::kFloat32 || w.device() != x.device() || !w.is_non_overlapping_and_dense())
      return ws;
    present.push_back(w);
  }
  if (present.empty() || present.size() > static_cast<size_t>(kernels::kMaxCastTensors)) return ws;
  const int64_t dtype = static_cast<int64_t>(at::autocast::get_autocast_dtype(at::kCUDA));
  const variable_list cast = CastWeights::apply(at::TensorList(present), dtype);
  std::vector<torch::Tensor> out(ws.size());
  size_t k = 0;
  for (size_t i = 0; i < ws.size(); ++i)
    if (ws[i].defined()) out[i] = cast[k++];
  return out;
#else
  return ws;
#endif
}

}  // namespace trainer
