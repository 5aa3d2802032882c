#include "data/gpu_jpeg.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "core/check.h"
#include "core/log.h"
#include "core/parallel.h"
#include "core/random.h"
#include "data/device_upload.h"
#include "data/image_ops.h"
#include "data/jpeg_decoder.h"
#include "data/sharding.h"

#ifdef TRAINER_WITH_NVJPEG
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/core/CachingHostAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <nvjpeg.h>
#endif
#ifdef TRAINER_WITH_KERNELS
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "crop_resize.h"
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
  // Two decode states used in turn, so a batch can be submitted while the previous one is still decoding; a state
  // is reused only after the event recorded behind its last decode has passed. Two suffice: more states, more
  // batches' conversions pending at once, are no faster eagerly and slower with a captured step (bench/NOTES.md).
  struct Slot {
    nvjpegJpegState_t state = nullptr;
    cudaEvent_t done = nullptr;
    std::vector<nvjpegDecodeParams_t> params;  // per image of a batch with regions
  };
  std::vector<Slot> slots;
  size_t turn = 0;
  // The engines write a batch's pixels when nvjpegDecodeBatched is called, not in stream order (torchcodec
  // #1634: with work queued, the call returns at once and the output is already written). A buffer from the
  // caching allocator on the decode's stream may be a block freed there with reads of it still queued; so the
  // output buffers come from this stream, on which nothing is ever queued, and are marked as used on the decode's
  // stream (record_stream): a freed buffer goes back to the pool only once those uses have run. One such stream
  // per device for the process, never destroyed (buffers allocated on it may outlive any decoder).
  cudaStream_t alloc_stream = nullptr;
  bool hardware = false;
  // interleaved RGB: planar output is no faster, end to end or alone (bench/NOTES.md)
  const nvjpegOutputFormat_t format = NVJPEG_OUTPUT_RGBI;
  std::mutex parse_mu;                          // inspect() calls, one at a time
  std::vector<nvjpegJpegStream_t> parsers;      // one bitstream parser per inspecting thread
  std::vector<nvjpegDecodeParams_t> checks;     // and its region for the engines' support check

  nvjpegDecodeParams_t new_params() {
    nvjpegDecodeParams_t p = nullptr;
    TRAINER_NVJPEG(nvjpegDecodeParamsCreate(handle, &p), "decode params create");
    TRAINER_NVJPEG(nvjpegDecodeParamsSetOutputFormat(p, format), "decode params format");
    return p;
  }
};

GpuJpegDecoder::GpuJpegDecoder(torch::Device device) : impl_(std::make_unique<Impl>()), device_(device) {
  TRAINER_CHECK(device.is_cuda(), "data.decode: gpu needs a CUDA device");
  c10::cuda::CUDAGuard guard(device.index());
  if (nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, nullptr, nullptr, 0, &impl_->handle) == NVJPEG_STATUS_SUCCESS) {
    impl_->hardware = true;
  } else {
    TRAINER_NVJPEG(nvjpegCreateEx(NVJPEG_BACKEND_DEFAULT, nullptr, nullptr, 0, &impl_->handle), "create");
  }
  {
    static std::mutex mu;
    static std::map<int, cudaStream_t> streams;
    std::lock_guard<std::mutex> lock(mu);
    cudaStream_t& st = streams[device.index()];
    if (!st)
      TRAINER_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) == cudaSuccess, "cudaStreamCreate failed");
    impl_->alloc_stream = st;
  }
  impl_->slots.resize(2);
  for (auto& slot : impl_->slots) {
    TRAINER_NVJPEG(nvjpegJpegStateCreate(impl_->handle, &slot.state), "state create");
    TRAINER_CHECK(cudaEventCreateWithFlags(&slot.done, cudaEventDisableTiming) == cudaSuccess,
                  "cudaEventCreate failed");
  }
}

GpuJpegDecoder::~GpuJpegDecoder() {
  for (auto& slot : impl_->slots) {
    if (slot.done) {
      cudaEventSynchronize(slot.done);
      cudaEventDestroy(slot.done);
    }
    for (nvjpegDecodeParams_t p : slot.params) nvjpegDecodeParamsDestroy(p);
    if (slot.state) nvjpegJpegStateDestroy(slot.state);
  }
  for (nvjpegDecodeParams_t p : impl_->checks) nvjpegDecodeParamsDestroy(p);
  for (nvjpegJpegStream_t p : impl_->parsers) nvjpegJpegStreamDestroy(p);
  if (impl_->handle) nvjpegDestroy(impl_->handle);
}

bool GpuJpegDecoder::hardware() const { return impl_->hardware; }

void GpuJpegDecoder::preallocate(int batch) {
  if (!impl_->hardware || batch < 1) return;
  c10::cuda::CUDAGuard guard(device_.index());
  // size hints of 1 x 1: the call is what sets the engines' memory pool up; it grows to the files' sizes
  for (auto& slot : impl_->slots)
    TRAINER_NVJPEG(nvjpegDecodeBatchedPreAllocate(impl_->handle, slot.state, batch, 1, 1, NVJPEG_CSS_444,
                                                  impl_->format),
                   "batched pre-allocation");
}

std::vector<GpuJpegDecoder::Info> GpuJpegDecoder::inspect(const Files& files, int threads, const RoiFn& roi_of) {
  std::lock_guard<std::mutex> lock(impl_->parse_mu);
  threads = std::max(1, std::min<int>(threads, static_cast<int>(files.size())));
  while (static_cast<int>(impl_->parsers.size()) < threads) {
    nvjpegJpegStream_t p = nullptr;
    TRAINER_NVJPEG(nvjpegJpegStreamCreate(impl_->handle, &p), "stream create");
    impl_->parsers.push_back(p);
    impl_->checks.push_back(impl_->new_params());
  }
  std::vector<Info> info(files.size());
  parallel_for_workers(static_cast<int64_t>(files.size()), threads, [&](int64_t i, int worker) {
    const auto* p = files[static_cast<size_t>(i)].first;
    const size_t n = files[static_cast<size_t>(i)].second;
    if (!p || n < 4 || sniff_format(p, n) != ImageFormat::jpeg) return;
    int comps = 0;
    nvjpegChromaSubsampling_t ss;
    int w[NVJPEG_MAX_COMPONENT] = {0}, h[NVJPEG_MAX_COMPONENT] = {0};
    if (nvjpegGetImageInfo(impl_->handle, p, n, &comps, &ss, w, h) != NVJPEG_STATUS_SUCCESS) return;
    if ((comps != 1 && comps != 3) || w[0] <= 0 || h[0] <= 0 || int64_t(w[0]) * h[0] > kMaxImagePixels) return;
    Rect roi;
    if (impl_->hardware) {
      nvjpegJpegStream_t parser = impl_->parsers[static_cast<size_t>(worker)];
      if (nvjpegJpegStreamParseHeader(impl_->handle, p, n, parser) != NVJPEG_STATUS_SUCCESS) return;
      if (roi_of) roi = roi_of(static_cast<size_t>(i), w[0], h[0]);
      const bool part = roi.w > 0 && roi.h > 0 && !(roi.x == 0 && roi.y == 0 && roi.w == w[0] && roi.h == h[0]);
      int unsupported = 1;
      if (part) {  // the engines' word on this region; where they refuse it, the whole image
        nvjpegDecodeParams_t check = impl_->checks[static_cast<size_t>(worker)];
        if (roi.x < 0 || roi.y < 0 || roi.x + roi.w > w[0] || roi.y + roi.h > h[0] ||
            nvjpegDecodeParamsSetROI(check, roi.x, roi.y, roi.w, roi.h) != NVJPEG_STATUS_SUCCESS ||
            nvjpegDecodeBatchedSupportedEx(impl_->handle, parser, check, &unsupported) != NVJPEG_STATUS_SUCCESS)
          unsupported = 1;
      }
      if (unsupported != 0) {
        roi = Rect{};
        if (nvjpegDecodeBatchedSupported(impl_->handle, parser, &unsupported) != NVJPEG_STATUS_SUCCESS ||
            unsupported != 0)
          return;
      }
    }
    info[static_cast<size_t>(i)] = Info{w[0], h[0], true, roi, static_cast<int>(ss)};
  });
  return info;
}

std::vector<torch::Tensor> GpuJpegDecoder::decode(const Files& files, const std::vector<Info>& info) {
  TRAINER_CHECK(info.size() == files.size(), "GpuJpegDecoder::decode: one info per file");
  std::vector<torch::Tensor> out(files.size());
  // submission order: alike files together (chroma subsampling, then size), as the engines prefer
  std::vector<size_t> which;
  bool regions = false;
  for (size_t i = 0; i < files.size(); ++i) {
    if (!info[i].supported) continue;
    which.push_back(i);
    regions = regions || info[i].roi.w > 0;
  }
  if (which.empty()) return out;
  std::stable_sort(which.begin(), which.end(), [&](size_t a, size_t b) {
    const Info &x = info[a], &y = info[b];
    if (x.chroma != y.chroma) return x.chroma < y.chroma;
    return int64_t(x.width) * x.height > int64_t(y.width) * y.height;
  });
  Impl::Slot& slot = impl_->slots[impl_->turn];
  impl_->turn = (impl_->turn + 1) % impl_->slots.size();
  auto& params = slot.params;
  if (regions)
    while (params.size() < which.size()) params.push_back(impl_->new_params());
  std::vector<const unsigned char*> data;
  std::vector<size_t> lengths;
  std::vector<nvjpegImage_t> dst;
  // one device buffer for the batch, each image a view of it
  auto dims = [&](size_t i) {
    const Rect& r = info[i].roi;
    return r.w > 0 ? std::make_pair(r.w, r.h) : std::make_pair(info[i].width, info[i].height);
  };
  int64_t total = 0;
  for (size_t i : which) total += int64_t(dims(i).first) * dims(i).second * 3;
  const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(device_.index());
  torch::Tensor buffer;
  {
    c10::cuda::CUDAStreamGuard on(c10::cuda::getStreamFromExternal(impl_->alloc_stream, device_.index()));
    buffer = torch::empty({total}, torch::TensorOptions().dtype(torch::kUInt8).device(device_));
  }
  buffer.record_stream(current);
  int64_t offset = 0;
  for (size_t j = 0; j < which.size(); ++j) {
    const size_t i = which[j];
    const Rect& r = info[i].roi;
    const bool part = r.w > 0;
    const auto [w, h] = dims(i);
    const torch::Tensor bytes = buffer.narrow(0, offset, int64_t(w) * h * 3);
    offset += int64_t(w) * h * 3;
    torch::Tensor t = bytes.view({h, w, 3});
    nvjpegImage_t img{};
    img.channel[0] = t.data_ptr<uint8_t>();
    img.pitch[0] = static_cast<size_t>(w) * 3;
    data.push_back(files[i].first);
    lengths.push_back(files[i].second);
    dst.push_back(img);
    if (regions)
      TRAINER_NVJPEG(part ? nvjpegDecodeParamsSetROI(params[j], r.x, r.y, r.w, r.h)
                          : nvjpegDecodeParamsSetROI(params[j], 0, 0, -1, -1),
                     "set region");
    out[i] = t;
  }
  const cudaStream_t s = current.stream();
  TRAINER_CHECK(cudaEventSynchronize(slot.done) == cudaSuccess, "nvJPEG: an earlier decode failed on the device");
  bool ok = nvjpegDecodeBatchedInitialize(impl_->handle, slot.state, static_cast<int>(data.size()), 1,
                                          impl_->format) == NVJPEG_STATUS_SUCCESS;
  if (ok && regions)
    ok = nvjpegDecodeBatchedEx(impl_->handle, slot.state, data.data(), lengths.data(), dst.data(),
                               params.data(), s) == NVJPEG_STATUS_SUCCESS;
  else if (ok)
    ok = nvjpegDecodeBatched(impl_->handle, slot.state, data.data(), lengths.data(), dst.data(), s) ==
         NVJPEG_STATUS_SUCCESS;
  cudaEventRecord(slot.done, s);
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
std::vector<GpuJpegDecoder::Info> GpuJpegDecoder::inspect(const Files&, int, const RoiFn&) { return {}; }
void GpuJpegDecoder::preallocate(int) {}
std::vector<torch::Tensor> GpuJpegDecoder::decode(const Files&, const std::vector<Info>&) { return {}; }
#endif

// ---- crop + resize + flip of a batch ----

GpuResizeOutput GpuResizeOutput::normalized(const std::vector<double>& mean, const std::vector<double>& std,
                                            bool channels_last, torch::ScalarType dtype) {
  TRAINER_CHECK(mean.size() == 3 && std.size() == 3, "GpuResizeOutput: three means and three stds");
  GpuResizeOutput o;
  o.normalize = true;
  for (size_t c = 0; c < 3; ++c) {
    o.mean255[c] = static_cast<float>(255.0 * mean[c]);
    o.inv_std255[c] = static_cast<float>(1.0 / (255.0 * std[c]));
  }
  o.channels_last = channels_last;
  o.dtype = dtype;
  return o;
}

bool gpu_crop_resize_kernel_available() {
#ifdef TRAINER_WITH_KERNELS
  return true;
#else
  return false;
#endif
}

torch::Tensor gpu_crop_resize(const std::vector<torch::Tensor>& images, const std::vector<Rect>& windows,
                              const std::vector<char>& flips, int64_t size, bool batched_kernel,
                              const GpuResizeOutput& norm) {
  TRAINER_CHECK(!images.empty() && images.size() == windows.size() && images.size() == flips.size(),
                "gpu_crop_resize: one window and one flip per image");
  const int64_t B = static_cast<int64_t>(images.size());
  const torch::Device device = images[0].device();
  TRAINER_CHECK(norm.dtype == torch::kFloat32 || norm.dtype == torch::kBFloat16,
                "gpu_crop_resize: the output is float32 or bfloat16, not ", norm.dtype);
  for (size_t i = 0; i < images.size(); ++i) {
    const torch::Tensor& t = images[i];
    const Rect& r = windows[i];
    TRAINER_CHECK(t.dim() == 3 && t.size(2) == 3 && t.scalar_type() == torch::kUInt8 && t.stride(0) > 0 &&
                      t.stride(1) > 0 && t.stride(2) > 0 && t.device() == device,
                  "gpu_crop_resize: image ", i, " is not an (H, W, 3) uint8 tensor on ", device.str());
    TRAINER_CHECK(r.w > 0 && r.h > 0 && r.x >= 0 && r.y >= 0 && r.x + r.w <= t.size(1) && r.y + r.h <= t.size(0),
                  "gpu_crop_resize: window ", r.x, ",", r.y, " ", r.w, "x", r.h, " of image ", i, " is outside its ",
                  t.size(1), "x", t.size(0), " pixels");
  }
  const auto format = norm.channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous;
#ifdef TRAINER_WITH_KERNELS
  if (batched_kernel) {
    torch::Tensor x = torch::empty({B, 3, size, size},
                                   torch::TensorOptions().dtype(norm.dtype).device(device).memory_format(format));
    TRAINER_CHECK(device.is_cuda(), "gpu_crop_resize: the batched kernel needs CUDA tensors");
    std::vector<CropResizeJob> jobs(static_cast<size_t>(B));
    for (size_t i = 0; i < jobs.size(); ++i) {
      jobs[i].src = images[i].data_ptr<uint8_t>();
      jobs[i].pitch = images[i].stride(0);
      jobs[i].pixel_step = static_cast<int32_t>(images[i].stride(1));
      jobs[i].channel_step = images[i].stride(2);
      jobs[i].x = windows[i].x;
      jobs[i].y = windows[i].y;
      jobs[i].w = windows[i].w;
      jobs[i].h = windows[i].h;
      jobs[i].flip = flips[i] ? 1 : 0;
    }
    const int64_t bytes = B * static_cast<int64_t>(sizeof(CropResizeJob));
    // pinned staging: the caching host allocator keeps it alive until the copy has run
    torch::Tensor host = torch::empty({bytes}, torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(true));
    std::memcpy(host.data_ptr<uint8_t>(), jobs.data(), static_cast<size_t>(bytes));
    torch::Tensor dev = host.to(device, /*non_blocking=*/true);
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device.index()).stream();
    CropResizeOutput o;
    for (int c = 0; c < 3 && norm.normalize; ++c) {
      o.mean[c] = norm.mean255[c];
      o.inv_std[c] = norm.inv_std255[c];
    }
    o.channels_last = norm.channels_last ? 1 : 0;
    const int err = launch_crop_resize(reinterpret_cast<const CropResizeJob*>(dev.data_ptr<uint8_t>()),
                                       static_cast<int>(B), static_cast<int>(size), x.data_ptr(),
                                       norm.dtype == torch::kBFloat16, stream, o);
    TRAINER_CHECK(err == 0, "gpu_crop_resize: kernel launch failed: ", cudaGetErrorString(static_cast<cudaError_t>(err)));
    return x;
  }
#else
  TRAINER_CHECK(!batched_kernel, "gpu_crop_resize: this build has no CUDA kernels of its own (nvcc not found)");
#endif
  torch::Tensor x = torch::empty({B, 3, size, size},
                                 torch::TensorOptions().dtype(torch::kFloat32).device(device).memory_format(format));
  for (int64_t i = 0; i < B; ++i) {
    const torch::Tensor& t = images[static_cast<size_t>(i)];
    const Rect& r = windows[static_cast<size_t>(i)];
    torch::Tensor c = t.narrow(0, r.y, r.h).narrow(1, r.x, r.w).permute({2, 0, 1}).unsqueeze(0).to(torch::kFloat32);
    torch::Tensor y = at::_upsample_bilinear2d_aa(c, {size, size}, /*align_corners=*/false);
    if (flips[static_cast<size_t>(i)]) y = y.flip({3});
    x[i].copy_(y[0]);
  }
  if (norm.normalize) {
    const auto f = torch::TensorOptions().dtype(torch::kFloat32);
    x.sub_(torch::tensor({norm.mean255[0], norm.mean255[1], norm.mean255[2]}, f).view({1, 3, 1, 1}).to(device))
        .mul_(torch::tensor({norm.inv_std255[0], norm.inv_std255[1], norm.inv_std255[2]}, f).view({1, 3, 1, 1}).to(device));
  }
  return x.to(norm.dtype);
}

// ---- the loader ----


struct GpuImageLoader::Pool {
  struct Read {
    std::vector<std::vector<uint8_t>> files;
    GpuJpegDecoder::Files in;                // what the decoder reads: the files' copy in `pinned`
    torch::Tensor pinned;
    std::vector<GpuJpegDecoder::Info> info;  // headers parsed (and crop regions checked) by the reading threads
  };
  // the next batch's files, read and parsed ahead while the current batch decodes
  std::future<Read> pending;
  int64_t pending_epoch = -1, pending_cursor = -1;
  Read batch;  // the batch being decoded (alive until the next batch)
  Pass following;  // the next epoch's pass, planned once by the producer (read ahead into, then gone on with)
};

GpuImageLoader::GpuImageLoader(std::vector<ImageSample> samples, ImageLoaderOptions opt, torch::Device device)
    : samples_(std::move(samples)), opt_(std::move(opt)), device_(device), pool_(std::make_unique<Pool>()) {
  TRAINER_CHECK(!samples_.empty(), "the image list is empty");
  TRAINER_CHECK(device.is_cuda(), "data.decode: gpu needs run.device cuda");
  decoder_ = std::make_unique<GpuJpegDecoder>(device);
  decoder_->preallocate(static_cast<int>(opt_.batch_size));
  normalized_ = GpuResizeOutput::normalized(opt_.mean, opt_.std, opt_.channels_last, opt_.dtype);
  const auto& n = normalized_;
  mean255_ = torch::tensor({n.mean255[0], n.mean255[1], n.mean255[2]}).view({1, 3, 1, 1}).to(device_);
  inv_std255_ = torch::tensor({n.inv_std255[0], n.inv_std255[1], n.inv_std255[2]}).view({1, 3, 1, 1}).to(device_);
  set_epoch(0);
}

struct GpuImageLoader::Ready {
  int64_t epoch = 0;
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

GpuImageLoader::Pass GpuImageLoader::make_pass(int64_t epoch, int64_t start_batch) const {
  Pass p;
  static_cast<EpochPlan&>(p) = plan_epoch(opt_, static_cast<int64_t>(samples_.size()), epoch);
  p.cursor = std::min(p.total, start_batch * opt_.batch_size);
  return p;
}

const GpuImageLoader::Pass& GpuImageLoader::following(int64_t epoch) {
  Pass& f = pool_->following;
  if (!f.order || f.epoch != epoch + 1) f = make_pass(epoch + 1, 0);
  return f;
}

void GpuImageLoader::loop() {
#ifdef TRAINER_WITH_NVJPEG
  c10::cuda::CUDAGuard device_guard(device_.index());
#endif
  const size_t depth = static_cast<size_t>(std::max(1, opt_.prefetch));
  try {
    while (true) {
      Pass p;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || queue_.size() < depth; });
        if (stop_) return;
        p = pass_;
      }
      if (p.cursor >= p.total) {  // the pass is made
        if (!opt_.train) return;  // evaluation: one pass per set_epoch
        // training: on with the next epoch, at most one ahead of the consumer
        {
          std::unique_lock<std::mutex> lock(mu_);
          cv_.wait(lock, [&] { return stop_ || pass_.epoch == current_.epoch; });
          if (stop_) return;
        }
        Pass next = following(p.epoch);
        std::lock_guard<std::mutex> lock(mu_);
        pass_ = std::move(next);
        continue;
      }
      auto r = std::make_unique<Ready>();
      r->epoch = p.epoch;
      produce(p, r->batch, r->done);
      const int64_t made = std::min(opt_.batch_size, p.total - p.cursor);
      std::lock_guard<std::mutex> lock(mu_);
      pass_.cursor = p.cursor + made;
      queue_.push_back(std::move(r));
      cv_.notify_all();
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
  static_cast<at::cuda::CUDAEvent*>(r->done.get())->block(main);
  r->batch.images.record_stream(main);
  r->batch.labels.record_stream(main);
#endif
  out = std::move(r->batch);
  return true;
}

bool GpuImageLoader::hardware() const { return decoder_->hardware(); }

void GpuImageLoader::set_epoch(int64_t epoch, int64_t start_batch) {
  {  // the epoch the producer has gone on with: keep what it has made
    std::lock_guard<std::mutex> lock(mu_);
    if (thread_.joinable() && !stop_ && !error_ && opt_.train && start_batch == 0 && epoch == current_.epoch + 1 &&
        taken_ >= batches_per_epoch() && pass_.epoch == epoch) {
      current_ = pass_;
      taken_ = 0;
      cv_.notify_all();
      return;
    }
  }
  stop();
  if (pool_->pending.valid()) pool_->pending.wait();
  pool_->pending = {};
  pool_->pending_cursor = -1;
  pass_ = make_pass(epoch, start_batch);
  current_ = pass_;
  taken_ = pass_.cursor / opt_.batch_size;
  start();
}

int64_t GpuImageLoader::batches_per_epoch() const { return current_.batches; }

Rect GpuImageLoader::window(int64_t index, int64_t epoch, int w, int h, bool* flip) const {
  return sample_window(opt_, index, epoch, w, h, flip);
}

void GpuImageLoader::produce(const Pass& p, Batch& out, std::shared_ptr<void>& done_event) {
#ifdef TRAINER_WITH_NVJPEG
  const int64_t B = std::min(opt_.batch_size, p.total - p.cursor);
  const int threads = std::max(1, opt_.workers);
  auto read_batch = [this, threads](Pass q, int64_t count) {
    const std::vector<int64_t>& order = *q.order;
    const int64_t from = q.cursor;
    Pool::Read r;
    r.files.resize(static_cast<size_t>(count));
    parallel_for(count, threads, [&](int64_t i) {
      try {
        read_sample_bytes(samples_[static_cast<size_t>(order[static_cast<size_t>(from + i)])], r.files[static_cast<size_t>(i)]);
      } catch (const Error&) {
        r.files[static_cast<size_t>(i)].clear();  // unreadable: handled as a bad sample below
      }
    });
    r.in.resize(r.files.size());
    {  // the engines read the files from pinned memory (one copy, by the reading threads)
      std::vector<size_t> at(r.files.size() + 1, 0);
      for (size_t i = 0; i < r.files.size(); ++i) at[i + 1] = at[i] + r.files[i].size();
      r.pinned = torch::empty({static_cast<int64_t>(std::max<size_t>(at.back(), 1))},
                              torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(true));
      uint8_t* base = r.pinned.data_ptr<uint8_t>();
      parallel_for(count, threads, [&](int64_t i) {
        const auto& f = r.files[static_cast<size_t>(i)];
        if (!f.empty()) std::memcpy(base + at[static_cast<size_t>(i)], f.data(), f.size());
        r.in[static_cast<size_t>(i)] = {base + at[static_cast<size_t>(i)], f.size()};
      });
    }
    // crop-only decode: the sample's crop window (the same draw as below) is all the engines decode
    GpuJpegDecoder::RoiFn roi_of;
    if (opt_.crop_decode)
      roi_of = [this, &order, from, epoch = q.epoch](size_t i, int w, int h) {
        bool flip = false;
        return window(order[static_cast<size_t>(from) + i], epoch, w, h, &flip);
      };
    r.info = decoder_->inspect(r.in, threads, roi_of);
    return r;
  };
  using clock = std::chrono::steady_clock;
  auto ms_since = [](clock::time_point t) { return std::chrono::duration<double, std::milli>(clock::now() - t).count(); };
  const auto t_read = clock::now();
  if (pool_->pending.valid() && pool_->pending_epoch == p.epoch && pool_->pending_cursor == p.cursor)
    pool_->batch = pool_->pending.get();
  else
    pool_->batch = read_batch(p, B);
  const double read_wait_ms = ms_since(t_read);
  const auto& files = pool_->batch.files;
  const auto& info = pool_->batch.info;
  const int64_t epoch = p.epoch;
  out.indices.assign(p.order->begin() + p.cursor, p.order->begin() + p.cursor + B);
  // read the next batch while this one decodes: of this epoch, or (training) the first of the next
  Pass ahead = p;
  ahead.cursor += B;
  if (ahead.cursor >= ahead.total && opt_.train) ahead = following(p.epoch);
  if (ahead.cursor < ahead.total) {
    pool_->pending_epoch = ahead.epoch;
    pool_->pending_cursor = ahead.cursor;
    pool_->pending = std::async(std::launch::async, read_batch, ahead, std::min(opt_.batch_size, ahead.total - ahead.cursor));
  }

  // normal priority, as the training step's stream: either one at high priority is slower (bench/NOTES.md)
  const auto side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device_.index());
  // timed events (the device time of decode and of augmentation, read back once they have passed)
  auto started = std::make_shared<at::cuda::CUDAEvent>(cudaEventDefault);
  auto decoded = std::make_shared<at::cuda::CUDAEvent>(cudaEventDefault);
  const int64_t S = opt_.image_size;
  torch::Tensor x, labels;
  {
    c10::cuda::CUDAStreamGuard guard(side);
    const GpuJpegDecoder::Files& in = pool_->batch.in;
    // what nvJPEG cannot take: the CPU threads decode it while the engines decode the rest
    std::vector<int64_t> fallback;
    for (int64_t i = 0; i < B; ++i)
      if (!info[static_cast<size_t>(i)].supported) fallback.push_back(i);
    std::vector<RgbImage> cpu(fallback.size());
    std::vector<char> failed(fallback.size(), 0);
    auto decode_on_cpu = [&](size_t from) {  // fallback[from..] into cpu[from..]
      parallel_for(static_cast<int64_t>(fallback.size() - from), threads, [&](int64_t j) {
        const size_t k = from + static_cast<size_t>(j);
        const int64_t i = fallback[k];
        const auto& f = files[static_cast<size_t>(i)];
        const std::string name = samples_[static_cast<size_t>(out.indices[static_cast<size_t>(i)])].name();
        try {
          TRAINER_CHECK(!f.empty(), name, ": unreadable");
          if (sniff_format(f.data(), f.size()) == ImageFormat::jpeg) {
            JpegDecoder jpeg;
            jpeg.decode(f.data(), f.size(), JpegDecodeOptions{}, cpu[k], name);
          } else {
            decode_png(f.data(), f.size(), cpu[k], name);
          }
        } catch (const Error& e) {
          failed[k] = 1;
          log::warn("skipping a bad sample: ", e.what());
        }
      });
    };
    auto cpu_part = std::async(std::launch::async, decode_on_cpu, size_t{0});
    started->record(side);
    const auto t_decode = clock::now();
    std::vector<torch::Tensor> img;
    try {
      img = decoder_->decode(in, info);  // on the side stream
    } catch (...) {
      cpu_part.wait();
      throw;
    }
    cpu_part.get();
    if (pool_->batch.pinned.defined())  // the pinned copy is not reused before the side stream is past the decode
      at::getHostAllocator(at::kCUDA)->record_event(pool_->batch.pinned.data_ptr(),
                                                     pool_->batch.pinned.storage().data_ptr().get_context(),
                                                     side.unwrap());
    // a batch nvJPEG refused as a whole (one bad bitstream fails it) goes to the CPU threads too
    const size_t late = fallback.size();
    for (int64_t i = 0; i < B; ++i)
      if (info[static_cast<size_t>(i)].supported && !img[static_cast<size_t>(i)].defined()) fallback.push_back(i);
    if (fallback.size() > late) {
      cpu.resize(fallback.size());
      failed.resize(fallback.size(), 0);
      decode_on_cpu(late);
    }
    const double decode_host_ms = ms_since(t_decode);
    for (size_t k = 0; k < fallback.size(); ++k) {
      if (failed[k]) continue;
      const RgbImage& r = cpu[k];
      img[static_cast<size_t>(fallback[k])] =
          upload(torch::from_blob(const_cast<uint8_t*>(r.pixels.data()), {r.height, r.width, 3}, torch::kUInt8),
                 device_);
    }
    int64_t fallbacks = 0, replaced = 0;
    for (size_t k = 0; k < fallback.size(); ++k) fallbacks += failed[k] ? 0 : 1;
    // the part of its image each decoded tensor holds: x, y of its corner, w, h of the whole image
    std::vector<Rect> frame(static_cast<size_t>(B));
    int64_t cropped = 0;
    for (int64_t i = 0; i < B; ++i) {
      const torch::Tensor& t = img[static_cast<size_t>(i)];
      const auto& inf = info[static_cast<size_t>(i)];
      if (!t.defined()) continue;
      if (inf.supported && inf.roi.w > 0 && t.size(1) == inf.roi.w && t.size(0) == inf.roi.h) {
        frame[static_cast<size_t>(i)] = Rect{inf.roi.x, inf.roi.y, inf.width, inf.height};
        ++cropped;
      } else {
        frame[static_cast<size_t>(i)] = Rect{0, 0, static_cast<int>(t.size(1)), static_cast<int>(t.size(0))};
      }
    }
    // a sample that failed everywhere takes the place (and label) of the next good one in the batch; in evaluation
    // its place is marked left out (index and label -1) once the crop windows are drawn
    std::vector<int64_t> label(static_cast<size_t>(B));
    std::vector<char> left_out(static_cast<size_t>(B), 0);
    for (int64_t i = 0; i < B; ++i) {
      int64_t src = i;
      for (int64_t k = 0; k < B && !img[static_cast<size_t>(src)].defined(); ++k) src = (i + k + 1) % B;
      TRAINER_CHECK(img[static_cast<size_t>(src)].defined(), "every sample of a batch failed to decode");
      if (src != i) {
        img[static_cast<size_t>(i)] = img[static_cast<size_t>(src)];
        frame[static_cast<size_t>(i)] = frame[static_cast<size_t>(src)];
        out.indices[static_cast<size_t>(i)] = out.indices[static_cast<size_t>(src)];
        left_out[static_cast<size_t>(i)] = !opt_.train;
        ++replaced;
      }
      label[static_cast<size_t>(i)] =
          left_out[static_cast<size_t>(i)] ? -1 : samples_[static_cast<size_t>(out.indices[static_cast<size_t>(i)])].label;
    }
    decoded->record(side);
    const auto t_augment = clock::now();
    // crop window, antialiased bilinear resize and flip: one kernel for the batch (0..255 float)
    std::vector<Rect> windows(static_cast<size_t>(B));
    std::vector<char> flips(static_cast<size_t>(B), 0);
    for (int64_t i = 0; i < B; ++i) {
      const Rect& f = frame[static_cast<size_t>(i)];
      bool flip = false;
      Rect w = window(out.indices[static_cast<size_t>(i)], epoch, f.w, f.h, &flip);
      w.x -= f.x;  // into the decoded region's coordinates (the region is this window where it was crop-decoded)
      w.y -= f.y;
      windows[static_cast<size_t>(i)] = w;
      flips[static_cast<size_t>(i)] = flip ? 1 : 0;
    }
    for (int64_t i = 0; i < B; ++i)
      if (left_out[static_cast<size_t>(i)]) out.indices[static_cast<size_t>(i)] = -1;
    const BatchAugmenter augmenter(opt_.augment, opt_.seed);
    const bool plain = !(opt_.train && augmenter.enabled());  // nothing between the resize and the normalisation
    const bool fused = plain && gpu_crop_resize_kernel_available();
    // fused: normalised and laid out by the resize kernel itself
    x = gpu_crop_resize(img, windows, flips, S, gpu_crop_resize_kernel_available(),
                        fused ? normalized_ : GpuResizeOutput{});
    labels = upload(torch::tensor(label, torch::kInt64), device_);
    if (!fused) {
      augmenter.augment_and_normalize_(x, out.indices, epoch, opt_.train, mean255_, inv_std255_);
      x = batch_layout(x, opt_.dtype, opt_.channels_last);
    }
    const double augment_host_ms = ms_since(t_augment);
    std::lock_guard<std::mutex> lock(mu_);
    stats_.host_read_wait_ms += read_wait_ms;
    stats_.host_decode_ms += decode_host_ms;
    stats_.host_augment_ms += augment_host_ms;
    ++stats_.host_batches;
    stats_.gpu += B - static_cast<int64_t>(fallback.size());
    stats_.gpu_cropped += cropped;
    stats_.cpu_fallback += fallbacks;
    stats_.bad += replaced;
  }
  auto done = std::make_shared<at::cuda::CUDAEvent>(cudaEventDefault);  // timing on: also the decode figures
  done->record(side);
  done_event = done;
  std::lock_guard<std::mutex> lock(mu_);
  timings_.push_back({started, decoded, done});
  while (!timings_.empty() && static_cast<at::cuda::CUDAEvent*>(timings_.front().done.get())->query()) {
    const Timing& t = timings_.front();
    auto* a = static_cast<at::cuda::CUDAEvent*>(t.started.get());
    auto* b = static_cast<at::cuda::CUDAEvent*>(t.decoded.get());
    auto* c = static_cast<at::cuda::CUDAEvent*>(t.done.get());
    stats_.decode_ms += a->elapsed_time(*b);
    stats_.augment_ms += b->elapsed_time(*c);
    ++stats_.batches;
    timings_.pop_front();
  }
  out.images = x;
  out.labels = labels;
#else
  (void)p;
  (void)out;
  (void)done_event;
  TRAINER_FAIL("data.decode: gpu: this build has no nvJPEG");
#endif
}

}  // namespace trainer
