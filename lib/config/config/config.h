// The resolved configuration of a run: one plain struct per module, every field with a default. The defaults
// are the built-in job: Fashion-MNIST (Debian's dataset-fashion-mnist) with a small-stem ResNet-18, 30 epochs.
// YAML is parsed only here (config.cpp); modules receive their struct. What each key means, its type and its
// allowed values live in one place, the schema table in config.cpp, which drives loading, `--set`, the error
// messages and `trainer --print-config --docs` (one comment per key): the fields below carry no second copy.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace trainer {

struct RunConfig {
  std::string name = "default";
  std::string out_dir = "runs";
  int64_t seed = 0;
  std::string device = "auto";
  std::string cuda_sync = "auto";
  bool deterministic = false;
  std::string log_level = "info";
  int64_t log_interval = 50;
  int64_t dist_timeout_s = 600;
  std::string progress = "auto";
  bool tensorboard = true;
  std::string profile;
};

struct ModelConfig {
  std::string name = "resnet18";
  int64_t num_classes = 10;
  int64_t in_chans = 1;
  bool small_stem = true;
  bool zero_init_last = true;
  std::string fused_norm = "auto";
  bool stem_fp16 = true;
  bool stem_s2d = true;
  double drop_rate = 0.0;
  double drop_path_rate = 0.0;
  std::string pretrained;
  bool channels_last = true;
};

struct DataConfig {
  std::string source = "idx";
  std::string root = "/usr/share/datasets/fashion-mnist";
  std::string train_split = "train";
  std::string eval_split = "t10k";
  int64_t image_size = 28;
  int64_t train_size_min = 0;  // progressive resizing (FFCV's): 0 = off
  int64_t train_size_max = 0;
  std::vector<double> train_size_ramp = {0, 0};
  int64_t batch_size = 512;
  int64_t eval_batch_size = 0;
  int64_t workers = -1;
  int64_t thread_nice = 0;
  int64_t training_cores = 0;
  int64_t prefetch = 2;
  bool drop_last = true;
  std::vector<double> mean;
  std::vector<double> std;
  std::string train_crop = "pad_crop";
  int64_t crop_pad = 4;
  double hflip = 0.5;
  std::vector<double> rrc_scale = {0.08, 1.0};
  std::vector<double> rrc_ratio = {3.0 / 4.0, 4.0 / 3.0};
  double crop_pct = 0.0;
  std::string interpolation = "auto";
  bool dct_scale = true;
  bool crop_decode = true;
  int64_t train_limit = 0;
  int64_t eval_limit = 0;
  int64_t synthetic_samples = 10000;
  bool on_gpu = true;
  std::string dtype = "auto";
  std::string decode = "auto";
  double hybrid_share = -1;
  int64_t gpu_decode_sms = 0;
  std::string gpu_decode_priority = "normal";
  int64_t gpu_decode_calls = 1;
  int64_t gpu_decode_mosaic = 0;
  double cache_gb = 0.0;
  std::string cache = "encoded";
  std::vector<double> jitter;
  double erase_prob = 0.0;
  std::vector<double> erase_scale = {0.02, 0.33};
  std::vector<double> erase_ratio = {0.3, 3.3};
  std::string erase_mode = "const";
  std::string auto_augment = "none";
  int64_t auto_augment_ops = 2;
  int64_t auto_augment_magnitude = 9;
};

struct OptimConfig {
  std::string name = "sgd";
  double lr = 0.2;
  double momentum = 0.9;
  bool nesterov = true;
  double weight_decay = 5e-4;
  std::vector<double> betas = {0.9, 0.999};
  double eps = 1e-8;
  bool wd_exclude_norm_bias = true;
  double clip_grad_norm = 0.0;
  std::string schedule = "cosine";
  double warmup_epochs = 2.0;
  double warmup_factor = 0.04;
  double min_lr = 0.0;
  double step_epochs = 30.0;
  std::vector<double> milestones = {30.0, 60.0, 90.0};
  double gamma = 0.1;
  double poly_power = 1.0;
  int64_t lr_base_batch = 0;
};

struct TrainConfig {
  int64_t epochs = 30;
  int64_t max_steps = 0;
  std::string precision = "bf16";
  int64_t accum_steps = 1;
  double label_smoothing = 0.1;
  int64_t eval_interval = 5;
  bool cudnn_benchmark = true;
  double ema_decay = 0.0;
  bool eval_hflip = false;
  int64_t max_nonfinite_steps = 20;
  double mixup_alpha = 0.0;
  double cutmix_alpha = 0.0;
  double mix_prob = 1.0;
  double mix_switch_prob = 0.5;
  bool cuda_graph = false;
  int64_t steps_ahead = 0;
};

struct CheckpointConfig {
  int64_t every_steps = 0;
  bool every_epoch = true;
  int64_t keep_last = 3;
  int64_t keep_best = 0;
  std::string best_metric = "top1";
  std::string resume;
  bool stop_on_error = true;
};

struct DistConfig {
  int64_t bucket_mb = 25;
  double first_bucket_mb = 1.0;
  bool overlap = true;
  std::string grad_compression = "none";
  bool sync_bn = false;
};

struct BenchConfig {
  int64_t warmup_steps = 20;
  int64_t steps = 100;
  std::string data = "synthetic";
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
// Cross-field checks (e.g. mean and std the same length); throws ConfigError. load_config runs them.
void validate_config(const Config& cfg, const std::string& origin);
// The checks that need what a run resolved beyond its config: whether its device is CUDA and how many ranks it
// has. Throws ConfigError naming the key. Trainer and bench-data run them.
void validate_config_for_run(const Config& cfg, bool cuda, int world_size);
// The GPU decode path's tuning keys (data.gpu_decode_*) set away from their defaults, with their values: what a
// cpu decode refuses and what a benchmark records.
struct KeySetting {
  const char* key;     // "data.gpu_decode_calls"
  int64_t number = 0;  // its value, where it is a number
  std::string text;    // its value, where it is a word (then `number` is unused)
};
std::vector<KeySetting> gpu_decode_settings(const DataConfig& d);
// The side the training batches have in `epoch` (from 0): data.image_size, or with progressive resizing
// (data.train_size_min > 0) FFCV's ramp: train_size_min up to the epoch train_size_ramp[0], train_size_max
// (0 = data.image_size) from train_size_ramp[1] on, linear in between rounded to a multiple of 32 (half to even,
// as numpy).
int64_t train_image_size(const DataConfig& d, int64_t epoch);
// The resolved config as YAML that load_config reads back; with_docs adds a comment per key.
std::string config_to_yaml(const Config& cfg, bool with_docs = false);

}  // namespace trainer
