#include "engine/bench.h"

#include <torch/torch.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "core/log.h"
#include "runtime/env.h"

namespace trainer {

std::string fnv1a_hex(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return strprintf("%016llx", static_cast<unsigned long long>(h));
}

namespace {
// Dense tensor-core peak by GPU name (vendor datasheets), for MFU; 0 when unknown.
double peak_flops(const std::string& gpu, Precision p) {
  if (p == Precision::fp32) return 0;
  if (gpu.find("H200") != std::string::npos || gpu.find("H100") != std::string::npos) return 989e12;
  if (gpu.find("A100") != std::string::npos) return 312e12;
  return 0;
}
}  // namespace

BenchResult run_bench(const Config& cfg, const RunContext& ctx) {
  Trainer t(cfg, ctx, /*with_data=*/false);
  const int64_t B = cfg.data.batch_size, S = cfg.data.image_size, C = cfg.model.in_chans;
  auto gen_opts = torch::TensorOptions().device(ctx.device);
  torch::manual_seed(cfg.run.seed);
  Batch batch;
  batch.images = torch::randn({B, C, S, S}, gen_opts.dtype(torch::kFloat32));
  if (ctx.device.is_cuda() && cfg.model.channels_last)
    batch.images = batch.images.contiguous(torch::MemoryFormat::ChannelsLast);
  batch.labels = torch::randint(cfg.model.num_classes, {B}, gen_opts.dtype(torch::kInt64));

  const int64_t k = cfg.train.accum_steps;
  auto run_steps = [&](int64_t n) {
    for (int64_t i = 0; i < n * k; ++i) t.train_step(batch);
  };
  run_steps(cfg.bench.warmup_steps);
  synchronize(ctx.device);
  reset_peak_memory(ctx.device);
  const auto t0 = std::chrono::steady_clock::now();
  run_steps(cfg.bench.steps);
  synchronize(ctx.device);
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double loss = t.take_train_loss();

  BenchResult r;
  r.img_per_s = static_cast<double>(cfg.bench.steps * k * B) / sec;
  r.step_ms = 1000.0 * sec / cfg.bench.steps;
  r.peak_mem_gib = gpu_memory(ctx.device).peak_gib;
  const EnvInfo env = query_env();
  const std::string gpu = ctx.device.is_cuda() && !env.gpus.empty() ? env.gpus[ctx.device.index()].name : "cpu";
  const double flops = 3.0 * t.model()->flops_per_image();  // forward + backward (2x)
  const double peak = peak_flops(gpu, t.precision());
  r.mfu = peak > 0 ? r.img_per_s * flops / peak : 0;

  nlohmann::json j;
  j["tool"] = "trainer";
  j["workload"] = {{"model", cfg.model.name},          {"batch_size", B},
                   {"image_size", S},                   {"precision", precision_name(t.precision())},
                   {"channels_last", cfg.model.channels_last}, {"optimizer", cfg.optim.name},
                   {"accum_steps", k},                  {"data", "synthetic, resident on the device"}};
  j["warmup_steps"] = cfg.bench.warmup_steps;
  j["steps"] = cfg.bench.steps;
  j["img_per_s"] = r.img_per_s;
  j["step_ms"] = r.step_ms;
  j["peak_mem_gib"] = r.peak_mem_gib;
  j["train_flops_per_image"] = flops;
  j["mfu"] = r.mfu;
  j["final_loss"] = loss;
  j["env"] = {{"gpu", gpu},
              {"cuda_driver", env.cuda_driver},
              {"cuda_runtime", env.cuda_runtime},
              {"cudnn", env.cudnn},
              {"nccl", env.nccl},
              {"libtorch", env.torch_version},
              {"compiler", env.compiler},
              {"trainer", env.trainer_version},
              {"git_sha", env.git_sha}};
  j["config_fnv1a64"] = fnv1a_hex(config_to_yaml(cfg));
  r.json = j.dump(2);

  log::info(strprintf("bench %s bs %lld %lldpx %s: %.1f img/s, %.2f ms/step, peak %.2f GiB, MFU %.1f%%",
                      cfg.model.name.c_str(), static_cast<long long>(B), static_cast<long long>(S),
                      precision_name(t.precision()), r.img_per_s, r.step_ms, r.peak_mem_gib, 100 * r.mfu));
  return r;
}

}  // namespace trainer
