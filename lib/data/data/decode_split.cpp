#include "data/decode_split.h"

#include <algorithm>
#include <cmath>

namespace trainer {
namespace {

void average_into(double& rate, double sample) {
  rate = rate == 0 ? sample : (1 - DecodeSplit::kRateWeight) * rate + DecodeSplit::kRateWeight * sample;
}

}  // namespace

DecodeSplit::DecodeSplit(double fixed_share) : fixed_(fixed_share < 0 ? -1 : std::min(fixed_share, 1.0)) {}

double DecodeSplit::share() const {
  if (!adaptive()) return fixed_;
  if (rate_host_ == 0 || rate_gpu_ == 0) return kStartShare;
  return std::min(kMaxShare, rate_host_ / (rate_host_ + rate_gpu_));
}

int64_t DecodeSplit::host_count(int64_t n) const {
  if (n <= 0) return 0;
  auto k = static_cast<int64_t>(std::llround(share() * static_cast<double>(n)));
  if (!adaptive() || n < 2) return std::clamp<int64_t>(k, 0, n);
  return std::clamp<int64_t>(k, 1, n - 1);
}

void DecodeSplit::observe_host(int64_t images, double wall_ms) {
  if (!adaptive() || images <= 0 || !(wall_ms > 0)) return;
  average_into(rate_host_, static_cast<double>(images) / wall_ms);
}

void DecodeSplit::observe_gpu(int64_t images, double span_ms) {
  if (!adaptive() || images <= 0 || !(span_ms > 0)) return;
  average_into(rate_gpu_, static_cast<double>(images) / span_ms);
}

double host_decode_cost(size_t bytes, double area, double bottom, bool cuttable, bool crop_decode) {
  const double b = static_cast<double>(bytes);
  if (!crop_decode) return b;
  return cuttable ? b * area : b * 0.5 * (bottom + area);
}

std::vector<int64_t> cheapest(const std::vector<double>& cost, const std::vector<char>& candidate, int64_t k) {
  std::vector<int64_t> at;
  for (size_t i = 0; i < cost.size() && i < candidate.size(); ++i)
    if (candidate[i]) at.push_back(static_cast<int64_t>(i));
  std::stable_sort(at.begin(), at.end(),
                   [&](int64_t a, int64_t b) { return cost[static_cast<size_t>(a)] < cost[static_cast<size_t>(b)]; });
  if (static_cast<int64_t>(at.size()) > k) at.resize(static_cast<size_t>(std::max<int64_t>(k, 0)));
  return at;
}

}  // namespace trainer
