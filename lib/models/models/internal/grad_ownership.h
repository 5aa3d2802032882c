// Whether a custom autograd Function's backward may write over a gradient it received: nobody but the autograd
// engine's copy of the argument list and the backward itself may hold the tensor, and nothing else may reach its
// memory. A view (a reshaped matmul output, say) counts its base: the view's autograd metadata holds the base, so
// the base's one reference and the storage's two (base and view) are what an unshared view has. The same test as
// autograd's AccumulateGrad before it takes over a gradient (use counts), with the storage added, since here the
// memory is written, not adopted. Move the gradient out of the argument list first (std::move(grads[i])).
#pragma once
#include <torch/types.h>

namespace trainer::glue {

inline bool sole_gradient(const torch::Tensor& g) {
  if (!g.defined() || !g.is_contiguous() || g.use_count() > 2) return false;
  if (!g.is_view()) return g.storage().use_count() == 1;
  const torch::TensorBase& base = g._base();
  return base.use_count() == 1 && g.storage().use_count() == 2 && base.storage().is_alias_of(g.storage());
}

}  // namespace trainer::glue
