// `trainer launch`: a failing rank brings the others down, output is prefixed by rank, and a real two-rank
// training run (Gloo on the CPU) completes; SIGTERM to the launcher reaches every rank (each saves, exits 3).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <thread>

#include "core/fs.h"
#include "core/check.h"
#include "distributed/launcher.h"
#include "test_support/test_support.h"

namespace trainer {
namespace {

TEST(Launcher, ParsesOptions) {
  const auto o = parse_launch_args({"--nproc-per-node", "4", "--master-port", "1234", "--", "--config", "x.yaml"}, "/t");
  EXPECT_EQ(o.nproc_per_node, 4);
  EXPECT_EQ(o.master_port, 1234);
  EXPECT_EQ(o.argv, (std::vector<std::string>{"/t", "--config", "x.yaml"}));
  EXPECT_THROW(parse_launch_args({"--nproc-per-node", "x"}, "/t"), ConfigError);
  EXPECT_THROW(parse_launch_args({"--bogus"}, "/t"), ConfigError);
  EXPECT_EQ(o.grace_seconds, 30);  // a large model's preemption checkpoint fits (torchrun's default too)
  EXPECT_EQ(parse_launch_args({"--grace-s", "120", "--", "x"}, "/t").grace_seconds, 120);
  EXPECT_THROW(parse_launch_args({"--grace-s", "-1"}, "/t"), ConfigError);
  EXPECT_TRUE(parse_launch_args({"--help"}, "/t").help);
  // like every other command: usage on stdout, exit 0
  const auto r = test::run_command(test::shell_quote(test::trainer_binary()) + " launch --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--nproc-per-node N"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--grace-s"), std::string::npos) << r.output;
}

bool process_gone(pid_t pid) {  // gone, or a zombie nobody reaps (a container's init may not)
  if (::kill(pid, 0) != 0) return true;
  const std::string stat = fs::exists("/proc/" + std::to_string(pid) + "/stat")
                               ? fs::read_text("/proc/" + std::to_string(pid) + "/stat") : std::string();
  const size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z';
}

// A rank that ignores SIGTERM is killed --grace-s after the stop, with what it started (its process group), not
// before.
TEST(Launcher, GracePeriodThenTheWholeProcessGroupIsKilled) {
  test::TempDir dir;
  LaunchOptions o;
  o.nproc_per_node = 2;
  o.grace_seconds = 2;
  const std::string pidfile = dir.file("child.pid");
  o.argv = {"/bin/sh", "-c",
            "if [ \"$RANK\" = 1 ]; then sleep 0.5; exit 4; fi; trap '' TERM; sleep 300 & echo $! > " + pidfile +
                "; while :; do sleep 0.1; done"};
  const auto t0 = std::chrono::steady_clock::now();
  const int code = launch(o);
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(code, 4);
  EXPECT_GE(sec, 2.4) << "killed before the grace period";
  EXPECT_LT(sec, 6.0);
  ASSERT_TRUE(fs::exists(pidfile));
  const pid_t child = static_cast<pid_t>(std::stol(fs::read_text(pidfile)));
  const auto t1 = std::chrono::steady_clock::now();
  while (!process_gone(child) && std::chrono::steady_clock::now() - t1 < std::chrono::seconds(3))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(process_gone(child)) << "rank 0's own child outlived the launcher";
  if (!process_gone(child)) ::kill(child, SIGKILL);
}

TEST(Launcher, FailingRankStopsTheOthersQuickly) {
  LaunchOptions o;
  o.nproc_per_node = 3;
  o.grace_seconds = 5;
  o.argv = {"/bin/sh", "-c", "if [ \"$RANK\" = 1 ]; then echo failing; exit 3; fi; exec sleep 60"};
  const auto t0 = std::chrono::steady_clock::now();
  const int code = launch(o);
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(code, 3);
  EXPECT_LT(sec, 10.0);
}

std::string train_args(const std::string& out) {
  return " --set run.device=cpu --set run.out_dir=" + test::shell_quote(out) +
         " --set model.name=vit_tiny_patch16_224 --set model.in_chans=1 --set data.source=synthetic" +
         " --set data.synthetic_samples=256 --set data.image_size=32 --set data.batch_size=16" +
         " --set optim.warmup_epochs=0 --set run.log_interval=1";
}

int port() {
  std::random_device rd;
  return 20000 + static_cast<int>(rd() % 20000);
}

// torchrun (from the project's .venv) starts the binary unchanged: its agent serves the store, the ranks join it.
TEST(Launcher, TorchrunNoPythonRunsTheBinaryUnchanged) {
  const std::string torchrun = test::source_dir() + "/.venv/bin/torchrun";
  if (!fs::exists(torchrun)) GTEST_SKIP() << "no " << torchrun << " (scripts/setup.sh creates it)";
  test::TempDir dir;
  const auto r = test::run_command(test::shell_quote(torchrun) + " --nproc-per-node 2 --master-port " +
                                   std::to_string(port()) + " --no-python " +
                                   test::shell_quote(test::trainer_binary()) + train_args(dir.file("a")) +
                                   " --set train.epochs=1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1/2 joined (torchrun"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("weights identical on all 2 ranks"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(dir.file("a/default/model.safetensors")));
}

TEST(Launcher, TwoRanksTrainAndSigtermReachesBoth) {
  test::TempDir dir;
  const std::string t = test::shell_quote(test::trainer_binary());
  const auto r = test::run_command(t + " launch --nproc-per-node 2 --master-port " + std::to_string(port()) + " --" +
                                   train_args(dir.file("a")) + " --set train.epochs=1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank 0]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[rank 1]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 1/2 joined"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(dir.file("a/default/model.safetensors")));

  // a long run, stopped by SIGTERM to the launcher: every rank stops at a step, rank 0 saves, exit 3
  const std::string log = dir.file("b.log");
  const pid_t pid = test::spawn(t + " launch --nproc-per-node 2 --master-port " + std::to_string(port()) + " --" +
                                     train_args(dir.file("b")) + " --set train.epochs=100",
                                 log);
  const std::string metrics = dir.file("b/default/metrics.jsonl");
  const auto t0 = std::chrono::steady_clock::now();
  while ((!fs::exists(metrics) || fs::file_size(metrics) < 300) &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << fs::read_text(log);
  EXPECT_EQ(WEXITSTATUS(status), 3) << fs::read_text(log);
  const std::string out = fs::read_text(log);
  EXPECT_NE(out.find("stop requested"), std::string::npos) << out;
  EXPECT_TRUE(fs::is_dir(dir.file("b/default/checkpoints")));
}

}  // namespace
}  // namespace trainer
