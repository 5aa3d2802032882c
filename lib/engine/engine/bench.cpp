#include "engine/bench.h"

#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/fs.h"
#include "core/log.h"
#include "core/thread_priority.h"
#include "data/auto_loader.h"
#include "data/gpu_image_loader.h"
#include "data/image_folder.h"
#include "data/image_loader.h"
#include "data/pipeline_report.h"
#include "distributed/process_group.h"
#include "models/batchnorm.h"
#include "models/registry.h"
#include "runtime/env.h"
#include "runtime/step_timer.h"

namespace trainer {

std::string fnv1a_hex(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return strprintf("%016llx", static_cast<unsigned long long>(h));
}


// The JSON's words for the path that made the batches.
static std::string decode_name(const PipelineStats& s) {
  if (s.decode == DecodeKind::gpu && s.gpu.cpu_hybrid > 0)
    return str_cat("hybrid (", s.hardware ? "nvJPEG hardware engines" : "nvJPEG", " + CPU threads, ",
                   s.gpu.cpu_hybrid, " of ", s.gpu.cpu_hybrid + s.gpu.gpu, " images on the CPU, share now ",
                   s.gpu.host_share, ")");
  if (s.decode == DecodeKind::gpu) return s.hardware ? "gpu (nvJPEG, hardware engines)" : "gpu (nvJPEG)";
  return s.decode == DecodeKind::cpu ? "cpu" : "none (data in memory)";
}

// the GPU decode path's keys set away from their defaults, named without "data."
static void record_gpu_decode_settings(const Config& cfg, nlohmann::json& j) {
  for (const KeySetting& k : gpu_decode_settings(cfg.data)) {
    const std::string name = std::string(k.key).substr(5);
    if (k.text.empty()) j[name] = k.number;
    else j[name] = k.text;
  }
}

// the side stream's time and the producer thread's host time per stage, per batch
static nlohmann::json gpu_decode_times(const GpuDecodeStats& st) {
  const double per = std::max<int64_t>(st.batches, 1), host = std::max<int64_t>(st.host_batches, 1);
  return {{"decode_stream_ms_per_batch", st.decode_ms / per},
          {"augment_stream_ms_per_batch", st.augment_ms / per},
          {"producer_host_ms_per_batch",
           {{"wait_for_files", st.host_read_wait_ms / host},
            {"parse_and_submit_decode", st.host_decode_ms / host},
            {"of_which_nvjpeg_call", st.host_nvjpeg_call_ms / host},
            {"of_which_cpu_part_after_the_call", st.host_after_call_ms / host},
            {"of_which_upload_cpu_decoded", st.host_upload_ms / host},
            {"launch_crop_resize_normalise", st.host_augment_ms / host}}},
          {"read_ahead_host_ms_per_batch",
           {{"wall", st.ahead_ms / host},
            {"read_files", st.ahead_read_ms / host},
            {"sizes_and_pinned_buffer", st.ahead_size_ms / host},
            {"parse_headers", st.ahead_parse_ms / host},
            {"lay_out_mosaics", st.ahead_mosaic_ms / host},
            {"hybrid_share_beside_parsing", st.ahead_share_ms / host},
            {"hybrid_share_images", static_cast<double>(st.ahead_share_images) / host},
            {"hybrid_share_thread_ms_per_image",
             st.ahead_share_cpu_ms / static_cast<double>(std::max<int64_t>(st.ahead_share_images, 1))}}}};
}

// what set the pipeline's pace over the timed steps (data/pipeline_report.h)
static void add_input_limit(nlohmann::json& j, const InputLimit& limit) {
  if (limit.stage.empty()) return;
  j["input_limit"] = {{"stage", limit.stage}, {"figures", limit.figures}, {"advice", limit.advice}};
}

BenchResult run_bench(const Config& cfg, const RunContext& ctx) {
  const bool pipeline = cfg.bench.data == "pipeline";
  Trainer t(cfg, ctx, /*with_data=*/pipeline);
  const int64_t B = cfg.data.batch_size, S = cfg.data.image_size, C = cfg.model.in_chans;
  auto gen_opts = torch::TensorOptions().device(ctx.device);
  torch::manual_seed(cfg.run.seed);
  Batch batch;
  if (!pipeline) {
    // as the loaders would give it: normalised, in data.dtype
    batch.images = torch::randn({B, C, S, S}, gen_opts.dtype(torch::kFloat32)).to(batch_dtype(cfg, ctx.device));
    if (ctx.device.is_cuda() && cfg.model.channels_last)
      batch.images = batch.images.contiguous(torch::MemoryFormat::ChannelsLast);
    batch.labels = torch::randint(cfg.model.num_classes, {B}, gen_opts.dtype(torch::kInt64));
  }
  // pipeline: batches from the configured loader, epoch after epoch; the wait for them is part of the step
  int64_t epoch = 0;
  double wait_s = 0;  // host time blocked on the loader
  if (pipeline) t.train_loader().set_epoch(epoch);
  auto next_batch = [&]() -> const Batch& {
    if (!pipeline) return batch;
    const auto t_wait = std::chrono::steady_clock::now();
    while (!t.train_loader().next(batch)) t.train_loader().set_epoch(++epoch);
    wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t_wait).count();
    return batch;
  };

  const int64_t k = cfg.train.accum_steps;
  auto run_steps = [&](int64_t n) {
    for (int64_t i = 0; i < n * k; ++i) t.train_step(next_batch());
  };
  run_steps(cfg.bench.warmup_steps);
  // data.decode auto: the timed steps start once it has decided (its trial is not what the run is timed on)
  while (pipeline && t.train_loader().deciding()) run_steps(1);
  synchronize(ctx.device);
  reset_peak_memory(ctx.device);
  const PipelineStats before = pipeline ? t.train_loader().pipeline_stats() : PipelineStats{};
  wait_s = 0;
  const ThreadSwitches switches0 = this_thread_switches();
  const auto t0 = std::chrono::steady_clock::now();
  run_steps(cfg.bench.steps);
  synchronize(ctx.device);
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const ThreadSwitches switches = this_thread_switches();
  const double loss = t.take_train_loss();
  if (ctx.dist) {
    ctx.dist->broadcast_buffers(*t.model());
    t.check_replicas();
  }

  // Ranks step in lockstep (every step ends in the same all-reduce): the job's rate is W x this rank's.
  BenchResult r;
  const double per_rank = static_cast<double>(cfg.bench.steps * k * B) / sec;
  r.img_per_s = per_rank * ctx.world_size;
  r.step_ms = 1000.0 * sec / cfg.bench.steps;
  // A captured step's activations live in the graph's private pool, allocated once at capture and not counted
  // as allocated afterwards: report the reserved memory there (an upper bound), the allocated peak otherwise.
  const GpuMemory mem = gpu_memory(ctx.device);
  r.peak_mem_gib = cfg.train.cuda_graph ? mem.reserved_gib : mem.peak_gib;
  const FlopsBudget flops = flops_budget(t.model()->flops_per_image(), ctx.device, t.precision() != Precision::fp32);
  r.mfu = flops.mfu(per_rank);

  nlohmann::json j;
  j["tool"] = "trainer";
  j["workload"] = {{"model", cfg.model.name},          {"batch_size", B},
                   {"image_size", S},                   {"precision", precision_name(t.precision())},
                   {"channels_last", cfg.model.channels_last}, {"optimizer", cfg.optim.name},
                   {"accum_steps", k},
                   {"data", pipeline ? "pipeline: " + cfg.data.source + " " + cfg.data.root + "/" + cfg.data.train_split
                                     : std::string("synthetic, resident on the device")}};
  const auto fused = t.model()->fused_norm_layers();
  if (fused.second > 0) j["fused_norm"] = str_cat(fused.first, " of ", fused.second, " norm layers fused");
  j["warmup_steps"] = cfg.bench.warmup_steps;
  j["steps"] = cfg.bench.steps;
  // the thread that runs the forward pass and the optimiser, over the timed steps: an involuntary switch is the
  // scheduler giving its CPU to another thread (a data thread, say) while it had work
  if (switches.involuntary >= 0 && switches0.involuntary >= 0)
    j["training_thread_switches_per_step"] = {
        {"voluntary", double(switches.voluntary - switches0.voluntary) / cfg.bench.steps},
        {"involuntary", double(switches.involuntary - switches0.involuntary) / cfg.bench.steps}};
  if (pipeline) {
    const PipelineStats ps = t.train_loader().pipeline_stats();
    j["decode"] = decode_name(ps);
    if (!t.train_loader().decision().empty()) j["decode_auto"] = t.train_loader().decision();
    record_gpu_decode_settings(cfg, j);
    // the data threads' settings as given (workers -1: cores - 2)
    j["data_threads"] = {{"workers", cfg.data.workers},
                         {"thread_nice", cfg.data.thread_nice},
                         {"training_cores", cfg.data.training_cores}};
    j["data_wait_fraction"] = wait_s / sec;  // of the timed steps' wall time, the host waited for batches
    const PipelineStats timed = pipeline_since(ps, before);
    // the loader's time
    if (ps.decode == DecodeKind::gpu && before.decode == DecodeKind::gpu && timed.gpu.batches > 0) {
      j["gpu_decode_timed"] = gpu_decode_times(timed.gpu);
      j["gpu_decode_timed"]["batches"] = timed.gpu.batches;
      j["gpu_decode_timed"]["nvjpeg_images"] = timed.gpu.gpu;
      j["gpu_decode_timed"]["of_which_tiles_of_mosaics"] = timed.gpu.gpu_tiled;
      j["gpu_decode_timed"]["mosaics"] = timed.gpu.gpu_mosaics;
      if (timed.gpu.mosaic_mcus > 0)
        j["gpu_decode_timed"]["mosaic_filler_share"] = double(timed.gpu.mosaic_filler_mcus) / timed.gpu.mosaic_mcus;
    }
    add_input_limit(j, ps.decode == before.decode ? limit_beside_training(input_limit(timed, sec), wait_s / sec)
                                                  : InputLimit{});
  }
  j["img_per_s"] = r.img_per_s;
  j["world_size"] = ctx.world_size;
  j["img_per_s_per_gpu"] = per_rank;
  if (ctx.world_size > 1)
    j["dist"] = {{"launcher", ctx.dist ? ctx.dist->env().launcher : "none"}, {"overlap", cfg.dist.overlap},
                 {"bucket_mb", cfg.dist.bucket_mb}, {"grad_compression", cfg.dist.grad_compression},
                 {"sync_bn", cfg.dist.sync_bn}};
  j["step_ms"] = r.step_ms;
  j["peak_mem_gib"] = r.peak_mem_gib;
  j["peak_mem_kind"] = cfg.train.cuda_graph ? "reserved (the CUDA graph's pool)" : "allocated";
  j["cuda_graph"] = cfg.train.cuda_graph;
  j["train_flops_per_image"] = flops.train_flops_per_image;
  j["mfu"] = r.mfu;
  j["final_loss"] = loss;
  const EnvInfo env = query_env();
  j["env"] = {{"gpu", flops.gpu},
              {"cuda_driver", env.cuda_driver},
              {"cuda_runtime", env.cuda_runtime},
              {"cuda_work_queues", env.cuda_work_queues},
              {"cudnn", env.cudnn},
              {"nccl", env.nccl},
              {"libtorch", env.torch_version},
              {"compiler", env.compiler},
              {"trainer", env.trainer_version},
              {"git_sha", env.git_sha}};
  j["config_fnv1a64"] = fnv1a_hex(config_to_yaml(cfg));
  r.json = j.dump(2);

  if (ctx.writer()) {
    std::fprintf(stderr, "%-22s %s\n%-22s %lld x %lld px, %s, %s\n%-22s %.1f\n%-22s %.1f (x %d)\n%-22s %.2f\n%-22s %.2f\n%-22s %.1f%%\n",
                 "model", cfg.model.name.c_str(), "batch", static_cast<long long>(B), static_cast<long long>(S),
                 precision_name(t.precision()), pipeline ? "data from the pipeline" : "synthetic data on the device",
                 "img/s", r.img_per_s, "img/s per GPU", per_rank, ctx.world_size, "ms/step", r.step_ms,
                 "peak memory GiB", r.peak_mem_gib, "MFU", 100 * r.mfu);
  }
  log::info(strprintf("bench %s bs %lld %lldpx %s x %d rank(s): %.1f img/s (%.1f per GPU), %.2f ms/step, peak %.2f "
                      "GiB, MFU %.1f%%",
                      cfg.model.name.c_str(), static_cast<long long>(B), static_cast<long long>(S),
                      precision_name(t.precision()), ctx.world_size, r.img_per_s, per_rank, r.step_ms,
                      r.peak_mem_gib, 100 * r.mfu));
  return r;
}

DataBenchResult run_bench_data(const Config& cfg, const RunContext& ctx) {
  validate_config_for_run(cfg, ctx.device.is_cuda(), ctx.world_size);
  const DataConfig& d = cfg.data;
  TRAINER_CHECK(d.source == "image_folder" || d.source == "list" || d.source == "shards",
                "bench-data measures the image-file pipeline: set data.source to image_folder, list or shards");
  ImageList list = image_split(d, d.train_split);
  const DataDefaults defaults = create_model(cfg.model, d.image_size)->data_defaults();
  ImageLoaderOptions o = image_loader_options(cfg, defaults, ctx);
  const size_t files = list.samples.size();
  std::string why;
  std::unique_ptr<Loader> owned = make_image_loader(std::move(list.samples), o, d.decode, ctx.device, &why);
  if (!why.empty()) log::info(why);
  Loader& loader = *owned;
  const int64_t per_epoch = loader.batches_per_epoch();
  // warm-up and timed batches run on into the next epochs as training does (a small set: many epochs)
  TRAINER_CHECK(per_epoch > 0, "the training split (", files, " images) has no full batch of ", d.batch_size);
  int64_t epoch = 0;
  Batch b;
  auto next = [&]() {
    if (!loader.next(b)) {
      loader.set_epoch(++epoch);
      TRAINER_CHECK(loader.next(b), "empty epoch");
    }
  };
  for (int64_t i = 0; i < cfg.bench.warmup_steps; ++i) next();
  // data.decode auto: timed once decided (on the pipeline alone training takes nothing, so the GPU path is tried
  // and the faster pipeline kept); the stage figures below are the chosen loader's
  while (loader.deciding()) next();
  synchronize(ctx.device);
  const PipelineStats p0 = loader.pipeline_stats();
  const StageTotals& s0 = p0.cpu;
  const auto t0 = std::chrono::steady_clock::now();
  int64_t images = 0;
  for (int64_t i = 0; i < cfg.bench.steps; ++i) {
    next();
    images += b.labels.size(0);
  }
  synchronize(ctx.device);
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const PipelineStats stats = loader.pipeline_stats();
  const StageTotals& s1 = stats.cpu;
  const bool gpu = stats.decode == DecodeKind::gpu;
  DataBenchResult r;
  r.workers = o.workers;
  r.img_per_s = images / sec;
  const double n = std::max<int64_t>(s1.samples - s0.samples, 1);
  r.read_us = (s1.read_ns - s0.read_ns) / n / 1e3;
  r.decode_us = (s1.decode_ns - s0.decode_ns) / n / 1e3;
  r.resize_us = (s1.resize_ns - s0.resize_ns) / n / 1e3;
  r.cut_fraction = (s1.cut - s0.cut) / n;
  const EnvInfo env = query_env();
  nlohmann::json j;
  j["tool"] = "trainer";
  j["workload"] = {{"root", d.root},           {"split", d.train_split},   {"files", files},
                   {"image_size", d.image_size}, {"batch_size", d.batch_size}, {"augment", d.train_crop + "+flip" +
                                  (d.auto_augment == "none" ? std::string() : "+" + d.auto_augment + "augment") +
                                  (d.jitter.empty() ? "" : "+jitter") + (d.erase_prob > 0 ? "+erasing" : "")},
                   {"dct_scale", d.dct_scale}, {"crop_decode", d.crop_decode}, {"workers", o.workers},
                   {"output", str_cat(c10::toString(batch_dtype(cfg, ctx.device)),
                                      ctx.device.is_cuda() ? " NCHW channels_last on the GPU, normalised"
                                                           : " NCHW on the CPU, normalised")}};
  j["batches"] = cfg.bench.steps;
  j["img_per_s"] = r.img_per_s;
  j["per_image_cpu_us"] = {{"read", r.read_us}, {"decode", r.decode_us}, {"resize_flip", r.resize_us}};
  j["restart_cut_fraction"] = r.cut_fraction;
  j["bad_samples"] = loader.bad_samples();
  j["decode"] = decode_name(stats);
  if (!loader.decision().empty()) j["decode_auto"] = loader.decision();
  record_gpu_decode_settings(cfg, j);
  const InputLimit limit = stats.decode == p0.decode ? input_limit(pipeline_since(stats, p0), sec) : InputLimit{};
  add_input_limit(j, limit);
  if (gpu) {
    const GpuDecodeStats& st = stats.gpu;
    j["gpu_decode"] = {{"nvjpeg", st.gpu},
                       {"nvjpeg_crop_window_only", st.gpu_cropped},
                       {"nvjpeg_tiles_of_mosaics", st.gpu_tiled},
                       {"nvjpeg_mosaics", st.gpu_mosaics},
                       {"cpu_fallback", st.cpu_fallback},
                       {"cpu_hybrid", st.cpu_hybrid},
                       {"host_share_now", st.host_share},
                       {"batched_crop_resize_kernel", gpu_crop_resize_kernel_available()},
                       {"timed_batches", st.batches}};
    j["gpu_decode"].update(gpu_decode_times(st));
  }
  j["env"] = {{"gpu", env.gpus.empty() ? "none" : env.gpus[0].name}, {"cpu_threads", std::thread::hardware_concurrency()},
              {"cuda_work_queues", env.cuda_work_queues}, {"libtorch", env.torch_version}, {"git_sha", env.git_sha}};
  j["config_fnv1a64"] = fnv1a_hex(config_to_yaml(cfg));
  r.json = j.dump(2);
  if (gpu)
    log::info(strprintf("bench-data: %.0f img/s, GPU decode (%s), %d read threads | %lld by nvJPEG (%lld crop window "
                        "only), %lld by the CPU fallback, %lld by the CPU threads' hybrid share (%.2f now) | side "
                        "stream per batch: decode %.2f ms, crop+resize+normalise %.2f ms",
                        r.img_per_s, stats.hardware ? "hardware engines" : "nvJPEG", r.workers,
                        static_cast<long long>(stats.gpu.gpu), static_cast<long long>(stats.gpu.gpu_cropped),
                        static_cast<long long>(stats.gpu.cpu_fallback), static_cast<long long>(stats.gpu.cpu_hybrid),
                        stats.gpu.host_share,
                        stats.gpu.decode_ms / std::max<int64_t>(stats.gpu.batches, 1),
                        stats.gpu.augment_ms / std::max<int64_t>(stats.gpu.batches, 1)));
  else
    log::info(strprintf("bench-data: %.0f img/s with %d threads | per image (CPU): read %.0f us, decode %.0f us, "
                        "resize+flip %.0f us | %.0f%% of windows cut out by restart markers",
                        r.img_per_s, r.workers, r.read_us, r.decode_us, r.resize_us, 100 * r.cut_fraction));
  if (!limit.stage.empty()) log::info("bench-data: what sets the pace: ", limit.stage, ": ", limit.figures);
  return r;
}

}  // namespace trainer
