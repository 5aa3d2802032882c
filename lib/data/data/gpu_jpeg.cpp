#include "data/gpu_jpeg.h"

#include <torch/torch.h>

#include <algorithm>
#include <future>
#include <thread>

#include "core/check.h"
#include "core/log.h"
#include "core/random.h"
#include "data/image_ops.h"
#include "data/jpeg_decoder.h"
#include "data/sharding.h"

#ifdef TRAINER_WITH_NVJPEG
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <nvjpeg.h>
#endif

namespace trainer {

#ifdef TRAINER_WITH_NVJPEG
bool gpu_decode_available() { return true; }

#define TRAINER_NVJPEG(call, what)                                                                  \
  do {                                                                                              \
    const nvjpegStatus_t st_ = (call);                                                              \
    TRAINER_CHECK(st_ == NVJPEG_STATUS_SUCCESS, "nvJPEG ", what, " failed (status ", int(st_), ")"); \
  } while (0)

struct GpuJpegDecoder::Impl {
  nvjpegHandle_t handle = nullptr;
  nvjpegJpegState_t state = nullptr;
  nvjpegJpegStream_t stream = nullptr;
  bool hardware = false;
};

GpuJpegDecoder::GpuJpegDecoder(torch::Device device) : impl_(std::make_unique<Impl>()), device_(device) {
  TRAINER_CHECK(device.is_cuda(), "data.decode: gpu needs a CUDA device");
  c10::cuda::CUDAGuard guard(device.index());
  if (nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, nullptr, nullptr, 0, &impl_->handle) == NVJPEG_STATUS_SUCCESS) {
    impl_->hardware = true;
  } else {
    TRAINER_NVJPEG(nvjpegCreateEx(NVJPEG_BACKEND_DEFAULT, nullptr, nullptr, 0, &impl_->handle), "create");
  }
  TRAINER_NVJPEG(nvjpegJpegStateCreate(impl_->handle, &impl_->state), "state create");
  TRAINER_NVJPEG(nvjpegJpegStreamCreate(impl_->handle, &impl_->stream), "stream create");
}

GpuJpegDecoder::~GpuJpegDecoder() {
  if (impl_->stream) nvjpegJpegStreamDestroy(impl_->stream);
  if (impl_->state) nvjpegJpegStateDestroy(impl_->state);
  if (impl_->handle) nvjpegDestroy(impl_->handle);
}

bool GpuJpegDecoder::hardware() const { return impl_->hardware; }

std::vector<torch::Tensor> GpuJpegDecoder::decode(const std::vector<std::pair<const uint8_t*, size_t>>& files) {
  std::vector<torch::Tensor> out(files.size());
  std::vector<const unsigned char*> data;
  std::vector<size_t> lengths;
  std::vector<nvjpegImage_t> dst;
  std::vector<size_t> which;
  const auto opts = torch::TensorOptions().dtype(torch::kUInt8).device(device_);
  for (size_t i = 0; i < files.size(); ++i) {
    const auto* p = files[i].first;
    const size_t n = files[i].second;
    if (!p || n < 4 || sniff_format(p, n) != ImageFormat::jpeg) continue;
    int comps = 0;
    nvjpegChromaSubsampling_t ss;
    int w[NVJPEG_MAX_COMPONENT] = {0}, h[NVJPEG_MAX_COMPONENT] = {0};
    if (nvjpegGetImageInfo(impl_->handle, p, n, &comps, &ss, w, h) != NVJPEG_STATUS_SUCCESS) continue;
    if ((comps != 1 && comps != 3) || w[0] <= 0 || h[0] <= 0 || int64_t(w[0]) * h[0] > kMaxImagePixels) continue;
    if (impl_->hardware) {
      int unsupported = 1;
      if (nvjpegJpegStreamParseHeader(impl_->handle, p, n, impl_->stream) != NVJPEG_STATUS_SUCCESS) continue;
      if (nvjpegDecodeBatchedSupported(impl_->handle, impl_->stream, &unsupported) != NVJPEG_STATUS_SUCCESS ||
          unsupported != 0)
        continue;
    }
    torch::Tensor t = torch::empty({h[0], w[0], 3}, opts);
    nvjpegImage_t img{};
    img.channel[0] = t.data_ptr<uint8_t>();
    img.pitch[0] = static_cast<size_t>(w[0]) * 3;
    data.push_back(p);
    lengths.push_back(n);
    dst.push_back(img);
    which.push_back(i);
    out[i] = t;
  }
  if (data.empty()) return out;
  const cudaStream_t s = c10::cuda::getCurrentCUDAStream(device_.index()).stream();
  const bool ok =
      nvjpegDecodeBatchedInitialize(impl_->handle, impl_->state, static_cast<int>(data.size()), 1,
                                    NVJPEG_OUTPUT_RGBI) == NVJPEG_STATUS_SUCCESS &&
      nvjpegDecodeBatched(impl_->handle, impl_->state, data.data(), lengths.data(), dst.data(), s) ==
          NVJPEG_STATUS_SUCCESS;
  if (!ok) {  // one bad bitstream fails the batch: everything goes to the CPU decoder
    for (size_t i : which) out[i] = torch::Tensor();
  }
  return out;
}

#else
bool gpu_decode_available() { return false; }
struct GpuJpegDecoder::Impl {};
GpuJpegDecoder::GpuJpegDecoder(torch::Device device) : device_(device) {
  TRAINER_FAIL("data.decode: gpu: this build has no nvJPEG (install the CUDA toolkit's nvJPEG or the "
               "nvidia-nvjpeg wheel and rebuild)");
}
GpuJpegDecoder::~GpuJpegDecoder() = default;
bool GpuJpegDecoder::hardware() const { return false; }
std::vector<torch::Tensor> GpuJpegDecoder::decode(const std::vector<std::pair<const uint8_t*, size_t>>&) { return {}; }
#endif

// ---- the loader ----

namespace {
// Runs fn(i) for i in [0, n) on `threads` threads.
template <class F> void parallel_for(int64_t n, int threads, F&& fn) {
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t i; (i = next.fetch_add(1)) < n;) fn(i);
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::min<int64_t>(threads, n); ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
}
}  // namespace

struct GpuImageLoader::Pool {
  // the next batch's files, read ahead while the current batch decodes
  std::future<std::vector<std::vector<uint8_t>>> pending;
  int64_t pending_cursor = -1;
  std::vector<std::vector<uint8_t>> files;  // the batch being decoded (alive until the next batch)
};

GpuImageLoader::GpuImageLoader(std::vector<ImageSample> samples, ImageLoaderOptions opt, torch::Device device)
    : samples_(std::move(samples)), opt_(std::move(opt)), device_(device), pool_(std::make_unique<Pool>()) {
  TRAINER_CHECK(!samples_.empty(), "the image list is empty");
  TRAINER_CHECK(device.is_cuda(), "data.decode: gpu needs run.device cuda");
  decoder_ = std::make_unique<GpuJpegDecoder>(device);
  std::vector<float> m, is;
  for (int c = 0; c < 3; ++c) {
    m.push_back(static_cast<float>(255.0 * opt_.mean[static_cast<size_t>(c)]));
    is.push_back(static_cast<float>(1.0 / (255.0 * opt_.std[static_cast<size_t>(c)])));
  }
  mean255_ = torch::tensor(m).view({1, 3, 1, 1}).to(device_);
  inv_std255_ = torch::tensor(is).view({1, 3, 1, 1}).to(device_);
  set_epoch(0);
}

struct GpuImageLoader::Ready {
  Batch batch;
  std::shared_ptr<void> done;  // at::cuda::CUDAEvent recorded on the side stream after the batch's last kernel
};

GpuImageLoader::~GpuImageLoader() {
  stop();
  if (pool_->pending.valid()) pool_->pending.wait();
}

GpuDecodeStats GpuImageLoader::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void GpuImageLoader::start() {
  stop_ = finished_ = false;
  error_ = nullptr;
  thread_ = std::thread([this] { loop(); });
}

void GpuImageLoader::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  queue_.clear();
}

void GpuImageLoader::loop() {
#ifdef TRAINER_WITH_NVJPEG
  c10::cuda::CUDAGuard device_guard(device_.index());
#endif
  const size_t depth = static_cast<size_t>(std::max(1, opt_.prefetch));
  try {
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || queue_.size() < depth; });
        if (stop_) return;
      }
      auto r = std::make_unique<Ready>();
      const bool more = produce(r->batch, r->done);
      std::lock_guard<std::mutex> lock(mu_);
      if (more) queue_.push_back(std::move(r));
      else finished_ = true;
      cv_.notify_all();
      if (!more) return;
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::current_exception();
    cv_.notify_all();
  }
}

bool GpuImageLoader::next(Batch& out) {
  std::unique_ptr<Ready> r;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !queue_.empty() || finished_ || error_; });
    if (error_) std::rethrow_exception(error_);
    if (queue_.empty()) return false;
    r = std::move(queue_.front());
    queue_.pop_front();
  }
  cv_.notify_all();
#ifdef TRAINER_WITH_NVJPEG
  const auto main = c10::cuda::getCurrentCUDAStream(device_.index());
  static_cast<at::cuda::CUDAEvent*>(r->done.get())->block(main);
  r->batch.images.record_stream(main);
  r->batch.labels.record_stream(main);
#endif
  out = std::move(r->batch);
  return true;
}

bool GpuImageLoader::hardware() const { return decoder_->hardware(); }

void GpuImageLoader::set_epoch(int64_t epoch, int64_t start_batch) {
  stop();
  if (pool_->pending.valid()) pool_->pending.wait();
  pool_->pending = {};
  pool_->pending_cursor = -1;
  order_ = epoch_indices(loader_shard(static_cast<int64_t>(samples_.size()), opt_.seed, epoch, opt_.rank,
                                      opt_.world_size, opt_.train, opt_.drop_last));
  epoch_ = epoch;
  const int64_t n = static_cast<int64_t>(order_.size());
  total_ = (opt_.train && opt_.drop_last) ? n / opt_.batch_size * opt_.batch_size : n;
  cursor_ = std::min(total_, start_batch * opt_.batch_size);
  start();
}

int64_t GpuImageLoader::batches_per_epoch() const {
  const int64_t n = static_cast<int64_t>(order_.size());
  return (opt_.train && opt_.drop_last) ? n / opt_.batch_size : (n + opt_.batch_size - 1) / opt_.batch_size;
}

Rect GpuImageLoader::window(int64_t index, int64_t epoch, int w, int h, bool* flip) const {
  return sample_window(opt_, index, epoch, w, h, flip);
}

bool GpuImageLoader::produce(Batch& out, std::shared_ptr<void>& done_event) {
#ifdef TRAINER_WITH_NVJPEG
  if (cursor_ >= total_) return false;
  const int64_t B = std::min(opt_.batch_size, total_ - cursor_);
  const int threads = std::max(1, opt_.workers);
  auto read_batch = [this, threads](int64_t from, int64_t count) {
    std::vector<std::vector<uint8_t>> files(static_cast<size_t>(count));
    parallel_for(count, threads, [&](int64_t i) {
      try {
        read_sample_bytes(samples_[static_cast<size_t>(order_[static_cast<size_t>(from + i)])], files[static_cast<size_t>(i)]);
      } catch (const Error&) {
        files[static_cast<size_t>(i)].clear();  // unreadable: handled as a bad sample below
      }
    });
    return files;
  };
  if (pool_->pending.valid() && pool_->pending_cursor == cursor_) pool_->files = pool_->pending.get();
  else pool_->files = read_batch(cursor_, B);
  auto& files = pool_->files;
  out.indices.assign(order_.begin() + cursor_, order_.begin() + cursor_ + B);
  cursor_ += B;
  if (cursor_ < total_) {  // read the next batch while this one decodes
    const int64_t nb = std::min(opt_.batch_size, total_ - cursor_);
    pool_->pending_cursor = cursor_;
    pool_->pending = std::async(std::launch::async, read_batch, cursor_, nb);
  }

  const auto side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device_.index());
  const int64_t S = opt_.image_size;
  torch::Tensor x, labels;
  {
    c10::cuda::CUDAStreamGuard guard(side);
    std::vector<std::pair<const uint8_t*, size_t>> in(static_cast<size_t>(B));
    for (int64_t i = 0; i < B; ++i)
      in[static_cast<size_t>(i)] = {files[static_cast<size_t>(i)].data(), files[static_cast<size_t>(i)].size()};
    std::vector<torch::Tensor> img = decoder_->decode(in);
    // what nvJPEG did not take: the CPU decoder, in parallel, then one upload each
    std::vector<int64_t> fallback;
    for (int64_t i = 0; i < B; ++i)
      if (!img[static_cast<size_t>(i)].defined()) fallback.push_back(i);
    std::vector<RgbImage> cpu(fallback.size());
    std::vector<char> failed(fallback.size(), 0);
    parallel_for(static_cast<int64_t>(fallback.size()), threads, [&](int64_t k) {
      const int64_t i = fallback[static_cast<size_t>(k)];
      const auto& f = files[static_cast<size_t>(i)];
      const std::string name = samples_[static_cast<size_t>(out.indices[static_cast<size_t>(i)])].name();
      try {
        TRAINER_CHECK(!f.empty(), name, ": unreadable");
        if (sniff_format(f.data(), f.size()) == ImageFormat::jpeg) {
          JpegDecoder jpeg;
          jpeg.decode(f.data(), f.size(), JpegDecodeOptions{}, cpu[static_cast<size_t>(k)], name);
        } else {
          decode_png(f.data(), f.size(), cpu[static_cast<size_t>(k)], name);
        }
      } catch (const Error& e) {
        failed[static_cast<size_t>(k)] = 1;
        log::warn("skipping a bad sample: ", e.what());
      }
    });
    for (size_t k = 0; k < fallback.size(); ++k) {
      if (failed[k]) continue;
      const RgbImage& r = cpu[k];
      img[static_cast<size_t>(fallback[k])] =
          torch::from_blob(const_cast<uint8_t*>(r.pixels.data()), {r.height, r.width, 3}, torch::kUInt8)
              .to(device_, /*non_blocking=*/false);
    }
    int64_t fallbacks = 0, replaced = 0;
    for (size_t k = 0; k < fallback.size(); ++k) fallbacks += failed[k] ? 0 : 1;
    // a sample that failed everywhere takes the place (and label) of the next good one in the batch
    std::vector<int64_t> label(static_cast<size_t>(B));
    for (int64_t i = 0; i < B; ++i) {
      int64_t src = i;
      for (int64_t k = 0; k < B && !img[static_cast<size_t>(src)].defined(); ++k) src = (i + k + 1) % B;
      TRAINER_CHECK(img[static_cast<size_t>(src)].defined(), "every sample of a batch failed to decode");
      if (src != i) {
        img[static_cast<size_t>(i)] = img[static_cast<size_t>(src)];
        out.indices[static_cast<size_t>(i)] = out.indices[static_cast<size_t>(src)];
        ++replaced;
      }
      label[static_cast<size_t>(i)] = samples_[static_cast<size_t>(out.indices[static_cast<size_t>(i)])].label;
    }
    // crop window, antialiased bilinear resize and flip per sample, into one float batch (0..255 scale)
    x = torch::empty({B, 3, S, S}, torch::TensorOptions().dtype(torch::kFloat32).device(device_));
    for (int64_t i = 0; i < B; ++i) {
      const torch::Tensor& t = img[static_cast<size_t>(i)];
      bool flip = false;
      const Rect r = window(out.indices[static_cast<size_t>(i)], epoch_, static_cast<int>(t.size(1)),
                            static_cast<int>(t.size(0)), &flip);
      torch::Tensor c = t.narrow(0, r.y, r.h).narrow(1, r.x, r.w).permute({2, 0, 1}).unsqueeze(0).to(torch::kFloat32);
      torch::Tensor y = at::_upsample_bilinear2d_aa(c, {S, S}, /*align_corners=*/false);
      if (flip) y = y.flip({3});
      x[i].copy_(y[0]);
    }
    labels = torch::tensor(label, torch::kInt64).to(device_, /*non_blocking=*/false);
    BatchAugmenter(opt_.augment, opt_.seed).normalize_(x, out.indices, epoch_, opt_.train, mean255_, inv_std255_);
    if (opt_.channels_last) x = x.contiguous(torch::MemoryFormat::ChannelsLast);
    std::lock_guard<std::mutex> lock(mu_);
    stats_.gpu += B - static_cast<int64_t>(fallback.size());
    stats_.cpu_fallback += fallbacks;
    stats_.bad += replaced;
  }
  auto done = std::make_shared<at::cuda::CUDAEvent>();
  done->record(side);
  done_event = done;
  out.images = x;
  out.labels = labels;
  return true;
#else
  (void)out;
  (void)done_event;
  TRAINER_FAIL("data.decode: gpu: this build has no nvJPEG");
#endif
}

}  // namespace trainer
