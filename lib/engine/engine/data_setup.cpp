#include "engine/data_setup.h"

#include <torch/torch.h>

#include <algorithm>
#include <thread>

#include "core/check.h"
#include "core/fs.h"
#include "core/log.h"
#include "core/thread_priority.h"
#include "data/auto_loader.h"
#include "data/cifar.h"
#include "data/gpu_image_loader.h"
#include "data/idx.h"
#include "data/image_folder.h"
#include "data/image_loader.h"
#include "data/memory_loader.h"
#include "data/shards.h"

namespace trainer {
namespace {

AugmentOptions augment_options(const DataConfig& d) {
  AugmentOptions a;
  a.jitter = d.jitter;
  a.erase_prob = d.erase_prob;
  a.erase_scale = d.erase_scale;
  a.erase_ratio = d.erase_ratio;
  a.erase_pixel = d.erase_mode == "pixel";
  if (d.auto_augment != "none") a.auto_augment.policy = d.auto_augment;
  a.auto_augment.num_ops = static_cast<int>(d.auto_augment_ops);
  a.auto_augment.magnitude = static_cast<int>(d.auto_augment_magnitude);
  return a;
}

// What both kinds of loader options (MemoryLoaderOptions, ImageLoaderOptions) take from the config alike.
template <class Options>
void set_batch_options(Options& o, const Config& cfg, const DataDefaults& defaults, const RunContext& ctx) {
  const DataConfig& d = cfg.data;
  o.batch_size = d.batch_size;
  o.seed = cfg.run.seed;
  o.rank = ctx.rank;
  o.world_size = ctx.world_size;
  o.drop_last = d.drop_last;
  o.image_size = d.image_size;
  o.hflip = d.hflip;
  o.mean = d.mean.empty() ? defaults.mean : d.mean;
  o.std = d.std.empty() ? defaults.std : d.std;
  o.channels_last = ctx.device.is_cuda() && cfg.model.channels_last;
  o.dtype = batch_dtype(cfg, ctx.device);
  o.augment = augment_options(d);
}

// the evaluation loader's options: the training loader's without augmentation, at data.eval_batch_size
template <class Options> Options eval_options(Options o, const DataConfig& d) {
  o.train = false;
  o.image_size = d.image_size;
  o.batch_size = d.eval_batch_size > 0 ? d.eval_batch_size : d.batch_size;
  return o;
}

}  // namespace

torch::ScalarType batch_dtype(const Config& cfg, torch::Device device) {
  const std::string& d = cfg.data.dtype;
  if (d == "float32") return torch::kFloat32;
  if (d == "bfloat16") return torch::kBFloat16;  // validate_config_for_run: only with bf16 on a GPU
  return device.is_cuda() && cfg.train.precision == "bf16" ? torch::kBFloat16 : torch::kFloat32;
}

ImageLoaderOptions image_loader_options(const Config& cfg, const DataDefaults& defaults, const RunContext& ctx) {
  const DataConfig& d = cfg.data;
  ImageLoaderOptions o;
  set_batch_options(o, cfg, defaults, ctx);
  o.crop_pct = d.crop_pct > 0 ? d.crop_pct : defaults.crop_pct;
  o.eval_filter = interpolation_from(d.interpolation == "auto" ? defaults.interpolation : d.interpolation);
  o.rrc_scale = d.rrc_scale;
  o.rrc_ratio = d.rrc_ratio;
  // default: the machine's cores less two, shared by the ranks on it
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  o.workers = d.workers > 0 ? static_cast<int>(d.workers) : std::max(1, (cores - 2) / std::max(1, ctx.local_world_size));
  o.prefetch = static_cast<int>(d.prefetch);
  set_data_thread_nice(static_cast<int>(d.thread_nice));  // process-wide: the thread pool serves every loader
  set_data_thread_reserved_cpus(static_cast<int>(d.training_cores));
  o.dct_scale = d.dct_scale;
  o.crop_decode = d.crop_decode;
  o.cache_gb = d.cache_gb;
  o.cache_decoded = d.cache == "decoded";
  o.cache_restart = d.cache == "restart";
  o.host_share = d.decode == "hybrid" ? d.hybrid_share : 0;
  o.decode_sms = static_cast<int>(d.gpu_decode_sms);
  o.decode_high_priority = d.gpu_decode_priority == "high";
  o.decode_calls = static_cast<int>(d.gpu_decode_calls);
  o.decode_mosaic = static_cast<int>(d.gpu_decode_mosaic);
  return o;
}

std::unique_ptr<Loader> make_image_loader(std::vector<ImageSample> samples, const ImageLoaderOptions& o,
                                          const std::string& decode, torch::Device device, std::string* why,
                                          const Loader* follow) {
  auto say = [&](const std::string& s) {
    if (why) *why = s;
  };
  if (decode == "gpu" || decode == "hybrid") {
    if (!gpu_decode_available())
      throw ConfigError(str_cat("key 'data.decode': ", decode, ", but this build has no nvJPEG"));
    if (!device.is_cuda()) throw ConfigError(str_cat("key 'data.decode': ", decode, " needs run.device cuda"));
    const std::string sms = o.decode_sms > 0 ? str_cat(", the loader's kernels on ", o.decode_sms, " SMs") : "";
    if (decode == "gpu") {
      say("data.decode gpu: nvJPEG" + sms);
      ImageLoaderOptions g = o;
      g.host_share = 0;
      return std::make_unique<GpuImageLoader>(std::move(samples), g, device);
    }
    say((o.host_share < 0 ? std::string("data.decode hybrid: nvJPEG and the CPU threads, the split adapted")
                          : str_cat("data.decode hybrid: nvJPEG and the CPU threads, ", o.host_share,
                                    " of each batch on the CPU")) +
        sms);
    return std::make_unique<GpuImageLoader>(std::move(samples), o, device);
  }
  if (decode == "auto") {
    if (!device.is_cuda() || !gpu_decode_available()) {
      say(str_cat("data.decode auto: cpu (", device.is_cuda() ? "this build has no nvJPEG" : "no GPU", ")"));
      return std::make_unique<ImageLoader>(std::move(samples), o, device);
    }
    // CPU first; the GPU path is tried while training if the CPU one cannot keep up (AutoDecodeLoader)
    const bool cached = o.cache_gb > 0 && (o.cache_decoded || o.cache_restart);
    say(cached ? "data.decode auto: starting with CPU decode; in the second epoch, when data.cache serves it, the GPU "
                 "path is tried if training waits"
               : "data.decode auto: starting with CPU decode; the GPU path is tried after a few batches if training "
                 "waits");
    auto list = std::make_shared<const std::vector<ImageSample>>(std::move(samples));
    auto cpu = [list, o, device]() -> std::unique_ptr<Loader> { return std::make_unique<ImageLoader>(*list, o, device); };
    auto gpu = [list, o, device]() -> std::unique_ptr<Loader> {
      return std::make_unique<GpuImageLoader>(*list, o, device);
    };
    if (follow) return std::make_unique<AutoDecodeLoader>(cpu, gpu, follow);
    AutoDecodeOptions ao;  // each window's time from an idle device to an idle device: what its steps took
    ao.sync = [device] { torch::cuda::synchronize(device.index()); };
    // the GPU path has no RAM cache: where the CPU path's serves decoded or rewritten images from the second epoch,
    // that epoch decides, not the first one's decoding
    if (cached) ao.epochs_before_measuring = 1;
    return std::make_unique<AutoDecodeLoader>(cpu, gpu, o.workers, std::move(ao));
  }
  return std::make_unique<ImageLoader>(std::move(samples), o, device);
}

ImageList image_split(const DataConfig& d, const std::string& split) {
  if (d.source == "list") return read_list_file(fs::join_path(d.root, split), d.root);
  if (d.source == "shards") return scan_shards(fs::join_path(d.root, split));
  return scan_image_folder(fs::join_path(d.root, split));
}

namespace {

// image_folder, list, shards: the CPU or GPU image pipeline (data.decode)
Loaders image_loaders(const Config& cfg, const DataDefaults& defaults, const RunContext& ctx, int64_t train_size) {
  const DataConfig& d = cfg.data;
  Loaders out;
  ImageList train = image_split(d, d.train_split);
  auto limit = [](ImageList& l, int64_t n) {
    if (n > 0 && n < static_cast<int64_t>(l.samples.size())) l.samples.resize(static_cast<size_t>(n));
  };
  limit(train, d.train_limit);
  for (const auto& s : train.samples)
    TRAINER_CHECK(s.label < cfg.model.num_classes, s.path, ": label ", s.label, " but model.num_classes is ",
                  cfg.model.num_classes);
  ImageLoaderOptions o = image_loader_options(cfg, defaults, ctx);
  if (train_size > 0) o.image_size = train_size;
  if (d.train_crop == "none") o.rrc_scale = {1.0, 1.0}, o.rrc_ratio = {0.0001, 10000.0};
  const torch::Device dev = ctx.device;
  std::string why;
  out.train = make_image_loader(std::move(train.samples), o, d.decode, dev, &why);
  if (!why.empty() && ctx.rank == 0) log::info(why);
  if (cfg.train.cuda_graph && out.train->pipeline_stats().decode == DecodeKind::gpu && ctx.rank == 0)
    log::warn("train.cuda_graph with data.decode gpu: measured slower than the eager step from the same loader "
              "(ResNet-50 on an H200: 88-89% of the captured step's synthetic throughput against 95% eager; "
              "bench/README.md); consider train.cuda_graph: false");
  if (!d.eval_split.empty()) {
    ImageList eval = image_split(d, d.eval_split);
    limit(eval, d.eval_limit);
    const ImageLoaderOptions e = eval_options(o, d);
    // evaluation decodes where training does; with auto, where training's decision went (from then on)
    out.eval = make_image_loader(std::move(eval.samples), e, d.decode, dev, nullptr, out.train.get());
  }
  return out;
}

}  // namespace

Loaders build_loaders(const Config& cfg, const DataDefaults& defaults, const RunContext& ctx, int64_t train_size) {
  const DataConfig& d = cfg.data;
  if (d.source == "image_folder" || d.source == "list" || d.source == "shards")
    return image_loaders(cfg, defaults, ctx, train_size);
  Loaders out;
  InMemoryDataset train, eval;
  bool have_eval = false;
  if (d.source == "idx") {
    train = load_idx_split(d.root, d.train_split);
    if (!d.eval_split.empty()) {
      eval = load_idx_split(d.root, d.eval_split);
      have_eval = true;
    }
  } else if (d.source == "cifar10" || d.source == "cifar100") {
    train = load_cifar_split(d.root, d.source, d.train_split);
    if (!d.eval_split.empty()) {
      eval = load_cifar_split(d.root, d.source, d.eval_split);
      have_eval = true;
    }
  } else if (d.source == "synthetic") {
    train = make_synthetic(d.synthetic_samples, d.image_size, cfg.model.in_chans, cfg.model.num_classes,
                           cfg.run.seed);
    eval = make_synthetic(std::max<int64_t>(d.synthetic_samples / 10, 1), d.image_size, cfg.model.in_chans,
                          cfg.model.num_classes, cfg.run.seed + 1);
    have_eval = true;
  } else {
    throw ConfigError(str_cat("key 'data.source': unsupported source '", d.source, "'"));
  }
  auto limit = [](InMemoryDataset& ds, int64_t n) {
    if (n > 0 && n < ds.images.size(0)) {
      ds.images = ds.images.narrow(0, 0, n).contiguous();
      ds.labels = ds.labels.narrow(0, 0, n).contiguous();
    }
  };
  limit(train, d.train_limit);
  if (have_eval) limit(eval, d.eval_limit);
  TRAINER_CHECK(train.images.size(3) == cfg.model.in_chans, "the training images have ", train.images.size(3),
                " channel(s) but model.in_chans is ", cfg.model.in_chans);
  TRAINER_CHECK(train.num_classes <= cfg.model.num_classes, "the labels go up to ", train.num_classes - 1,
                " but model.num_classes is ", cfg.model.num_classes);

  MemoryLoaderOptions o;
  set_batch_options(o, cfg, defaults, ctx);
  if (train_size > 0) o.image_size = train_size;
  o.crop = d.train_crop;
  o.crop_pad = d.crop_pad;
  const torch::Device data_device = d.on_gpu ? ctx.device : torch::Device(torch::kCPU);
  out.train = std::make_unique<MemoryLoader>(std::move(train), o, data_device);
  if (have_eval) {
    out.eval = std::make_unique<MemoryLoader>(std::move(eval), eval_options(o, d), data_device);
  }
  return out;
}

}  // namespace trainer
