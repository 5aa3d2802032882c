// The hybrid decode's split of a batch between the CPU threads and nvJPEG (data/decode_split.h): fixed shares,
// the adapted share settling where both sides take as long for their part (a simulated host and GPU, the GPU with
// a fixed latency), following a side that slows down, and its bounds.
#include <gtest/gtest.h>

#include <cmath>

#include "data/decode_split.h"

namespace trainer {
namespace {

TEST(DecodeSplit, FixedSharesTakeThatMuchOfEveryBatch) {
  EXPECT_EQ(DecodeSplit(0).host_count(256), 0);
  EXPECT_EQ(DecodeSplit(0.25).host_count(256), 64);
  EXPECT_EQ(DecodeSplit(1).host_count(256), 256);
  EXPECT_EQ(DecodeSplit(0.5).host_count(0), 0);
  DecodeSplit fixed(0.3, 14);
  fixed.observe_host(10, 1.0);  // measurements do not move a fixed share
  fixed.observe_gpu(100, 1.0);
  EXPECT_DOUBLE_EQ(fixed.share(), 0.3);
  EXPECT_FALSE(fixed.adaptive());
}

// A host of `threads` threads decoding an image in `host_ms` of CPU time, and a GPU taking latency_ms plus
// per_image_ms an image, both fed what the split gives them; returns each side's time for the last batch.
struct Sim {
  int threads;
  double host_ms, latency_ms, per_image_ms;
  void step(DecodeSplit& s, int64_t n, double* host_wall, double* gpu_span) const {
    const int64_t k = s.host_count(n), m = n - k;
    s.observe_host(k, static_cast<double>(k) * host_ms);
    const double span = latency_ms + static_cast<double>(m) * per_image_ms;
    s.observe_gpu(m, span);
    *host_wall = std::ceil(static_cast<double>(k) / threads) * host_ms;
    *gpu_span = span;
  }
};

TEST(DecodeSplit, AdaptedShareBalancesBothSidesAndFollowsASlowerSide) {
  DecodeSplit s(-1, 14);
  EXPECT_TRUE(s.adaptive());
  EXPECT_DOUBLE_EQ(s.share(), DecodeSplit::kStartShare);
  // host: 14 threads at 1.4 ms an image = 10 images/ms; GPU: 2 ms + 0.05 ms an image (20 images/ms at full load)
  Sim sim{14, 1.4, 2.0, 0.05};
  double host = 0, gpu = 0;
  for (int i = 0; i < 60; ++i) sim.step(s, 256, &host, &gpu);
  // balance: k / 10 = 2 + (256 - k) * 0.05 -> k = 98 (share 0.383); host wall in whole waves of 14
  EXPECT_NEAR(s.share(), 98.0 / 256, 0.02);
  EXPECT_NEAR(s.host_rate(), 10.0, 1e-9);
  EXPECT_NEAR(static_cast<double>(s.host_count(256)) / 10.0, gpu, 0.6);
  // the CPU slows to half its speed (another job on the host): the share follows within a few dozen batches
  sim.host_ms = 2.8;
  for (int i = 0; i < 60; ++i) sim.step(s, 256, &host, &gpu);
  // k / 5 = 2 + (256 - k) * 0.05 -> k = 58.2
  EXPECT_NEAR(s.share(), 58.2 / 256, 0.02);
  // and the GPU slows (a heavier training step beside it): more goes to the host
  sim.per_image_ms = 0.2;
  for (int i = 0; i < 60; ++i) sim.step(s, 256, &host, &gpu);
  // k / 5 = 2 + (256 - k) * 0.2 -> k = 133
  EXPECT_NEAR(s.share(), 133.0 / 256, 0.02);
}

TEST(DecodeSplit, AdaptedShareKeepsBothSidesMeasuredAndIgnoresEmptyBatches) {
  DecodeSplit s(-1, 4);
  s.observe_host(0, 5.0);  // nothing decoded: no rate
  s.observe_gpu(10, 0.0);  // no time measured: no rate
  EXPECT_DOUBLE_EQ(s.share(), DecodeSplit::kStartShare);
  s.observe_host(100, 1.0);  // a host far faster than the GPU
  s.observe_gpu(1, 100.0);
  EXPECT_LE(s.share(), DecodeSplit::kMaxShare);
  EXPECT_EQ(s.host_count(256), static_cast<int64_t>(std::llround(DecodeSplit::kMaxShare * 256)));
  EXPECT_EQ(s.host_count(2), 1);  // each side keeps one image
  EXPECT_EQ(s.host_count(1), 1);
  DecodeSplit slow_host(-1, 1);
  slow_host.observe_host(1, 1000.0);
  slow_host.observe_gpu(255, 1.0);
  EXPECT_EQ(slow_host.host_count(256), 1);
}

}  // namespace
}  // namespace trainer
