// The hybrid decode's split of a batch between the CPU threads and nvJPEG (data/decode_split.h): fixed shares,
// the adapted share settling where both sides take as long for their part (a simulated host in whole waves of
// threads and a GPU with a fixed latency), following a side that slows down, and its bounds; which images the host
// takes (the cheapest for it); and the GPU decode path's end-of-epoch line (data/pipeline_report.h).
#include <gtest/gtest.h>

#include <cmath>

#include "data/decode_split.h"
#include "data/pipeline_report.h"

namespace trainer {
namespace {

TEST(DecodeSplit, FixedSharesTakeThatMuchOfEveryBatch) {
  EXPECT_EQ(DecodeSplit(0).host_count(256), 0);
  EXPECT_EQ(DecodeSplit(0.25).host_count(256), 64);
  EXPECT_EQ(DecodeSplit(1).host_count(256), 256);
  EXPECT_EQ(DecodeSplit(0.5).host_count(0), 0);
  DecodeSplit fixed(0.3);
  fixed.observe_host(10, 1.0);  // measurements do not move a fixed share
  fixed.observe_gpu(100, 1.0);
  EXPECT_DOUBLE_EQ(fixed.share(), 0.3);
  EXPECT_FALSE(fixed.adaptive());
}

// A host of `threads` threads decoding an image in `host_ms` each (whole waves of threads), and a GPU taking
// latency_ms plus per_image_ms an image, both fed what the split gives them and measured as the loader measures them.
struct Sim {
  int threads;
  double host_ms, latency_ms, per_image_ms;
  double host_wall(int64_t k) const { return std::ceil(static_cast<double>(k) / threads) * host_ms; }
  double gpu_span(int64_t m) const { return latency_ms + static_cast<double>(m) * per_image_ms; }
  void steps(DecodeSplit& s, int64_t n, int count) const {
    for (int i = 0; i < count; ++i) {
      const int64_t k = s.host_count(n), m = n - k;
      s.observe_host(k, host_wall(k));
      s.observe_gpu(m, gpu_span(m));
    }
  }
  // how far apart the two sides finish a batch of n at the split's share
  double imbalance(const DecodeSplit& s, int64_t n) const {
    const int64_t k = s.host_count(n);
    return std::abs(host_wall(k) - gpu_span(n - k));
  }
};

TEST(DecodeSplit, AdaptedShareBalancesBothSidesAndFollowsASlowerSide) {
  DecodeSplit s(-1);
  EXPECT_TRUE(s.adaptive());
  EXPECT_DOUBLE_EQ(s.share(), DecodeSplit::kStartShare);
  // host: 14 threads at 1.4 ms an image; GPU: 2 ms + 0.05 ms an image
  Sim sim{14, 1.4, 2.0, 0.05};
  sim.steps(s, 256, 60);
  // both finish within a wave of the host's threads of each other: 98 images on the CPU (9.8 ms), 158 on nvJPEG
  // (9.9 ms)
  EXPECT_NEAR(s.share(), 98.0 / 256, 0.02);
  EXPECT_LE(sim.imbalance(s, 256), sim.host_ms);
  // the CPU slows to half its speed (another job on the host): the share follows within a few dozen batches
  sim.host_ms = 2.8;
  sim.steps(s, 256, 60);
  EXPECT_NEAR(s.share(), 57.0 / 256, 0.02);
  EXPECT_LE(sim.imbalance(s, 256), sim.host_ms);
  // and the GPU slows 4x (a heavier training step beside it): more goes to the CPU
  sim.per_image_ms = 0.2;
  sim.steps(s, 256, 60);
  EXPECT_NEAR(s.share(), 127.0 / 256, 0.02);
  EXPECT_LE(sim.imbalance(s, 256), sim.host_ms);
}

TEST(DecodeSplit, AdaptedShareKeepsBothSidesMeasuredAndIgnoresEmptyBatches) {
  DecodeSplit s(-1);
  s.observe_host(0, 5.0);  // nothing decoded: no rate
  s.observe_gpu(10, 0.0);  // no time measured: no rate
  EXPECT_DOUBLE_EQ(s.share(), DecodeSplit::kStartShare);
  s.observe_host(100, 1.0);  // a host far faster than the GPU
  s.observe_gpu(1, 100.0);
  EXPECT_LE(s.share(), DecodeSplit::kMaxShare);
  EXPECT_EQ(s.host_count(256), static_cast<int64_t>(std::llround(DecodeSplit::kMaxShare * 256)));
  EXPECT_EQ(s.host_count(2), 1);  // each side keeps one image
  EXPECT_EQ(s.host_count(1), 1);
  DecodeSplit slow_host(-1);
  slow_host.observe_host(1, 1000.0);
  slow_host.observe_gpu(255, 1.0);
  EXPECT_EQ(slow_host.host_count(256), 1);
}

// The host threads' share is the images cheapest for their crop decode: a cuttable file costs its bytes times the
// window's area share, another its bytes times the mean of that and the window's bottom, a whole-image decode its
// bytes; the k cheapest candidates in that order, earlier positions first among equals.
TEST(DecodeSplit, TheShareIsTheImagesCheapestForTheCpuThreads) {
  EXPECT_DOUBLE_EQ(host_decode_cost(1000, 0.25, 0.5, /*cuttable=*/true, /*crop_decode=*/true), 250);
  EXPECT_DOUBLE_EQ(host_decode_cost(1000, 0.25, 0.5, false, true), 375);
  EXPECT_DOUBLE_EQ(host_decode_cost(1000, 0.25, 0.5, true, false), 1000);
  // a small window low in the image costs more than a large one at the top, unless the file can be cut
  EXPECT_GT(host_decode_cost(1000, 0.1, 1.0, false, true), host_decode_cost(1000, 0.3, 0.4, false, true));
  EXPECT_LT(host_decode_cost(1000, 0.1, 1.0, true, true), host_decode_cost(1000, 0.3, 0.4, true, true));

  const std::vector<double> cost = {5, 1, 9, 1, 3, 0.5};
  const std::vector<char> jpeg = {1, 1, 1, 1, 1, 0};  // the last is not a candidate (a PNG)
  EXPECT_EQ(cheapest(cost, jpeg, 3), (std::vector<int64_t>{1, 3, 4}));
  EXPECT_EQ(cheapest(cost, jpeg, 1), (std::vector<int64_t>{1}));
  EXPECT_EQ(cheapest(cost, jpeg, 0), (std::vector<int64_t>{}));
  EXPECT_EQ(cheapest(cost, jpeg, 10), (std::vector<int64_t>{1, 3, 4, 0, 2}));
}

// The end-of-epoch line of the GPU decode path: the epoch's part of the counters, the hybrid share where there was
// one, the side stream's time per batch against the step's; nothing when no batch was timed.
TEST(DecodeSplit, EpochReportGivesTheEpochsPartOfTheCounters) {
  GpuDecodeStats start, now;
  start.gpu = 100, start.cpu_fallback = 2, start.batches = 4, start.decode_ms = 40, start.augment_ms = 8;
  EXPECT_EQ(gpu_decode_report(start, start, 30.0), "");
  now = start;
  now.gpu += 300, now.cpu_fallback += 4, now.cpu_hybrid = 208, now.host_share = 0.4;
  now.batches += 2, now.decode_ms += 16, now.augment_ms += 4;
  EXPECT_EQ(gpu_decode_report(now, start, 40.0),
            "GPU decode: 300 images by nvJPEG, 212 by the CPU threads (208 of them the hybrid share, 0.40 of a batch "
            "now); the loader's side stream per batch: decode 8.00 ms, crop + resize + normalise 2.00 ms, beside a "
            "40.00 ms step (25%)");
  now.cpu_hybrid = 0;
  EXPECT_EQ(gpu_decode_report(now, start, 0).find("hybrid"), std::string::npos);
}

}  // namespace
}  // namespace trainer
