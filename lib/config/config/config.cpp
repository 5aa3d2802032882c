// YAML loading, --set overrides and printing, all driven by one schema table (fields_of) so that the
// three agree. Errors name the file, line, key path and what is allowed, and throw ConfigError (exit 2).
#include "config/config.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include "core/check.h"
#include "core/fs.h"
#include "core/strings.h"

namespace trainer {
namespace {

// ---- schema ----

enum class Kind { Int, Float, Bool, String, FloatList };

struct Field {
  std::string path;  // "optim.lr"
  std::string doc;
  Kind kind;
  void* ptr;
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_open = false;  // exclusive lower bound
  bool max_open = false;
  std::vector<std::string> choices;  // String: allowed values (empty = any)
  size_t list_len = 0;                // FloatList: exact length (0 = any)
};

struct Range {
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_open = false, max_open = false;
};
Range at_least(double v) { return {v, std::numeric_limits<double>::infinity(), false, false}; }
Range above(double v) { return {v, std::numeric_limits<double>::infinity(), true, false}; }
Range closed(double a, double b) { return {a, b, false, false}; }
Range half_open(double a, double b) { return {a, b, false, true}; }

class Schema {
 public:
  void add_int(const std::string& p, int64_t* v, const std::string& doc, Range r = {}) { add(p, Kind::Int, v, doc, r); }
  void add_float(const std::string& p, double* v, const std::string& doc, Range r = {}) { add(p, Kind::Float, v, doc, r); }
  void add_bool(const std::string& p, bool* v, const std::string& doc) { add(p, Kind::Bool, v, doc, {}); }
  void add_string(const std::string& p, std::string* v, const std::string& doc, std::vector<std::string> choices = {}) {
    add(p, Kind::String, v, doc, {});
    fields.back().choices = std::move(choices);
  }
  void add_list(const std::string& p, std::vector<double>* v, const std::string& doc, size_t len = 0, Range r = {}) {
    add(p, Kind::FloatList, v, doc, r);
    fields.back().list_len = len;
  }
  std::vector<Field> fields;
  std::map<std::string, std::string> section_docs;

 private:
  void add(const std::string& p, Kind k, void* v, const std::string& doc, Range r) {
    Field f;
    f.path = p;
    f.doc = doc;
    f.kind = k;
    f.ptr = v;
    f.min = r.min;
    f.max = r.max;
    f.min_open = r.min_open;
    f.max_open = r.max_open;
    fields.push_back(std::move(f));
  }
};

// Every key a config may hold. Keep in the order of config.h.
Schema fields_of(Config& c) {
  Schema s;
  s.section_docs["run"] = "where the run writes, seeds, device and logging";
  s.add_string("run.name", &c.run.name, "run folder name under out_dir");
  s.add_string("run.out_dir", &c.run.out_dir, "parent folder of run folders");
  s.add_int("run.seed", &c.run.seed, "seeds weights, data order and augmentation", at_least(0));
  s.add_string("run.device", &c.run.device, "where to train", {"auto", "cpu", "cuda"});
  s.add_string("run.cuda_sync", &c.run.cuda_sync,
               "how a thread waiting for the GPU waits: auto = CUDA's choice (spins where there are more cores than "
               "contexts), spin, yield, blocking (sleeps: frees the core of the GPU loader's nvJPEG call for others)",
               {"auto", "spin", "yield", "blocking"});
  s.add_bool("run.deterministic", &c.run.deterministic, "deterministic kernels (cudnn.benchmark off)");
  s.add_string("run.log_level", &c.run.log_level, "console and file log level",
               {"trace", "debug", "info", "warn", "error"});
  s.add_int("run.log_interval", &c.run.log_interval, "optimizer steps between log lines", at_least(1));
  s.add_int("run.dist_timeout_s", &c.run.dist_timeout_s, "seconds a collective may take before the job ends",
            at_least(1));
  s.add_string("run.progress", &c.run.progress, "progress bar on stderr", {"auto", "always", "never"});
  s.add_bool("run.tensorboard", &c.run.tensorboard, "write a TensorBoard event file into the run folder");
  s.add_string("run.profile", &c.run.profile,
               "START:END = Chrome trace of optimizer steps START..END-1 into the run folder (trace.json)");

  s.section_docs["model"] = "architecture, by registry name";
  s.add_string("model.name", &c.model.name, "registry name, e.g. resnet50, vit_base_patch16_224");
  s.add_int("model.num_classes", &c.model.num_classes, "classifier outputs", at_least(1));
  s.add_int("model.in_chans", &c.model.in_chans, "input channels (1 = grayscale)", closed(1, 64));
  s.add_bool("model.small_stem", &c.model.small_stem, "ResNet: 3x3 stride-1 stem without max-pool (28-64 px inputs)");
  s.add_bool("model.zero_init_last", &c.model.zero_init_last, "ResNet: zero the last BN gamma of each block");
  s.add_string("model.fused_norm", &c.model.fused_norm,
               "trainer's own kernels (CUDA, bf16/fp16 autocast): ResNet's batch norm with its residual add and "
               "ReLU and the stem's max-pool (channels_last; not yet with dist.sync_bn under auto), ViT's residual "
               "add + LayerNorm, fc1's bias + GELU and the q/k/v gradient stack with its bias sums: auto = where "
               "they are faster than ATen's, on = wherever they run (sync_bn too), off = ATen's ops",
               {"auto", "on", "off"});
  s.add_bool("model.stem_fp16", &c.model.stem_fp16,
             "ResNet: the 7x7 stem convolution's forward in fp16 under bf16 autocast (cuDNN has no fast bf16 kernel "
             "for 3 input channels); its weight gradient stays bf16");
  s.add_bool("model.stem_s2d", &c.model.stem_s2d,
             "ResNet on CUDA: the 7x7 stride-2 stem as the same convolution, 4x4 over the 2x2 space-to-depth of "
             "its input (12 channels, as MLPerf's ResNet-50), forward and weight gradient in the autocast dtype; "
             "before stem_fp16 where it applies (even padded image sides, at most 4 input channels)");
  s.add_float("model.drop_rate", &c.model.drop_rate, "dropout before the classifier", half_open(0, 1));
  s.add_float("model.drop_path_rate", &c.model.drop_path_rate, "stochastic depth rate of the last block",
              half_open(0, 1));
  s.add_string("model.pretrained", &c.model.pretrained, "safetensors weights to start from (timm names), empty = none");
  s.add_bool("model.channels_last", &c.model.channels_last, "NHWC memory format for model and input on CUDA");

  s.section_docs["data"] = "dataset, batching and augmentation";
  s.add_string("data.source", &c.data.source, "dataset kind", {"synthetic", "idx", "cifar10", "cifar100", "image_folder", "list", "shards"});
  s.add_string("data.root", &c.data.root, "dataset folder");
  s.add_string("data.train_split", &c.data.train_split, "training split: idx file prefix, image_folder sub-folder, list file, shards sub-folder");
  s.add_string("data.eval_split", &c.data.eval_split, "eval split, as train_split; empty = no eval");
  s.add_int("data.image_size", &c.data.image_size, "side of the model input in pixels", closed(8, 4096));
  s.add_int("data.train_size_min", &c.data.train_size_min,
            "progressive resizing (FFCV's): training batches start at this side, 0 = off (always data.image_size)",
            closed(0, 4096));
  s.add_int("data.train_size_max", &c.data.train_size_max,
            "progressive resizing: the training side at the end of the ramp, 0 = data.image_size (evaluation always "
            "uses data.image_size)",
            closed(0, 4096));
  s.add_list("data.train_size_ramp", &c.data.train_size_ramp,
             "progressive resizing: [first, last] epoch (from 0) of the linear ramp from train_size_min to "
             "train_size_max; the side is rounded to a multiple of 32",
             2, at_least(0));
  s.add_int("data.batch_size", &c.data.batch_size, "per-process batch size", closed(1, 1 << 20));
  s.add_int("data.eval_batch_size", &c.data.eval_batch_size, "eval batch size, 0 = batch_size", closed(0, 1 << 20));
  s.add_int("data.workers", &c.data.workers, "CPU data threads, -1 = cores - 2 (at least 1)", closed(-1, 1024));
  s.add_int("data.thread_nice", &c.data.thread_nice,
            "CPU priority of the data threads below the training thread's (Linux niceness; 0 = the same)",
            closed(0, 19));
  s.add_int("data.training_cores", &c.data.training_cores,
            "CPUs kept for the training threads: the data threads run on the others (Linux affinity; 0 = anywhere)",
            closed(0, 1024));
  s.add_int("data.prefetch", &c.data.prefetch, "batches prepared ahead of the train step", closed(1, 64));
  s.add_bool("data.drop_last", &c.data.drop_last, "drop the last incomplete training batch");
  s.add_list("data.mean", &c.data.mean, "per-channel mean on a 0..1 scale, empty = model default", 0, closed(0, 1));
  s.add_list("data.std", &c.data.std, "per-channel std on a 0..1 scale, empty = model default", 0, above(0));
  s.add_string("data.train_crop", &c.data.train_crop, "training crop", {"none", "pad_crop", "rrc"});
  s.add_int("data.crop_pad", &c.data.crop_pad, "pad_crop: zero padding on each side", closed(0, 256));
  s.add_float("data.hflip", &c.data.hflip, "probability of a horizontal flip", closed(0, 1));
  s.add_list("data.rrc_scale", &c.data.rrc_scale, "rrc: range of the crop's area fraction", 2, closed(0, 1));
  s.add_list("data.rrc_ratio", &c.data.rrc_ratio, "rrc: range of the crop's aspect ratio", 2, above(0));
  s.add_float("data.crop_pct", &c.data.crop_pct, "eval centre-crop fraction, 0 = the model's default", closed(0, 1));
  s.add_string("data.interpolation", &c.data.interpolation,
               "image files: the eval resize's filter (antialiased, as torchvision's and PIL's); auto = the model's "
               "(bicubic for ViT, as timm's data config; bilinear for ResNets); training resizes bilinear",
               {"auto", "bilinear", "bicubic"});
  s.add_bool("data.dct_scale", &c.data.dct_scale,
             "JPEG, CPU decode: decode at 1/2, 1/4, 1/8 when the crop is shrunk anyway");
  s.add_bool("data.crop_decode", &c.data.crop_decode,
             "JPEG: decode only the crop window (CPU: libjpeg-turbo's crop/skip; GPU: nvJPEG regions on the hardware "
             "engines)");
  s.add_int("data.train_limit", &c.data.train_limit, "use only the first N training samples, 0 = all", at_least(0));
  s.add_int("data.eval_limit", &c.data.eval_limit, "use only the first N eval samples, 0 = all", at_least(0));
  s.add_int("data.synthetic_samples", &c.data.synthetic_samples, "synthetic: images per epoch", at_least(1));
  s.add_bool("data.on_gpu", &c.data.on_gpu, "in-memory sources: hold the dataset and augment on the GPU");
  s.add_string("data.dtype", &c.data.dtype,
               "the normalised batch's dtype: auto = bfloat16 when training in bf16 on a GPU (what autocast casts the "
               "first layer's input to, so the loader writes half the bytes and the step skips the cast), float32 "
               "otherwise",
               {"auto", "float32", "bfloat16"});
  s.add_string("data.decode", &c.data.decode,
               "image files: cpu = decode threads with libjpeg-turbo; gpu = nvJPEG batched decode (hardware JPEG "
               "engines where present) with crop, resize and flip on the GPU; auto = start on the CPU path and, while "
               "training, switch to the GPU path where training waits for data the decode threads cannot make, "
               "keeping it only if it is faster end to end; hybrid = the gpu path with a share of each training batch "
               "decoded, cropped and resized by the CPU threads while the engines decode the batch before "
               "(data.hybrid_share)",
               {"cpu", "gpu", "auto", "hybrid"});
  s.add_float("data.hybrid_share", &c.data.hybrid_share,
              "data.decode hybrid: the share of each batch's JPEGs the CPU threads decode; -1 = adapted while "
              "training so that both sides finish a batch together (their measured rates)",
              closed(-1, 1));
  s.add_int("data.gpu_decode_sms", &c.data.gpu_decode_sms,
            "data.decode gpu, hybrid (and auto once on the GPU path): the SMs the loader's kernels may use, as a CUDA "
            "green context (rounded up to the GPU's granularity, 8 on Hopper); 0 = all of them, beside training's",
            at_least(0));
  s.add_string("data.gpu_decode_priority", &c.data.gpu_decode_priority,
               "data.decode gpu, hybrid (and auto once on the GPU path): the CUDA priority of the loader's side "
               "stream, where nvJPEG's kernels and the crop-resize-normalise run; normal = the training step's, high = "
               "their blocks go to the SMs before the step's waiting ones",
               {"normal", "high"});
  s.add_int("data.gpu_decode_calls", &c.data.gpu_decode_calls,
            "data.decode gpu, hybrid (and auto once on the GPU path): nvJPEG batched calls in flight, each batch's "
            "on a decoder state and thread of its own, handed out in order (a call waits on GPU-side stages that "
            "slow beside training; 1 = one batch at a time)",
            closed(1, 4));
  s.add_int("data.gpu_decode_mosaic", &c.data.gpu_decode_mosaic,
            "data.decode gpu, hybrid (and auto once on the GPU path), training with data.crop_decode: the crop windows "
            "of k JPEGs a mosaic, one JPEG nvJPEG decodes whole (its per-image CUDA calls made once per mosaic), for "
            "files with a restart marker after every MCU that share their coding tables (trainer pack --huffman "
            "standard); other files are decoded one by one; 0 = every file on its own",
            closed(0, 64));
  s.add_float("data.cache_gb", &c.data.cache_gb,
              "image files and shards: keep each sample in RAM after its first read (later epochs read no disk), at "
              "most this many GiB; 0 = off",
              at_least(0));
  s.add_string("data.cache", &c.data.cache,
               "what data.cache_gb keeps: encoded (the files' bytes), restart (each JPEG rewritten losslessly with a "
               "restart marker after every MCU, as trainer pack does: the first epoch pays the rewrite, later ones "
               "entropy-decode only the crop window) or decoded (full RGB images: later epochs only crop and resize; "
               "DCT scaling and crop-only decode are then unused)",
               {"encoded", "restart", "decoded"});
  s.add_list("data.jitter", &c.data.jitter,
             "training colour jitter [brightness, contrast, saturation, hue] as torchvision's ColorJitter, per "
             "sample on the device; empty = off",
             0, closed(0, 1));
  s.add_float("data.erase_prob", &c.data.erase_prob, "training random erasing probability (torchvision/timm), 0 = off",
              closed(0, 1));
  s.add_list("data.erase_scale", &c.data.erase_scale, "random erasing: range of the erased area fraction", 2,
             closed(0, 1));
  s.add_list("data.erase_ratio", &c.data.erase_ratio, "random erasing: range of the box aspect ratio", 2, above(0));
  s.add_string("data.auto_augment", &c.data.auto_augment,
               "training RandAugment (rand) or TrivialAugmentWide (trivial) with torchvision's ops, magnitudes and "
               "uint8 rounding, per sample on the device after the crop; none = off",
               {"none", "rand", "trivial"});
  s.add_int("data.auto_augment_ops", &c.data.auto_augment_ops, "RandAugment: ops applied to each sample (num_ops)",
            closed(1, 4));
  s.add_int("data.auto_augment_magnitude", &c.data.auto_augment_magnitude,
            "RandAugment: magnitude bin of 31 (torchvision's magnitude, default 9)", closed(0, 30));
  s.add_string("data.erase_mode", &c.data.erase_mode, "random erasing fill: 0 (the mean colour) or normal noise",
               {"const", "pixel"});

  s.section_docs["optim"] = "optimizer and learning-rate schedule";
  s.add_string("optim.name", &c.optim.name, "optimizer", {"sgd", "adamw", "lamb"});
  s.add_float("optim.lr", &c.optim.lr, "peak learning rate", above(0));
  s.add_float("optim.momentum", &c.optim.momentum, "sgd momentum", half_open(0, 1));
  s.add_bool("optim.nesterov", &c.optim.nesterov, "sgd: Nesterov momentum");
  s.add_float("optim.weight_decay", &c.optim.weight_decay, "weight decay (decoupled for adamw)", at_least(0));
  s.add_list("optim.betas", &c.optim.betas, "adamw/lamb betas", 2, half_open(0, 1));
  s.add_float("optim.eps", &c.optim.eps, "adamw/lamb epsilon (timm's Lamb uses 1e-6)", above(0));
  s.add_bool("optim.wd_exclude_norm_bias", &c.optim.wd_exclude_norm_bias,
             "no weight decay on norms, biases and the model's no_weight_decay names");
  s.add_float("optim.clip_grad_norm", &c.optim.clip_grad_norm, "max global gradient norm, 0 = off", at_least(0));
  s.add_string("optim.schedule", &c.optim.schedule, "learning-rate schedule after warmup",
               {"constant", "cosine", "step", "multistep", "poly"});
  s.add_float("optim.warmup_epochs", &c.optim.warmup_epochs, "linear warmup length in epochs", at_least(0));
  s.add_float("optim.warmup_factor", &c.optim.warmup_factor, "warmup starts at lr * warmup_factor", closed(0, 1));
  s.add_float("optim.min_lr", &c.optim.min_lr, "floor of cosine and poly", at_least(0));
  s.add_float("optim.step_epochs", &c.optim.step_epochs, "step: decay every this many epochs", above(0));
  s.add_list("optim.milestones", &c.optim.milestones, "multistep: epochs at which lr *= gamma", 0, at_least(0));
  s.add_float("optim.gamma", &c.optim.gamma, "step/multistep decay factor", closed(0, 1));
  s.add_float("optim.poly_power", &c.optim.poly_power, "poly exponent", above(0));
  s.add_int("optim.lr_base_batch", &c.optim.lr_base_batch,
            "linear scaling rule: lr times the global batch (batch x ranks x accum_steps) / this; 0 = off",
            at_least(0));

  s.section_docs["train"] = "the training loop";
  s.add_int("train.epochs", &c.train.epochs, "passes over the training set", closed(1, 100000));
  s.add_int("train.max_steps", &c.train.max_steps, "stop after this many optimizer steps, 0 = no limit", at_least(0));
  s.add_string("train.precision", &c.train.precision, "autocast precision on CUDA", {"bf16", "fp16", "fp32"});
  s.add_int("train.accum_steps", &c.train.accum_steps, "micro-batches per optimizer step", closed(1, 1024));
  s.add_float("train.label_smoothing", &c.train.label_smoothing, "cross-entropy label smoothing", half_open(0, 1));
  s.add_int("train.eval_interval", &c.train.eval_interval, "evaluate every N epochs (and at the end), 0 = end only",
            at_least(0));
  s.add_bool("train.cudnn_benchmark", &c.train.cudnn_benchmark, "autotune convolutions for fixed shapes");
  s.add_float("train.ema_decay", &c.train.ema_decay,
              "exponential moving average of the weights per optimizer step (e.g. 0.9998), evaluated alongside and "
              "saved as model_ema.safetensors; 0 = off",
              half_open(0, 1));
  s.add_bool("train.eval_hflip", &c.train.eval_hflip,
             "evaluation also scores each image with its mirror: top1_hflip, the top-1 of the two softmaxes' mean "
             "(test-time augmentation), beside the plain top-1");
  s.add_int("train.max_nonfinite_steps", &c.train.max_nonfinite_steps,
            "bf16/fp32: stop after this many consecutive steps with non-finite gradients, 0 = never", at_least(0));
  s.add_float("train.mixup_alpha", &c.train.mixup_alpha, "MixUp: lambda ~ Beta(alpha, alpha) per batch, 0 = off",
              at_least(0));
  s.add_float("train.cutmix_alpha", &c.train.cutmix_alpha, "CutMix: lambda ~ Beta(alpha, alpha) per batch, 0 = off",
              at_least(0));
  s.add_float("train.mix_prob", &c.train.mix_prob, "probability that a batch is mixed (MixUp/CutMix on)",
              closed(0, 1));
  s.add_float("train.mix_switch_prob", &c.train.mix_switch_prob,
              "MixUp and CutMix both on: probability that a batch gets CutMix", closed(0, 1));
  s.add_bool("train.cuda_graph", &c.train.cuda_graph,
             "replay the whole train step (forward, backward, optimizer) as one CUDA graph; one GPU, "
             "accum_steps 1");
  s.add_int("train.steps_ahead", &c.train.steps_ahead,
            "on a GPU: the optimizer steps the host may queue before the device has run them (it then waits for "
            "the oldest); 0 = no bound", at_least(0));

  s.section_docs["checkpoint"] = "checkpoints in <run folder>/checkpoints and resuming";
  s.add_int("checkpoint.every_steps", &c.checkpoint.every_steps, "write every N optimizer steps, 0 = off", at_least(0));
  s.add_bool("checkpoint.every_epoch", &c.checkpoint.every_epoch, "write one at the end of each epoch");
  s.add_int("checkpoint.keep_last", &c.checkpoint.keep_last, "checkpoints kept, older ones deleted", at_least(1));
  s.add_int("checkpoint.keep_best", &c.checkpoint.keep_best,
            "also keep the best K checkpoints by eval metric in checkpoints/best/, 0 = off", at_least(0));
  s.add_string("checkpoint.best_metric", &c.checkpoint.best_metric, "metric ranking keep_best",
               {"top1", "top5", "loss"});
  s.add_string("checkpoint.resume", &c.checkpoint.resume,
               "empty = start fresh; auto = newest valid checkpoint of the run; or a checkpoint path");
  s.add_bool("checkpoint.stop_on_error", &c.checkpoint.stop_on_error,
             "a checkpoint that fails to write stops the run (false: warn and go on)");

  s.section_docs["dist"] = "data parallelism over several processes (ignored in a single process)";
  s.add_int("dist.bucket_mb", &c.dist.bucket_mb, "gradient all-reduce bucket size, MiB", closed(1, 4096));
  s.add_float("dist.first_bucket_mb", &c.dist.first_bucket_mb, "size of the first (earliest) bucket, MiB",
              closed(0.01, 4096));
  s.add_bool("dist.overlap", &c.dist.overlap, "launch all-reduces from autograd hooks while backward runs");
  s.add_string("dist.grad_compression", &c.dist.grad_compression, "gradients in flight", {"none", "bf16"});
  s.add_bool("dist.sync_bn", &c.dist.sync_bn, "batch norm statistics computed over all ranks");

  s.section_docs["bench"] = "`trainer bench`: timed training steps";
  s.add_int("bench.warmup_steps", &c.bench.warmup_steps, "untimed steps first", at_least(0));
  s.add_int("bench.steps", &c.bench.steps, "timed steps", at_least(1));
  s.add_string("bench.data", &c.bench.data,
               "synthetic = one batch resident on the device (compute only); pipeline = batches from data.* "
               "(end to end; `bench-data` times the pipeline alone)",
               {"synthetic", "pipeline"});
  return s;
}

// ---- value parsing ----

const char* kind_name(const Field& f) {
  switch (f.kind) {
    case Kind::Int: return "an integer";
    case Kind::Float: return "a number";
    case Kind::Bool: return "true or false";
    case Kind::String: return "a string";
    case Kind::FloatList: return "a list of numbers";
  }
  return "?";
}

std::string describe_allowed(const Field& f) {
  std::string s = kind_name(f);
  if (f.kind == Kind::String && !f.choices.empty()) return "one of: " + join(f.choices, ", ");
  if (f.kind == Kind::FloatList && f.list_len) s += str_cat(" of length ", f.list_len);
  const bool has_min = std::isfinite(f.min), has_max = std::isfinite(f.max);
  if (has_min || has_max) {
    s += f.kind == Kind::FloatList ? ", each " : " ";
    if (has_min && has_max)
      s += str_cat("in ", f.min_open ? "(" : "[", f.min, ", ", f.max, f.max_open ? ")" : "]");
    else if (has_min)
      s += str_cat(f.min_open ? "> " : ">= ", f.min);
    else
      s += str_cat(f.max_open ? "< " : "<= ", f.max);
  }
  return s;
}

bool in_range(const Field& f, double v) {
  if (std::isnan(v)) return false;
  if (f.min_open ? !(v > f.min) : !(v >= f.min)) return false;
  if (f.max_open ? !(v < f.max) : !(v <= f.max)) return false;
  return true;
}

bool parse_int(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  size_t pos = 0;
  try {
    long long v = std::stoll(s, &pos, 10);
    if (pos != s.size()) return false;
    *out = v;
    return true;
  } catch (...) {
    return false;
  }
}

bool parse_double(const std::string& s, double* out) {
  if (s.empty()) return false;
  size_t pos = 0;
  try {
    double v = std::stod(s, &pos);
    if (pos != s.size()) return false;
    *out = v;
    return true;
  } catch (...) {
    return false;
  }
}

bool parse_bool(const std::string& s, bool* out) {
  const std::string l = to_lower(s);
  if (l == "true" || l == "yes" || l == "on") { *out = true; return true; }
  if (l == "false" || l == "no" || l == "off") { *out = false; return true; }
  return false;
}

// Where a value came from, for error messages: "configs/x.yaml:12" or "--set".
struct Origin {
  std::string where;
  std::string render(const std::string& key) const { return str_cat(where, ": key '", key, "'"); }
};

[[noreturn]] void fail_value(const Origin& o, const Field& f, const std::string& got) {
  throw ConfigError(str_cat(o.render(f.path), ": expected ", describe_allowed(f), ", got '", got, "'"));
}

// Sets a scalar field from its text. Lists take a vector of texts.
void set_scalar(const Field& f, const std::string& text, const Origin& o) {
  switch (f.kind) {
    case Kind::Int: {
      int64_t v;
      if (!parse_int(text, &v) || !in_range(f, static_cast<double>(v))) fail_value(o, f, text);
      *static_cast<int64_t*>(f.ptr) = v;
      return;
    }
    case Kind::Float: {
      double v;
      if (!parse_double(text, &v) || !in_range(f, v)) fail_value(o, f, text);
      *static_cast<double*>(f.ptr) = v;
      return;
    }
    case Kind::Bool: {
      bool v;
      if (!parse_bool(text, &v)) fail_value(o, f, text);
      *static_cast<bool*>(f.ptr) = v;
      return;
    }
    case Kind::String: {
      if (!f.choices.empty()) {
        bool ok = false;
        for (const auto& c : f.choices) ok = ok || c == text;
        if (!ok) fail_value(o, f, text);
      }
      *static_cast<std::string*>(f.ptr) = text;
      return;
    }
    case Kind::FloatList:
      break;
  }
  fail_value(o, f, text);
}

void set_list(const Field& f, const std::vector<std::string>& items, const Origin& o) {
  std::vector<double> out;
  for (const auto& it : items) {
    double v;
    if (!parse_double(it, &v) || !in_range(f, v)) fail_value(o, f, "[" + join(items, ", ") + "]");
    out.push_back(v);
  }
  if (f.list_len && out.size() != f.list_len) fail_value(o, f, "[" + join(items, ", ") + "]");
  *static_cast<std::vector<double>*>(f.ptr) = out;
}

const Field* find_field(const Schema& s, const std::string& path) {
  for (const auto& f : s.fields)
    if (f.path == path) return &f;
  return nullptr;
}

// Keys directly below `prefix` ("" = top level): sections and fields.
std::vector<std::string> children_of(const Schema& s, const std::string& prefix) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const auto& f : s.fields) {
    if (!prefix.empty() && !starts_with(f.path, prefix + ".")) continue;
    std::string rest = prefix.empty() ? f.path : f.path.substr(prefix.size() + 1);
    std::string head = rest.substr(0, rest.find('.'));
    if (seen.insert(head).second) out.push_back(head);
  }
  return out;
}

bool is_section(const Schema& s, const std::string& path) {
  for (const auto& f : s.fields)
    if (starts_with(f.path, path + ".")) return true;
  return false;
}

// ---- YAML ----

std::string where(const std::string& file, const YAML::Node& n) {
  return str_cat(file, ":", n.Mark().line + 1);
}

void load_node(Schema& s, const YAML::Node& node, const std::string& prefix, const std::string& file) {
  if (!node.IsMap()) {
    throw ConfigError(str_cat(where(file, node), ": ", prefix.empty() ? "the top level" : "key '" + prefix + "'",
                              " must be a mapping of keys (allowed: ", join(children_of(s, prefix), ", "), ")"));
  }
  std::map<std::string, std::string> seen;  // key -> where it was first given: yaml-cpp keeps duplicates silently
  for (auto it = node.begin(); it != node.end(); ++it) {
    // copies, not references: yaml-cpp's iterator-> hands out a temporary proxy, so a reference to it->second
    // dangles after this statement (AddressSanitizer: stack-use-after-scope, found by scripts/fuzz.sh)
    const YAML::Node key_node = it->first;
    const YAML::Node value = it->second;
    if (!key_node.IsScalar())
      throw ConfigError(str_cat(where(file, key_node), ": ", prefix.empty() ? "a top-level" : "a '" + prefix + "'",
                                " key is not a plain name (a mapping or list used as a key?)"));
    const std::string key = key_node.Scalar();
    const std::string path = prefix.empty() ? key : prefix + "." + key;
    const auto first = seen.emplace(key, where(file, key_node));
    if (!first.second)
      throw ConfigError(str_cat(where(file, key_node), ": key '", path, "' is given twice (first at ",
                                first.first->second, "); give each key once"));
    if (const Field* f = find_field(s, path)) {
      Origin o{where(file, key_node)};
      if (f->kind == Kind::FloatList) {
        std::vector<std::string> items;
        if (value.IsSequence()) {
          for (const auto& v : value) {
            if (!v.IsScalar()) fail_value(o, *f, "a nested value");
            items.push_back(v.Scalar());
          }
        } else if (value.IsNull()) {
          // an empty value means an empty list
        } else {
          fail_value(o, *f, value.IsScalar() ? value.Scalar() : std::string("a mapping"));
        }
        set_list(*f, items, o);
      } else if (value.IsScalar()) {
        set_scalar(*f, value.Scalar(), o);
      } else if (value.IsNull() && f->kind == Kind::String) {
        set_scalar(*f, "", o);
      } else {
        fail_value(o, *f, value.IsSequence() ? "a list" : value.IsMap() ? "a mapping" : "nothing");
      }
    } else if (is_section(s, path)) {
      load_node(s, value, path, file);
    } else {
      throw ConfigError(str_cat(where(file, key_node), ": unknown key '", path, "' (allowed",
                                prefix.empty() ? "" : " in '" + prefix + "'", ": ",
                                join(children_of(s, prefix), ", "), ")"));
    }
  }
}

void emit_value(std::ostringstream& os, const Field& f) {
  switch (f.kind) {
    case Kind::Int: os << *static_cast<int64_t*>(f.ptr); break;
    case Kind::Float: {
      double v = *static_cast<double*>(f.ptr);
      os << strprintf("%.17g", v);
      if (v == std::floor(v) && std::fabs(v) < 1e15) os << ".0";
      break;
    }
    case Kind::Bool: os << (*static_cast<bool*>(f.ptr) ? "true" : "false"); break;
    case Kind::String: {
      YAML::Emitter e;
      e << YAML::DoubleQuoted << *static_cast<std::string*>(f.ptr);
      os << e.c_str();
      break;
    }
    case Kind::FloatList: {
      const auto& v = *static_cast<std::vector<double>*>(f.ptr);
      os << "[";
      for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << strprintf("%.17g", v[i]);
      os << "]";
      break;
    }
  }
}

}  // namespace

void apply_override(Config& cfg, const std::string& assignment) {
  Schema s = fields_of(cfg);
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ConfigError(str_cat("--set ", assignment, ": expected key.path=value"));
  const std::string key = trim(assignment.substr(0, eq));
  const std::string text = trim(assignment.substr(eq + 1));
  const Field* f = find_field(s, key);
  if (!f) {
    std::string parent = key.find('.') == std::string::npos ? "" : key.substr(0, key.rfind('.'));
    if (!parent.empty() && !is_section(s, parent)) parent.clear();
    std::vector<std::string> allowed;
    for (const auto& c : children_of(s, parent)) allowed.push_back(parent.empty() ? c : parent + "." + c);
    throw ConfigError(str_cat("--set: unknown key '", key, "' (allowed: ", join(allowed, ", "), ")"));
  }
  Origin o{"--set"};
  if (f->kind == Kind::FloatList) {
    // Accept "[a, b]", "a,b" or "" (empty list).
    std::string body = text;
    if (!body.empty() && body.front() == '[') {
      if (body.back() != ']') fail_value(o, *f, text);
      body = body.substr(1, body.size() - 2);
    }
    std::vector<std::string> items;
    if (!trim(body).empty())
      for (const auto& p : split(body, ',')) items.push_back(trim(p));
    set_list(*f, items, o);
  } else {
    std::string v = text;
    if (f->kind == Kind::String && v.size() >= 2 && (v.front() == '"' || v.front() == '\'') && v.back() == v.front())
      v = v.substr(1, v.size() - 2);
    set_scalar(*f, v, o);
  }
}

void validate_config(const Config& c, const std::string& origin) {
  auto fail = [&](const std::string& key, const std::string& msg) {
    throw ConfigError(str_cat(origin, ": key '", key, "': ", msg));
  };
  if (!c.data.mean.empty() && c.data.mean.size() != static_cast<size_t>(c.model.in_chans))
    fail("data.mean", str_cat("expected ", c.model.in_chans, " values (model.in_chans), got ", c.data.mean.size()));
  if (!c.data.std.empty() && c.data.std.size() != static_cast<size_t>(c.model.in_chans))
    fail("data.std", str_cat("expected ", c.model.in_chans, " values (model.in_chans), got ", c.data.std.size()));
  if (c.data.rrc_scale[0] > c.data.rrc_scale[1])
    fail("data.rrc_scale", "expected [low, high] with low <= high");
  if (c.data.rrc_ratio[0] > c.data.rrc_ratio[1])
    fail("data.rrc_ratio", "expected [low, high] with low <= high");
  if (!c.data.jitter.empty() && c.data.jitter.size() != 4)
    fail("data.jitter", str_cat("expected 4 values [brightness, contrast, saturation, hue], got ", c.data.jitter.size()));
  if (!c.data.jitter.empty() && c.data.jitter[3] > 0.5) fail("data.jitter", "hue must be in [0, 0.5]");
  if (c.data.erase_scale[0] > c.data.erase_scale[1]) fail("data.erase_scale", "expected [low, high] with low <= high");
  if (c.data.erase_ratio[0] > c.data.erase_ratio[1]) fail("data.erase_ratio", "expected [low, high] with low <= high");
  for (size_t i = 1; i < c.optim.milestones.size(); ++i)
    if (c.optim.milestones[i] < c.optim.milestones[i - 1]) fail("optim.milestones", "expected increasing epochs");
  if (c.run.name.empty() || c.run.name.find('/') != std::string::npos)
    fail("run.name", "expected a non-empty folder name without '/'");
  if (c.data.source != "synthetic" && c.data.root.empty()) fail("data.root", "expected a dataset folder");
  if (c.data.dtype == "bfloat16" && c.train.precision != "bf16")
    fail("data.dtype", str_cat("bfloat16 batches need train.precision bf16 (got ", c.train.precision,
                               "): the model takes the batch in the dtype autocast would cast it to"));
  if (c.train.cuda_graph && c.train.accum_steps != 1)
    fail("train.cuda_graph", "a captured step is a whole optimizer step: expected train.accum_steps 1");
  const bool image_files = c.data.source == "image_folder" || c.data.source == "list" || c.data.source == "shards";
  if (image_files && c.model.in_chans != 3)
    fail("model.in_chans", str_cat("image files decode to RGB: expected 3 with data.source ", c.data.source, ", got ",
                                   c.model.in_chans));
  if (image_files && c.data.train_crop != "rrc" && c.data.train_crop != "none")
    fail("data.train_crop", str_cat("image sources support rrc (RandomResizedCrop) and none, not '", c.data.train_crop,
                                    "'"));
  if (!c.data.jitter.empty() && c.model.in_chans != 3)
    fail("data.jitter", str_cat("colour jitter needs RGB images: expected model.in_chans 3, got ", c.model.in_chans));
  if (c.data.train_size_min > 0) {
    const int64_t hi = c.data.train_size_max > 0 ? c.data.train_size_max : c.data.image_size;
    if (c.data.train_size_min > hi)
      fail("data.train_size_min", str_cat("expected at most train_size_max (or data.image_size) ", hi, ", got ",
                                          c.data.train_size_min));
    if (c.data.train_size_ramp[0] > c.data.train_size_ramp[1])
      fail("data.train_size_ramp", "expected [first, last] epochs with first <= last");
    if (c.train.cuda_graph)
      fail("data.train_size_min", "progressive resizing changes the batch shape, which a captured step "
                                  "(train.cuda_graph) cannot: expected train.cuda_graph false");
    if (c.model.name.rfind("vit", 0) == 0)
      fail("data.train_size_min", str_cat(c.model.name, "'s position embeddings fit one grid: progressive resizing "
                                          "is for convolutional models"));
  }
}

int64_t train_image_size(const DataConfig& d, int64_t epoch) {
  if (d.train_size_min <= 0) return d.image_size;
  const double lo = static_cast<double>(d.train_size_min);
  const double hi = static_cast<double>(d.train_size_max > 0 ? d.train_size_max : d.image_size);
  const double e0 = d.train_size_ramp[0], e1 = d.train_size_ramp[1], e = static_cast<double>(epoch);
  // FFCV's get_resolution: the ends as given, inside the ramp numpy's interp rounded to a multiple of 32
  if (e <= e0) return d.train_size_min;
  if (e >= e1) return static_cast<int64_t>(hi);
  const double size = lo + (hi - lo) * (e - e0) / (e1 - e0);
  return std::max<int64_t>(32, static_cast<int64_t>(std::nearbyint(size / 32.0)) * 32);
}

void validate_config_for_run(const Config& c, bool cuda, int world_size) {
  auto fail = [&](const std::string& key, const std::string& msg) {
    throw ConfigError(str_cat("key '", key, "': ", msg));
  };
  if (c.data.dtype == "bfloat16" && !cuda)
    fail("data.dtype", "bfloat16 needs a CUDA device with train.precision bf16 (on the CPU the model trains in "
                       "float32)");
  if (c.train.cuda_graph && !cuda) fail("train.cuda_graph", "needs a CUDA device (run.device)");
  if (c.train.cuda_graph && world_size > 1)
    fail("train.cuda_graph", str_cat("captures one GPU's step; not with ", world_size,
                                     " ranks (data parallel all-reduces run eagerly)"));
  if ((c.data.decode == "gpu" || c.data.decode == "hybrid") && !cuda)
    fail("data.decode", str_cat(c.data.decode, " needs run.device cuda"));
  if (c.data.decode == "cpu")  // the GPU decode path's keys, set away from their defaults, have nothing to set
    for (const KeySetting& k : gpu_decode_settings(c.data))
      fail(k.key, "sets the GPU decode path; data.decode is cpu (use gpu, hybrid or auto)");
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  if (c.data.training_cores > 0 && cores > 0 && c.data.training_cores >= cores)
    fail("data.training_cores", str_cat(c.data.training_cores, " leaves no CPU for the data threads: this machine has ",
                                        cores));
  if (c.data.gpu_decode_mosaic == 1)
    fail("data.gpu_decode_mosaic", "a mosaic of one window is the file on its own: 0 (off) or at least 2");
  if (c.data.gpu_decode_priority != "normal" && c.data.gpu_decode_sms > 0)
    fail("data.gpu_decode_priority", "a green context's stream (data.gpu_decode_sms) keeps the normal priority");
  if (c.data.hybrid_share < 0 && c.data.hybrid_share != -1)
    fail("data.hybrid_share", str_cat("expected -1 (adapted) or a share in [0, 1], got ", c.data.hybrid_share));
}

std::vector<KeySetting> gpu_decode_settings(const DataConfig& d) {
  std::vector<KeySetting> out;
  if (d.gpu_decode_sms > 0) out.push_back({"data.gpu_decode_sms", d.gpu_decode_sms, ""});
  if (d.gpu_decode_priority != "normal") out.push_back({"data.gpu_decode_priority", 0, d.gpu_decode_priority});
  if (d.gpu_decode_calls > 1) out.push_back({"data.gpu_decode_calls", d.gpu_decode_calls, ""});
  if (d.gpu_decode_mosaic > 0) out.push_back({"data.gpu_decode_mosaic", d.gpu_decode_mosaic, ""});
  return out;
}

Config config_from_overrides(const std::vector<std::string>& overrides) {
  Config c;
  for (const auto& o : overrides) apply_override(c, o);
  validate_config(c, overrides.empty() ? "defaults" : "--set");
  return c;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  Config c;
  if (fs::is_dir(path)) throw ConfigError(str_cat(path, ": is a folder; --config expects a YAML file"));
  {
    std::ifstream probe(path);
    if (!probe) throw ConfigError(str_cat(path, ": cannot open the config file (missing or unreadable)"));
  }
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::ParserException& e) {
    throw ConfigError(str_cat(path, ":", e.mark.line + 1, ": invalid YAML: ", e.msg));
  } catch (const YAML::Exception& e) {
    throw ConfigError(str_cat(path, ": cannot read: ", e.what()));
  }
  Schema s = fields_of(c);
  try {
    if (!root.IsDefined() || root.IsNull())
      throw ConfigError(str_cat(path, ": holds no settings (empty, or only comments); expected a mapping of ",
                                "sections (", join(children_of(s, ""), ", "), "). To train the built-in default, ",
                                "leave out --config"));
    load_node(s, root, "", path);
  } catch (const YAML::Exception& e) {  // anything yaml-cpp refuses that the checks above did not name
    throw ConfigError(str_cat(path, ":", e.mark.line + 1, ": cannot read this YAML: ", e.msg));
  }
  for (const auto& o : overrides) apply_override(c, o);
  validate_config(c, path);
  return c;
}

std::string config_to_yaml(const Config& cfg, bool with_docs) {
  Config copy = cfg;
  Schema s = fields_of(copy);
  std::ostringstream os;
  std::string section;
  for (const auto& f : s.fields) {
    const std::string sec = f.path.substr(0, f.path.find('.'));
    if (sec != section) {
      if (!section.empty()) os << "\n";
      section = sec;
      os << sec << ":";
      if (with_docs) os << "  # " << s.section_docs[sec];
      os << "\n";
    }
    os << "  " << f.path.substr(sec.size() + 1) << ": ";
    emit_value(os, f);
    if (with_docs) os << "  # " << f.doc << " (" << describe_allowed(f) << ")";
    os << "\n";
  }
  return os.str();
}

}  // namespace trainer
