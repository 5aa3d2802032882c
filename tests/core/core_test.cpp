#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "core/check.h"
#include "core/log.h"
#include "core/parallel.h"
#include "core/strings.h"
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
  std::atomic<int> calls{0};
  EXPECT_THROW(parallel_for(100000, 4,
                            [&](int64_t i) {
                              calls.fetch_add(1);
                              if (i == 10) throw std::runtime_error("sample 10 is bad");
                            }),
               std::runtime_error);
  EXPECT_LT(calls.load(), 100000) << "the others stop taking indices after the error";
  parallel_for(0, 4, [&](int64_t) { FAIL() << "no index in an empty range"; });
}

}  // namespace
}  // namespace trainer
