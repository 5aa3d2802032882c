// Checkpoints: the file verifies (magic, version, checksum), corrupt ones are skipped by --resume auto and
// refused by --resume PATH, old ones are pruned; the background writer writes what was submitted, reports a failed
// write once, finishes the write in flight when it goes; a real trainer process killed with SIGKILL and resumed ends
// with bit-identical weights and the same per-step losses as an uninterrupted run; SIGTERM saves and exits 3.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "checkpoint/background_writer.h"
#include "checkpoint/checkpoint.h"
#include "core/check.h"
#include "core/fs.h"
#include "core/strings.h"
#include "engine/run_dir.h"
#include "models/safetensors.h"
#include "test_support/test_support.h"

namespace trainer {
namespace {

CheckpointState sample_state() {
  CheckpointState s;
  s.tensors = {{"model.w", torch::randn({4, 3})}, {"rng.cpu", torch::arange(10).to(torch::kUInt8)}};
  s.epoch = 2;
  s.batch = 7;
  s.step = 123;
  s.config_yaml = "run:\n  name: x\n";
  return s;
}

TEST(Checkpoint, RoundTripAndVerify) {
  test::TempDir dir;
  const auto s = sample_state();
  write_checkpoint(dir.file("c.safetensors"), s);
  const auto back = read_checkpoint(dir.file("c.safetensors"));
  EXPECT_EQ(back.step, 123);
  EXPECT_EQ(back.epoch, 2);
  EXPECT_EQ(back.batch, 7);
  EXPECT_EQ(back.config_yaml, s.config_yaml);
  ASSERT_EQ(back.tensors.size(), 2u);
  EXPECT_TRUE(torch::equal(back.tensors[0].second, s.tensors[0].second));
}

// The background writer writes the state as it was at submit (training changes its tensors meanwhile), runs the
// follow-up after the write, hands a failed write's error back once (naming the file) and writes on after it, and
// finishes the write in flight when it is destroyed.
TEST(Checkpoint, BackgroundWriterWritesTheSubmittedStateAndReportsFailuresOnce) {
  test::TempDir dir;
  CheckpointState s = sample_state();
  const torch::Tensor at_submit = s.tensors[0].second.clone();
  bool followed = false;
  {
    BackgroundCheckpointWriter w;
    w.submit(dir.file("a.safetensors"), s, [&] { followed = fs::exists(dir.file("a.safetensors")); });
    s.tensors[0].second.add_(1.0);  // what the next optimizer step would do
    w.wait();
    EXPECT_TRUE(followed);
    EXPECT_TRUE(torch::equal(read_checkpoint(dir.file("a.safetensors")).tensors[0].second, at_submit));

    w.submit(dir.file("no/such/folder/b.safetensors"), s);
    try {
      w.wait();
      ADD_FAILURE() << "a write into a missing folder did not fail";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("b.safetensors"), std::string::npos) << e.what();
    }
    EXPECT_NO_THROW(w.wait());  // reported once
    w.submit(dir.file("c.safetensors"), s);
  }  // the destructor finishes c
  EXPECT_TRUE(torch::equal(read_checkpoint(dir.file("c.safetensors")).tensors[0].second, at_submit + 1.0));
}

TEST(Checkpoint, CorruptAndTruncatedFilesAreRefusedAndSkipped) {
  test::TempDir dir;
  CheckpointDir cd(dir.file("ckpts"));
  fs::make_dirs(cd.dir());
  auto s = sample_state();
  for (int64_t step : {10, 20, 30}) {
    s.step = step;
    write_checkpoint(cd.path_for(step), s);
  }
  // flip one byte inside the tensor data of the newest, truncate the middle one
  std::string newest = test::read_file(cd.path_for(30));
  newest[newest.size() - 5] ^= 0x40;
  test::write_file(cd.path_for(30), newest);
  const std::string mid = test::read_file(cd.path_for(20));
  test::write_file(cd.path_for(20), mid.substr(0, mid.size() / 2));
  try {
    read_checkpoint(cd.path_for(30));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("checksum"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_checkpoint(cd.path_for(20)), Error);
  EXPECT_EQ(cd.latest_valid(), cd.path_for(10));
  test::write_file(dir.file("other.safetensors"), "");
  EXPECT_THROW(read_checkpoint(dir.file("other.safetensors")), Error);
}

TEST(Checkpoint, PruneKeepsNewest) {
  test::TempDir dir;
  CheckpointDir cd(dir.path());
  auto s = sample_state();
  for (int64_t step = 1; step <= 5; ++step) write_checkpoint(cd.path_for(step), s);
  cd.prune(2);
  EXPECT_EQ(cd.list(), (std::vector<std::string>{cd.path_for(4), cd.path_for(5)}));
}

TEST(Checkpoint, BestKeepsTheTopKByMetric) {
  test::TempDir dir;
  auto s = sample_state();
  BestCheckpoints top1(dir.file("best"), "top1", 2);
  fs::make_dirs(dir.file("best"));
  const std::vector<std::pair<double, int64_t>> evals = {{71.5, 10}, {80.25, 20}, {78.0, 30}, {90.0, 40}, {60.0, 50}};
  for (const auto& [v, step] : evals) {
    if (!top1.qualifies(v)) continue;
    write_checkpoint(top1.path_for(v, step), s);
    top1.prune();
  }
  const auto kept = top1.ranked();
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_DOUBLE_EQ(kept[0].first, 90.0);
  EXPECT_DOUBLE_EQ(kept[1].first, 80.25);
  EXPECT_EQ(kept[0].second, top1.path_for(90.0, 40));
  EXPECT_FALSE(top1.qualifies(79.0));
  EXPECT_NO_THROW(read_checkpoint(kept[1].second));

  BestCheckpoints loss(dir.file("best"), "loss", 1);  // lower is better; other metrics' files are ignored
  write_checkpoint(loss.path_for(0.9, 1), s);
  write_checkpoint(loss.path_for(0.4, 2), s);
  loss.prune();
  ASSERT_EQ(loss.ranked().size(), 1u);
  EXPECT_DOUBLE_EQ(loss.ranked()[0].first, 0.4);
  EXPECT_EQ(top1.ranked().size(), 2u);
}

// ---- real processes ----

std::string run_args(const std::string& out) {
  // a small deterministic CPU run with stochastic depth (RNG state matters) and augmentation (data RNG matters)
  return test::shell_quote(test::trainer_binary()) + " --set run.device=cpu --set run.deterministic=true" +
         " --set run.out_dir=" + test::shell_quote(out) +
         " --set model.name=vit_tiny_patch16_224 --set model.in_chans=1 --set model.drop_path_rate=0.2" +
         " --set data.source=synthetic --set data.synthetic_samples=384 --set data.image_size=32" +
         " --set data.batch_size=32 --set train.epochs=3 --set optim.name=adamw --set optim.lr=0.001" +
         " --set optim.warmup_epochs=0.5 --set run.log_interval=1 --set checkpoint.every_steps=4" +
         " --set checkpoint.keep_last=2 --set train.eval_interval=0";
}

std::vector<std::string> losses(const std::string& metrics) {
  std::vector<std::string> out;
  for (const auto& line : split(fs::read_text(metrics), '\n'))
    if (line.find("\"kind\":\"train\"") != std::string::npos) {
      const size_t a = line.find("\"step\":"), b = line.find("\"loss\":");
      out.push_back(line.substr(a, line.find(',', a) - a) + " " + line.substr(b, line.find(',', b) - b));
    }
  return out;
}

TEST(Resume, KilledRunResumesBitIdentically) {
  test::TempDir dir;
  // uninterrupted reference
  const auto ref = test::run_command(run_args(dir.file("a")));
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  // the same run, SIGKILLed once its step-16 checkpoint exists (mid-epoch 2), then resumed
  const std::string b = dir.file("b");
  const pid_t pid = test::spawn(run_args(b), dir.file("b1.log"));
  const std::string want = CheckpointDir(b + "/default/checkpoints").path_for(16);
  const auto t0 = std::chrono::steady_clock::now();
  auto logged_past_16 = [&] {  // the step-16 checkpoint exists and the run logged step 17 after it
    return fs::exists(want) && fs::read_text(b + "/default/metrics.jsonl").find("\"step\":17,") != std::string::npos;
  };
  while (!logged_past_16() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(300))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(fs::exists(want)) << fs::read_text(dir.file("b1.log"));
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the run finished before it could be killed";
  ASSERT_FALSE(fs::exists(b + "/default/model.safetensors"));
  const int64_t from = read_checkpoint(CheckpointDir(b + "/default/checkpoints").latest_valid()).step;
  int64_t killed_at = 0;
  for (const auto& line : split(fs::read_text(b + "/default/metrics.jsonl"), '\n'))
    killed_at = std::max(killed_at, metrics_row_step(line));
  const auto res = test::run_command(run_args(b) + " --resume auto");
  ASSERT_EQ(res.exit_code, 0) << res.output;
  EXPECT_NE(res.output.find("resumed from"), std::string::npos) << res.output;

  const auto wa = read_safetensors(dir.file("a/default/model.safetensors")).tensors;
  const auto wb = read_safetensors(b + "/default/model.safetensors").tensors;
  ASSERT_EQ(wa.size(), wb.size());
  for (size_t i = 0; i < wa.size(); ++i)
    EXPECT_TRUE(torch::equal(wa[i].second, wb[i].second)) << wa[i].first << " differs after resume";
  // losses: the resumed run's log continues the killed one; every step's loss equals the reference's
  const auto la = losses(dir.file("a/default/metrics.jsonl"));
  const auto lb = losses(b + "/default/metrics.jsonl");
  ASSERT_EQ(la.size(), 36u);
  std::set<std::string> sb(lb.begin(), lb.end());
  for (const auto& l : la) EXPECT_TRUE(sb.count(l)) << "missing or different after resume: " << l;
  // one curve: the killed run's rows after its last checkpoint, trained again, left metrics.jsonl for metrics_superseded.jsonl
  EXPECT_EQ(lb, la);
  ASSERT_GT(killed_at, from) << "the killed run logged nothing after its last checkpoint";
  int superseded = 0;
  for (const auto& line : split(fs::read_text(b + "/default/metrics_superseded.jsonl"), '\n'))
    if (!line.empty()) {
      ++superseded;
      EXPECT_GT(metrics_row_step(line), from) << line;
    }
  EXPECT_GE(superseded, killed_at - from);  // a train row per step at least
  // TensorBoard reads one curve too: the resumed run's SessionLog START purges the killed run's later events
  const std::string script = dir.file("read.py");
  fs::write_text_atomic(script, R"(import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
ea = EventAccumulator(sys.argv[1]); ea.Reload()
steps = [e.step for e in ea.Scalars("train/loss")]
print("steps", len(steps), "unique", len(set(steps)), "sorted", steps == sorted(steps))
)");
  const auto tb = test::run_command(test::python() + " " + test::shell_quote(script) + " " +
                                    test::shell_quote(b + "/default"));
  ASSERT_EQ(tb.exit_code, 0) << tb.output;
  EXPECT_NE(tb.output.find("steps 36 unique 36 sorted True"), std::string::npos) << tb.output;
}

// A fresh run under a run.name that already holds a finished run leaves that run alone: it writes beside it
// (default-2), and --resume auto still continues the first one.
TEST(Resume, AFreshRunNeverWritesIntoAnotherRunsFolder) {
  test::TempDir dir;
  const std::string args = run_args(dir.path()) + " --set train.epochs=1";
  const auto first = test::run_command(args);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::string a = dir.file("default");
  const std::string weights = fs::read_text(a + "/model.safetensors"), metrics = fs::read_text(a + "/metrics.jsonl");
  const std::string log = fs::read_text(a + "/train.log");
  const auto checkpoints = CheckpointDir(a + "/checkpoints").list();
  const auto second = test::run_command(args + " --set train.max_steps=5");
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("writes to " + a + "-2"), std::string::npos) << second.output;
  EXPECT_EQ(fs::read_text(a + "/model.safetensors"), weights);
  EXPECT_EQ(fs::read_text(a + "/metrics.jsonl"), metrics);
  EXPECT_EQ(fs::read_text(a + "/train.log"), log);
  EXPECT_EQ(CheckpointDir(a + "/checkpoints").list(), checkpoints);
  EXPECT_TRUE(fs::exists(a + "-2/model.safetensors"));
  EXPECT_EQ(read_checkpoint(CheckpointDir(a + "-2/checkpoints").latest_valid()).step, 4);
  const auto third = test::run_command(args + " --set train.max_steps=5");  // and the next one beside both
  ASSERT_EQ(third.exit_code, 0) << third.output;
  EXPECT_TRUE(fs::exists(a + "-3/model.safetensors"));
  // --resume auto continues the named folder's run (finished: nothing left to train), in that folder
  const auto resumed = test::run_command(args + " --resume auto");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from " + a + "/checkpoints"), std::string::npos) << resumed.output;
  EXPECT_FALSE(fs::exists(a + "-4"));
  EXPECT_EQ(fs::read_text(a + "/model.safetensors"), weights);
}

// A fatal error reaches train.log too, not only the console.
TEST(Resume, FatalErrorsAreInTrainLog) {
  test::TempDir dir;
  // lr 1e6 diverges: after max_nonfinite_steps skipped steps in a row the run stops with an error
  const auto r = test::run_command(run_args(dir.path()) + " --set optim.name=sgd --set optim.lr=1e6" +
                                   " --set train.max_nonfinite_steps=2 --set model.drop_path_rate=0");
  ASSERT_EQ(r.exit_code, 1) << r.output;
  const std::string log = fs::read_text(dir.file("default/train.log"));
  EXPECT_NE(log.find("fatal: "), std::string::npos) << log;
  EXPECT_NE(log.find("non-finite gradients"), std::string::npos) << log;
}

// accum_steps 3 over 10 batches an epoch: groups of 3, 3, 3 and 1, four optimizer steps an epoch. The run
// checkpoints at every epoch's end, resumes exactly from a mid-epoch checkpoint, and its epoch records count
// optimizer steps.
TEST(Resume, AccumulationThatDoesNotDivideTheEpoch) {
  test::TempDir dir;
  const std::string args = run_args(dir.path()) + " --set data.synthetic_samples=320 --set train.accum_steps=3" +
                           " --set train.epochs=2 --set checkpoint.every_steps=2 --set checkpoint.keep_last=10";
  const auto ref = test::run_command(args + " --set run.name=a");
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  int epochs = 0;
  for (const auto& line : split(fs::read_text(dir.file("a/metrics.jsonl")), '\n'))
    if (line.find("\"kind\":\"epoch\"") != std::string::npos) {
      ++epochs;
      EXPECT_NE(line.find("\"steps\":4,\"micro_batches\":10,"), std::string::npos) << line;
    }
  EXPECT_EQ(epochs, 2);
  CheckpointDir a(dir.file("a/checkpoints"));
  EXPECT_EQ(read_checkpoint(a.path_for(4)).epoch, 1);  // epoch 1's end: the start of epoch 2
  EXPECT_EQ(read_checkpoint(a.path_for(4)).batch, 0);
  // stopped at step 6 (epoch 2, batch 6), then resumed to the end: the same weights
  const auto first = test::run_command(args + " --set run.name=b --set train.max_steps=6");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const CheckpointState mid = read_checkpoint(CheckpointDir(dir.file("b/checkpoints")).latest_valid());
  EXPECT_EQ(mid.step, 6);
  EXPECT_EQ(mid.batch, 6);
  const auto rest = test::run_command(args + " --set run.name=b --resume auto");
  ASSERT_EQ(rest.exit_code, 0) << rest.output;
  const auto wa = read_safetensors(dir.file("a/model.safetensors")).tensors;
  const auto wb = read_safetensors(dir.file("b/model.safetensors")).tensors;
  ASSERT_EQ(wa.size(), wb.size());
  for (size_t i = 0; i < wa.size(); ++i)
    EXPECT_TRUE(torch::equal(wa[i].second, wb[i].second)) << wa[i].first << " differs after resume";
}

// checkpoint.keep_best: the best two evaluations of a run are kept in checkpoints/best/, apart from the rotation.
TEST(Resume, KeepBestFollowsTheEvalMetric) {
  test::TempDir dir;
  const auto r = test::run_command(run_args(dir.path()) + " --set train.epochs=4 --set train.eval_interval=1" +
                                   " --set checkpoint.keep_best=2 --set run.deterministic=false");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<double> top1;
  for (const auto& line : split(fs::read_text(dir.file("default/metrics.jsonl")), '\n'))
    if (line.find("\"kind\":\"eval\"") != std::string::npos) {
      const size_t a = line.find("\"top1\":") + 7;
      top1.push_back(std::stod(line.substr(a, line.find(',', a) - a)));
    }
  ASSERT_EQ(top1.size(), 4u);
  std::sort(top1.rbegin(), top1.rend());
  const auto kept = BestCheckpoints(dir.file("default/checkpoints/best"), "top1", 2).ranked();
  ASSERT_EQ(kept.size(), 2u) << r.output;
  const CheckpointState best = read_checkpoint(kept[0].second);  // what produced it travels with it
  EXPECT_FALSE(best.extra.at("trainer_version").empty());
  EXPECT_TRUE(best.extra.count("git_sha"));
  EXPECT_NE(best.config_yaml.find("keep_best: 2"), std::string::npos);
  EXPECT_NEAR(kept[0].first, top1[0], 1e-4);
  EXPECT_NEAR(kept[1].first, top1[1], 1e-4);
  for (const auto& k : kept) EXPECT_NO_THROW(read_checkpoint(k.second));
}

// A full disk, simulated by a file-size limit (writes past it fail with EFBIG, as with ENOSPC): the checkpoint
// that cannot be written is reported with its path and the reason, no temporary file is left, and the checkpoint
// written before stays valid. stop_on_error=false warns and trains on.
TEST(Resume, DiskFullKeepsThePreviousCheckpoint) {
  test::TempDir dir;
  const auto first = test::run_command(run_args(dir.path()) + " --set train.epochs=1");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  CheckpointDir cd(dir.file("default/checkpoints"));
  const auto before = cd.list();
  ASSERT_FALSE(before.empty());
  const std::string limited = "trap '' XFSZ; ulimit -f 4096; exec ";  // 2-4 MB per file: logs fit, checkpoints not
  const auto stop = test::run_command("sh -c " + test::shell_quote(limited + run_args(dir.path()) +
                                                                   " --set train.epochs=2 --resume auto"));
  EXPECT_EQ(stop.exit_code, 1) << stop.output;
  EXPECT_NE(stop.output.find(".tmp: write failed"), std::string::npos) << stop.output;
  // the run's own log keeps its lines and ends with the reason it stopped
  const std::string log = fs::read_text(dir.file("default/train.log"));
  EXPECT_NE(log.find("resumed from"), std::string::npos) << log;
  EXPECT_NE(log.find("fatal: "), std::string::npos) << log;
  EXPECT_NE(log.find(".tmp: write failed"), std::string::npos) << log;
  EXPECT_EQ(cd.list(), before) << "a failed checkpoint changed the folder";
  EXPECT_NO_THROW(read_checkpoint(cd.latest_valid()));
  for (const auto& f : fs::list_dir(cd.dir())) EXPECT_EQ(f.find(".tmp"), std::string::npos) << f;

  const auto go_on = test::run_command("sh -c " + test::shell_quote(limited + run_args(dir.path()) +
                                                                    " --set train.epochs=2 --resume auto" +
                                                                    " --set checkpoint.stop_on_error=false"));
  size_t warnings = 0;
  for (size_t at = 0; (at = go_on.output.find("checkpoint failed, the previous one is kept", at)) != std::string::npos; ++at)
    ++warnings;
  EXPECT_GE(warnings, 2u) << go_on.output;  // it trained on past the first failure
  EXPECT_NE(go_on.output.find("epoch 2 done"), std::string::npos) << go_on.output;
  EXPECT_NO_THROW(read_checkpoint(cd.latest_valid()));
}

TEST(Resume, SigtermWritesCheckpointAndExitsThree) {
  test::TempDir dir;
  const std::string b = dir.file("b");
  const pid_t pid = test::spawn(run_args(b) + " --set checkpoint.every_steps=0", dir.file("log"));
  const std::string metrics = b + "/default/metrics.jsonl";
  const auto t0 = std::chrono::steady_clock::now();
  while ((!fs::exists(metrics) || fs::file_size(metrics) < 200) &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(300))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  // twice within milliseconds, as GNU timeout and forwarding launchers do: one request, the checkpoint is written
  ::kill(pid, SIGTERM);
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << fs::read_text(dir.file("log"));
  EXPECT_EQ(WEXITSTATUS(status), 3) << fs::read_text(dir.file("log"));
  const std::string latest = CheckpointDir(b + "/default/checkpoints").latest_valid();
  ASSERT_FALSE(latest.empty());
  EXPECT_GT(read_checkpoint(latest).step, 0);
  // --resume PATH to something that does not verify fails clearly
  test::write_file(dir.file("bad.safetensors"), "garbage");
  const auto r = test::run_command(run_args(b) + " --resume " + dir.file("bad.safetensors"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("bad.safetensors"), std::string::npos) << r.output;
  // export: the checkpoint's model as plain safetensors
  const auto e = test::run_command(test::shell_quote(test::trainer_binary()) + " export --checkpoint " + latest +
                                   " --out " + dir.file("m.safetensors"));
  EXPECT_EQ(e.exit_code, 0) << e.output;
  EXPECT_GT(read_safetensors(dir.file("m.safetensors")).tensors.size(), 100u);
}

}  // namespace
}  // namespace trainer
