// Which samples a rank sees in an epoch: DistributedSampler semantics. The epoch's order is a permutation
// drawn from (seed, epoch); it is padded (by wrapping) to a multiple of world_size, and rank r takes every
// world_size-th index starting at r, so ranks get disjoint, equal shares.
#pragma once
#include <cstdint>
#include <vector>

namespace trainer {

struct ShardSpec {
  int64_t dataset_size = 0;
  uint64_t seed = 0;
  int64_t epoch = 0;
  int rank = 0;
  int world_size = 1;
  bool shuffle = true;
  bool drop_last = false;  // drop the tail instead of padding
  bool even = true;        // false: no padding or dropping (exact evaluation; shares may differ by one)
};

std::vector<int64_t> epoch_indices(const ShardSpec& s);

// The loaders' rule: training shuffles and shares evenly (padding, or dropping with drop_last); evaluation keeps
// dataset order and neither pads nor drops, so distributed metrics count every sample exactly once.
ShardSpec loader_shard(int64_t dataset_size, uint64_t seed, int64_t epoch, int rank, int world_size, bool train,
                       bool drop_last);

}  // namespace trainer
