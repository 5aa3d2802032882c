// The loaders a Config asks for: the in-memory sources (idx, cifar, synthetic) held on the device, or image files
// (image_folder, list, shards) through the CPU or GPU pipeline that data.decode names; with the options every
// loader takes alike (batch, seed, rank, normalisation, dtype, augmentations) set in one place.
#pragma once
#include <torch/types.h>

#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "data/image_folder.h"
#include "data/image_loader.h"
#include "data/loader.h"
#include "engine/run_context.h"
#include "models/classifier.h"

namespace trainer {

class AutoDecodeLoader;

struct Loaders {
  std::unique_ptr<Loader> train;
  std::unique_ptr<Loader> eval;  // null without data.eval_split
};
// Checks what the data must agree on with the model (channels, labels) and builds both loaders; errors name the
// key, file or sample. The training batches have the side train_size (0: data.image_size; progressive resizing
// gives train_image_size of the epoch), the evaluation ones data.image_size.
Loaders build_loaders(const Config& cfg, const DataDefaults& defaults, const RunContext& ctx, int64_t train_size = 0);

// The dtype of the normalised batches the loaders give (data.dtype): auto is bfloat16 when training in bf16 on a
// GPU, float32 otherwise; bfloat16 asked for on the CPU (where the model trains in float32) is an error.
torch::ScalarType batch_dtype(const Config& cfg, torch::Device device);
// The CPU image pipeline's options from a config (shared by training, eval and bench-data).
ImageLoaderOptions image_loader_options(const Config& cfg, const DataDefaults& defaults, const RunContext& ctx);
// The image-file loader data.decode asks for: cpu (ImageLoader), gpu (GpuImageLoader) or auto (an
// AutoDecodeLoader: CPU decode first, the GPU path tried while training if training waits for data, the faster end
// to end kept and logged; the CPU path where there is no GPU or no nvJPEG). `why` (optional) gets the sentence
// saying which was made. With auto, `follow` (evaluation) takes the decision of that (the training) loader instead of
// making its own.
std::unique_ptr<Loader> make_image_loader(std::vector<ImageSample> samples, const ImageLoaderOptions& o,
                                          const std::string& decode, torch::Device device, std::string* why = nullptr,
                                          const Loader* follow = nullptr);
// The samples of a split of a file-based source (image_folder, list, shards).
ImageList image_split(const DataConfig& d, const std::string& split);

}  // namespace trainer
