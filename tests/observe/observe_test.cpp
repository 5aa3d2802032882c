// Observability pieces on their own: CRC-32C and the TensorBoard event file (read back by our reader and by
// tensorboard's EventAccumulator), the progress bar's text and its silence off a terminal, and the bottleneck
// verdicts on crafted timings; scripts/trace_gaps.py on a crafted trace.
#include <gtest/gtest.h>

#include <cstdio>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/fs.h"
#include "core/strings.h"
#include "observe/progress.h"
#include "observe/tfevents.h"
#include "observe/verdict.h"
#include "test_support/test_support.h"

namespace trainer {
namespace {

TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);  // the CRC-32C check value
  EXPECT_EQ(crc32c("", 0), 0u);
  const std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720 B.4
}

TEST(TensorBoard, EventFileRoundTripsThroughOurReaderAndTensorboard) {
  test::TempDir dir;
  std::string path;
  {
    EventWriter w(dir.path());
    path = w.path();
    for (int step = 1; step <= 5; ++step)
      w.scalars(step * 10, {{"train/loss", 2.0 / step}, {"perf/img_per_s", 1000.0 * step}});
  }
  EXPECT_NE(path.find("events.out.tfevents."), std::string::npos);
  const auto events = read_tfrecords(path);
  ASSERT_EQ(events.size(), 6u);  // file_version + 5
  EXPECT_NE(events[0].find("brain.Event:2"), std::string::npos);
  EXPECT_NE(events[3].find("train/loss"), std::string::npos);

  // a flipped byte is caught by the checksum
  std::string bytes = fs::read_text(path);
  bytes[bytes.size() - 7] ^= 0x40;
  test::TempDir other;
  fs::write_text_atomic(other.file("corrupt.tfevents"), bytes);
  EXPECT_THROW(read_tfrecords(other.file("corrupt.tfevents")), Error);

  // tensorboard itself reads the scalars back
  const std::string script = dir.file("read.py");
  fs::write_text_atomic(script, R"(import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
ea = EventAccumulator(sys.argv[1]); ea.Reload()
for tag in sorted(ea.Tags()["scalars"]):
    print(tag, " ".join(f"{e.step}:{e.value:.4f}" for e in ea.Scalars(tag)))
)");
  const auto r = test::run_command(test::python() + " " + test::shell_quote(script) + " " + test::shell_quote(dir.path()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("perf/img_per_s 10:1000.0000 20:2000.0000 30:3000.0000 40:4000.0000 50:5000.0000"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("train/loss 10:2.0000 20:1.0000 30:0.6667 40:0.5000 50:0.4000"), std::string::npos)
      << r.output;
}

TEST(Progress, RendersTheBarWithinTheWidth) {
  ProgressState s;
  s.epoch = 3;
  s.epochs = 30;
  s.step = 50;
  s.steps = 100;
  s.img_per_s = 4512.4;
  s.loss = 0.83456;
  s.eta_s = 3725;
  const std::string line = render_progress(s, 120);
  EXPECT_EQ(line.rfind("epoch 3/30 [", 0), 0u) << line;
  EXPECT_NE(line.find("50/100 | 4512 img/s | loss 0.8346 | ETA 1h02m"), std::string::npos) << line;
  EXPECT_NE(line.find("####################...................."), std::string::npos) << line;  // half of 40
  EXPECT_LE(line.size(), 120u);
  EXPECT_LE(render_progress(s, 40).size(), 40u);
  EXPECT_EQ(format_duration(42), "42s");
  EXPECT_EQ(format_duration(185), "3m05s");
  EXPECT_EQ(format_duration(-1), "?");
}

TEST(Progress, WritesNothingWhenNotATerminal) {
  test::TempDir dir;
  FILE* f = std::fopen(dir.file("out.txt").c_str(), "w");
  ASSERT_TRUE(f);
  {
    ProgressBar bar(f);
    EXPECT_FALSE(bar.active());
    ProgressState s;
    s.epochs = 1;
    s.epoch = 1;
    bar.update(s);
    bar.clear();
  }
  std::fclose(f);
  EXPECT_EQ(fs::read_text(dir.file("out.txt")), "");
}

TEST(Verdict, OnCraftedTimings) {
  EpochTimings t;
  t.images = 10000;
  t.steps = 100;
  t.wall_s = 10.0;
  t.data_wait_s = 0.5;
  t.copy_s = 1.0;
  t.drained_steps = 3;
  EXPECT_TRUE(bottleneck_verdicts(t).empty());  // 5% waiting, copies hidden, GPU always busy: compute-bound

  t.data_wait_s = 5.0;  // half the epoch waiting for data
  auto v = bottleneck_verdicts(t);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_NE(v[0].find("input-bound: 50%"), std::string::npos) << v[0];
  EXPECT_NE(v[0].find("delivered 1000 img/s"), std::string::npos) << v[0];
  EXPECT_NE(v[0].find("could train 2000 img/s"), std::string::npos) << v[0];
  EXPECT_NE(v[0].find("data.workers"), std::string::npos) << v[0];
  EXPECT_NE(v[0].find("data.decode: gpu"), std::string::npos) << v[0];
  EXPECT_NE(v[0].find("data.cache: decoded"), std::string::npos) << v[0];
  EXPECT_EQ(v[0].find("hybrid"), std::string::npos) << "measured slower than pure nvJPEG: not advised";
  t.input_limit = "the decode threads: 14 threads busy 98% of the time";  // the loader named its limit
  t.input_advice = "data.decode: gpu or auto";
  v = bottleneck_verdicts(t);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_NE(v[0].find("could train 2000 img/s. What sets it: the decode threads: 14 threads busy 98% of the time. "
                      "What to change: data.decode: gpu or auto."),
            std::string::npos)
      << v[0];
  EXPECT_EQ(v[0].find("data.workers"), std::string::npos) << "the general advice gives way to the limit's";
  t.input_limit.clear(), t.input_advice.clear();
  t.starved_steps = 2;  // the GPU never ran dry for data: the wait was a full launch queue behind a busy GPU
  EXPECT_TRUE(bottleneck_verdicts(t).empty());
  t.starved_steps = 60;  // it ran dry before 60% of the batches came
  v = bottleneck_verdicts(t);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_NE(v[0].find("input-bound: 50%"), std::string::npos) << v[0];
  t.starved_steps = -1;

  t.data_wait_s = 0.0;
  t.copy_s = 9.5;  // copies as long as the compute
  v = bottleneck_verdicts(t);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_NE(v[0].find("copy-bound: host-to-device copies took 95.0 ms per batch against 100.0 ms"), std::string::npos)
      << v[0];

  t.copy_s = -1;  // not measured
  t.drained_steps = 80;  // the GPU ran dry before 80% of the steps
  v = bottleneck_verdicts(t);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_NE(v[0].find("launch-bound: in 80% of steps"), std::string::npos) << v[0];

  t.drained_steps = -1;  // CPU: not measured, no verdict
  EXPECT_TRUE(bottleneck_verdicts(t).empty());
}

// scripts/<script> on a crafted trace of `events` written into dir, its JSON to dir/out.json
test::CommandResult run_trace_script(const test::TempDir& dir, const std::string& script, const nlohmann::json& events) {
  test::write_file(dir.file("trace.json"), nlohmann::json{{"traceEvents", events}}.dump());
  return test::run_command(test::python() + " " + test::shell_quote(test::source_dir() + "/scripts/" + script) + " " +
                           test::shell_quote(dir.file("trace.json")) + " --json " + test::shell_quote(dir.file("out.json")));
}

// trace_gaps.py: a crafted trace with a host-bound gap (the next kernel's launch call ends after the gap begins)
// and a device-bound one (launched in time; another stream's kernel runs during it) on the busiest stream.
TEST(TraceGaps, SplitsIdleTimeIntoHostAndDeviceBound) {
  test::TempDir dir;
  using nlohmann::json;
  auto kernel = [](const char* name, int stream, double ts, double dur, int corr) {
    return json{{"ph", "X"}, {"cat", "kernel"}, {"name", name}, {"ts", ts}, {"dur", dur},
                {"args", {{"stream", stream}, {"correlation", corr}}}};
  };
  auto launch = [](double ts, double dur, int corr) {
    return json{{"ph", "X"}, {"cat", "cuda_runtime"}, {"name", "cudaLaunchKernel"}, {"ts", ts}, {"dur", dur},
                {"tid", 1}, {"args", {{"correlation", corr}}}};
  };
  // another thread's call while the main thread's launch is late (100..140), partly inside the gap
  const json malloc_call = {{"ph", "X"}, {"cat", "cuda_runtime"}, {"name", "cudaMalloc"}, {"ts", 90.0},
                            {"dur", 40.0}, {"tid", 2}, {"args", json::object()}};
  json ev = json::array({kernel("conv_a", 7, 0, 100, 1), launch(-20, 5, 1),
                         kernel("conv_b", 7, 150, 100, 2), launch(130, 10, 2),    // launched at 140: host-bound 50
                         kernel("conv_c", 7, 400, 100, 3), launch(110, 10, 3),    // queued at 120: device-bound 150
                         kernel("rgba2rgb", 20, 260, 100, 4), launch(200, 5, 4),  // runs inside the second gap
                         kernel("conv_d", 7, 501, 100, 5), launch(300, 5, 5),     // a 1 us gap: below the floor
                         malloc_call});
  const auto r = run_trace_script(dir, "trace_gaps.py", ev);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json g = json::parse(test::read_file(dir.file("out.json")));
  EXPECT_EQ(g["stream"].get<int>(), 7);
  EXPECT_EQ(g["kernels"].get<int>(), 4);
  EXPECT_EQ(g["gaps"].get<int>(), 2);
  EXPECT_DOUBLE_EQ(g["idle_us"].get<double>(), 200.0);
  EXPECT_DOUBLE_EQ(g["idle_host_bound_us"].get<double>(), 50.0);
  EXPECT_DOUBLE_EQ(g["idle_device_bound_us"].get<double>(), 150.0);
  const json& top = g["largest_gaps"][0];
  EXPECT_EQ(top["next_kernel"].get<std::string>(), "conv_c");
  EXPECT_FALSE(top["host_bound"].get<bool>());
  EXPECT_DOUBLE_EQ(top["other_streams_during_gap_us"]["rgba2rgb"].get<double>(), 100.0);
  EXPECT_TRUE(g["largest_gaps"][1]["host_bound"].get<bool>());
  EXPECT_DOUBLE_EQ(g["largest_gaps"][1]["launch_call_us"].get<double>(), 10.0);
  // the other thread's cudaMalloc overlapped the late launch from 100 (the gap's start) to 130
  EXPECT_DOUBLE_EQ(g["largest_gaps"][1]["other_threads_api_calls_us"]["cudaMalloc"].get<double>(), 30.0);
  EXPECT_DOUBLE_EQ(g["host_bound_gaps_other_threads_api_us"]["cudaMalloc"].get<double>(), 30.0);
  EXPECT_DOUBLE_EQ(g["device_bound_gaps_other_streams_us"]["rgba2rgb"].get<double>(), 100.0);
  EXPECT_NE(r.output.find("host-bound 0.05 ms, device-bound 0.15 ms"), std::string::npos) << r.output;
}

// trace_api.py: the CUDA calls of a crafted trace per thread; the training threads are those that launched the
// busiest stream's kernels (the forward's and autograd's), and another thread's long sync leads the rest's longest.
TEST(TraceApi, NamesTheTrainingThreadAndTheOthersLongestCalls) {
  test::TempDir dir;
  using nlohmann::json;
  auto call = [](const char* name, int tid, double ts, double dur, int corr) {
    return json{{"ph", "X"}, {"cat", "cuda_runtime"}, {"name", name}, {"ts", ts}, {"dur", dur},
                {"tid", tid}, {"args", {{"correlation", corr}}}};
  };
  auto kernel = [](int stream, double ts, double dur, int corr) {
    return json{{"ph", "X"}, {"cat", "kernel"}, {"name", "k"}, {"ts", ts}, {"dur", dur},
                {"args", {{"stream", stream}, {"correlation", corr}}}};
  };
  json ev = json::array({call("cudaLaunchKernel", 1, 0, 5, 1), kernel(7, 10, 300, 1),
                         call("cudaLaunchKernel", 1, 10, 5, 2), kernel(7, 310, 300, 2),
                         call("cudaLaunchKernel", 2, 20, 3, 3), kernel(20, 30, 10, 3),
                         call("cudaEventSynchronize", 2, 30, 800, 4), call("cudaMemcpyAsync", 2, 840, 4, 5),
                         call("cudaLaunchKernel", 3, 600, 900, 6), kernel(7, 1500, 100, 6)});  // the backward's
  const auto r = run_trace_script(dir, "trace_api.py", ev);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json a = json::parse(test::read_file(dir.file("out.json")));
  EXPECT_EQ(a["training_thread"].get<int>(), 1);
  EXPECT_EQ(a["training_threads"], json::array({1, 3}));
  EXPECT_EQ(a["training_stream"].get<int>(), 7);
  EXPECT_EQ(a["threads"]["1"]["cudaLaunchKernel"]["calls"].get<int>(), 2);
  EXPECT_DOUBLE_EQ(a["threads"]["2"]["cudaEventSynchronize"]["total_ms"].get<double>(), 0.8);
  const json& longest = a["longest_other_calls"];
  ASSERT_EQ(longest.size(), 3u);  // thread 2's three calls, not the training threads' (3's 900 us launch)
  EXPECT_EQ(longest[0]["name"].get<std::string>(), "cudaEventSynchronize");
  EXPECT_DOUBLE_EQ(longest[0]["us"].get<double>(), 800.0);
  EXPECT_NE(r.output.find("thread 1 (training)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("thread 3 (training)"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace trainer
