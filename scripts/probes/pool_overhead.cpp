// What a fork-join call costs its caller: parallel_for over 256 items of about W microseconds of arithmetic each,
// on T threads, with threads started and joined for every call against the
// process-wide pool of core/parallel.h; the median of 400 calls each, and the same work on one thread.
//
//   g++ -O2 -std=c++17 -Ilib/core scripts/probes/pool_overhead.cpp lib/core/core/parallel.cpp -lpthread \
//     -o /tmp/pool_overhead
//   /tmp/pool_overhead T W
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "core/parallel.h"

using Clock = std::chrono::steady_clock;

namespace {

template <class F> void spawned_for(int64_t n, int threads, F&& fn) {
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t i; (i = next.fetch_add(1)) < n;) fn(i);
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::min<int64_t>(threads, n); ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
}

volatile double sink;
void spin(int us) {  // about `us` microseconds of arithmetic
  const auto end = Clock::now() + std::chrono::microseconds(us);
  double x = 1;
  while (Clock::now() < end) x = x * 1.0000001 + 1e-9;
  sink = x;
}

template <class Call> double median_ms(Call&& call) {
  std::vector<double> ms;
  for (int rep = 0; rep < 400; ++rep) {
    const auto t = Clock::now();
    call();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t).count());
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 14, us = argc > 2 ? std::atoi(argv[2]) : 5;
  const int64_t n = 256;
  const double spawned = median_ms([&] { spawned_for(n, threads, [&](int64_t) { spin(us); }); });
  const double pooled = median_ms([&] { trainer::parallel_for(n, threads, [&](int64_t) { spin(us); }); });
  const double serial = median_ms([&] { spawned_for(n, 1, [&](int64_t) { spin(us); }); });
  std::printf("%d threads, 256 items of %d us (%u cores): threads per call %.3f ms, pool %.3f ms, one thread %.3f ms\n",
              threads, us, std::thread::hardware_concurrency(), spawned, pooled, serial);
}
