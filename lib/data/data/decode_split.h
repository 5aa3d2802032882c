// How the hybrid decode (data.decode: hybrid) splits each batch between the CPU decode threads and nvJPEG: a fixed
// share, or an adapted one. Adapted: each side's rate is averaged over the recent batches (exponentially, weight
// kRateWeight for the newest) -- the host's as the images its threads decoded over the wall time of their whole part
// of the batch (reading and parsing it included, and whatever else the cores do), nvJPEG's as its images over its
// own side-stream span -- and the host takes the balance share r_host / (r_host + r_gpu): where the host's wall time
// for its part equals nvJPEG's span for the rest (k / r_host = m / r_gpu), the pipeline's fastest split whatever the
// two times' shapes (a fixed latency, whole waves of threads). Each side keeps at least one image of a batch of two
// or more so that both rates stay measured.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace trainer {

class DecodeSplit {
 public:
  static constexpr double kStartShare = 0.25;  // adapted: the host's share until both sides are measured
  static constexpr double kMaxShare = 0.95;
  static constexpr double kRateWeight = 0.2;

  // fixed_share in [0, 1]: that share of every batch; < 0: adapted
  explicit DecodeSplit(double fixed_share = 0);
  bool adaptive() const { return fixed_ < 0; }
  double share() const;                 // the balance share (fixed: that share)
  int64_t host_count(int64_t n) const;  // of n images nvJPEG could take: how many go to the host threads
  // one batch's measurements: `images` decoded by the host threads in `wall_ms`, or by nvJPEG in a side-stream span
  // of `span_ms`; ignored where nothing was decoded or no time measured
  void observe_host(int64_t images, double wall_ms);
  void observe_gpu(int64_t images, double span_ms);
  double host_rate() const { return rate_host_; }  // images per ms, 0 until measured
  double gpu_rate() const { return rate_gpu_; }

 private:
  double fixed_;
  double rate_host_ = 0, rate_gpu_ = 0;
};

// Which of a batch's images the host threads take: the cheapest for them, by what their crop decode reads (the
// engines' time hardly depends on the window: their share keeps the costly ones). A file that jpeg_cut.h can cut
// entropy-decodes only its window's restart intervals (~ bytes x the window's share of the area); any other file
// entropy-decodes every row down to the window's bottom and transforms the window (~ bytes x (bottom + area) / 2,
// the fit of crop decode times in bench/results/2026-12-05_devbox/run07); without crop decoding (or for a
// progressive file, which the caller prices at its bytes), the bytes.
// area, bottom: the window's area over the image's, its last row over the image's height (both in (0, 1]).
double host_decode_cost(size_t bytes, double area, double bottom, bool cuttable, bool crop_decode);
// The positions of the k smallest costs among those with candidate[i] set, cheapest first (ties: the earlier
// position); all candidates where there are at most k.
std::vector<int64_t> cheapest(const std::vector<double>& cost, const std::vector<char>& candidate, int64_t k);

}  // namespace trainer
