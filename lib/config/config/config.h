// The resolved configuration of a run: one plain struct per module, every field with a default. The defaults
// are the built-in job: Fashion-MNIST (Debian's dataset-fashion-mnist) with a small-stem ResNet-18, 30 epochs.
// YAML is parsed only here (config.cpp); modules receive their struct. The user-facing docs, types and
// allowed ranges of every key live in one schema table in config.cpp, which drives loading, `--set`,
// `--print-config` and the error messages, so the three can never disagree.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace trainer {

struct RunConfig {
  std::string name = "default";       // run folder name under out_dir
  std::string out_dir = "runs";       // parent of run folders
  int64_t seed = 0;                   // seeds weights, data order and augmentation
  std::string device = "auto";        // auto | cpu | cuda
  bool deterministic = false;         // deterministic kernels, cudnn.benchmark off
  std::string log_level = "info";     // trace | debug | info | warn | error
  int64_t log_interval = 50;          // optimizer steps between log lines
  int64_t dist_timeout_s = 600;       // a collective unfinished after this long ends the job
  std::string progress = "auto";      // progress bar: auto (on a terminal) | always | never
  bool tensorboard = true;            // TensorBoard event file in the run folder
  std::string profile;                // "START:END": Chrome trace of those optimizer steps ("" = off)
};

struct ModelConfig {
  std::string name = "resnet18";      // registry name, e.g. resnet50, vit_base_patch16_224
  int64_t num_classes = 10;           // classifier outputs
  int64_t in_chans = 1;               // input channels (1 = grayscale)
  bool small_stem = true;             // ResNet: 3x3 stride-1 stem, no max-pool (28-64 px inputs)
  bool zero_init_last = true;         // ResNet: zero the last BN gamma of each block
  std::string fused_norm = "auto";
  double drop_rate = 0.0;             // dropout before the classifier
  double drop_path_rate = 0.0;        // stochastic depth, linearly increasing over blocks
  std::string pretrained;             // safetensors file to load (timm/torchvision names), empty = none
  bool channels_last = true;          // NHWC memory format for model and input (CUDA)
};

struct DataConfig {
  std::string source = "idx";         // synthetic | idx | cifar10 | cifar100 | image_folder | list | shards
  std::string root = "/usr/share/datasets/fashion-mnist";  // dataset folder
  std::string train_split = "train";  // idx: file prefix; cifar: train|test; image_folder: sub-folder; list: list file
  std::string eval_split = "t10k";    // the same for evaluation ("" = no eval)
  int64_t image_size = 28;            // side of the model input, pixels
  int64_t batch_size = 512;           // per-process batch
  int64_t eval_batch_size = 0;        // 0 = batch_size
  int64_t workers = -1;               // CPU data threads, -1 = cores - 2 (at least 1)
  int64_t prefetch = 2;               // batches prepared ahead of the train step
  bool drop_last = true;              // drop the last incomplete train batch
  std::vector<double> mean;           // per-channel normalisation (0..1 scale), empty = model default
  std::vector<double> std;            // per-channel std, empty = model default
  std::string train_crop = "pad_crop";  // none | pad_crop | rrc (RandomResizedCrop)
  int64_t crop_pad = 4;               // pad_crop: zero padding on each side before a random crop
  double hflip = 0.5;                 // probability of a horizontal flip
  std::vector<double> rrc_scale = {0.08, 1.0};            // rrc: area fraction range
  std::vector<double> rrc_ratio = {3.0 / 4.0, 4.0 / 3.0};  // rrc: aspect-ratio range
  double crop_pct = 0.0;              // eval: centre crop fraction, 0 = the model's default
  bool dct_scale = true;              // JPEG, CPU decode: decode at 1/2, 1/4, 1/8 when the crop is shrunk anyway
  bool crop_decode = true;            // JPEG: decode only the crop window (CPU and GPU decode)
  int64_t train_limit = 0;            // use only the first N training samples, 0 = all
  int64_t eval_limit = 0;             // use only the first N eval samples, 0 = all
  int64_t synthetic_samples = 10000;  // synthetic: images per epoch
  bool on_gpu = true;                 // in-memory sources: keep the dataset and augment on the GPU
  std::string dtype = "auto";         // of the normalised batch: auto (bfloat16 when training in bf16 on a GPU) |
                                      // float32 | bfloat16
  std::string decode = "cpu";         // image files: cpu (libjpeg-turbo threads) | gpu (nvJPEG) | auto (CPU first, GPU if training waits)
  double cache_gb = 0.0;              // image files: keep samples in RAM after the first read, up to N GiB
  std::string cache = "encoded";      // encoded (the files' bytes) | decoded (full RGB images: no decode later)
  std::vector<double> jitter;         // colour jitter {brightness, contrast, saturation, hue}, empty = off
  double erase_prob = 0.0;            // random erasing probability, 0 = off
  std::vector<double> erase_scale = {0.02, 0.33};  // erased area fraction
  std::vector<double> erase_ratio = {0.3, 3.3};    // erased box aspect ratio
  std::string erase_mode = "const";   // const (0 = the mean colour) | pixel (normal noise)
  std::string auto_augment = "none";  // none | rand (RandAugment) | trivial (TrivialAugmentWide), torchvision's
  int64_t auto_augment_ops = 2;       // rand: ops per sample
  int64_t auto_augment_magnitude = 9; // rand: magnitude bin 0..30
};

struct OptimConfig {
  std::string name = "sgd";           // sgd | adamw | lamb
  double lr = 0.2;                    // peak learning rate
  double momentum = 0.9;              // sgd momentum
  bool nesterov = true;               // sgd: Nesterov momentum
  double weight_decay = 5e-4;         // decoupled for adamw, L2 for sgd
  std::vector<double> betas = {0.9, 0.999};  // adamw betas
  double eps = 1e-8;                  // adamw epsilon
  bool wd_exclude_norm_bias = true;   // no weight decay on norms, biases and the model's no_weight_decay()
  double clip_grad_norm = 0.0;        // max global grad norm, 0 = off
  std::string schedule = "cosine";    // constant | cosine | step | multistep | poly
  double warmup_epochs = 2.0;         // linear warmup length, epochs (fractions allowed)
  double warmup_factor = 0.04;        // warmup starts at lr * warmup_factor
  double min_lr = 0.0;                // floor of cosine / poly
  double step_epochs = 30.0;          // step: decay every this many epochs
  std::vector<double> milestones = {30.0, 60.0, 90.0};  // multistep: epochs
  double gamma = 0.1;                 // step / multistep decay factor
  double poly_power = 1.0;            // poly exponent
  int64_t lr_base_batch = 0;          // linear scaling: lr *= global batch / this (e.g. 256), 0 = lr as given
};

struct TrainConfig {
  int64_t epochs = 30;                // passes over the training set
  int64_t max_steps = 0;              // stop after this many optimizer steps, 0 = no limit
  std::string precision = "bf16";     // bf16 | fp16 | fp32 (autocast on CUDA; CPU runs fp32 unless bf16 forced)
  int64_t accum_steps = 1;            // micro-batches per optimizer step
  double label_smoothing = 0.1;       // cross-entropy label smoothing
  int64_t eval_interval = 5;          // evaluate every N epochs (and at the end), 0 = only at the end
  bool cudnn_benchmark = true;        // autotune convolutions (off in deterministic mode)
  double ema_decay = 0.0;             // EMA of the weights (evaluated alongside, saved as model_ema), 0 = off
  int64_t max_nonfinite_steps = 20;   // bf16/fp32: stop after this many consecutive non-finite steps, 0 = never
  double mixup_alpha = 0.0;           // MixUp Beta(alpha, alpha), 0 = off
  double cutmix_alpha = 0.0;          // CutMix Beta(alpha, alpha), 0 = off
  double mix_prob = 1.0;              // probability that a batch is mixed at all
  double mix_switch_prob = 0.5;       // both on: probability of CutMix rather than MixUp for a batch
  bool cuda_graph = false;            // capture the whole train step in a CUDA graph (one GPU, static shapes)
};

struct CheckpointConfig {
  int64_t every_steps = 0;            // write a checkpoint every N optimizer steps, 0 = off
  bool every_epoch = true;            // write one at the end of each epoch
  int64_t keep_last = 3;              // checkpoints kept (older ones deleted)
  int64_t keep_best = 0;              // also keep the best K by eval metric in checkpoints/best/ (0 = off)
  std::string best_metric = "top1";   // top1 | top5 (higher is better) | loss (lower is better)
  std::string resume;                 // "" = start fresh, auto = newest valid in the run folder, or a path
  bool stop_on_error = true;          // a checkpoint that fails to write stops the run (else warn, go on)
};

struct DistConfig {
  int64_t bucket_mb = 25;             // gradient all-reduce bucket size, MiB
  double first_bucket_mb = 1.0;       // the first bucket (last layers), small so communication starts early
  bool overlap = true;                // launch all-reduces from autograd hooks while backward runs
  std::string grad_compression = "none";  // none | bf16: gradients travel as bf16
  bool sync_bn = false;               // batch norm statistics over all ranks (SyncBatchNorm)
};

struct BenchConfig {
  int64_t warmup_steps = 20;          // steps run before timing starts
  int64_t steps = 100;                // timed steps
  std::string data = "synthetic";     // synthetic: one batch resident on the GPU | pipeline: the configured loader
};

struct Config {
  RunConfig run;
  ModelConfig model;
  DataConfig data;
  OptimConfig optim;
  TrainConfig train;
  CheckpointConfig checkpoint;
  DistConfig dist;
  BenchConfig bench;
};

// Loads `path` (YAML) over the defaults, then applies `overrides` ("a.b=value", as from --set). Every
// problem throws ConfigError naming the file, line, key path and what is allowed. Writes nothing.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});
// The defaults plus overrides (no file).
Config config_from_overrides(const std::vector<std::string>& overrides);
// Parses one "a.b=value" and applies it to cfg.
void apply_override(Config& cfg, const std::string& assignment);
// Cross-field checks (e.g. mean and std the same length); throws ConfigError.
void validate_config(const Config& cfg, const std::string& origin);
// The resolved config as YAML that load_config reads back; with_docs adds a comment per key.
std::string config_to_yaml(const Config& cfg, bool with_docs = false);

}  // namespace trainer
