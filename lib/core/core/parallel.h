// A fork-join loop over [0, n) on a few short-lived threads, each index taken once from a shared counter (the
// GPU loader's file reading and header parsing, `trainer pack`). The first exception a call throws stops the
// others taking new indices and is rethrown on the calling thread once every thread has joined.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace trainer {

// fn(i, worker) for every i in [0, n); worker is the calling thread's number, 0 .. threads - 1 (0 is the caller).
template <class F> void parallel_for_workers(int64_t n, int threads, F&& fn) {
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::mutex error_mu;
  auto work = [&](int worker) {
    try {
      for (int64_t i; (i = next.fetch_add(1)) < n;) fn(i, worker);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu);
      if (!error) error = std::current_exception();
      next.store(n);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::min<int64_t>(threads, n); ++t) pool.emplace_back(work, t);
  work(0);
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

template <class F> void parallel_for(int64_t n, int threads, F&& fn) {
  parallel_for_workers(n, threads, [&](int64_t i, int) { fn(i); });
}

}  // namespace trainer
