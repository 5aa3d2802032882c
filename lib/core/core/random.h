// Counter-based randomness: every random draw of a sample comes from a generator seeded by
// (seed, epoch, sample index), so augmentation is identical whatever the thread count or batch order.
#pragma once
#include <cstdint>

namespace trainer {

// SplitMix64 step: a strong 64-bit mixer (Steele et al.), used to derive seeds and as a small PRNG.
inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline uint64_t mix_seed(uint64_t a, uint64_t b) {
  uint64_t s = a ^ (b * 0xD1B54A32D192ED03ull);
  return splitmix64(s);
}

// Small PRNG for one sample's augmentation draws.
class SampleRng {
 public:
  SampleRng(uint64_t seed, uint64_t epoch, uint64_t index) : state_(mix_seed(mix_seed(seed, epoch + 1), index + 1)) {}
  uint64_t next_u64() { return splitmix64(state_); }
  // uniform in [0, 1)
  double uniform() { return static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0); }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  // uniform integer in [lo, hi]
  int64_t randint(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(next_u64() % static_cast<uint64_t>(hi - lo + 1));
  }
  bool bernoulli(double p) { return uniform() < p; }

 private:
  uint64_t state_;
};

}  // namespace trainer
