#include "data/gpu_image_loader.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
#include <map>

#include "core/check.h"
#include "core/log.h"
#include "core/parallel.h"
#include "core/thread_priority.h"
#include "data/augment.h"
#include "data/device_upload.h"
#include "data/image_ops.h"
#include "data/jpeg_cut.h"
#include "data/jpeg_decoder.h"
#include "data/jpeg_mosaic.h"

#ifdef TRAINER_WITH_NVJPEG
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGreenContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace trainer {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

#ifdef TRAINER_WITH_NVJPEG
// A green context of `sms` of the device's SMs: streams taken from it run their kernels on those SMs only.
std::shared_ptr<at::cuda::GreenContext> sm_partition(torch::Device device, int sms) {
  const int all = at::cuda::getDeviceProperties(device.index())->multiProcessorCount;
  TRAINER_CHECK(sms < all, "data.gpu_decode_sms: ", sms, " SMs asked for the GPU loader, the GPU has ", all,
                " (0 = all of them)");
  try {
    return at::cuda::GreenContext::create(static_cast<uint32_t>(sms), static_cast<uint32_t>(device.index()));
  } catch (const std::exception& e) {
    TRAINER_FAIL("data.gpu_decode_sms: ", sms, ": no CUDA green context of that many SMs here (0 = all of them): ",
                 e.what());
  }
}
#endif

// A JPEG or PNG file's pixels by the CPU decoders; throws Error naming `name`.
void decode_on_host(const uint8_t* data, size_t size, const std::string& name, RgbImage& out) {
  TRAINER_CHECK(size > 0, name, ": empty file");
  if (sniff_format(data, size) == ImageFormat::jpeg) {
    JpegDecoder jpeg;
    jpeg.decode(data, size, JpegDecodeOptions{}, out, name);
  } else {
    decode_png(data, size, out, name);
  }
}

// Images decoded on the CPU (host[i] for i in `which`) onto the device: copied by `threads` threads into one pinned
// buffer, which goes over in one host-to-device copy; the result holds (h, w, 3) uint8 views of that device buffer,
// in the order of `which`. (One pinned copy and one transfer per image cost the producer thread about 20 us each.)
std::vector<torch::Tensor> upload_images(const std::vector<RgbImage>& host, const std::vector<size_t>& which,
                                         int threads, const torch::Device& device) {
  std::vector<torch::Tensor> out;
  if (which.empty()) return out;
  std::vector<int64_t> at(which.size() + 1, 0);
  for (size_t j = 0; j < which.size(); ++j) at[j + 1] = at[j] + static_cast<int64_t>(host[which[j]].pixels.size());
  torch::Tensor pinned = torch::empty({std::max<int64_t>(at.back(), 1)},
                                      torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(true));
  uint8_t* base = pinned.data_ptr<uint8_t>();
  parallel_for(static_cast<int64_t>(which.size()), threads, [&](int64_t j) {
    const RgbImage& r = host[which[static_cast<size_t>(j)]];
    std::memcpy(base + at[static_cast<size_t>(j)], r.pixels.data(), r.pixels.size());
  });
  const torch::Tensor on_device = upload(pinned, device);
  for (size_t j = 0; j < which.size(); ++j) {
    const RgbImage& r = host[which[j]];
    out.push_back(on_device.narrow(0, at[j], at[j + 1] - at[j]).view({r.height, r.width, 3}));
  }
  return out;
}

torch::Tensor upload_image(const RgbImage& r, const torch::Device& device) {
  return upload(torch::from_blob(const_cast<uint8_t*>(r.pixels.data()), {r.height, r.width, 3}, torch::kUInt8),
                device);
}

}  // namespace

struct GpuImageLoader::FileBatch {
  torch::Tensor pinned;                    // the batch's files, read straight into it (read_batch)
  GpuJpegDecoder::Files files;             // file i's bytes in `pinned`; {nullptr, 0} where it could not be read
  std::vector<std::string> read_errors;    // why file i could not be read; empty where it was
  GpuJpegDecoder::Files in;                // what nvJPEG reads: `files` but for the CPU threads' share
  std::vector<GpuJpegDecoder::Info> info;  // headers parsed (and crop regions checked) by the reading threads
  // training, hybrid: the CPU threads' share of the batch's JPEGs, decoded while the batch before decodes,
  // into their (S, S, 3) output as the CPU loader makes it (decode_sample_output); share_slot[i] >= 0: position i's
  // image in `outputs`, < 0: not in the share
  std::vector<int> share_slot;
  torch::Tensor outputs;                  // (k, S, S, 3) uint8, pinned
  std::vector<std::string> share_errors;  // why position i of the share failed
  int64_t share_images = 0;               // k
  double share = 0;                       // k over the batch's JPEGs
  // the wall time of this batch's read-ahead, the share's decode with the reading and parsing (hybrid): the host
  // side's time for its k images, so that the split balances it against nvJPEG's span for the rest; and its stages
  double host_ms = 0, read_ms = 0, size_ms = 0, parse_ms = 0, share_ms = 0;
  double share_cpu_ms = 0;  // the threads' time in the share's images, summed
  // training, opt.decode_mosaic: the crop windows of files that can be tiled together laid out k to a JPEG
  // (jpeg_mosaic.h) that nvJPEG decodes whole. mosaic_of[i] >= 0: file i's window is in that mosaic (and `in`
  // holds nothing for the file); tile_frame[i]: the file's frame in the mosaic's pixels (x, y of the source's
  // corner, w, h of the source); -1: the file is decoded on its own
  std::vector<JpegMosaic> mosaics;
  torch::Tensor mosaic_pinned;                    // the mosaics' bytes, pinned
  GpuJpegDecoder::Files mosaic_in;                // each mosaic's in `mosaic_pinned`
  std::vector<GpuJpegDecoder::Info> mosaic_info;  // and their headers, parsed
  std::vector<int> mosaic_of;
  std::vector<Rect> tile_frame;
  double mosaic_ms = 0;  // laying them out and parsing them
};

struct GpuImageLoader::ReadAhead {
  std::future<FileBatch> pending;  // the next batch's files, read and parsed while the current batch decodes
  int64_t epoch = -1, cursor = -1;  // which batch `pending` is
  FileBatch current;                // the batch being decoded (alive until the next batch)
  EpochCursor following;            // the next epoch, planned once by the producer (read ahead into, then gone on with)
};

struct GpuImageLoader::Decoded {
  std::vector<int64_t> index;         // the sample at each position (a substitute for a bad one); -1: left out
  std::vector<torch::Tensor> images;  // (h, w, 3) uint8 on the device; undefined: failed on both decoders
  std::vector<std::string> errors;    // why position i failed, where it did
  std::vector<Rect> frame;            // the part of its image each tensor holds: x, y of its corner, w, h of the whole
  std::vector<char> final;            // the tensor is already the sample's (S, S, 3) output (the hybrid share)
  int64_t by_gpu = 0, by_cpu = 0, cropped = 0;
  int64_t tiled = 0;         // of cropped: decoded as tiles of mosaics
  int64_t by_hybrid = 0;     // of by_cpu: the hybrid share (nvJPEG could have taken them)
  // the producer thread's part of decode(): the nvJPEG call, the CPU threads' part beside it (what it waited for
  // after the call), the uploads of what the CPU threads decoded
  double nvjpeg_call_ms = 0, host_after_call_ms = 0, upload_ms = 0;
};

#ifdef TRAINER_WITH_NVJPEG
struct GpuImageLoader::Ready {
  int64_t epoch = 0;
  Batch batch;
  at::cuda::CUDAEvent done;  // on the side stream after the batch's last kernel
};
struct GpuImageLoader::BatchTimes {
  // engines: after nvJPEG's part, before the CPU threads' images are uploaded (the span nvJPEG's rate is taken over:
  // it must not include the wait for the threads); decoded: after the uploads
  at::cuda::CUDAEvent started{cudaEventDefault}, engines{cudaEventDefault}, decoded{cudaEventDefault},
      done{cudaEventDefault};
  int64_t by_gpu = 0;  // the images nvJPEG decoded in the span started..engines
  void engines_done() { engines.record(c10::cuda::getCurrentCUDAStream()); }
};
#else
struct GpuImageLoader::Ready {
  int64_t epoch = 0;
  Batch batch;
};
struct GpuImageLoader::BatchTimes {
  void engines_done() {}
};
#endif

GpuImageLoader::GpuImageLoader(std::vector<ImageSample> samples, ImageLoaderOptions opt, torch::Device device)
    : samples_(std::move(samples)),
      opt_(std::move(opt)),
      device_(device),
      ahead_(std::make_unique<ReadAhead>()),
      split_(opt_.host_share) {
  TRAINER_CHECK(!samples_.empty(), "the image list is empty");
  TRAINER_CHECK(device.is_cuda(), "data.decode: gpu needs run.device cuda");
  decoder_ = std::make_unique<GpuJpegDecoder>(device);
#ifdef TRAINER_WITH_NVJPEG
  if (opt_.decode_sms > 0) sms_ = sm_partition(device_, opt_.decode_sms);
#endif
  decoder_->preallocate(static_cast<int>(opt_.batch_size));
  for (int k = 1; k < opt_.decode_calls; ++k) {  // their own handles and states: the calls overlap
    callers_.push_back(std::make_unique<GpuJpegDecoder>(device));
    callers_.back()->preallocate(static_cast<int>(opt_.batch_size));
  }
  normalized_ = GpuResizeOutput::normalized(opt_.mean, opt_.std, opt_.channels_last, opt_.dtype);
  const auto& n = normalized_;
  mean255_ = torch::tensor({n.mean255[0], n.mean255[1], n.mean255[2]}).view({1, 3, 1, 1}).to(device_);
  inv_std255_ = torch::tensor({n.inv_std255[0], n.inv_std255[1], n.inv_std255[2]}).view({1, 3, 1, 1}).to(device_);
  black_ = torch::zeros({1, 1, 3}, torch::TensorOptions().dtype(torch::kUInt8).device(device_));
  set_epoch(0);
}

GpuImageLoader::~GpuImageLoader() {
  stop();
  if (ahead_->pending.valid()) ahead_->pending.wait();
}

GpuDecodeStats GpuImageLoader::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  GpuDecodeStats s = stats_;
  s.bad = bad_.count();
  return s;
}

PipelineStats GpuImageLoader::pipeline_stats() const {
  PipelineStats s;
  s.decode = DecodeKind::gpu;
  s.hardware = hardware();
  s.gpu = stats();
  s.threads = std::max(1, opt_.workers);
  return s;
}

bool GpuImageLoader::hardware() const { return decoder_->hardware(); }

int64_t GpuImageLoader::batches_per_epoch() const { return current_.batches; }

Rect GpuImageLoader::window(int64_t index, int64_t epoch, int w, int h, bool* flip) const {
  return sample_window(opt_, index, epoch, w, h, flip);
}

// ---- the producer thread and the consumer ----

void GpuImageLoader::start() {
  stop_ = false;
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

GpuImageLoader::EpochCursor GpuImageLoader::make_cursor(int64_t epoch, int64_t start_batch) const {
  EpochCursor p;
  static_cast<EpochPlan&>(p) = plan_epoch(opt_, static_cast<int64_t>(samples_.size()), epoch);
  p.cursor = std::min(p.total, start_batch * opt_.batch_size);
  return p;
}

const GpuImageLoader::EpochCursor& GpuImageLoader::following(int64_t epoch) {
  EpochCursor& f = ahead_->following;
  if (!f.order || f.epoch != epoch + 1) f = make_cursor(epoch + 1, 0);
  return f;
}

void GpuImageLoader::loop() {
  become_data_thread();
#ifdef TRAINER_WITH_NVJPEG
  c10::cuda::CUDAGuard device_guard(device_.index());
#endif
  const size_t depth = static_cast<size_t>(std::max(1, opt_.prefetch));
  const size_t calls = std::min(depth, static_cast<size_t>(std::max(1, opt_.decode_calls)));
  // opt.decode_calls > 1: batches being made on threads of their own, oldest first; each goes to the queue once
  // made, in order, so the consumer sees the one-call order
  struct InFlight {
    std::unique_ptr<Ready> ready;
    std::unique_ptr<FileBatch> files;
    std::future<void> made;
  };
  std::deque<InFlight> flying;
  size_t submitted = 0;  // which decoder a batch goes to, in turn
  auto hand_over_oldest = [&] {
    InFlight f = std::move(flying.front());
    flying.pop_front();
    f.made.get();  // rethrows the batch's error
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(f.ready));
    cv_.notify_all();
  };
  auto wait_all = [&] {  // on the way out: no thread of a batch outlives the loop
    for (auto& f : flying)
      if (f.made.valid()) f.made.wait();
    flying.clear();
  };
  try {
    while (true) {
      EpochCursor p;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || queue_.size() + flying.size() < depth; });
        if (stop_) {
          lock.unlock();
          wait_all();
          return;
        }
        p = producing_;
      }
      if (p.cursor >= p.total) {  // the epoch is made
        while (!flying.empty()) hand_over_oldest();  // the consumer needs them to finish the epoch
        if (!opt_.train) return;  // evaluation: one pass per set_epoch
        // training: on with the next epoch, at most one ahead of the consumer
        {
          std::unique_lock<std::mutex> lock(mu_);
          cv_.wait(lock, [&] { return stop_ || producing_.epoch == current_.epoch; });
          if (stop_) return;
        }
        EpochCursor next = following(p.epoch);
        std::lock_guard<std::mutex> lock(mu_);
        producing_ = std::move(next);
        continue;
      }
      auto r = std::make_unique<Ready>();
      r->epoch = p.epoch;
      const int64_t made = std::min(opt_.batch_size, p.total - p.cursor);
      if (calls == 1) {
        produce(p, *r);
        std::lock_guard<std::mutex> lock(mu_);
        producing_.cursor = p.cursor + made;
        queue_.push_back(std::move(r));
        cv_.notify_all();
        continue;
      }
      InFlight f;
      const auto t_read = Clock::now();
      f.files = std::make_unique<FileBatch>(std::move(take_files(p, made)));
      const double read_wait_ms = ms_since(t_read);
      const size_t k = submitted++ % calls;
      GpuJpegDecoder& decoder = k == 0 ? *decoder_ : *callers_[k - 1];
      f.made = std::async(std::launch::async, [this, p, files = f.files.get(), &decoder, ready = r.get()] {
        become_data_thread();
#ifdef TRAINER_WITH_NVJPEG
        c10::cuda::CUDAGuard guard(device_.index());
#endif
        make(p, *files, decoder, *ready);
      });
      f.ready = std::move(r);
      flying.push_back(std::move(f));
      {
        std::lock_guard<std::mutex> lock(mu_);
        producing_.cursor = p.cursor + made;
        stats_.host_read_wait_ms += read_wait_ms;
      }
      if (flying.size() >= calls) hand_over_oldest();
    }
  } catch (...) {
    wait_all();
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::current_exception();
    cv_.notify_all();
  }
}

bool GpuImageLoader::next(Batch& out) {
  std::unique_ptr<Ready> r;
  {
    std::unique_lock<std::mutex> lock(mu_);
    const int64_t batches = batches_per_epoch();
    cv_.wait(lock, [&] { return error_ || taken_ >= batches || !queue_.empty(); });
    if (error_) std::rethrow_exception(error_);
    if (taken_ >= batches) return false;
    r = std::move(queue_.front());
    queue_.pop_front();
    TRAINER_CHECK(r->epoch == current_.epoch, "GpuImageLoader: a batch of epoch ", r->epoch, " in epoch ",
                  current_.epoch);
    ++taken_;
  }
  cv_.notify_all();
#ifdef TRAINER_WITH_NVJPEG
  const auto main = c10::cuda::getCurrentCUDAStream(device_.index());
  r->done.block(main);
  r->batch.images.record_stream(main);
  r->batch.labels.record_stream(main);
#endif
  out = std::move(r->batch);
  return true;
}

void GpuImageLoader::set_epoch(int64_t epoch, int64_t start_batch) {
  {  // the epoch the producer has gone on with: keep what it has made
    std::lock_guard<std::mutex> lock(mu_);
    if (thread_.joinable() && !stop_ && !error_ && opt_.train && start_batch == 0 && epoch == current_.epoch + 1 &&
        taken_ >= batches_per_epoch() && producing_.epoch == epoch) {
      current_ = producing_;
      taken_ = 0;
      cv_.notify_all();
      return;
    }
  }
  stop();
  if (ahead_->pending.valid()) ahead_->pending.wait();
  ahead_->pending = {};
  ahead_->cursor = -1;
  producing_ = make_cursor(epoch, start_batch);
  current_ = producing_;
  taken_ = producing_.cursor / opt_.batch_size;
  start();
}

// ---- making one batch ----

#ifdef TRAINER_WITH_NVJPEG
void GpuImageLoader::produce(const EpochCursor& p, Ready& r) {
  const int64_t B = std::min(opt_.batch_size, p.total - p.cursor);
  const auto t_read = Clock::now();
  FileBatch& files = take_files(p, B);
  const double read_wait_ms = ms_since(t_read);
  make(p, files, *decoder_, r);
  std::lock_guard<std::mutex> lock(mu_);
  stats_.host_read_wait_ms += read_wait_ms;
}

void GpuImageLoader::make(const EpochCursor& p, FileBatch& files, GpuJpegDecoder& decoder, Ready& r) {
  const int64_t B = std::min(opt_.batch_size, p.total - p.cursor);
  const std::vector<int64_t> indices(p.order->begin() + p.cursor, p.order->begin() + p.cursor + B);

  // data.gpu_decode_priority: the training step's priority by default (bench/NOTES.md)
  const auto side =
      sms_ ? sms_->Stream() : c10::cuda::getStreamFromPool(opt_.decode_high_priority, device_.index());
  c10::cuda::CUDAStreamGuard guard(side);
  auto times = std::make_unique<BatchTimes>();
  times->started.record(side);
  const auto t_decode = Clock::now();
  Decoded d = decode(files, indices, decoder, *times);
  // the files' and mosaics' pinned buffers are not reused before the side stream is past the decode
  for (const torch::Tensor* b : {&files.pinned, &files.mosaic_pinned})
    if (b->defined() && b->numel() > 0)
      at::getHostAllocator(at::kCUDA)->record_event(b->data_ptr(), b->storage().data_ptr().get_context(),
                                                     side.unwrap());
  substitute_failures(d);
  const double decode_host_ms = ms_since(t_decode);
  times->decoded.record(side);

  const auto t_augment = Clock::now();
  r.batch.images = crop_resize_normalize(d, p.epoch);
  std::vector<int64_t> labels(d.index.size());
  for (size_t i = 0; i < labels.size(); ++i)
    labels[i] = d.index[i] < 0 ? -1 : samples_[static_cast<size_t>(d.index[i])].label;
  r.batch.labels = upload(torch::tensor(labels, torch::kInt64), device_);
  r.batch.indices = std::move(d.index);
  const double augment_host_ms = ms_since(t_augment);
  r.done.record(side);
  times->done.record(side);

  std::lock_guard<std::mutex> lock(mu_);
  stats_.host_decode_ms += decode_host_ms;
  stats_.host_nvjpeg_call_ms += d.nvjpeg_call_ms;
  stats_.host_after_call_ms += d.host_after_call_ms;
  stats_.host_upload_ms += d.upload_ms;
  stats_.host_augment_ms += augment_host_ms;
  stats_.ahead_ms += files.host_ms;
  stats_.ahead_read_ms += files.read_ms;
  stats_.ahead_parse_ms += files.parse_ms;
  stats_.ahead_share_ms += files.share_ms;
  stats_.ahead_size_ms += files.size_ms;
  stats_.ahead_share_cpu_ms += files.share_cpu_ms;
  stats_.ahead_share_images += files.share_images;
  ++stats_.host_batches;
  stats_.gpu += d.by_gpu;
  stats_.gpu_cropped += d.cropped;
  stats_.gpu_tiled += d.tiled;
  stats_.gpu_mosaics += static_cast<int64_t>(files.mosaics.size());
  for (const JpegMosaic& m : files.mosaics) {
    stats_.mosaic_mcus += m.tile_mcus + m.filler_mcus;
    stats_.mosaic_filler_mcus += m.filler_mcus;
  }
  stats_.ahead_mosaic_ms += files.mosaic_ms;
  stats_.cpu_fallback += d.by_cpu - d.by_hybrid;
  stats_.cpu_hybrid += d.by_hybrid;
  split_.observe_host(files.share_images, files.host_ms);
  stats_.host_share = files.share;
  times->by_gpu = d.by_gpu;
  times_.push_back(std::move(times));
  collect_times();
}

void GpuImageLoader::collect_times() {
  while (!times_.empty() && times_.front()->done.query()) {
    const BatchTimes& t = *times_.front();
    stats_.decode_ms += t.started.elapsed_time(t.decoded);
    split_.observe_gpu(t.by_gpu, t.started.elapsed_time(t.engines));
    stats_.augment_ms += t.decoded.elapsed_time(t.done);
    ++stats_.batches;
    times_.pop_front();
  }
}
#else
void GpuImageLoader::produce(const EpochCursor&, Ready&) { TRAINER_FAIL("data.decode: gpu: this build has no nvJPEG"); }
void GpuImageLoader::make(const EpochCursor&, FileBatch&, GpuJpegDecoder&, Ready&) {
  TRAINER_FAIL("data.decode: gpu: this build has no nvJPEG");
}
void GpuImageLoader::collect_times() {}
#endif

GpuImageLoader::FileBatch GpuImageLoader::read_files(const EpochCursor& q, int64_t count) const {
  const int threads = std::max(1, opt_.workers);
  const std::vector<int64_t>& order = *q.order;
  const int64_t from = q.cursor;
  const auto t = Clock::now();
  FileBatch r;
  std::vector<const ImageSample*> samples(static_cast<size_t>(count));
  for (size_t i = 0; i < samples.size(); ++i) samples[i] = &samples_[static_cast<size_t>(order[from + i])];
  // straight into pinned memory (the host allocator's cached blocks: no pages to fault in), which the engines read
  BatchBytes bytes = read_batch(samples, threads, [&r](size_t n) {
    r.pinned = torch::empty({static_cast<int64_t>(n)},
                            torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(true));
    return r.pinned.data_ptr<uint8_t>();
  });
  r.files = std::move(bytes.files);
  r.read_errors = std::move(bytes.errors);
  r.size_ms = bytes.size_ms;
  r.read_ms = bytes.read_ms;
  // training, hybrid: the CPU threads' share, decoded (below) while the headers of the rest are parsed for nvJPEG
  const std::vector<int64_t> share = opt_.train ? pick_share(q, r) : std::vector<int64_t>{};
  r.in = r.files;
  for (int64_t i : share) r.in[static_cast<size_t>(i)] = {nullptr, 0};
  std::future<void> decoding;
  if (!share.empty()) decoding = std::async(std::launch::async, [&] {
    become_data_thread();
    decode_share(q, share, r);
  });
  // crop-only decode in training: the sample's crop window (the draw crop_resize_normalize makes) is all the engines
  // decode; evaluation resizes the whole image before it crops (gpu_eval_resize)
  GpuJpegDecoder::RoiFn roi_of;
  if (opt_.crop_decode && opt_.train)
    roi_of = [this, &order, from, epoch = q.epoch](size_t i, int w, int h) {
      bool flip = false;
      return window(order[static_cast<size_t>(from) + i], epoch, w, h, &flip);
    };
  const auto t_parse = Clock::now();
  try {
    if (roi_of && opt_.decode_mosaic > 1) lay_out_mosaics(q, r, threads);
    // the share's and the mosaics' files (no bytes here) come back unsupported
    r.info = decoder_->inspect(r.in, threads, roi_of);
  } catch (...) {
    if (decoding.valid()) decoding.wait();
    throw;
  }
  r.parse_ms = ms_since(t_parse);
  if (decoding.valid()) decoding.get();
  r.host_ms = ms_since(t);
  return r;
}

void GpuImageLoader::lay_out_mosaics(const EpochCursor& q, FileBatch& r, int threads) const {
  const auto t = Clock::now();
  const size_t B = r.files.size();
  r.mosaic_of.assign(B, -1);
  r.tile_frame.assign(B, Rect{});
  // the files that can be tiled together, each with its window, grouped by their coding tables in batch order
  std::vector<std::string> keys(B);
  std::vector<Rect> windows(B);
  parallel_for(static_cast<int64_t>(B), threads, [&](int64_t j) {
    const auto i = static_cast<size_t>(j);
    const auto& f = r.in[i];  // neither the hybrid share nor a file that could not be read
    JpegFrame frame;
    if (!f.first || !read_jpeg_frame(f.first, f.second, frame) || !frame.cuttable) return;
    keys[i] = mosaic_key(f.first, f.second);
    bool flip = false;
    windows[i] = window((*q.order)[static_cast<size_t>(q.cursor) + i], q.epoch, frame.width, frame.height, &flip);
    r.tile_frame[i] = Rect{0, 0, frame.width, frame.height};
  });
  std::map<std::string, std::vector<size_t>> alike;
  for (size_t i = 0; i < B; ++i)
    if (!keys[i].empty()) alike[keys[i]].push_back(i);
  const size_t k = static_cast<size_t>(opt_.decode_mosaic);
  std::vector<std::vector<size_t>> groups;
  for (const auto& [key, files] : alike)
    for (size_t at = 0; at + 1 < files.size(); at += k)  // a last one left alone is decoded on its own
      groups.emplace_back(files.begin() + static_cast<std::ptrdiff_t>(at),
                          files.begin() + static_cast<std::ptrdiff_t>(std::min(files.size(), at + k)));
  std::vector<JpegMosaic> built(groups.size());
  std::vector<char> ok(groups.size(), 0);
  parallel_for(static_cast<int64_t>(groups.size()), threads, [&](int64_t g) {
    std::vector<MosaicPiece> pieces;
    for (size_t i : groups[static_cast<size_t>(g)])
      pieces.push_back({r.in[i].first, r.in[i].second, windows[i], &keys[i]});
    ok[static_cast<size_t>(g)] = build_jpeg_mosaic(pieces, built[static_cast<size_t>(g)]);
  });
  for (size_t g = 0; g < groups.size(); ++g) {
    if (!ok[g]) continue;  // decoded one by one, whose decode reports any corruption
    for (size_t j = 0; j < groups[g].size(); ++j) {
      const size_t i = groups[g][j];
      const MosaicTile& tile = built[g].tiles[j];
      r.mosaic_of[i] = static_cast<int>(r.mosaics.size());
      r.tile_frame[i].x = tile.at.x - tile.x;
      r.tile_frame[i].y = tile.at.y - tile.y;
      r.in[i] = {nullptr, 0};
    }
    r.mosaics.push_back(std::move(built[g]));
  }
  if (r.mosaics.empty()) {
    r.mosaic_ms = ms_since(t);
    return;
  }
  // into pinned memory, as the files are, for the engines' copies
  size_t total = 0;
  for (const JpegMosaic& m : r.mosaics) total += m.bytes.size();
  r.mosaic_pinned = torch::empty({static_cast<int64_t>(total)},
                                 torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(true));
  uint8_t* at = r.mosaic_pinned.data_ptr<uint8_t>();
  for (const JpegMosaic& m : r.mosaics) {
    r.mosaic_in.push_back({at, m.bytes.size()});
    at += m.bytes.size();
  }
  parallel_for(static_cast<int64_t>(r.mosaics.size()), threads, [&](int64_t m) {
    const auto& b = r.mosaics[static_cast<size_t>(m)].bytes;
    std::memcpy(const_cast<uint8_t*>(r.mosaic_in[static_cast<size_t>(m)].first), b.data(), b.size());
  });
  r.mosaic_info = decoder_->inspect(r.mosaic_in, threads);  // whole: each is all crop windows
  r.mosaic_ms = ms_since(t);
}

std::vector<int64_t> GpuImageLoader::pick_share(const EpochCursor& q, FileBatch& r) const {
  const auto B = static_cast<int64_t>(r.files.size());
  r.share_slot.assign(static_cast<size_t>(B), -1);
  // candidates: the JPEGs that were read (what nvJPEG does not take among them is the CPU's either way), each at
  // what its crop decode costs the CPU threads (decode_split.h): the share is the cheapest k
  std::vector<char> jpeg(static_cast<size_t>(B), 0);
  std::vector<double> cost(static_cast<size_t>(B), 0);
  int64_t candidates = 0;
  for (size_t i = 0; i < jpeg.size(); ++i) {
    const auto& f = r.files[i];
    jpeg[i] = f.second >= 4 && sniff_format(f.first, f.second) == ImageFormat::jpeg;
    if (!jpeg[i]) continue;
    ++candidates;
    JpegFrame frame;
    cost[i] = static_cast<double>(f.second);  // a frame we cannot read, or progressive: the whole file
    if (!read_jpeg_frame(f.first, f.second, frame) || frame.progressive) continue;
    bool flip = false;
    const Rect w = window((*q.order)[static_cast<size_t>(q.cursor) + i], q.epoch, frame.width, frame.height, &flip);
    const double area = double(w.w) * w.h / (double(frame.width) * frame.height);
    const double bottom = double(std::min(w.y + w.h, frame.height)) / frame.height;
    cost[i] = host_decode_cost(f.second, area, bottom, frame.cuttable, opt_.crop_decode);
  }
  int64_t k;
  {
    std::lock_guard<std::mutex> lock(mu_);
    k = split_.host_count(candidates);
  }
  const std::vector<int64_t> at = cheapest(cost, jpeg, k);
  for (size_t j = 0; j < at.size(); ++j) r.share_slot[static_cast<size_t>(at[j])] = static_cast<int>(j);
  r.share_images = static_cast<int64_t>(at.size());
  r.share = candidates > 0 ? static_cast<double>(at.size()) / static_cast<double>(candidates) : 0;
  return at;
}

void GpuImageLoader::decode_share(const EpochCursor& q, const std::vector<int64_t>& at, FileBatch& r) const {
  const auto t = Clock::now();
  const int64_t S = opt_.image_size, k = static_cast<int64_t>(at.size());
  r.outputs = torch::empty({k, S, S, 3}, torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(true));
  r.share_errors.resize(r.files.size());
  uint8_t* out = r.outputs.data_ptr<uint8_t>();
  std::vector<double> spent(static_cast<size_t>(k), 0);
  const int threads = std::max(1, opt_.workers);
  // a decoder and a decode buffer per thread, as the CPU loader's threads keep theirs
  std::unique_ptr<JpegDecoder[]> jpeg(new JpegDecoder[static_cast<size_t>(threads)]);
  std::vector<RgbImage> img(static_cast<size_t>(threads));
  parallel_for_workers(k, threads, [&](int64_t j, int w) {
    const auto t_image = Clock::now();
    const auto i = static_cast<size_t>(at[static_cast<size_t>(j)]);
    const int64_t index = (*q.order)[static_cast<size_t>(q.cursor) + i];
    try {
      decode_sample_output(opt_, index, q.epoch, r.files[i].first, r.files[i].second,
                           samples_[static_cast<size_t>(index)].name(), jpeg[static_cast<size_t>(w)],
                           img[static_cast<size_t>(w)], out + j * S * S * 3);
    } catch (const Error& e) {
      r.share_errors[i] = e.what();
    }
    spent[static_cast<size_t>(j)] = ms_since(t_image);
  });
  r.share_ms = ms_since(t);
  for (double v : spent) r.share_cpu_ms += v;
}

GpuImageLoader::FileBatch& GpuImageLoader::take_files(const EpochCursor& p, int64_t count) {
  ReadAhead& a = *ahead_;
  if (a.pending.valid() && a.epoch == p.epoch && a.cursor == p.cursor)
    a.current = a.pending.get();
  else
    a.current = read_files(p, count);
  // read the next batch while this one decodes: of this epoch, or (training) the first of the next
  EpochCursor next = p;
  next.cursor += count;
  if (next.cursor >= next.total && opt_.train) next = following(p.epoch);
  if (next.cursor < next.total) {
    a.epoch = next.epoch;
    a.cursor = next.cursor;
    const int64_t n = std::min(opt_.batch_size, next.total - next.cursor);
    a.pending = std::async(std::launch::async, [this, next, n] {
      become_data_thread();
      return read_files(next, n);
    });
  }
  return a.current;
}

GpuImageLoader::Decoded GpuImageLoader::decode(const FileBatch& files, const std::vector<int64_t>& indices,
                                               GpuJpegDecoder& decoder, BatchTimes& times) {
  const size_t B = indices.size();
  const int threads = std::max(1, opt_.workers);
  Decoded d;
  d.index = indices;
  d.errors.resize(B);
  d.frame.resize(B);
  d.final.assign(B, 0);
  std::vector<RgbImage> host(B);
  auto decode_on_host_threads = [&](const std::vector<size_t>& which) {
    parallel_for(static_cast<int64_t>(which.size()), threads, [&](int64_t j) {
      const size_t i = which[static_cast<size_t>(j)];
      if (!files.read_errors[i].empty()) {
        d.errors[i] = files.read_errors[i];
        return;
      }
      try {
        decode_on_host(files.files[i].first, files.files[i].second, samples_[static_cast<size_t>(indices[i])].name(),
                       host[i]);
      } catch (const Error& e) {
        d.errors[i] = e.what();
      }
    });
  };
  // what nvJPEG cannot take: decoded by the CPU threads while the engines decode the rest (the hybrid share was
  // decoded ahead, decode_share)
  std::vector<GpuJpegDecoder::Info> info = files.info;
  std::vector<size_t> on_host;
  for (size_t i = 0; i < B; ++i) {
    if (in_share(files, i)) info[i].supported = false;
    else if (!info[i].supported && !in_mosaic(files, i)) on_host.push_back(i);
  }
  auto host_part = std::async(std::launch::async, [&] {
    become_data_thread();
    decode_on_host_threads(on_host);
  });
  const auto t_call = Clock::now();
  try {
    // on the current (side) stream, in one call: the files on their own, then the mosaics
    GpuJpegDecoder::Files in = files.in;
    in.insert(in.end(), files.mosaic_in.begin(), files.mosaic_in.end());
    info.insert(info.end(), files.mosaic_info.begin(), files.mosaic_info.end());
    d.images = decoder.decode(in, info);
    info.resize(B);
    times.engines_done();
  } catch (...) {
    host_part.wait();
    throw;
  }
  d.nvjpeg_call_ms = ms_since(t_call);
  const auto t_after = Clock::now();
  host_part.get();
  d.host_after_call_ms = ms_since(t_after);
  // a mosaic's tiles are views of it; a batch nvJPEG refused as a whole (one bad bitstream fails it) goes to the CPU
  // threads too, the mosaics' files as files
  d.images.resize(B + files.mosaics.size());
  const std::vector<torch::Tensor> mosaics(d.images.begin() + static_cast<std::ptrdiff_t>(B), d.images.end());
  d.images.resize(B);
  std::vector<char> tiled(B, 0);
  std::vector<size_t> refused;
  for (size_t i = 0; i < B; ++i) {
    if (in_mosaic(files, i) && mosaics[static_cast<size_t>(files.mosaic_of[i])].defined()) {
      d.images[i] = mosaics[static_cast<size_t>(files.mosaic_of[i])];
      tiled[i] = 1;
    } else if ((info[i].supported || in_mosaic(files, i)) && !d.images[i].defined()) {
      refused.push_back(i);
    }
  }
  decode_on_host_threads(refused);
  on_host.insert(on_host.end(), refused.begin(), refused.end());
  d.by_gpu = static_cast<int64_t>(B - on_host.size()) - files.share_images;
  std::vector<size_t> decoded;
  for (size_t i : on_host)
    if (d.errors[i].empty()) decoded.push_back(i);
  const auto t_upload = Clock::now();
  const std::vector<torch::Tensor> uploaded = upload_images(host, decoded, threads, device_);
  for (size_t j = 0; j < decoded.size(); ++j) d.images[decoded[j]] = uploaded[j];
  d.by_cpu += static_cast<int64_t>(decoded.size());
  take_share(files, d);
  d.upload_ms = ms_since(t_upload);
  const int S = static_cast<int>(opt_.image_size);
  for (size_t i = 0; i < B; ++i) {
    const torch::Tensor& t = d.images[i];
    if (!t.defined()) continue;
    const auto& inf = info[i];
    if (d.final[i]) {
      d.frame[i] = Rect{0, 0, S, S};
    } else if (tiled[i]) {
      d.frame[i] = files.tile_frame[i];
      ++d.cropped;
      ++d.tiled;
    } else if (inf.supported && inf.roi.w > 0 && t.size(1) == inf.roi.w && t.size(0) == inf.roi.h) {
      d.frame[i] = Rect{inf.roi.x, inf.roi.y, inf.width, inf.height};
      ++d.cropped;
    } else {
      d.frame[i] = Rect{0, 0, static_cast<int>(t.size(1)), static_cast<int>(t.size(0))};
    }
  }
  return d;
}

bool GpuImageLoader::in_share(const FileBatch& files, size_t i) {
  return i < files.share_slot.size() && files.share_slot[i] >= 0;
}

bool GpuImageLoader::in_mosaic(const FileBatch& files, size_t i) {
  return i < files.mosaic_of.size() && files.mosaic_of[i] >= 0;
}

void GpuImageLoader::take_share(const FileBatch& files, Decoded& d) const {
  if (files.share_images == 0) return;
  const torch::Tensor on_device = files.outputs.to(device_, /*non_blocking=*/true);  // one copy for the share
  for (size_t i = 0; i < files.share_slot.size(); ++i) {
    if (!in_share(files, i)) continue;
    if (!files.share_errors[i].empty()) {  // to the bad-sample policy, as a failed decode on either side
      d.errors[i] = files.share_errors[i];
      continue;
    }
    d.images[i] = on_device[files.share_slot[i]];
    d.final[i] = 1;
    ++d.by_cpu;
    ++d.by_hybrid;
  }
}

void GpuImageLoader::substitute_failures(Decoded& d) {
  for (size_t i = 0; i < d.images.size(); ++i) {
    int64_t index = d.index[i];
    for (int attempt = 1; !d.images[i].defined(); ++attempt) {
      bad_.report(samples_[static_cast<size_t>(index)].name(), d.errors[i]);
      if (!opt_.train) {  // left out
        d.images[i] = black_;
        d.frame[i] = Rect{0, 0, 1, 1};
        d.final[i] = 0;
        d.index[i] = -1;
        break;
      }
      TRAINER_CHECK(attempt < kMaxBadInARow, kMaxBadInARow, " bad samples in a row, the last: ", d.errors[i]);
      index = substitute_sample(index, attempt, samples_.size());
      try {
        const ImageSample& s = samples_[static_cast<size_t>(index)];
        std::vector<uint8_t> bytes;
        read_sample_bytes(s, bytes);
        RgbImage img;
        decode_on_host(bytes.data(), bytes.size(), s.name(), img);
        d.images[i] = upload_image(img, device_);
        d.frame[i] = Rect{0, 0, img.width, img.height};
        d.final[i] = 0;
        d.index[i] = index;
        ++d.by_cpu;
      } catch (const Error& e) {
        d.errors[i] = e.what();
      }
    }
  }
}

torch::Tensor GpuImageLoader::crop_resize_normalize(const Decoded& d, int64_t epoch) {
  if (!opt_.train) {  // torchvision's resize then centre crop of the whole images, normalised by the resize kernel's
    GpuResizeOutput how = normalized_;  // rules (a left-out sample's 1 x 1 black image gives black)
    how.filter = opt_.eval_filter;
    return gpu_eval_resize(d.images, opt_.image_size, opt_.crop_pct, how);
  }
  const size_t B = d.images.size();
  std::vector<Rect> windows(B);
  std::vector<char> flips(B, 0);
  for (size_t i = 0; i < B; ++i) {
    if (d.index[i] < 0) {  // left out: its black pixel
      windows[i] = Rect{0, 0, 1, 1};
      continue;
    }
    const Rect& f = d.frame[i];
    if (d.final[i]) {  // the hybrid share: already cropped, resized and flipped
      windows[i] = f;
      continue;
    }
    bool flip = false;
    Rect w = window(d.index[i], epoch, f.w, f.h, &flip);
    w.x -= f.x;  // into the decoded region's coordinates (the region is this window where it was crop-decoded)
    w.y -= f.y;
    windows[i] = w;
    flips[i] = flip ? 1 : 0;
  }
  const BatchAugmenter augmenter(opt_.augment, opt_.seed);
  const bool plain = !(opt_.train && augmenter.enabled());  // nothing between the resize and the normalisation
  const bool fused = plain && gpu_crop_resize_kernel_available();  // normalised and laid out by the resize kernel
  GpuResizeOutput how = fused ? normalized_ : GpuResizeOutput{};
  how.filter = opt_.train ? Interpolation::bilinear : opt_.eval_filter;
  torch::Tensor x = gpu_crop_resize(d.images, windows, flips, opt_.image_size, gpu_crop_resize_kernel_available(), how);
  if (!fused) {
    augmenter.augment_and_normalize_(x, d.index, epoch, opt_.train, mean255_, inv_std255_);
    x = batch_layout(x, opt_.dtype, opt_.channels_last);
  }
  return x;
}

}  // namespace trainer
