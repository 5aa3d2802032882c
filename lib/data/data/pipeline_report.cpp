#include "data/pipeline_report.h"

#include <algorithm>

#include "core/strings.h"

namespace trainer {

std::string gpu_decode_report(const GpuDecodeStats& now, const GpuDecodeStats& at_start, double step_ms) {
  const int64_t batches = now.batches - at_start.batches;
  if (batches <= 0) return {};
  const double decode = (now.decode_ms - at_start.decode_ms) / static_cast<double>(batches);
  const double augment = (now.augment_ms - at_start.augment_ms) / static_cast<double>(batches);
  std::string s = strprintf("GPU decode: %lld images by nvJPEG, %lld by the CPU threads",
                            static_cast<long long>(now.gpu - at_start.gpu),
                            static_cast<long long>((now.cpu_fallback - at_start.cpu_fallback) +
                                                   (now.cpu_hybrid - at_start.cpu_hybrid)));
  if (now.cpu_hybrid > at_start.cpu_hybrid)
    s += strprintf(" (%lld of them the hybrid share, %.2f of a batch now)",
                   static_cast<long long>(now.cpu_hybrid - at_start.cpu_hybrid), now.host_share);
  s += strprintf("; the loader's side stream per batch: decode %.2f ms, crop + resize + normalise %.2f ms", decode,
                 augment);
  if (step_ms > 0) s += strprintf(", beside a %.2f ms step (%.0f%%)", step_ms, 100.0 * (decode + augment) / step_ms);
  return s;
}


PipelineStats pipeline_since(const PipelineStats& now, const PipelineStats& before) {
  PipelineStats d = now;
  StageTotals& c = d.cpu;
  const StageTotals& c0 = before.cpu;
  c.read_ns -= c0.read_ns, c.decode_ns -= c0.decode_ns, c.resize_ns -= c0.resize_ns;
  c.samples -= c0.samples, c.bad -= c0.bad, c.cut -= c0.cut;
  GpuDecodeStats& g = d.gpu;
  const GpuDecodeStats& g0 = before.gpu;
  g.gpu -= g0.gpu, g.cpu_fallback -= g0.cpu_fallback, g.cpu_hybrid -= g0.cpu_hybrid, g.bad -= g0.bad;
  g.gpu_cropped -= g0.gpu_cropped, g.batches -= g0.batches;
  g.gpu_tiled -= g0.gpu_tiled, g.gpu_mosaics -= g0.gpu_mosaics, g.ahead_mosaic_ms -= g0.ahead_mosaic_ms;
  g.mosaic_mcus -= g0.mosaic_mcus, g.mosaic_filler_mcus -= g0.mosaic_filler_mcus;
  g.decode_ms -= g0.decode_ms, g.augment_ms -= g0.augment_ms;
  g.host_batches -= g0.host_batches;
  g.host_read_wait_ms -= g0.host_read_wait_ms, g.host_decode_ms -= g0.host_decode_ms;
  g.host_augment_ms -= g0.host_augment_ms;
  g.host_nvjpeg_call_ms -= g0.host_nvjpeg_call_ms, g.host_after_call_ms -= g0.host_after_call_ms;
  g.host_upload_ms -= g0.host_upload_ms;
  g.ahead_ms -= g0.ahead_ms, g.ahead_read_ms -= g0.ahead_read_ms, g.ahead_size_ms -= g0.ahead_size_ms;
  g.ahead_parse_ms -= g0.ahead_parse_ms, g.ahead_share_ms -= g0.ahead_share_ms;
  g.ahead_share_cpu_ms -= g0.ahead_share_cpu_ms, g.ahead_share_images -= g0.ahead_share_images;
  return d;
}

namespace {

constexpr double kBusy = 0.75;  // a side busier than this for the interval sets the pace

// The CPU path: the decode threads' time per sample, by stage.
InputLimit cpu_limit(const StageTotals& t, int threads, double wall_s) {
  InputLimit out;
  if (t.samples <= 0 || threads <= 0 || t.read_ns < 0 || t.decode_ns < 0 || t.resize_ns < 0) return out;
  const double n = static_cast<double>(t.samples);
  const double read = t.read_ns / n / 1e6, decode = t.decode_ns / n / 1e6, resize = t.resize_ns / n / 1e6;
  const double per = read + decode + resize;  // ms of one thread a sample
  if (per <= 0) return out;
  const double busy = per * n / (1e3 * wall_s * threads), rate = 1e3 * threads / per;
  const std::string figures =
      strprintf("%d thread%s busy %.0f%% of the time at %.2f ms a sample (read %.2f, decode %.2f, crop + "
                "resize + flip %.2f): at most %.0f img/s",
                threads, threads == 1 ? "" : "s", 100 * busy, per, read, decode, resize, rate);
  if (busy < kBusy) {
    out.stage = "not the decode threads";
    out.figures = figures;
    out.advice = "look outside the decoding: the epoch's start while the batch ring fills (data.prefetch), or the "
                 "copy to the device";
    return out;
  }
  out.stage = "the decode threads";
  out.figures = figures;
  if (read >= decode && read >= resize)
    out.advice = "reading the files is the largest part: data.cache_gb keeps them in RAM after their first read; "
                 "shards (trainer pack) are read in sequence";
  else if (resize > decode)
    out.advice = "the crop-resize is the largest part: smaller stored images (trainer pack --max-side); data.decode: "
                 "gpu or auto";
  else
    out.advice = "data.decode: gpu or auto (nvJPEG, picked by measuring); where the decoded images fit in RAM, "
                 "data.cache: decoded with data.cache_gb; JPEGs with restart markers (trainer pack, or data.cache: "
                 "restart) entropy-decode only the crop window, about 30% less; data.crop_decode and data.dct_scale "
                 "on; more threads (data.workers) only where cores are idle";
  return out;
}

// The GPU path: the producer thread's time per batch, by part.
InputLimit gpu_limit(const GpuDecodeStats& g, double wall_s) {
  InputLimit out;
  if (g.host_batches <= 0 || g.host_read_wait_ms < 0 || g.host_decode_ms < 0 || g.host_augment_ms < 0) return out;
  const double b = static_cast<double>(g.host_batches);
  const double wait = g.host_read_wait_ms / b, call = g.host_nvjpeg_call_ms / b, augment = g.host_augment_ms / b;
  const double after = (g.host_after_call_ms + g.host_upload_ms) / b;
  const double producer = wait + g.host_decode_ms / b + augment, per_batch = 1e3 * wall_s / b;
  const double busy = producer / per_batch;
  const std::string head = strprintf("the loader's thread busy %.0f%% of the time, %.2f ms of the %.2f ms a batch took",
                                     100 * busy, producer, per_batch);
  const double images = static_cast<double>(g.gpu) / b;
  if (busy < kBusy) {
    out.stage = "not the loader's thread";
    out.figures = head + strprintf(" (the side stream's decode %.2f ms, crop + resize + normalise %.2f ms a batch)",
                                   g.decode_ms / std::max<int64_t>(g.batches, 1),
                                   g.augment_ms / std::max<int64_t>(g.batches, 1));
    out.advice = "look outside the loader's thread: the epoch's start while its queue fills (data.prefetch)";
    return out;
  }
  if (wait >= call && wait >= after && wait >= augment) {
    const double ahead = g.ahead_ms / b, read = g.ahead_read_ms / b, sizes = g.ahead_size_ms / b;
    const double parse = g.ahead_parse_ms / b, share = g.ahead_share_ms / b;
    out.stage = "the read-ahead";
    out.figures = head + strprintf("; it waited %.2f ms a batch for the next batch's files, whose read-ahead took "
                                   "%.2f ms (sizes and buffer %.2f, read %.2f, header parsing %.2f",
                                   wait, ahead, sizes, read, parse);
    if (g.ahead_share_images > 0)
      out.figures += strprintf(", the CPU share %.2f for %.1f images", share,
                               static_cast<double>(g.ahead_share_images) / b);
    out.figures += ")";
    if (share > parse && g.ahead_share_images > 0)
      out.advice = "the CPU share is its largest part: a smaller data.hybrid_share, or data.decode: gpu";
    else if (read >= sizes && read >= parse)
      out.advice = "reading the files is its largest part: data.cache_gb keeps them in RAM after their first read; "
                   "shards (trainer pack) are read in sequence";
    else
      out.advice = "more reading threads (data.workers) where cores are idle";
    return out;
  }
  if (call >= after && call >= augment) {
    out.stage = "the nvJPEG call";
    out.figures = head + strprintf("; of it %.2f ms in the nvJPEG call for %.0f images (%.0f img/s)", call, images,
                                   call > 0 ? 1e3 * images / call : 0.0);
    out.advice = "the JPEG engines (and the SMs nvJPEG shares with training) are the limit: where the decoded "
                 "images fit in RAM, data.cache: decoded with data.cache_gb (later epochs only crop and resize); "
                 "smaller stored images (trainer pack --max-side); data.decode: auto compares it with the CPU threads";
    return out;
  }
  if (after >= augment) {
    out.stage = "the CPU part of the batch";
    out.figures = head + strprintf("; of it %.2f ms after the nvJPEG call waiting for the CPU threads' images and "
                                   "their upload (%.1f a batch nvJPEG could not take)",
                                   after, static_cast<double>(g.cpu_fallback) / b);
    out.advice = "files nvJPEG cannot take (CMYK, PNG, ...) decode on the CPU threads: trainer pack --quality 95 "
                 "writes every image as an RGB JPEG";
    return out;
  }
  out.stage = "the crop-resize launches";
  out.figures = head + strprintf("; of it %.2f ms launching the crop, resize and normalise", augment);
  out.advice = "fewer per-sample GPU augmentations (data.jitter, data.erase_prob), or a larger batch";
  return out;
}

}  // namespace

InputLimit input_limit(const PipelineStats& interval, double wall_s) {
  if (wall_s <= 0) return {};
  if (interval.decode == DecodeKind::cpu) return cpu_limit(interval.cpu, interval.threads, wall_s);
  if (interval.decode == DecodeKind::gpu) return gpu_limit(interval.gpu, wall_s);
  return {};
}

InputLimit limit_beside_training(const InputLimit& loader, double data_wait_fraction) {
  constexpr double kWaited = 0.02;  // a step that waited less than this for data was not paced by the loader
  if (loader.stage.empty() || data_wait_fraction >= kWaited) return loader;
  InputLimit out;
  out.stage = strprintf("the training step (it waited for data %.1f%% of the time)", 100 * data_wait_fraction);
  out.figures = "beside it, " + loader.stage + ": " + loader.figures;
  out.advice = "the loader keeps up; where the step is slower than on synthetic data (bench.data: synthetic), the "
               "loader's work beside it slows it: its CPU threads beside a host-bound step (fewer data.workers, "
               "a smaller data.hybrid_share) or its GPU work (data.decode: cpu where the threads keep up)";
  return out;
}

}  // namespace trainer
