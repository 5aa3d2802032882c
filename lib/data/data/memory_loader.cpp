#include "data/memory_loader.h"

#include <torch/torch.h>

#include "core/check.h"
#include "core/random.h"
#include "data/device_upload.h"

namespace trainer {

CropFlip draw_crop_flip(uint64_t seed, int64_t epoch, int64_t index, int64_t pad, double hflip) {
  SampleRng rng(seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(index));
  CropFlip d;
  d.dy = rng.randint(0, 2 * pad);
  d.dx = rng.randint(0, 2 * pad);
  d.flip = rng.bernoulli(hflip);
  return d;
}

MemoryLoader::MemoryLoader(InMemoryDataset data, MemoryLoaderOptions opt, torch::Device device)
    : opt_(std::move(opt)), device_(device) {
  TRAINER_CHECK(data.images.dim() == 4 && data.images.scalar_type() == torch::kUInt8,
                "in-memory images must be (N,H,W,C) uint8");
  TRAINER_CHECK(data.images.size(0) > 0, "the dataset is empty");
  TRAINER_CHECK(opt_.crop == "none" || opt_.crop == "pad_crop", "in-memory datasets support the crops none and ",
                "pad_crop, not '", opt_.crop, "' (rrc needs an image-file source)");
  const int64_t C = data.images.size(3);
  TRAINER_CHECK(static_cast<int64_t>(opt_.mean.size()) == C && static_cast<int64_t>(opt_.std.size()) == C,
                "normalisation needs ", C, " mean/std values, got ", opt_.mean.size(), "/", opt_.std.size());
  images_ = data.images.to(device_);
  labels_ = data.labels.to(device_);
  num_classes_ = data.num_classes;
  auto f = torch::TensorOptions().dtype(torch::kFloat32);
  std::vector<float> m, is;
  for (int64_t c = 0; c < C; ++c) {
    m.push_back(static_cast<float>(opt_.mean[c] * 255.0));
    is.push_back(static_cast<float>(1.0 / (opt_.std[c] * 255.0)));
  }
  mean255_ = torch::tensor(m, f).view({1, C, 1, 1}).to(device_);
  inv_std255_ = torch::tensor(is, f).view({1, C, 1, 1}).to(device_);
  set_epoch(0);
}

void MemoryLoader::set_epoch(int64_t epoch, int64_t start_batch) {
  epoch_ = epoch;
  order_ = epoch_indices(
      loader_shard(images_.size(0), opt_.seed, epoch, opt_.rank, opt_.world_size, opt_.train, opt_.drop_last));
  cursor_ = std::min(order_.size(), static_cast<size_t>(start_batch * opt_.batch_size));
}

int64_t MemoryLoader::batches_per_epoch() const {
  const int64_t n = static_cast<int64_t>(order_.size());
  return (opt_.train && opt_.drop_last) ? n / opt_.batch_size : (n + opt_.batch_size - 1) / opt_.batch_size;
}

bool MemoryLoader::next(Batch& out) {
  const int64_t n = static_cast<int64_t>(order_.size());
  const int64_t remaining = n - static_cast<int64_t>(cursor_);
  if (remaining <= 0 || (opt_.train && opt_.drop_last && remaining < opt_.batch_size)) return false;
  const int64_t B = std::min<int64_t>(opt_.batch_size, remaining);
  out.indices.assign(order_.begin() + cursor_, order_.begin() + cursor_ + B);
  cursor_ += static_cast<size_t>(B);

  // ---- host: indices and each sample's draws, one small copy ----
  const int64_t H = images_.size(1), W = images_.size(2);
  const bool augment = opt_.train;
  const int64_t pad = augment && opt_.crop == "pad_crop" ? opt_.crop_pad : 0;
  auto host = torch::empty({augment ? 4 : 1, B}, torch::kInt64);
  auto* h = host.data_ptr<int64_t>();
  for (int64_t i = 0; i < B; ++i) {
    h[i] = out.indices[i];
    if (augment) {
      const CropFlip d = draw_crop_flip(opt_.seed, epoch_, out.indices[i], pad, opt_.hflip);
      h[B + i] = d.dy;
      h[2 * B + i] = d.dx;
      h[3 * B + i] = d.flip;
    }
  }
  auto dev = upload(host, device_);
  auto idx = dev[0];

  // ---- device: gather, crop + flip as one gather, convert, normalise ----
  torch::Tensor img = images_.index_select(0, idx);  // (B,H,W,C) uint8
  if (augment) {
    if (pad > 0) img = torch::constant_pad_nd(img, {0, 0, pad, pad, pad, pad});
    auto ar_h = torch::arange(H, dev.options()), ar_w = torch::arange(W, dev.options());
    auto rows = dev[1].unsqueeze(1) + ar_h.unsqueeze(0);                        // (B,H)
    auto cols_fwd = ar_w.unsqueeze(0).expand({B, W});
    auto cols = torch::where(dev[3].unsqueeze(1).to(torch::kBool), (W - 1) - cols_fwd, cols_fwd) +
                dev[2].unsqueeze(1);                                               // (B,W)
    auto b = torch::arange(B, dev.options()).view({B, 1, 1});
    img = img.index({b, rows.unsqueeze(2), cols.unsqueeze(1)});                   // (B,H,W,C)
  }
  // (B,H,W,C) viewed as (B,C,H,W) is channels_last already
  torch::Tensor x = img.permute({0, 3, 1, 2}).to(torch::kFloat32);
  const BatchAugmenter aug(opt_.augment, opt_.seed);
  const bool extra = augment && aug.enabled();
  const int64_t out_h = opt_.image_size > 0 ? opt_.image_size : H, out_w = opt_.image_size > 0 ? opt_.image_size : W;
  BatchAugmenter::Draws draws;
  if (extra) {
    draws = aug.draw(out.indices, epoch_, out_h, out_w, dev.device());
    aug.auto_augment_255_(x, out.indices, epoch_);
    if (x.size(1) == 3) aug.jitter_255_(x, draws);  // colour jitter needs RGB
  }
  x = x.sub_(mean255_).mul_(inv_std255_);
  if (opt_.image_size > 0 && (opt_.image_size != H || opt_.image_size != W)) {
    x = torch::nn::functional::interpolate(
        x, torch::nn::functional::InterpolateFuncOptions()
               .size(std::vector<int64_t>{opt_.image_size, opt_.image_size})
               .mode(torch::kBilinear)
               .align_corners(false));
  }
  if (extra) aug.erase_(x, draws);
  out.images = batch_layout(x, opt_.dtype, opt_.channels_last);
  out.labels = labels_.index_select(0, idx);
  return true;
}

}  // namespace trainer
