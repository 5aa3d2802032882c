// Data parallelism on the CPU with Gloo, two real processes on one machine: two ranks with half batches end
// with the weights of one process on the whole batch, eval sums are exact, and a dead rank ends the job.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <thread>

#include "checkpoint/checkpoint.h"
#include "core/fs.h"
#include "core/strings.h"
#include "models/safetensors.h"
#include "test_support/test_support.h"

namespace trainer {
namespace {

int free_port() {
  std::random_device rd;
  return 20000 + static_cast<int>(rd() % 20000);
}

std::string args(const std::string& out, int batch) {
  return test::shell_quote(test::trainer_binary()) + " --set run.device=cpu --set run.deterministic=true" +
         " --set run.out_dir=" + test::shell_quote(out) + " --set run.dist_timeout_s=30" +
         " --set model.name=vit_tiny_patch16_224 --set model.in_chans=1" +
         " --set data.source=synthetic --set data.synthetic_samples=256 --set data.image_size=32" +
         " --set data.batch_size=" + std::to_string(batch) + " --set train.epochs=2 --set optim.lr=0.05" +
         " --set optim.warmup_epochs=0 --set run.log_interval=1 --set checkpoint.every_epoch=false";
}

using test::spawn;

std::string env(int rank, int port) {
  return "env RANK=" + std::to_string(rank) + " WORLD_SIZE=2 LOCAL_RANK=" + std::to_string(rank) +
         " LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) + " ";
}

// Rank 1 in the background, rank 0 here, both with `cmd` (a command without the rank variables); both must exit 0.
void run_two_ranks(const std::string& cmd, const std::string& r1_log, test::CommandResult* r0_out) {
  const int port = free_port();
  const pid_t r1 = spawn(env(1, port) + cmd, r1_log);
  const auto r0 = test::run_command(env(0, port) + cmd);
  int status = 0;
  ::waitpid(r1, &status, 0);
  ASSERT_EQ(r0.exit_code, 0) << r0.output;
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << fs::read_text(r1_log);
  if (r0_out) *r0_out = r0;
}

std::string eval_line(const std::string& metrics) {
  std::string last;
  for (const auto& l : split(fs::read_text(metrics), '\n'))
    if (l.find("\"kind\":\"eval\"") != std::string::npos) last = l;
  return last;
}

// The floating tensors of two weight files agree within `rel` of each tensor's largest magnitude.
void expect_same_weights(const std::string& path_a, const std::string& path_b, double rel, const std::string& what) {
  const auto a = read_safetensors(path_a).tensors;
  const auto b = read_safetensors(path_b).tensors;
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].second.is_floating_point()) continue;
    const double diff = (a[i].second - b[i].second).abs().max().item<double>();
    EXPECT_LT(diff / (a[i].second.abs().max().item<double>() + 1e-12), rel) << a[i].first << " (" << what << ")";
  }
}

TEST(DataParallel, TwoRanksEqualOneProcessOnTheGlobalBatch) {
  test::TempDir dir;
  const auto single = test::run_command(args(dir.file("one"), 32));
  ASSERT_EQ(single.exit_code, 0) << single.output;
  const int port = free_port();
  const pid_t r1 = spawn(env(1, port) + args(dir.file("two"), 16), dir.file("r1.log"));
  const auto r0 = test::run_command(env(0, port) + args(dir.file("two"), 16));
  int status = 0;
  ::waitpid(r1, &status, 0);
  ASSERT_EQ(r0.exit_code, 0) << r0.output;
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << fs::read_text(dir.file("r1.log"));
  EXPECT_NE(r0.output.find("joined"), std::string::npos) << r0.output;
  EXPECT_NE(r0.output.find("weights identical on all 2 ranks after 16 steps"), std::string::npos) << r0.output;

  expect_same_weights(dir.file("one/default/model.safetensors"), dir.file("two/default/model.safetensors"), 1e-4,
                      "2 ranks");
  // only rank 0 wrote: one metrics file, and its eval covers the whole eval set once (25 = 13 + 12 samples)
  const std::string e1 = eval_line(dir.file("one/default/metrics.jsonl"));
  const std::string e2 = eval_line(dir.file("two/default/metrics.jsonl"));
  EXPECT_NE(e1.find("\"samples\":25"), std::string::npos) << e1;
  EXPECT_NE(e2.find("\"samples\":25"), std::string::npos) << e2;
}

// Two ranks with two micro-batches of 8 each (the first backward without communication) end where one process
// with batches of 32 ends; also with the hooks off (all buckets after backward).
TEST(DataParallel, AccumulationWithNoSyncEqualsNoAccumulation) {
  test::TempDir dir;
  const auto single = test::run_command(args(dir.file("one"), 32));
  ASSERT_EQ(single.exit_code, 0) << single.output;
  for (const std::string overlap : {"true", "false"}) {
    const std::string out = dir.file("accum_" + overlap);
    const std::string extra = " --set train.accum_steps=2 --set dist.bucket_mb=1 --set dist.overlap=" + overlap;
    test::CommandResult r0;
    ASSERT_NO_FATAL_FAILURE(run_two_ranks(args(out, 8) + extra, dir.file("r1.log"), &r0));
    expect_same_weights(dir.file("one/default/model.safetensors"), out + "/default/model.safetensors", 1e-4,
                        "overlap " + overlap);
  }
}

// A ResNet (batch norm) on two ranks of 16 with dist.sync_bn ends where one process with batches of 32 ends;
// without sync_bn each rank normalises its own half and the weights differ.
TEST(DataParallel, SyncBatchNormEqualsOneProcessOnTheGlobalBatch) {
  test::TempDir dir;
  const std::string resnet = " --set model.name=resnet18 --set train.max_steps=3 --set train.epochs=1";
  const auto single = test::run_command(args(dir.file("one"), 32) + resnet);
  ASSERT_EQ(single.exit_code, 0) << single.output;
  const auto a = read_safetensors(dir.file("one/default/model.safetensors")).tensors;
  for (const std::string sync : {"true", "false"}) {
    const std::string out = dir.file("sync_" + sync);
    const std::string extra = resnet + " --set dist.sync_bn=" + sync;
    test::CommandResult r0;
    ASSERT_NO_FATAL_FAILURE(run_two_ranks(args(out, 16) + extra, dir.file("r1.log"), &r0));
    const auto b = read_safetensors(out + "/default/model.safetensors").tensors;
    ASSERT_EQ(a.size(), b.size());
    // absolute differences: batch-norm biases start at 0, so relative ones of tiny tensors say nothing
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i].second.is_floating_point())
        worst = std::max(worst, (a[i].second - b[i].second).abs().max().item<double>());
    if (sync == "true") {
      EXPECT_LT(worst, 1e-3);  // measured 1.7e-4 (conv1.weight, E[x^2]-E[x]^2 against Welford)
      EXPECT_NE(r0.output.find("batch norm layers compute statistics over 2 ranks"), std::string::npos) << r0.output;
    } else {
      EXPECT_GT(worst, 1e-2) << "per-rank batch norm should differ from the global batch";
    }
  }
}

// A checkpoint written by two ranks resumes in one process at the same place in the epoch: after 3 batches of
// 16 on each of 2 ranks (96 samples), one process with batches of 16 continues at batch 6.
TEST(DataParallel, ResumesOnADifferentNumberOfRanks) {
  test::TempDir dir;
  const std::string out = dir.file("run");
  const std::string first = args(out, 16) + " --set train.max_steps=3 --set checkpoint.every_steps=1";
  const int port = free_port();
  const pid_t r1 = spawn(env(1, port) + first, dir.file("r1.log"));
  const auto r0 = test::run_command(env(0, port) + first);
  int status = 0;
  ::waitpid(r1, &status, 0);
  ASSERT_EQ(r0.exit_code, 0) << r0.output;
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << fs::read_text(dir.file("r1.log"));

  const auto resumed = test::run_command(args(out, 16) + " --set checkpoint.resume=auto");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("written by 2 rank(s), resumed on 1: epoch 1 continues at batch 6, step 6"),
            std::string::npos)
      << resumed.output;
  EXPECT_NE(resumed.output.find("trained 32 steps"), std::string::npos) << resumed.output;  // 2 epochs x 16
}

TEST(DataParallel, DeadRankEndsTheJob) {
  test::TempDir dir;
  const int port = free_port();
  const std::string a = args(dir.file("run"), 16) + " --set train.epochs=50";
  const pid_t r0 = spawn(env(0, port) + a, dir.file("r0.log"));
  const pid_t r1 = spawn(env(1, port) + a, dir.file("r1.log"));
  const std::string metrics = dir.file("run/default/metrics.jsonl");
  auto t0 = std::chrono::steady_clock::now();
  while ((!fs::exists(metrics) || fs::file_size(metrics) < 300) &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(fs::exists(metrics)) << fs::read_text(dir.file("r0.log"));
  ::kill(r1, SIGKILL);
  ::waitpid(r1, nullptr, 0);
  t0 = std::chrono::steady_clock::now();
  int status = 0;
  pid_t done = 0;
  while ((done = ::waitpid(r0, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(90))
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  if (done == 0) {
    ::kill(r0, SIGKILL);
    ::waitpid(r0, nullptr, 0);
    FAIL() << "rank 0 still running 90 s after rank 1 died";
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0);
  const std::string log = fs::read_text(dir.file("r0.log"));
  // the failure names this rank and the operation (not only the "rank 0/2 joined" line)
  const bool named = log.find("rank 0: ") != std::string::npos &&
                     (log.find("failed (a peer died or timed out)") != std::string::npos ||
                      log.find("did not finish within") != std::string::npos);
  EXPECT_TRUE(named) << log;
}

// Each rank reads checkpoints from its own run folder (here: two folders, as on hosts without a shared
// filesystem). Rank 0 picks the step; a rank that lacks it stops every rank before anything is written, naming
// the step and the file; with the same checkpoint on both, both resume from it.
TEST(DataParallel, RanksResumeFromTheStepRankZeroChooses) {
  test::TempDir dir;
  auto both = [&](const std::string& extra, test::CommandResult* r0_out, int* r1_code) {
    const int port = free_port();
    const pid_t r1 = spawn(env(1, port) + args(dir.file("r1"), 16) + extra, dir.file("r1.log"));
    *r0_out = test::run_command(env(0, port) + args(dir.file("r0"), 16) + extra);
    int status = 0;
    ::waitpid(r1, &status, 0);
    *r1_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  test::CommandResult r0;
  int r1 = 0;
  both(" --set train.max_steps=4 --set checkpoint.every_steps=2 --set checkpoint.keep_last=5", &r0, &r1);
  ASSERT_EQ(r0.exit_code, 0) << r0.output;
  ASSERT_EQ(r1, 0) << fs::read_text(dir.file("r1.log"));
  const std::string c0 = dir.file("r0/default/checkpoints"), c1 = dir.file("r1/default/checkpoints");
  ASSERT_TRUE(fs::exists(c0 + "/ckpt-0000000004.safetensors")) << r0.output;
  fs::make_dirs(c1);
  auto copy = [&](const std::string& name) { fs::write_text_atomic(c1 + "/" + name, fs::read_text(c0 + "/" + name)); };
  copy("ckpt-0000000002.safetensors");  // rank 1's folder lacks rank 0's newest

  const std::string resume = " --set train.max_steps=6 --set checkpoint.every_steps=2 --set checkpoint.keep_last=5" +
                             std::string(" --resume auto");
  both(resume, &r0, &r1);
  EXPECT_NE(r0.exit_code, 0) << r0.output;
  EXPECT_NE(r1, 0);
  const std::string log1 = fs::read_text(dir.file("r1.log"));
  EXPECT_NE(log1.find("rank 1 cannot resume from step 4, which rank 0 resumes from"), std::string::npos) << log1;
  EXPECT_NE(log1.find("ckpt-0000000004.safetensors"), std::string::npos) << log1;
  EXPECT_NE(r0.output.find("1 rank(s) cannot resume from step 4"), std::string::npos) << r0.output;
  EXPECT_FALSE(fs::exists(c0 + "/ckpt-0000000006.safetensors")) << "a rank trained on";

  copy("ckpt-0000000004.safetensors");
  both(resume, &r0, &r1);
  ASSERT_EQ(r0.exit_code, 0) << r0.output;
  ASSERT_EQ(r1, 0) << fs::read_text(dir.file("r1.log"));
  EXPECT_NE(r0.output.find("resumed from " + c0 + "/ckpt-0000000004.safetensors"), std::string::npos) << r0.output;
  EXPECT_TRUE(fs::exists(c0 + "/ckpt-0000000006.safetensors"));
  EXPECT_NE(r0.output.find("weights identical on all 2 ranks after 6 steps"), std::string::npos) << r0.output;
}


// ---- two hosts over a real network: two network namespaces joined by a veth pair ----

// Two "hosts" 10.231.0.1 and .2 (each its own network stack, loopback included, so a rank that binds the
// hostname's address, which Debian's /etc/hosts maps to 127.0.1.1, cannot be reached). Needs root and iproute2;
// `ok` is false with the reason where they are not there.
struct TwoHosts {
  std::string a, b, why;
  bool ok = false;
  TwoHosts() {
    const std::string id = std::to_string(::getpid() % 100000);
    a = "trn_a" + id;
    b = "trn_b" + id;
    const std::string va = "tva" + id, vb = "tvb" + id;
    const std::string cmd = "ip netns add " + a + " && ip netns add " + b + " && ip link add " + va +
                            " type veth peer name " + vb + " && ip link set " + va + " netns " + a +
                            " && ip link set " + vb + " netns " + b + " && ip -n " + a + " addr add 10.231.0.1/24 dev " +
                            va + " && ip -n " + b + " addr add 10.231.0.2/24 dev " + vb + " && ip -n " + a +
                            " link set " + va + " up && ip -n " + b + " link set " + vb + " up && ip -n " + a +
                            " link set lo up && ip -n " + b + " link set lo up";
    const auto r = test::run_command(cmd);
    ok = r.exit_code == 0;
    why = r.output;
  }
  ~TwoHosts() { test::run_command("ip netns del " + a + "; ip netns del " + b); }
  // every process of host b dies at once, and its link goes down first: its peers see silence, not a reset
  void kill_b() {
    test::run_command("ip -n " + b + " link set tvb" + b.substr(5) + " down; ip netns pids " + b + " | xargs -r kill -9");
  }
};

std::string launch_on(const std::string& ns, int node, int port, const std::string& trainer_args) {
  return "ip netns exec " + ns + " " + test::shell_quote(test::trainer_binary()) + " launch --nnodes 2 --node-rank " +
         std::to_string(node) + " --nproc-per-node 2 --master-addr 10.231.0.1 --master-port " + std::to_string(port) +
         " --grace-s 5 -- " + trainer_args.substr(trainer_args.find(' ') + 1);  // the args less the binary
}

TEST(TwoHosts, TwoByTwoRanksEqualOneProcessAndADeadHostEndsTheOther) {
  TwoHosts net;
  if (!net.ok) GTEST_SKIP() << "cannot make two network namespaces here (needs root and iproute2): " << net.why;
  test::TempDir dir;
  const auto single = test::run_command(args(dir.file("one"), 32));
  ASSERT_EQ(single.exit_code, 0) << single.output;

  int port = free_port();
  const pid_t b = spawn(launch_on(net.b, 1, port, args(dir.file("b"), 8)), dir.file("b.log"));
  const auto a = test::run_command(launch_on(net.a, 0, port, args(dir.file("a"), 8)));
  int status = 0;
  ::waitpid(b, &status, 0);
  ASSERT_EQ(a.exit_code, 0) << a.output << "\n---- host b ----\n" << fs::read_text(dir.file("b.log"));
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << fs::read_text(dir.file("b.log"));
  EXPECT_NE(a.output.find("Gloo on 10.231.0.1"), std::string::npos) << a.output;
  EXPECT_NE(fs::read_text(dir.file("b.log")).find("Gloo on 10.231.0.2"), std::string::npos);
  EXPECT_NE(a.output.find("weights identical on all 4 ranks after 16 steps"), std::string::npos) << a.output;
  expect_same_weights(dir.file("one/default/model.safetensors"), dir.file("a/default/model.safetensors"), 1e-4,
                      "2 hosts x 2 ranks");

  // host b dies mid-run: host a's ranks end within run.dist_timeout_s (30 s here) with the failed operation named,
  // and the last checkpoint is intact
  port = free_port();
  const std::string long_run = " --set train.epochs=100 --set checkpoint.every_steps=2";
  const pid_t a2 = spawn(launch_on(net.a, 0, port, args(dir.file("a2"), 8) + long_run), dir.file("a2.log"));
  const pid_t b2 = spawn(launch_on(net.b, 1, port, args(dir.file("b2"), 8) + long_run), dir.file("b2.log"));
  const std::string ckpts = dir.file("a2/default/checkpoints");
  auto t0 = std::chrono::steady_clock::now();
  while (CheckpointDir(ckpts).list().size() < 2 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120))
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_GE(CheckpointDir(ckpts).list().size(), 2u) << fs::read_text(dir.file("a2.log"));
  net.kill_b();
  ::waitpid(b2, nullptr, 0);
  t0 = std::chrono::steady_clock::now();
  pid_t done = 0;
  while ((done = ::waitpid(a2, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(75))
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (done == 0) {
    ::kill(a2, SIGKILL);
    ::waitpid(a2, nullptr, 0);
    FAIL() << "host a still running " << waited << " s after host b died\n" << fs::read_text(dir.file("a2.log"));
  }
  EXPECT_LT(waited, 30 + 10.0) << fs::read_text(dir.file("a2.log"));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0);
  const std::string log = fs::read_text(dir.file("a2.log"));
  const bool named = log.find("did not finish within") != std::string::npos ||
                     log.find("failed (a peer died or timed out)") != std::string::npos;
  EXPECT_TRUE(named) << log;
  const std::string last = CheckpointDir(ckpts).latest_valid();
  ASSERT_FALSE(last.empty());
  EXPECT_GE(read_checkpoint(last).step, 2);
}

}  // namespace
}  // namespace trainer
