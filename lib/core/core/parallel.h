// A fork-join loop over [0, n): each index taken once from a shared counter by the calling thread and a few of a
// process-wide pool of persistent threads (the GPU loader's file reading, header parsing and hybrid share,
// `trainer pack`). The first exception a call throws stops the others taking new indices and is rethrown on the
// calling thread once every thread that took part is done. Calls may come from several threads at once and from
// inside a loop's body: the caller always works through the range itself, so a call never waits on a busy pool.
#pragma once
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>

namespace trainer {

// work(worker) on the calling thread as worker 0 and on up to `helpers` of the pool's threads, each with its own
// number in 1 .. helpers (none: work(0) here alone); returns once every thread that took part has returned. The
// pool grows to what the calls in flight ask for (capped); a helper that has not joined by the time the caller is
// done is not waited for. work must not throw.
void run_on_pool(int helpers, const std::function<void(int)>& work);

// The pool's thread count (tests: it does not grow with calls made one after another).
int pool_threads();

// fn(i, worker) for every i in [0, n); worker is the thread's number, 0 .. threads - 1 (0 is the caller).
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
  run_on_pool(static_cast<int>((threads < n ? threads : n) - 1), work);
  if (error) std::rethrow_exception(error);
}

template <class F> void parallel_for(int64_t n, int threads, F&& fn) {
  parallel_for_workers(n, threads, [&](int64_t i, int) { fn(i); });
}

}  // namespace trainer
