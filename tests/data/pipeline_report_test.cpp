// What set the input pipeline's pace (data/pipeline_report.h) on crafted counters: the interval's part of them,
// the CPU path's decode threads (busy or not, the largest stage picking the advice), the GPU path's loader thread
// (the read-ahead, the nvJPEG call, the CPU part after it), the step beside training and the cases it cannot judge.
#include <gtest/gtest.h>

#include "data/pipeline_report.h"

namespace trainer {
namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// n samples at these milliseconds of one thread each, by stage
PipelineStats cpu_interval(int64_t n, double read_ms, double decode_ms, double resize_ms, int threads) {
  PipelineStats p;
  p.decode = DecodeKind::cpu;
  p.threads = threads;
  p.cpu.samples = n;
  p.cpu.read_ns = static_cast<int64_t>(n * read_ms * 1e6);
  p.cpu.decode_ns = static_cast<int64_t>(n * decode_ms * 1e6);
  p.cpu.resize_ns = static_cast<int64_t>(n * resize_ms * 1e6);
  return p;
}

TEST(PipelineReport, SinceTakesTheIntervalsPartOfEveryCounter) {
  PipelineStats before = cpu_interval(100, 0.1, 1.0, 0.2, 4), now = cpu_interval(300, 0.1, 1.0, 0.2, 4);
  before.gpu.host_batches = 2, now.gpu.host_batches = 7;
  before.gpu.host_nvjpeg_call_ms = 20, now.gpu.host_nvjpeg_call_ms = 70;
  before.gpu.ahead_share_images = 10, now.gpu.ahead_share_images = 35;
  before.gpu.gpu_tiled = 64, now.gpu.gpu_tiled = 320;
  before.gpu.gpu_mosaics = 4, now.gpu.gpu_mosaics = 20;
  before.gpu.ahead_mosaic_ms = 1.5, now.gpu.ahead_mosaic_ms = 6;
  const PipelineStats d = pipeline_since(now, before);
  EXPECT_EQ(d.decode, DecodeKind::cpu);
  EXPECT_EQ(d.threads, 4);
  EXPECT_EQ(d.cpu.samples, 200);
  EXPECT_EQ(d.cpu.decode_ns, now.cpu.decode_ns - before.cpu.decode_ns);
  EXPECT_EQ(d.gpu.host_batches, 5);
  EXPECT_DOUBLE_EQ(d.gpu.host_nvjpeg_call_ms, 50);
  EXPECT_EQ(d.gpu.ahead_share_images, 25);
  EXPECT_EQ(d.gpu.gpu_tiled, 256);
  EXPECT_EQ(d.gpu.gpu_mosaics, 16);
  EXPECT_DOUBLE_EQ(d.gpu.ahead_mosaic_ms, 4.5);
}

TEST(PipelineReport, BusyDecodeThreadsAreTheLimitWithTheirRate) {
  // 1000 samples at 1.58 ms of thread time each on 4 threads in 0.41 s: busy 96%, at most 4 / 1.58 ms = 2532 img/s
  const InputLimit l = input_limit(cpu_interval(1000, 0.02, 1.40, 0.16, 4), 0.41);
  EXPECT_EQ(l.stage, "the decode threads");
  EXPECT_TRUE(has(l.figures, "4 threads busy 96% of the time at 1.58 ms a sample")) << l.figures;
  EXPECT_TRUE(has(l.figures, "read 0.02, decode 1.40, crop + resize + flip 0.16")) << l.figures;
  EXPECT_TRUE(has(l.figures, "at most 2532 img/s")) << l.figures;
  EXPECT_TRUE(has(l.advice, "data.decode: gpu or auto")) << l.advice;
  EXPECT_TRUE(has(l.advice, "data.cache: decoded")) << l.advice;

  const InputLimit reading = input_limit(cpu_interval(1000, 1.50, 1.00, 0.10, 4), 0.66);
  EXPECT_EQ(reading.stage, "the decode threads");
  EXPECT_TRUE(has(reading.advice, "reading the files")) << reading.advice;
  EXPECT_TRUE(has(reading.advice, "data.cache_gb")) << reading.advice;

  const InputLimit resizing = input_limit(cpu_interval(1000, 0.01, 0.20, 0.60, 4), 0.21);
  EXPECT_TRUE(has(resizing.advice, "crop-resize")) << resizing.advice;
}

TEST(PipelineReport, IdleDecodeThreadsAreNamedAsNotTheLimit) {
  const InputLimit l = input_limit(cpu_interval(1000, 0.02, 1.40, 0.16, 4), 2.0);  // busy 20%
  EXPECT_EQ(l.stage, "not the decode threads");
  EXPECT_TRUE(has(l.figures, "4 threads busy 20% of the time")) << l.figures;
  EXPECT_TRUE(has(l.advice, "outside the decoding")) << l.advice;
}

// 10 batches of 256 in `wall_s`, the producer's time in the given milliseconds a batch
PipelineStats gpu_interval(double wait, double call, double after, double augment) {
  PipelineStats p;
  p.decode = DecodeKind::gpu;
  p.threads = 14;
  GpuDecodeStats& g = p.gpu;
  g.host_batches = g.batches = 10;
  g.gpu = 2560;
  g.host_read_wait_ms = 10 * wait;
  g.host_nvjpeg_call_ms = 10 * call;
  g.host_after_call_ms = 10 * after;
  g.host_decode_ms = 10 * (call + after + 0.3);  // and the submission around the call
  g.host_augment_ms = 10 * augment;
  g.decode_ms = 10 * 13.0, g.augment_ms = 10 * 1.5;
  return p;
}

TEST(PipelineReport, TheNvjpegCallIsTheLimitWhereItTakesTheLoadersTime) {
  // a batch every 16 ms; the producer 1 + 12.3 + 0.2 + 0.5 = 14 ms of it (88%), 12 in the nvJPEG call
  const InputLimit l = input_limit(gpu_interval(1.0, 12.0, 0.2, 0.5), 0.16);
  EXPECT_EQ(l.stage, "the nvJPEG call");
  EXPECT_TRUE(has(l.figures, "the loader's thread busy 88% of the time, 14.00 ms of the 16.00 ms a batch took"))
      << l.figures;
  EXPECT_TRUE(has(l.figures, "12.00 ms in the nvJPEG call for 256 images (21333 img/s)")) << l.figures;
  EXPECT_TRUE(has(l.advice, "data.cache: decoded")) << l.advice;
}

// A measured case: ResNet-18 from JPEGs with data.decode gpu on an H100 (bench/results/2026-12-05_h100/run93,
// resnet18_gpu.json: 201 batches at 15.93 ms, the producer's figures per batch): the nvJPEG call is named.
TEST(PipelineReport, Run93sGpuDecodeIsBoundByTheNvjpegCall) {
  PipelineStats p = gpu_interval(0.194, 15.261, 0.072, 0.183);
  GpuDecodeStats& g = p.gpu;
  const double b = 201;
  g.host_batches = g.batches = 201;
  g.gpu = 201 * 256;
  g.host_read_wait_ms = b * 0.194, g.host_nvjpeg_call_ms = b * 15.261, g.host_after_call_ms = b * 0.072;
  g.host_decode_ms = b * 15.405, g.host_augment_ms = b * 0.183;
  const InputLimit l = input_limit(p, b * 15.933e-3);
  EXPECT_EQ(l.stage, "the nvJPEG call");
  EXPECT_TRUE(has(l.figures, "busy 99% of the time, 15.78 ms of the 15.93 ms a batch took")) << l.figures;
  EXPECT_TRUE(has(l.figures, "15.26 ms in the nvJPEG call for 256 images (16775 img/s)")) << l.figures;
}

TEST(PipelineReport, TheReadAheadIsTheLimitWhereTheLoaderWaitsForFiles) {
  PipelineStats p = gpu_interval(9.0, 5.0, 0.2, 0.5);
  GpuDecodeStats& g = p.gpu;
  g.ahead_ms = 10 * 14.0, g.ahead_read_ms = 10 * 3.0, g.ahead_size_ms = 10 * 0.8, g.ahead_parse_ms = 10 * 2.1;
  g.ahead_share_ms = 10 * 8.0, g.ahead_share_images = 10 * 40;
  InputLimit l = input_limit(p, 0.16);
  EXPECT_EQ(l.stage, "the read-ahead");
  EXPECT_TRUE(has(l.figures, "waited 9.00 ms a batch for the next batch's files, whose read-ahead took 14.00 ms "
                             "(sizes and buffer 0.80, read 3.00, header parsing 2.10, the CPU share 8.00 for 40.0 images)"))
      << l.figures;
  EXPECT_TRUE(has(l.advice, "data.hybrid_share")) << l.advice;

  g.ahead_share_ms = 0, g.ahead_share_images = 0;  // pure nvJPEG: the reading is the largest part
  l = input_limit(p, 0.16);
  EXPECT_FALSE(has(l.figures, "CPU share")) << l.figures;
  EXPECT_TRUE(has(l.advice, "data.cache_gb")) << l.advice;
}

TEST(PipelineReport, TheCpuPartAfterTheCallAndAnIdleLoader) {
  PipelineStats p = gpu_interval(1.0, 3.0, 9.0, 0.5);
  p.gpu.cpu_fallback = 10 * 20;
  InputLimit l = input_limit(p, 0.16);
  EXPECT_EQ(l.stage, "the CPU part of the batch");
  EXPECT_TRUE(has(l.figures, "(20.0 a batch nvJPEG could not take)")) << l.figures;
  EXPECT_TRUE(has(l.advice, "trainer pack --quality")) << l.advice;

  l = input_limit(gpu_interval(1.0, 3.0, 0.2, 0.5), 0.16);  // 5 of 16 ms
  EXPECT_EQ(l.stage, "not the loader's thread");
  EXPECT_TRUE(has(l.figures, "side stream's decode 13.00 ms")) << l.figures;
}

// Beside training the loader's stage is named only where the step waited for it: run104 (H100, ResNet-18, hybrid)
// had the loader's thread 86% busy in the nvJPEG call while the step waited 0.2% of the time at 70% of synthetic.
TEST(PipelineReport, BesideTrainingAStepThatDidNotWaitSetsThePace) {
  const InputLimit loader = input_limit(gpu_interval(1.0, 12.0, 0.2, 0.5), 0.16);
  ASSERT_EQ(loader.stage, "the nvJPEG call");
  const InputLimit step = limit_beside_training(loader, 0.002);
  EXPECT_EQ(step.stage, "the training step (it waited for data 0.2% of the time)");
  EXPECT_TRUE(has(step.figures, "beside it, the nvJPEG call: the loader's thread busy 88%")) << step.figures;
  EXPECT_TRUE(has(step.advice, "data.workers")) << step.advice;

  const InputLimit waited = limit_beside_training(loader, 0.08);  // run104's gpu rows: 7-8% waited
  EXPECT_EQ(waited.stage, loader.stage);
  EXPECT_EQ(waited.figures, loader.figures);
  EXPECT_TRUE(limit_beside_training(InputLimit{}, 0.0).stage.empty());  // nothing known stays unknown
}

TEST(PipelineReport, NothingToSayWithoutTimedWork) {
  EXPECT_TRUE(input_limit(PipelineStats{}, 1.0).stage.empty());                        // data in memory
  EXPECT_TRUE(input_limit(cpu_interval(0, 0, 0, 0, 4), 1.0).stage.empty());            // nothing made
  EXPECT_TRUE(input_limit(cpu_interval(100, 0.1, 1.0, 0.1, 4), 0).stage.empty());      // no time
  EXPECT_TRUE(input_limit(cpu_interval(-50, -0.1, -1.0, -0.1, 4), 1.0).stage.empty());  // a loader made anew
  PipelineStats g = gpu_interval(1.0, 12.0, 0.2, 0.5);
  g.gpu.host_batches = 0;
  EXPECT_TRUE(input_limit(g, 1.0).stage.empty());
}

}  // namespace
}  // namespace trainer
