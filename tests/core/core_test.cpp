#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <thread>
#include <stdexcept>
#include <vector>

#include "core/check.h"
#include "core/log.h"
#include "core/fs.h"
#include "core/parallel.h"
#include "core/signals.h"
#include "core/strings.h"
#include "core/thread_priority.h"
#include "test_support/test_support.h"

namespace trainer {
namespace {

TEST(Strings, CatJoinSplitTrim) {
  EXPECT_EQ(str_cat("a", 1, '-', 2.5), "a1-2.5");
  EXPECT_EQ(join({"x", "y", "z"}, ", "), "x, y, z");
  EXPECT_EQ(split("a,b,,c", ','), (std::vector<std::string>{"a", "b", "", "c"}));
  EXPECT_EQ(trim("  hi \n"), "hi");
  EXPECT_TRUE(starts_with("model.name", "model."));
  EXPECT_TRUE(ends_with("x.yaml", ".yaml"));
  EXPECT_FALSE(ends_with("a", "yaml"));
  EXPECT_EQ(strprintf("%05.1f|%s", 3.14159, "ok"), "003.1|ok");
}

// The paths trainer prints for the user are absolute: relative ones get the working directory, existing ones are
// resolved.
TEST(Fs, AbsolutePathResolvesRelativeAndExistingPaths) {
  char cwd[4096];
  ASSERT_NE(::getcwd(cwd, sizeof(cwd)), nullptr);
  EXPECT_EQ(fs::absolute_path("no_such_dir/model.safetensors"), std::string(cwd) + "/no_such_dir/model.safetensors");
  EXPECT_EQ(fs::absolute_path("/no/such/file"), "/no/such/file");
  EXPECT_EQ(fs::absolute_path("."), std::string(cwd));
  EXPECT_EQ(fs::absolute_path("/tmp/../tmp"), "/tmp");
}

TEST(Check, ThrowsWithFileLineAndMessage) {
  try {
    TRAINER_CHECK(1 + 1 == 3, "arithmetic is broken: ", 42);
    FAIL() << "no throw";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("arithmetic is broken: 42"), std::string::npos) << m;
    EXPECT_NE(m.find("core_test.cpp:"), std::string::npos) << m;
  }
}

TEST(Log, WritesToFileWithRankPrefix) {
  test::TempDir dir;
  const std::string path = dir.file("run.log");
  log::set_file(path);
  log::set_rank(1, 4);
  log::info("hello ", 7);
  log::debug("hidden at info level");
  log::set_rank(0, 1);
  log::set_file("");
  const std::string text = test::read_file(path);
  EXPECT_NE(text.find("[rank 1/4] hello 7"), std::string::npos) << text;
  EXPECT_EQ(text.find("hidden"), std::string::npos) << text;
}

TEST(Log, ParsesLevels) {
  EXPECT_EQ(log::parse_level("warn"), log::Level::warn);
  EXPECT_THROW(log::parse_level("loud"), ConfigError);
}

// Every index once, whatever the thread count; worker numbers in range; a throwing call's exception reaches the
// caller after every thread has joined.
TEST(Parallel, EveryIndexOnceAndErrorsReachTheCaller) {
  for (int threads : {1, 3, 8}) {
    std::vector<std::atomic<int>> seen(1000);
    std::atomic<int> bad_worker{0};
    parallel_for_workers(1000, threads, [&](int64_t i, int worker) {
      seen[static_cast<size_t>(i)].fetch_add(1);
      if (worker < 0 || worker >= threads) bad_worker.fetch_add(1);
    });
    for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i].load(), 1) << "index " << i << ", " << threads << " threads";
    EXPECT_EQ(bad_worker.load(), 0);
  }
  // each other index takes 20 us, so a thread of the throwing call descheduled for a while (2 cores, 4 threads)
  // cannot see the others finish the range before it throws
  std::atomic<int> calls{0}, after{0};
  std::atomic<bool> thrown{false};
  EXPECT_THROW(parallel_for(100000, 4,
                            [&](int64_t i) {
                              calls.fetch_add(1);
                              if (thrown.load()) after.fetch_add(1);
                              if (i == 10) {
                                thrown.store(true);
                                throw std::runtime_error("sample 10 is bad");
                              }
                              std::this_thread::sleep_for(std::chrono::microseconds(20));
                            }),
               std::runtime_error);
  EXPECT_LT(calls.load(), 100000) << "the others stop taking indices after the error";
  EXPECT_LT(after.load(), 1000) << "indices begun after the error was thrown";
  parallel_for(0, 4, [&](int64_t) { FAIL() << "no index in an empty range"; });
}

// Each call's worker numbers belong to one thread each (per-worker decoders and buffers rely on it), with calls
// made at once from several threads and from inside a loop's body; the pool does not grow with calls in turn.
TEST(Parallel, CallsAtOnceAndNestedKeepTheirWorkersApart) {
  auto one_call = [](int threads, int64_t n, std::atomic<int>& clashes, const std::function<void(int64_t)>& also) {
    std::vector<std::atomic<std::thread::id>> owner(static_cast<size_t>(threads));
    parallel_for_workers(n, threads, [&](int64_t i, int worker) {
      std::thread::id none, me = std::this_thread::get_id();
      auto& o = owner[static_cast<size_t>(worker)];
      if (!o.compare_exchange_strong(none, me) && none != me) clashes.fetch_add(1);
      also(i);
    });
  };
  std::atomic<int> clashes{0};
  std::atomic<int64_t> inner_sum{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&] {
      for (int rep = 0; rep < 50; ++rep)
        one_call(6, 64, clashes, [&](int64_t i) {
          if (i % 16 == 0) one_call(3, 10, clashes, [&](int64_t j) { inner_sum.fetch_add(j); });
        });
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(clashes.load(), 0) << "two threads shared a worker number within one call";
  EXPECT_EQ(inner_sum.load(), 4 * 50 * 4 * 45) << "every nested call covered its range once";
  std::atomic<int> ignored{0};
  one_call(8, 1000, ignored, [](int64_t) {});
  const int threads = pool_threads();
  for (int rep = 0; rep < 200; ++rep) one_call(8, 1000, ignored, [](int64_t) {});
  EXPECT_EQ(pool_threads(), threads) << "calls one after another reuse the pool's threads";
}


// Runs f in a forked child; returns its wait status.
template <class F> int in_child(F&& f) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    f();
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

// What `probe` reads on a data thread (at 0) and on the pool's helpers of one of its calls (1..3; `none` where a helper
// came late and was not waited for).
template <class T>
std::vector<T> on_data_threads(const std::function<T()>& probe, const T& none) {
  std::vector<T> seen(4, none);
  std::thread data([&] {
    become_data_thread();
    parallel_for_workers(64, 4, [&](int64_t, int worker) {
      seen[static_cast<size_t>(worker)] = probe();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the helpers come before the range is done
    });
  });
  data.join();
  return seen;
}

// data.thread_nice: a data thread and the pool's helpers of its calls take the niceness; the thread that set it
// (the training thread) keeps its own. Not in a forked child: the pool's state would name threads the child lacks.
// The helpers keep what they took (an unprivileged thread cannot lower it back), which no other test reads.
TEST(ThreadPriority, DataThreadsAndThePoolsHelpersTakeTheNiceness) {
  const int before = this_thread_nice();
  set_data_thread_nice(7);
  const std::vector<int> seen = on_data_threads<int>(this_thread_nice, -1);
  EXPECT_EQ(seen[0], 7) << "the data thread itself";
  int helpers = 0;
  for (size_t w = 1; w < seen.size(); ++w) {
    if (seen[w] == -1) continue;  // a helper that came late: not waited for
    EXPECT_EQ(seen[w], 7) << "helper " << w;
    ++helpers;
  }
  EXPECT_GE(helpers, 1) << "no helper joined a 128 ms range";
  EXPECT_EQ(this_thread_nice(), before) << "the thread that set it keeps its own";
  set_data_thread_nice(40);
  EXPECT_EQ(data_thread_nice(), 19) << "clamped to Linux's range";
  set_data_thread_nice(0);
}

// data.training_cores: a data thread and the pool's helpers run off the first CPUs of the setter's set, the setter
// keeps its own, and 0 (or a count that leaves no CPU) gives the data threads the whole set back.
TEST(ThreadPriority, DataThreadsKeepOffTheTrainingCores) {
  const std::vector<int> all = this_thread_cpus();
  ASSERT_FALSE(all.empty());
  const auto data_cpus = [] { return on_data_threads<std::vector<int>>(this_thread_cpus, {}); };
  set_data_thread_reserved_cpus(1);
  const std::vector<int> rest = all.size() > 1 ? std::vector<int>(all.begin() + 1, all.end()) : all;
  EXPECT_EQ(data_thread_reserved_cpus(), all.size() > 1 ? 1 : 0);
  std::vector<std::vector<int>> seen = data_cpus();
  EXPECT_EQ(seen[0], rest) << "the data thread itself";
  for (size_t w = 1; w < seen.size(); ++w)
    if (!seen[w].empty()) EXPECT_EQ(seen[w], rest) << "helper " << w;
  EXPECT_EQ(this_thread_cpus(), all) << "the thread that set it keeps its own";
  set_data_thread_reserved_cpus(static_cast<int>(all.size()));
  EXPECT_EQ(data_thread_reserved_cpus(), 0) << "a count that leaves no CPU keeps none";
  EXPECT_EQ(data_cpus()[0], all);
  set_data_thread_reserved_cpus(1);
  set_data_thread_reserved_cpus(0);
  seen = data_cpus();
  EXPECT_EQ(seen[0], all);
  for (size_t w = 1; w < seen.size(); ++w)
    if (!seen[w].empty()) EXPECT_EQ(seen[w], all) << "helper " << w;
}

// A thread's context switches: each sleep is a voluntary one; nothing counts down.
TEST(ThreadPriority, ContextSwitchesCountASleepingThreadsWaits) {
  ThreadSwitches before, after;
  std::thread t([&] {
    before = this_thread_switches();
    for (int i = 0; i < 20; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    after = this_thread_switches();
  });
  t.join();
  ASSERT_GE(before.voluntary, 0) << "/proc/thread-self/status unreadable";
  EXPECT_GE(after.voluntary - before.voluntary, 20);
  EXPECT_GE(after.involuntary, before.involuntary);
}

// GNU timeout, scancel and forwarding launchers deliver SIGTERM twice within milliseconds: one stop request, the
// process lives on to write its checkpoint. A signal seconds later exits at once.
TEST(Signals, RepeatsWithinTheWindowAreOneRequestALaterOneExits) {
  const int twice = in_child([] {
    install_stop_handlers();
    ::raise(SIGTERM);
    ::raise(SIGTERM);
    ::raise(SIGINT);
    ::_exit(stop_requested() ? 7 : 8);
  });
  ASSERT_TRUE(WIFEXITED(twice));
  EXPECT_EQ(WEXITSTATUS(twice), 7);
  const int later = in_child([] {
    install_stop_handlers();
    ::raise(SIGTERM);
    std::this_thread::sleep_for(std::chrono::duration<double>(kRepeatWindowSeconds + 0.2));
    ::raise(SIGINT);
    ::_exit(9);  // not reached: the late signal exits
  });
  ASSERT_TRUE(WIFEXITED(later));
  EXPECT_EQ(WEXITSTATUS(later), 128 + SIGINT);
}

// Every log line reaches the file when written: a process killed right after logging leaves it there.
TEST(Log, EveryLineReachesTheFileBeforeAKill) {
  test::TempDir dir;
  const std::string path = dir.file("train.log");
  const int status = in_child([&] {
    log::set_file(path);
    log::info("the last words before SIGKILL");
    ::raise(SIGKILL);
  });
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_NE(fs::read_text(path).find("the last words before SIGKILL\n"), std::string::npos) << fs::read_text(path);
}

}  // namespace
}  // namespace trainer
