#include "data/gpu_jpeg_decoder.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "core/check.h"
#include "core/parallel.h"
#include "data/image_ops.h"

#ifdef TRAINER_WITH_NVJPEG
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
  // Two decode states used in turn, so a batch can be submitted while the previous one is still decoding; a state
  // is reused only after the event recorded behind its last decode has passed. Two suffice: more states, more
  // batches' conversions pending at once, are no faster eagerly and slower with a captured step (bench/NOTES.md).
  struct DecodeState {
    nvjpegJpegState_t state = nullptr;
    cudaEvent_t done = nullptr;
    std::vector<nvjpegDecodeParams_t> params;  // per image of a batch with regions
  };
  std::vector<DecodeState> slots;
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
  // the engines reading host bitstreams: from device memory (NVJPEG_BACKEND_HARDWARE_DEVICE) nvJPEG makes more CUDA
  // calls an image and was slower (bench/NOTES.md)
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
  Impl::DecodeState& slot = impl_->slots[impl_->turn];
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

}  // namespace trainer
