// Global average pooling (models/global_pool) on the GPU: the same values and gradient as x.mean({2, 3}), the
// gradient channels_last for a channels_last input (label gpu).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "models/global_pool.h"

namespace trainer {
namespace {

TEST(GlobalAvgPool, MatchesTheMeanAndKeepsChannelsLastInItsGradient) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device; none is usable here";
  for (const auto dtype : {torch::kBFloat16, torch::kFloat32})
    for (const auto& shape : std::vector<std::vector<int64_t>>{{256, 2048, 7, 7}, {3, 5, 4, 6}}) {
      SCOPED_TRACE(testing::Message() << dtype << " " << shape[0] << "x" << shape[1]);
      torch::manual_seed(3);
      const auto o = torch::device(torch::kCUDA).dtype(dtype);
      torch::Tensor x = torch::randn(shape, o).contiguous(torch::MemoryFormat::ChannelsLast);
      torch::Tensor g = torch::randn({shape[0], shape[1]}, o);
      torch::Tensor xa = x.detach().requires_grad_(true), xb = x.detach().requires_grad_(true);
      torch::Tensor ya = global_avg_pool(xa), yb = xb.mean({2, 3});
      ya.backward(g);
      yb.backward(g);
      EXPECT_TRUE(torch::equal(ya, yb));
      EXPECT_TRUE(xa.grad().is_contiguous(torch::MemoryFormat::ChannelsLast));
      EXPECT_TRUE(torch::allclose(xa.grad().to(torch::kFloat32), xb.grad().to(torch::kFloat32), 1e-2, 1e-6));
    }
}

}  // namespace
}  // namespace trainer
