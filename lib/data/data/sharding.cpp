#include "data/sharding.h"

#include <numeric>

#include "core/check.h"
#include "core/random.h"

namespace trainer {

std::vector<int64_t> epoch_indices(const ShardSpec& s) {
  TRAINER_CHECK(s.world_size >= 1 && s.rank >= 0 && s.rank < s.world_size, "bad rank ", s.rank, "/", s.world_size);
  std::vector<int64_t> order(static_cast<size_t>(s.dataset_size));
  std::iota(order.begin(), order.end(), 0);
  if (s.shuffle) {  // Fisher-Yates with a generator keyed by (seed, epoch)
    uint64_t st = mix_seed(s.seed, static_cast<uint64_t>(s.epoch) + 0x51ED);
    for (int64_t i = s.dataset_size - 1; i > 0; --i) {
      const int64_t j = static_cast<int64_t>(splitmix64(st) % static_cast<uint64_t>(i + 1));
      std::swap(order[i], order[j]);
    }
  }
  const int64_t w = s.world_size;
  int64_t total;
  if (!s.even) {
    total = s.dataset_size;
  } else if (s.drop_last) {
    total = (s.dataset_size / w) * w;
  } else {
    total = (s.dataset_size + w - 1) / w * w;
  }
  std::vector<int64_t> padded(order.begin(), order.begin() + std::min<int64_t>(total, s.dataset_size));
  for (int64_t i = 0; static_cast<int64_t>(padded.size()) < total; ++i) padded.push_back(order[i % s.dataset_size]);
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(total / w));
  for (int64_t i = s.rank; i < total; i += w) mine.push_back(padded[i]);
  return mine;
}

ShardSpec loader_shard(int64_t dataset_size, uint64_t seed, int64_t epoch, int rank, int world_size, bool train,
                       bool drop_last) {
  ShardSpec s;
  s.dataset_size = dataset_size;
  s.seed = seed;
  s.epoch = epoch;
  s.rank = rank;
  s.world_size = world_size;
  s.shuffle = train;
  s.drop_last = train && drop_last;
  s.even = train;
  return s;
}

}  // namespace trainer
