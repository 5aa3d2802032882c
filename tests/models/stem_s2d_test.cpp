// The stem as a 4x4 convolution over its input's space-to-depth (models/stem_s2d.h), on the CPU in float64: the
// same output and weight gradient as the 7x7 stride-2 convolution, the rearranged layout itself, and where it
// applies. (The GPU kernel and the speed: stem_conv_gpu_test.cpp.)
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "models/stem_s2d.h"

namespace trainer {
namespace {

TEST(StemS2d, EqualsTheStrideTwoConvolutionAndItsWeightGradient) {
  for (const auto& shape : std::vector<std::vector<int64_t>>{{2, 3, 32, 32}, {1, 1, 18, 22}, {3, 4, 10, 12}}) {
    SCOPED_TRACE(testing::Message() << shape[0] << "x" << shape[1] << "x" << shape[2] << "x" << shape[3]);
    torch::manual_seed(4);
    const auto d = torch::kFloat64;
    torch::Tensor x = torch::randn(shape, d);
    torch::Tensor w = torch::randn({8, shape[1], 7, 7}, d).requires_grad_(true);
    ASSERT_TRUE(stem_s2d_applies(x, w, 2, 3));
    torch::Tensor ref = at::conv2d(x, w, {}, 2, 3);
    torch::Tensor dy = torch::randn(ref.sizes(), d);
    ref.backward(dy);
    const torch::Tensor dw_ref = w.grad().clone();
    w.mutable_grad().zero_();
    torch::Tensor y = stem_conv_s2d(x, w, 3);
    ASSERT_EQ(y.sizes(), ref.sizes());
    EXPECT_TRUE(torch::allclose(y, ref.detach(), 1e-10, 1e-10));
    y.backward(dy);
    EXPECT_TRUE(torch::allclose(w.grad(), dw_ref, 1e-10, 1e-10));
  }
}

TEST(StemS2d, RearrangesThePaddedPhasesIntoChannels) {
  const int64_t N = 2, C = 3, H = 6, W = 8, pad = 3;
  torch::Tensor x = torch::arange(N * C * H * W, torch::kFloat32).view({N, C, H, W}) + 1;  // no zeros
  const torch::Tensor y = stem_space_to_depth(x, pad, torch::kFloat32);
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{N, stem_s2d_channels(C), (H + 2 * pad) / 2, (W + 2 * pad) / 2}));
  EXPECT_EQ(stem_s2d_channels(3), 16);
  EXPECT_EQ(stem_s2d_channels(1), 8);
  EXPECT_TRUE(y.is_contiguous(torch::MemoryFormat::ChannelsLast));
  auto ya = y.accessor<float, 4>();
  auto xa = x.accessor<float, 4>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < y.size(2); ++i)
      for (int64_t j = 0; j < y.size(3); ++j)
        for (int64_t ch = 0; ch < y.size(1); ++ch) {
          float want = 0;
          if (ch < 4 * C) {
            const int64_t phase = ch / C, c = ch % C, r = 2 * i + phase / 2 - pad, s = 2 * j + phase % 2 - pad;
            if (r >= 0 && r < H && s >= 0 && s < W) want = xa[n][c][r][s];
          }
          ASSERT_EQ(ya[n][ch][i][j], want) << "n " << n << " channel " << ch << " at " << i << "," << j;
        }
}

TEST(StemS2d, AppliesOnlyWhereTheRearrangementIsExact) {
  const torch::Tensor w = torch::zeros({64, 3, 7, 7});
  EXPECT_TRUE(stem_s2d_applies(torch::zeros({1, 3, 224, 224}), w, 2, 3));
  EXPECT_FALSE(stem_s2d_applies(torch::zeros({1, 3, 37, 224}), w, 2, 3));  // odd side + 2 pad
  EXPECT_FALSE(stem_s2d_applies(torch::zeros({1, 3, 224, 224}), w, 1, 3));  // stride 1
  EXPECT_FALSE(stem_s2d_applies(torch::zeros({1, 5, 224, 224}), torch::zeros({64, 5, 7, 7}), 2, 3));  // > 4 channels
  EXPECT_FALSE(stem_s2d_applies(torch::zeros({1, 3, 224, 224}), torch::zeros({64, 3, 3, 3}), 2, 1));  // not 7x7
  EXPECT_FALSE(stem_s2d_applies(torch::zeros({1, 3, 224, 224}).requires_grad_(true), w, 2, 3));  // needs dx
  EXPECT_THROW(stem_space_to_depth(torch::zeros({1, 3, 7, 8}), 3, torch::kFloat32), std::exception);
}

}  // namespace
}  // namespace trainer
