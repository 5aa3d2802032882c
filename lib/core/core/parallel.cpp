#include "core/parallel.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <thread>

#include "core/thread_priority.h"

namespace trainer {

namespace {

// One call of run_on_pool, on its caller's stack; every field but `work` is guarded by the pool's mutex.
struct Job {
  const std::function<void(int)>* work;
  int wanted;           // helpers still to join; 0: none may (all came, or the caller was done first)
  int next_worker = 1;  // the number the next helper takes
  int running = 0;      // helpers inside work
  std::condition_variable finished;
};

class Pool {
 public:
  void run(int helpers, const std::function<void(int)>& work) {
    Job job{&work, helpers};
    {
      std::lock_guard<std::mutex> lock(mu_);
      // start threads where the idle ones are already promised to the calls queued before this one
      const int spare = idle_ - promised_;
      const int missing = std::min(helpers - spare, kMaxThreads - threads_);
      for (int t = 0; t < missing; ++t) {
        std::thread([this] { serve(); }).detach();
        ++threads_;
      }
      queue_.push_back(&job);
      promised_ += helpers;
    }
    for (int t = 0; t < helpers; ++t) wake_.notify_one();
    work(0);
    std::unique_lock<std::mutex> lock(mu_);
    if (job.wanted > 0) {  // helpers that did not come in time: the range is done, nobody else may start
      queue_.erase(std::find(queue_.begin(), queue_.end(), &job));
      promised_ -= job.wanted;
      job.wanted = 0;
    }
    job.finished.wait(lock, [&] { return job.running == 0; });
  }

  int threads() {
    std::lock_guard<std::mutex> lock(mu_);
    return threads_;
  }

 private:
  static constexpr int kMaxThreads = 256;

  void serve() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      ++idle_;
      wake_.wait(lock, [&] { return !queue_.empty(); });
      --idle_;
      Job* job = queue_.front();
      const int worker = job->next_worker++;
      --promised_;
      if (--job->wanted == 0) queue_.pop_front();
      ++job->running;
      lock.unlock();
      become_data_thread();
      (*job->work)(worker);
      lock.lock();
      // notified under the lock: the caller cannot return (and free the job) before this thread lets go of it
      if (--job->running == 0) job->finished.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Job*> queue_;  // calls still wanting helpers, oldest first
  int threads_ = 0, idle_ = 0;
  int promised_ = 0;  // helpers the queued calls still want
};

// never destroyed: its threads wait on it until the process ends
Pool& pool() {
  static Pool* p = new Pool;
  return *p;
}

}  // namespace

void run_on_pool(int helpers, const std::function<void(int)>& work) {
  if (helpers <= 0) {
    work(0);
    return;
  }
  pool().run(helpers, work);
}

int pool_threads() { return pool().threads(); }

}  // namespace trainer
