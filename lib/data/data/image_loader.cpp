#include "data/image_loader.h"
#include "data/shards.h"

#include <cstring>

#include <fcntl.h>
#include <unistd.h>

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#ifdef TRAINER_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "core/check.h"
#include "core/fs.h"
#include "core/log.h"
#include "core/random.h"
#include "core/thread_priority.h"
#include "data/image_ops.h"
#include "data/jpeg_cut.h"
#include "data/jpeg_decoder.h"
#include "data/jpeg_encoder.h"
#include "data/sharding.h"

namespace trainer {

struct ImageLoader::Slot {
  torch::Tensor images;   // (B,S,S,3) uint8, pinned when the device is CUDA
  torch::Tensor labels;   // (B,) int64
  std::vector<int64_t> indices;
  int64_t batch = -1;     // which batch the slot holds (numbered across epochs: Pass::base + batch of the epoch)
  int64_t done = 0;       // samples written
#ifdef TRAINER_WITH_CUDA
  std::unique_ptr<at::cuda::CUDAEvent> copy_start;  // timing events around the H2D copy out of this slot
  std::unique_ptr<at::cuda::CUDAEvent> copied;      // the copy finished
#endif
};

namespace {
using Clock = std::chrono::steady_clock;
int64_t ns_since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t).count();
}

// The training window `win` (full-resolution pixels) in a decode at 1/d whose pixel (0, 0) is pixel (ox, oy) of the
// scaled image and which is (w x h), rounded to whole pixels inside it.
Rect region_in_decode(const Rect& win, int d, int ox, int oy, int w, int h) {
  Rect r;
  r.x = std::clamp(static_cast<int>(std::lround(double(win.x) / d)) - ox, 0, w - 1);
  r.y = std::clamp(static_cast<int>(std::lround(double(win.y) / d)) - oy, 0, h - 1);
  r.w = std::min(std::max(1, static_cast<int>(std::lround(double(win.w) / d))), w - r.x);
  r.h = std::min(std::max(1, static_cast<int>(std::lround(double(win.h) / d))), h - r.y);
  return r;
}

}  // namespace

Rect sample_window(const ImageLoaderOptions& o, int64_t index, int64_t epoch, int w, int h, bool* flip) {
  *flip = false;
  if (!o.train) return center_crop_window(w, h, static_cast<int>(o.image_size), o.crop_pct);
  SampleRng rng(o.seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(index));
  const Rect r = draw_rrc(rng, w, h, o.rrc_scale[0], o.rrc_scale[1], o.rrc_ratio[0], o.rrc_ratio[1]);
  *flip = rng.bernoulli(o.hflip);
  return r;
}

ImageLoader::ImageLoader(std::vector<ImageSample> samples, ImageLoaderOptions opt, torch::Device device)
    : samples_(std::move(samples)), opt_(std::move(opt)), device_(device) {
  TRAINER_CHECK(!samples_.empty(), "the image list is empty");
  if (opt_.cache_gb > 0) {
    cache_.reset(new std::atomic<const CacheEntry*>[samples_.size()]);
    for (size_t i = 0; i < samples_.size(); ++i) cache_[i].store(nullptr, std::memory_order_relaxed);
  }
  TRAINER_CHECK(opt_.mean.size() == 3 && opt_.std.size() == 3, "image sources are RGB: mean/std need 3 values");
  const int64_t S = opt_.image_size, B = opt_.batch_size;
  const int ring = std::max(2, opt_.prefetch + 1);
  for (int i = 0; i < ring; ++i) {
    auto s = std::make_unique<Slot>();
    s->images = torch::empty({B, S, S, 3}, torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(device_.is_cuda()));
    s->labels = torch::empty({B}, torch::TensorOptions().dtype(torch::kInt64).pinned_memory(device_.is_cuda()));
#ifdef TRAINER_WITH_CUDA
    if (device_.is_cuda()) {
      s->copy_start = std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault);
      s->copied = std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault);
    }
#endif
    slots_.push_back(std::move(s));
  }
  std::vector<float> m, is;
  for (int c = 0; c < 3; ++c) {
    m.push_back(static_cast<float>(opt_.mean[c] * 255.0));
    is.push_back(static_cast<float>(1.0 / (opt_.std[c] * 255.0)));
  }
  mean255_ = torch::tensor(m).view({1, 3, 1, 1}).to(device_);
  inv_std255_ = torch::tensor(is).view({1, 3, 1, 1}).to(device_);
  set_epoch(0);
  const int n = std::max(1, opt_.workers);
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { worker_loop(); });
}

ImageLoader::~ImageLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
  if (cache_)
    for (size_t i = 0; i < samples_.size(); ++i) delete cache_[i].load();
}

EpochPlan plan_epoch(const ImageLoaderOptions& o, int64_t dataset_size, int64_t epoch) {
  EpochPlan p;
  p.epoch = epoch;
  p.order = std::make_shared<const std::vector<int64_t>>(
      epoch_indices(loader_shard(dataset_size, o.seed, epoch, o.rank, o.world_size, o.train, o.drop_last)));
  const int64_t n = static_cast<int64_t>(p.order->size());
  p.total = (o.train && o.drop_last) ? n / o.batch_size * o.batch_size : n;
  p.batches = (p.total + o.batch_size - 1) / o.batch_size;
  return p;
}

ImageLoader::Pass ImageLoader::make_pass(int64_t epoch, int64_t base) const {
  Pass p;
  static_cast<EpochPlan&>(p) = plan_epoch(opt_, static_cast<int64_t>(samples_.size()), epoch);
  p.base = base;
  return p;
}

void ImageLoader::set_epoch(int64_t epoch, int64_t start_batch) {
  std::unique_lock<std::mutex> lock(mu_);
  const bool whole_epoch_taken = !passes_.empty() && cursor_ == current_.base + current_.batches;
  if (opt_.train && start_batch == 0 && epoch == current_.epoch + 1 && whole_epoch_taken && !error_) {
    // the next epoch: keep what the threads have made of it (every task of this one is done: all its batches
    // were taken)
    if (passes_.size() == 1) {
      passes_.push_back(make_pass(epoch, current_.base + current_.batches));
      work_pass_ = 1;
      next_task_ = 0;
    }
    passes_.pop_front();
    work_pass_ -= 1;
  } else {
    // start over: let the tasks handed out finish, hand out no more meanwhile, then reset the ring
    resetting_ = true;
    done_cv_.wait(lock, [&] { return in_flight_ == 0; });
    resetting_ = false;
    passes_.clear();
    passes_.push_back(make_pass(epoch, 0));
    const int64_t start = std::min<int64_t>(start_batch, passes_[0].batches);
    work_pass_ = 0;
    next_task_ = std::min(passes_[0].total, start * opt_.batch_size);
    released_ = start;
    cursor_ = start;
    for (auto& sl : slots_) {
      sl->batch = -1;
      sl->done = 0;
    }
  }
  current_ = passes_[0];
  lock.unlock();
  work_cv_.notify_all();
}

int64_t ImageLoader::batches_per_epoch() const { return current_.batches; }

bool ImageLoader::take_task_ready() {
  if (resetting_ || passes_.empty()) return false;
  const int64_t ring = static_cast<int64_t>(slots_.size());
  for (;;) {
    const Pass& p = passes_[work_pass_];
    if (next_task_ < p.total) return p.base + next_task_ / opt_.batch_size < released_ + ring;
    if (work_pass_ + 1 < passes_.size()) {
      ++work_pass_;
      next_task_ = 0;
      continue;
    }
    if (!opt_.train || passes_.size() >= 2) return false;  // evaluation; or already one epoch ahead
    passes_.push_back(make_pass(p.epoch + 1, p.base + p.batches));
  }
}

// ---- workers ----

void ImageLoader::worker_loop() {
  become_data_thread();
  JpegDecoder jpeg;
  std::vector<uint8_t> file;
  RgbImage img;
  const int64_t ring = static_cast<int64_t>(slots_.size());
  for (;;) {
    int64_t task, epoch;
    Order order;
    Slot* slot;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || take_task_ready(); });
      if (stop_) return;
      const Pass& p = passes_[work_pass_];
      task = next_task_++;
      epoch = p.epoch;
      order = p.order;
      const int64_t batch = p.base + task / opt_.batch_size;
      slot = slots_[batch % ring].get();
      if (slot->batch != batch) {  // first task of this batch claims the slot
        slot->batch = batch;
        slot->done = 0;
        slot->indices.assign(static_cast<size_t>(p.batch_size_of(task / opt_.batch_size, opt_.batch_size)), -1);
      }
      ++in_flight_;
    }
    try {
      process(task, epoch, *order, *slot, file, img, jpeg);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++slot->done;
      --in_flight_;
    }
    done_cv_.notify_all();
  }
}

void ImageLoader::process(int64_t task, int64_t epoch, const std::vector<int64_t>& order, Slot& slot,
                          std::vector<uint8_t>& file, RgbImage& img, JpegDecoder& jpeg) {
  const int64_t pos = task % opt_.batch_size;
  int64_t index = order[static_cast<size_t>(task)];
  const int64_t S = opt_.image_size;
  uint8_t* dst = slot.images.data_ptr<uint8_t>() + pos * S * S * 3;
  // a bad file: the one policy of bad_samples.h (replaced in training, left out in evaluation)
  for (int attempt = 0;; ++attempt) {
    try {
      decode_sample(index, epoch, dst, file, img, jpeg);
      break;
    } catch (const Error& e) {
      bad_.report(samples_[static_cast<size_t>(index)].name(), e.what());
      if (!opt_.train) {
        std::memset(dst, 0, static_cast<size_t>(S * S * 3));
        slot.labels.data_ptr<int64_t>()[pos] = -1;
        slot.indices[static_cast<size_t>(pos)] = -1;
        done_samples_.fetch_add(1);
        return;
      }
      TRAINER_CHECK(attempt + 1 < kMaxBadInARow, kMaxBadInARow, " bad samples in a row, the last: ", e.what());
      index = substitute_sample(index, attempt + 1, samples_.size());
    }
  }
  slot.labels.data_ptr<int64_t>()[pos] = samples_[static_cast<size_t>(index)].label;
  slot.indices[static_cast<size_t>(pos)] = index;
  done_samples_.fetch_add(1);
}

void ImageLoader::decode_sample(int64_t index, int64_t epoch, uint8_t* dst, std::vector<uint8_t>& file, RgbImage& img,
                                JpegDecoder& jpeg) {
  const ImageSample& s = samples_[static_cast<size_t>(index)];
  const int S = static_cast<int>(opt_.image_size);
  auto draw_window = [&](int w, int h, bool* flip) { return sample_window(opt_, index, epoch, w, h, flip); };
  const Interpolation filter = opt_.train ? Interpolation::bilinear : opt_.eval_filter;
  // training resizes the drawn window (crop then resize); evaluation crops the resized image, as torchvision
  const bool eval = !opt_.train;
  auto t0 = Clock::now();
  const CacheEntry* hit = cache_ ? cache_[static_cast<size_t>(index)].load(std::memory_order_acquire) : nullptr;
  const std::string name = s.name();
  if (cache_ && opt_.cache_decoded) {
    // decoded cache: the first epoch decodes the whole image once; later ones only crop and resize
    const RgbImage* src = hit ? &hit->image : nullptr;
    if (!src) {
      read_sample_bytes(s, file);
      read_ns_.fetch_add(ns_since(t0));
      t0 = Clock::now();
      if (sniff_format(file.data(), file.size()) == ImageFormat::jpeg) {
        int w = 0, h = 0;
        read_image_size(jpeg, file.data(), file.size(), name, &w, &h);  // within the pixel limit
        jpeg.decode(file.data(), file.size(), JpegDecodeOptions{}, img, name);
      } else {
        decode_png(file.data(), file.size(), img, name);
      }
      decode_ns_.fetch_add(ns_since(t0));
      auto e = std::make_unique<CacheEntry>();
      e->image = img;
      const CacheEntry* p = publish(index, std::move(e), static_cast<int64_t>(img.pixels.size()));
      src = p ? &p->image : &img;
    }
    t0 = Clock::now();
    bool flip = false;
    const ResizeMap m = eval ? eval_map(src->width, src->height, S, opt_.crop_pct)
                             : window_map(draw_window(src->width, src->height, &flip), S, S);
    resize_rgb_mapped(src->pixels.data(), src->width, src->height, m, dst, S, S, S * 3, flip, filter);
    resize_ns_.fetch_add(ns_since(t0));
    return;
  }
  const std::vector<uint8_t>* bytes = hit ? &hit->bytes : nullptr;
  if (!bytes) {
    read_sample_bytes(s, file);
    bytes = &file;
    if (cache_) {
      auto e = std::make_unique<CacheEntry>();
      const bool full = cache_full_logged_.load(std::memory_order_relaxed);  // nothing more will be cached
      if (full || !opt_.cache_restart || !with_restart_markers(file, e->bytes, name)) e->bytes = file;
      const auto size = static_cast<int64_t>(e->bytes.size());  // the rewrite's, where it was rewritten
      if (const CacheEntry* p = publish(index, std::move(e), size)) bytes = &p->bytes;
    }
  }
  read_ns_.fetch_add(ns_since(t0));
  const SampleDecodeTimes t =
      decode_sample_output(opt_, index, epoch, bytes->data(), bytes->size(), name, jpeg, img, dst);
  decode_ns_.fetch_add(t.decode_ns);
  resize_ns_.fetch_add(t.resize_ns);
  if (t.cut) cut_.fetch_add(1);
}

SampleDecodeTimes decode_sample_output(const ImageLoaderOptions& opt, int64_t index, int64_t epoch,
                                       const uint8_t* data, size_t size, const std::string& name, JpegDecoder& jpeg,
                                       RgbImage& img, uint8_t* dst) {
  const int S = static_cast<int>(opt.image_size);
  const Interpolation filter = opt.train ? Interpolation::bilinear : opt.eval_filter;
  // training resizes the drawn window (crop then resize); evaluation crops the resized image, as torchvision
  const bool eval = !opt.train;
  SampleDecodeTimes times;
  auto t0 = Clock::now();
  int w = 0, h = 0;
  read_image_size(jpeg, data, size, name, &w, &h);  // within the pixel limit
  bool flip = false;
  const Rect win = sample_window(opt, index, epoch, w, h, &flip);  // evaluation: the centre crop's extent
  const ResizeMap eval_full = eval ? eval_map(w, h, S, opt.crop_pct) : ResizeMap{};
  ResizeMap m;  // the resize, in the decoded image's pixels
  if (sniff_format(data, size) == ImageFormat::jpeg) {
    JpegDecodeOptions o;
    o.scale_denom = opt.dct_scale ? pick_scale_denom(win.w, win.h, S, S) : 1;
    o.crop = opt.crop_decode;
    o.window = eval ? map_footprint(eval_full, S, S, filter) : win;  // with the taps' reach over the crop's edge
    jpeg.decode(data, size, o, img, name);
    times.cut = jpeg.last_decode_was_cut();
    const int d = o.scale_denom;
    // the decoder returned the window rounded outwards to whole scaled pixels, from (x / d, y / d)
    const int ox = o.crop ? o.window.x / d : 0, oy = o.crop ? o.window.y / d : 0;
    m = eval ? map_into_decode(eval_full, d, ox, oy, img.width, img.height)
             : window_map(region_in_decode(win, d, ox, oy, img.width, img.height), S, S);
  } else {
    decode_png(data, size, img, name);
    m = eval ? eval_full : window_map(win, S, S);
  }
  times.decode_ns = ns_since(t0);

  t0 = Clock::now();
  resize_rgb_mapped(img.pixels.data(), img.width, img.height, m, dst, S, S, S * 3, flip, filter);
  times.resize_ns = ns_since(t0);
  return times;
}

// data.cache: restart. The rewrite reads every coefficient, so a corrupt file throws here as its decode would.
bool ImageLoader::with_restart_markers(const std::vector<uint8_t>& file, std::vector<uint8_t>& out,
                                       const std::string& name) {
  if (sniff_format(file.data(), file.size()) != ImageFormat::jpeg) return false;
  RestartIndex idx;
  if (index_restart_intervals(file.data(), file.size(), idx, 0)) return false;  // cuttable as it is
  return transcode_with_restarts(file.data(), file.size(), out, name);
}

const ImageLoader::CacheEntry* ImageLoader::publish(int64_t index, std::unique_ptr<CacheEntry> e, int64_t size) {
  const int64_t budget = static_cast<int64_t>(opt_.cache_gb * (1 << 30));
  if (cache_bytes_.fetch_add(size) + size > budget) {
    cache_bytes_.fetch_sub(size);
    if (!cache_full_logged_.exchange(true))
      log::warn("data.cache_gb: the cache is full at ", opt_.cache_gb, " GiB; further samples are read from disk");
    return nullptr;
  }
  const CacheEntry* expected = nullptr;
  const CacheEntry* mine = e.get();
  if (cache_[static_cast<size_t>(index)].compare_exchange_strong(expected, mine, std::memory_order_acq_rel)) {
    e.release();
    return mine;
  }
  cache_bytes_.fetch_sub(size);  // another thread cached it first
  return expected;
}

// ---- consumer ----

bool ImageLoader::next(Batch& out) {
  const int64_t ring = static_cast<int64_t>(slots_.size());
  Slot* slot;
  int64_t size;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (cursor_ >= current_.base + current_.batches) return false;
    // the previous batch's slot can be refilled once its copy to the device finished
    if (cursor_ > released_) {
#ifdef TRAINER_WITH_CUDA
      Slot* prev = slots_[(cursor_ - 1) % ring].get();
      if (prev->copied) {
        prev->copied->synchronize();
        copy_ns_ += static_cast<int64_t>(1e6 * prev->copy_start->elapsed_time(*prev->copied));
      }
#endif
      released_ = cursor_;
      work_cv_.notify_all();
    }
    size = current_.batch_size_of(cursor_ - current_.base, opt_.batch_size);
    slot = slots_[cursor_ % ring].get();
    const int64_t want = cursor_;
    done_cv_.wait(lock, [&] { return error_ || (slot->batch == want && slot->done == size); });
    if (error_) std::rethrow_exception(error_);
    ++cursor_;
  }
  out.indices = slot->indices;
  torch::Tensor images = slot->images.narrow(0, 0, size);
  torch::Tensor labels = slot->labels.narrow(0, 0, size);
  if (device_.is_cuda()) {
#ifdef TRAINER_WITH_CUDA
    // ---- copy on a side stream; the compute stream waits on an event, not on the host ----
    // Allocate on the side stream and mark the tensors as used by the compute stream: the caching allocator
    // then never hands this memory to anyone while either stream may still touch it. (Allocating on the
    // compute stream instead lets the side stream overwrite blocks that queued compute work still reads.)
    auto main = c10::cuda::getCurrentCUDAStream(device_.index());
    auto side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device_.index());
    torch::Tensor gi, gl;
    {
      c10::cuda::CUDAStreamGuard guard(side);
      slot->copy_start->record(side);
      gi = torch::empty(images.sizes(), images.options().device(device_).pinned_memory(false));
      gl = torch::empty(labels.sizes(), labels.options().device(device_).pinned_memory(false));
      gi.copy_(images, /*non_blocking=*/true);
      gl.copy_(labels, /*non_blocking=*/true);
      slot->copied->record(side);
    }
    gi.record_stream(main);
    gl.record_stream(main);
    slot->copied->block(main);
    images = gi;
    labels = gl;
#endif
  } else {
    images = images.clone();  // the slot will be refilled
    labels = labels.clone();
  }
  if (!opt_.normalize) {
    out.images = images;
  } else {
    // (B,S,S,3) viewed as (B,3,S,S) has channels_last strides already
    torch::Tensor x = images.permute({0, 3, 1, 2}).to(torch::kFloat32);
    BatchAugmenter(opt_.augment, opt_.seed).augment_and_normalize_(x, out.indices, current_.epoch, opt_.train, mean255_, inv_std255_);
    out.images = batch_layout(x, opt_.dtype, opt_.channels_last);
  }
  out.labels = labels;
  return true;
}

PipelineStats ImageLoader::pipeline_stats() const {
  PipelineStats s;
  s.decode = DecodeKind::cpu;
  s.cpu = stage_totals();
  s.threads = std::max(1, opt_.workers);
  return s;
}

StageTotals ImageLoader::stage_totals() const {
  StageTotals t;
  t.read_ns = read_ns_.load();
  t.decode_ns = decode_ns_.load();
  t.resize_ns = resize_ns_.load();
  t.samples = done_samples_.load();
  t.bad = bad_.count();
  t.cut = cut_.load();
  return t;
}

}  // namespace trainer
