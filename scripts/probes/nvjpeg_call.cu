// What bounds nvJPEG's batched hardware decode call, the GPU loader's pace beside training: the host thread (then
// its CPU time is the call's wall time, and a second thread with its own state doubles the rate), the engines
// (neither CPU contention nor a second thread change it), or the SMs the call's kernels share (a busy GPU slows
// it). Decodes batches of 256 crop windows (RandomResizedCrop's draws) of DIR's JPEGs on 1, 2 or 4 threads, each
// with its own handle, state and stream, while S threads spin on the CPU and/or another stream keeps the SMs
// (a compute kernel; "legacy": longer ones on the legacy default stream) or the memory (device copies) busy; per
// call: wall and thread CPU time, then the stream sync, and the spread of the calls (min, median, mean, 90th
// percentile, max). The handle's memory comes from nvJPEG's own allocators ("default") or from the same CUDA calls
// counted and timed ("count": how often a call allocates after the warm-up, and what that costs).
//
//   nvcc -O2 -std=c++17 -I<nvjpeg include> -Ilib/data -Ilib/core scripts/probes/nvjpeg_call.cu <the JPEG sources
//     below> -L<cupti lib> -Xlinker -rpath -Xlinker <cupti lib> -lnvjpeg -lcupti -lcuda -ljpeg -lpthread
//     -o /tmp/nvjpeg_call (the GPU host: both libs in /usr/local/cuda/targets/x86_64-linux/lib)
//   /tmp/nvjpeg_call DIR [spin threads, default 14] [loads, default "none sm mem"]
// Environment: ALLOCS="default count" (which allocators), THREADS="1 2 4", SPINS="0 S",
// BLOCKING=1 (cudaDeviceScheduleBlockingSync: the host thread sleeps in waits instead of spinning),
// FLAGS="0 1" (nvjpegCreateEx flags in turn: 1 = NVJPEG_FLAGS_HW_DECODE_NO_PIPELINE, no extra images buffered),
// FORMATS="RGBI NV12 YUV RGB Y" (the output format in turn; planes get a pitch of the window's width),
// ROI="1 0" (the crop window decoded, or the whole image), PINNED=1 (the bitstreams in page-locked memory),
// PARTITION="0 8" (k > 0: the SMs split in two green contexts, the decoders' streams on k SMs and the GPU load's
// on the other SMs, so the decode's kernels never wait for SMs the load holds; link -lcuda),
// CALLS=N (timed calls a configuration, default 48), WINDOW=N (the rate of each N calls, stamped with the wall
// clock: the probe beside a training run in another process), COUNT=1 (after each configuration's timing, 8 more
// calls on one thread with every CUDA runtime and driver call they make counted through CUPTI: which calls, how
// many a call). Link CUPTI for it: -lcupti.
// REWRITE=1: the files rewritten first as trainer pack's lossless rewrite with the standard Huffman tables (a
// restart marker after every MCU), MOSAIC="0 8 16 32" (k > 1: each call's windows laid out k to a JPEG by
// data/jpeg_mosaic, built on the decoding thread before the call and timed apart, and those decoded whole: the
// calls nvJPEG makes an image, made once a mosaic; implies REWRITE=1). Both need the project's JPEG sources and
// libjpeg on the command line: add -Ilib/data -Ilib/core lib/data/data/jpeg_mosaic.cpp lib/data/data/jpeg_cut.cpp
// lib/data/data/jpeg_encoder.cpp lib/core/core/check.cpp lib/core/core/strings.cpp -ljpeg.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>
#include <nvjpeg.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "data/jpeg_encoder.h"
#include "data/jpeg_mosaic.h"

#define CK(x)                                                                                        \
  do {                                                                                               \
    cudaError_t e_ = (x);                                                                            \
    if (e_ != cudaSuccess) {                                                                         \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));                \
      std::exit(1);                                                                                  \
    }                                                                                                \
  } while (0)
#define NJ(x)                                                                                        \
  do {                                                                                               \
    nvjpegStatus_t e_ = (x);                                                                         \
    if (e_ != NVJPEG_STATUS_SUCCESS) {                                                               \
      std::fprintf(stderr, "%s:%d nvJPEG status %d\n", __FILE__, __LINE__, static_cast<int>(e_));    \
      std::exit(1);                                                                                  \
    }                                                                                                \
  } while (0)

namespace {

constexpr int kBatch = 256;
int g_calls = 48;   // timed batches of 256 a configuration (after 3 untimed): CALLS
int g_window = 0;   // WINDOW=N: the decode rate of every N calls in turn, stamped with the wall clock

double now_ms(clockid_t clock) {
  timespec t;
  clock_gettime(clock, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

struct Image {
  std::vector<unsigned char> bytes;
  const unsigned char* data = nullptr;  // bytes, or their copy in pinned memory (PINNED=1)
  int x = 0, y = 0, w = 0, h = 0;  // the crop window
  int width = 0, height = 0;
};

// RandomResizedCrop(224)'s window draw: area 8-100%, aspect 3/4-4/3, else the centre
void draw_window(Image& im, int width, int height, std::mt19937& rng) {
  std::uniform_real_distribution<double> area(0.08, 1.0), logr(std::log(3.0 / 4), std::log(4.0 / 3));
  for (int t = 0; t < 10; ++t) {
    const double a = area(rng) * width * height, r = std::exp(logr(rng));
    const int w = static_cast<int>(std::round(std::sqrt(a * r))), h = static_cast<int>(std::round(std::sqrt(a / r)));
    if (w > 0 && h > 0 && w <= width && h <= height) {
      im.w = w, im.h = h;
      im.x = std::uniform_int_distribution<int>(0, width - w)(rng);
      im.y = std::uniform_int_distribution<int>(0, height - h)(rng);
      return;
    }
  }
  im.w = std::min(width, height), im.h = im.w, im.x = (width - im.w) / 2, im.y = (height - im.h) / 2;
}

std::vector<Image> load(const std::string& dir, nvjpegHandle_t handle, size_t count) {
  std::vector<std::string> paths;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".jpg") paths.push_back(e.path().string());
  std::sort(paths.begin(), paths.end());
  if (paths.size() > count) paths.resize(count);
  std::mt19937 rng(7);
  std::vector<Image> out;
  for (const auto& p : paths) {
    std::ifstream f(p, std::ios::binary);
    Image im;
    im.bytes.assign(std::istreambuf_iterator<char>(f), {});
    int comps = 0, w[4], h[4];
    nvjpegChromaSubsampling_t ss;
    if (nvjpegGetImageInfo(handle, im.bytes.data(), im.bytes.size(), &comps, &ss, w, h) != NVJPEG_STATUS_SUCCESS)
      continue;
    im.width = w[0], im.height = h[0];
    draw_window(im, w[0], h[0], rng);
    out.push_back(std::move(im));
  }
  for (auto& im : out) im.data = im.bytes.data();
  return out;
}

// REWRITE=1: each file as trainer pack rewrites it (a restart marker after every MCU), with the standard Huffman
// tables so that files of one quality share all their tables; the original is kept where the rewrite declines
void rewrite(std::vector<Image>& set) {
  size_t before = 0, after = 0, kept = 0;
  const double t0 = now_ms(CLOCK_MONOTONIC);
  for (auto& im : set) {
    std::vector<uint8_t> out;
    before += im.bytes.size();
    if (trainer::transcode_with_restarts(im.bytes.data(), im.bytes.size(), out, "probe.jpg", 1,
                                         trainer::HuffmanTables::standard))
      im.bytes.assign(out.begin(), out.end());
    else
      ++kept;
    after += im.bytes.size();
    im.data = im.bytes.data();
  }
  std::printf("rewritten with restart markers and the standard tables: %.1f -> %.1f KB a file, %.2f ms a file, "
              "%zu kept as they were\n", before / 1024.0 / set.size(), after / 1024.0 / set.size(),
              (now_ms(CLOCK_MONOTONIC) - t0) / set.size(), kept);
}

// PINNED=1: the bitstreams copied into one page-locked block, as the trainer's loader reads its files
void pin(std::vector<Image>& set) {
  size_t total = 0;
  for (const auto& im : set) total += im.bytes.size();
  unsigned char* block = nullptr;
  CK(cudaHostAlloc(reinterpret_cast<void**>(&block), total, cudaHostAllocDefault));
  for (auto& im : set) {
    std::copy(im.bytes.begin(), im.bytes.end(), block);
    im.data = block;
    block += im.bytes.size();
  }
}

// --- the handle's allocators ---------------------------------------------------------------------------------
struct AllocStats {
  std::atomic<long> dev{0}, pinned{0}, dev_bytes{0}, pinned_bytes{0};
  std::atomic<long> us{0};  // wall time inside the allocator functions (mallocs and frees)
  void reset() { dev = 0, pinned = 0, dev_bytes = 0, pinned_bytes = 0, us = 0; }
};
AllocStats g_alloc;

struct Timer {
  double t0 = now_ms(CLOCK_MONOTONIC);
  ~Timer() { g_alloc.us += static_cast<long>((now_ms(CLOCK_MONOTONIC) - t0) * 1e3); }
};

int count_dev_malloc(void*, void** p, size_t n, cudaStream_t) {
  Timer t;
  g_alloc.dev++, g_alloc.dev_bytes += static_cast<long>(n);
  return cudaMalloc(p, n) == cudaSuccess ? 0 : 1;
}
int count_dev_free(void*, void* p, size_t, cudaStream_t) {
  Timer t;
  return cudaFree(p) == cudaSuccess ? 0 : 1;
}
int count_pinned_malloc(void*, void** p, size_t n, cudaStream_t) {
  Timer t;
  g_alloc.pinned++, g_alloc.pinned_bytes += static_cast<long>(n);
  return cudaHostAlloc(p, n, cudaHostAllocDefault) == cudaSuccess ? 0 : 1;
}
int count_pinned_free(void*, void* p, size_t, cudaStream_t) {
  Timer t;
  return cudaFreeHost(p) == cudaSuccess ? 0 : 1;
}

int g_mosaic = 0;      // MOSAIC: windows a JPEG (0 or 1: each window decoded on its own, as a region)
unsigned g_flags = 0;  // the handles' nvjpegCreateEx flags (FLAGS)
nvjpegOutputFormat_t g_format = NVJPEG_OUTPUT_RGBI;  // FORMATS
bool g_roi = true;  // ROI

// --- PARTITION: the SMs split between the decoders and the load ----------------------------------------------
#define CU(x)                                                                                        \
  do {                                                                                               \
    CUresult e_ = (x);                                                                               \
    if (e_ != CUDA_SUCCESS) {                                                                        \
      std::fprintf(stderr, "%s:%d CUDA driver error %d\n", __FILE__, __LINE__, static_cast<int>(e_)); \
      std::exit(1);                                                                                  \
    }                                                                                                \
  } while (0)
CUgreenCtx g_decode_ctx = nullptr, g_load_ctx = nullptr;  // null: no partition

// k SMs for the decoders, the rest of the device's SMs for the load
void partition(int k) {
  for (CUgreenCtx* c : {&g_decode_ctx, &g_load_ctx})  // the last value's (their streams are gone with its runs)
    if (*c) {
      CU(cuGreenCtxDestroy(*c));
      *c = nullptr;
    }
  if (k <= 0) return;
  CUdevice dev;
  CU(cuDeviceGet(&dev, 0));
  CUdevResource all, group, rest;
  CU(cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM));
  unsigned groups = 1;
  CU(cuDevSmResourceSplitByCount(&group, &groups, &all, &rest, 0, static_cast<unsigned>(k)));
  CUdevResourceDesc dg, dr;
  CU(cuDevResourceGenerateDesc(&dg, &group, 1));
  CU(cuDevResourceGenerateDesc(&dr, &rest, 1));
  CU(cuGreenCtxCreate(&g_decode_ctx, dg, dev, CU_GREEN_CTX_DEFAULT_STREAM));
  CU(cuGreenCtxCreate(&g_load_ctx, dr, dev, CU_GREEN_CTX_DEFAULT_STREAM));
  std::printf("SMs: %u for the decoders, %u for the load\n", group.sm.smCount, rest.sm.smCount);
}

// a non-blocking stream, on the green context's SMs where there is one
cudaStream_t new_stream(CUgreenCtx ctx) {
  cudaStream_t s = nullptr;
  if (ctx)
    CU(cuGreenCtxStreamCreate(reinterpret_cast<CUstream*>(&s), ctx, CU_STREAM_NON_BLOCKING, 0));
  else
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

// --- CUDA calls counted on the decoding thread (COUNT=1) ------------------------------------------------------
thread_local bool t_counting = false;
std::mutex g_count_mu;
std::map<std::pair<int, int>, long> g_counts;  // (CUPTI domain, callback id) -> calls

void CUPTIAPI on_api(void*, CUpti_CallbackDomain domain, CUpti_CallbackId id, const void* data) {
  if (!t_counting || static_cast<const CUpti_CallbackData*>(data)->callbackSite != CUPTI_API_ENTER) return;
  std::lock_guard<std::mutex> lock(g_count_mu);
  g_counts[{static_cast<int>(domain), static_cast<int>(id)}]++;
}

// the counted calls a decode call makes, most frequent first, runtime ("rt") and driver ("drv") apart
void print_counts(int calls) {
  std::vector<std::pair<long, std::string>> rows;
  long total[2] = {0, 0};
  for (const auto& [key, n] : g_counts) {
    const char* name = nullptr;
    cuptiGetCallbackName(static_cast<CUpti_CallbackDomain>(key.first), static_cast<uint32_t>(key.second), &name);
    const bool rt = key.first == CUPTI_CB_DOMAIN_RUNTIME_API;
    total[rt ? 0 : 1] += n;
    rows.push_back({n, std::string(rt ? "rt " : "drv ") + (name ? name : "?")});
  }
  std::sort(rows.rbegin(), rows.rend());
  std::printf("  CUDA calls a decode call: runtime %.1f, driver %.1f |", double(total[0]) / calls,
              double(total[1]) / calls);
  for (size_t i = 0; i < rows.size() && i < 12; ++i)
    std::printf(" %s %.1f", rows[i].second.c_str(), double(rows[i].first) / calls);
  std::printf("\n");
  std::fflush(stdout);
}

nvjpegHandle_t make_handle(const std::string& alloc) {
  nvjpegHandle_t h = nullptr;
  if (alloc == "default") {
    NJ(nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, nullptr, nullptr, g_flags, &h));
    return h;
  }
  nvjpegDevAllocatorV2_t dev{count_dev_malloc, count_dev_free, nullptr};
  nvjpegPinnedAllocatorV2_t pinned{count_pinned_malloc, count_pinned_free, nullptr};
  NJ(nvjpegCreateExV2(NVJPEG_BACKEND_HARDWARE, &dev, &pinned, g_flags, &h));
  return h;
}

struct CallTimes {
  double wall = 0, cpu = 0, sync = 0;
  double build = 0;  // MOSAIC: laying the call's windows out (host, before the call)
  int images = 0;    // the images the call decoded
  double done = 0;  // CLOCK_REALTIME at the end of the sync, ms: lines the calls up with another process's run
};

struct Decoder {
  nvjpegHandle_t handle;
  nvjpegJpegState_t state;
  cudaStream_t stream;
  std::vector<nvjpegDecodeParams_t> params;
  unsigned char* buffer = nullptr;

  Decoder(int n, size_t bytes, const std::string& alloc) : params(n) {
    handle = make_handle(alloc);
    NJ(nvjpegJpegStateCreate(handle, &state));
    stream = new_stream(g_decode_ctx);
    for (auto& p : params) {
      NJ(nvjpegDecodeParamsCreate(handle, &p));
      NJ(nvjpegDecodeParamsSetOutputFormat(p, g_format));
    }
    CK(cudaMalloc(&buffer, bytes));
  }
  ~Decoder() {
    for (auto p : params) nvjpegDecodeParamsDestroy(p);
    nvjpegJpegStateDestroy(state);
    nvjpegDestroy(handle);
    cudaStreamDestroy(stream);
    cudaFree(buffer);
  }

  std::vector<trainer::JpegMosaic> mosaics;

  // MOSAIC=k: the n windows from `first` on as mosaics of k, decoded whole
  CallTimes decode_mosaics(const std::vector<Image>& set, size_t first, int n) {
    CallTimes t;
    const double b0 = now_ms(CLOCK_MONOTONIC);
    mosaics.resize(static_cast<size_t>((n + g_mosaic - 1) / g_mosaic));
    for (size_t m = 0; m < mosaics.size(); ++m) {
      std::vector<trainer::MosaicPiece> pieces;
      for (int j = static_cast<int>(m) * g_mosaic; j < std::min(n, static_cast<int>(m + 1) * g_mosaic); ++j) {
        const Image& im = set[(first + j) % set.size()];
        pieces.push_back({im.data, im.bytes.size(), {im.x, im.y, im.w, im.h}});
      }
      if (!trainer::build_jpeg_mosaic(pieces, mosaics[m])) {
        std::fprintf(stderr, "MOSAIC: the windows from %zu cannot be laid out together (tables differ?)\n", first);
        std::exit(1);
      }
    }
    t.build = now_ms(CLOCK_MONOTONIC) - b0;
    std::vector<const unsigned char*> data;
    std::vector<size_t> lengths;
    std::vector<nvjpegImage_t> dst;
    size_t offset = 0;
    for (const auto& m : mosaics) {
      data.push_back(m.bytes.data());
      lengths.push_back(m.bytes.size());
      nvjpegImage_t img{};
      img.channel[0] = buffer + offset, img.pitch[0] = static_cast<size_t>(m.width) * 3;
      offset += static_cast<size_t>(m.width) * m.height * 3;
      dst.push_back(img);
    }
    timed_call(data, lengths, dst, NVJPEG_OUTPUT_RGBI, false, t);
    return t;
  }

  // the batched call on these images (their regions where `roi`), then the stream sync, timed into t
  void timed_call(std::vector<const unsigned char*>& data, std::vector<size_t>& lengths,
                  std::vector<nvjpegImage_t>& dst, nvjpegOutputFormat_t format, bool roi, CallTimes& t) {
    const int n = static_cast<int>(data.size());
    const double w0 = now_ms(CLOCK_MONOTONIC), c0 = now_ms(CLOCK_THREAD_CPUTIME_ID);
    NJ(nvjpegDecodeBatchedInitialize(handle, state, n, 1, format));
    if (roi)  // whole images as the trainer decodes them: nvjpegDecodeBatchedEx refused them (status 3, run119)
      NJ(nvjpegDecodeBatchedEx(handle, state, data.data(), lengths.data(), dst.data(), params.data(), stream));
    else
      NJ(nvjpegDecodeBatched(handle, state, data.data(), lengths.data(), dst.data(), stream));
    const double w1 = now_ms(CLOCK_MONOTONIC);
    t.cpu = now_ms(CLOCK_THREAD_CPUTIME_ID) - c0;
    CK(cudaStreamSynchronize(stream));
    t.wall = w1 - w0, t.sync = now_ms(CLOCK_MONOTONIC) - w1;
    t.done = now_ms(CLOCK_REALTIME);
    t.images = n;
  }

  CallTimes decode(const std::vector<Image>& set, size_t first, int n) {
    if (g_mosaic > 1) return decode_mosaics(set, first, n);
    std::vector<const unsigned char*> data(n);
    std::vector<size_t> lengths(n);
    std::vector<nvjpegImage_t> dst(n);
    size_t offset = 0;
    for (int j = 0; j < n; ++j) {
      const Image& im = set[(first + j) % set.size()];
      data[j] = im.data, lengths[j] = im.bytes.size();
      const int w = g_roi ? im.w : im.width, h = g_roi ? im.h : im.height;
      dst[j] = nvjpegImage_t{};
      if (g_format == NVJPEG_OUTPUT_RGBI || g_format == NVJPEG_OUTPUT_BGRI) {
        dst[j].channel[0] = buffer + offset, dst[j].pitch[0] = static_cast<size_t>(w) * 3;
        offset += static_cast<size_t>(w) * h * 3;
      } else {  // planes (Y, U, V or R, G, B; NV12's second plane is UV interleaved): a window-sized slot each
        const size_t pitch = static_cast<size_t>(w + 2) & ~size_t(1), plane = pitch * static_cast<size_t>(h + 2);
        for (int c = 0; c < 3; ++c) dst[j].channel[c] = buffer + offset + c * plane, dst[j].pitch[c] = pitch;
        offset += 3 * plane;
      }
      const int even = g_format == NVJPEG_OUTPUT_RGBI || g_format == NVJPEG_OUTPUT_BGRI ? ~0 : ~1;  // chroma-aligned
      if (g_roi) NJ(nvjpegDecodeParamsSetROI(params[j], im.x & even, im.y & even, im.w & even, im.h & even));
    }
    CallTimes t;
    timed_call(data, lengths, dst, g_format, g_roi, t);
    return t;
  }
};

__global__ void burn(float* x, int iters) {
  float a = x[threadIdx.x], b = 1.0001f;
  for (int i = 0; i < iters; ++i) a = a * b + 1e-7f;
  if (a == 12345.f) x[threadIdx.x] = a;
}

// keeps the GPU busy on its own stream until stop: "sm" a compute kernel on every SM, "mem" device copies;
// "legacy" the compute kernel on the legacy default stream (where LibTorch's default stream puts a training step),
// "flood" short kernels launched far ahead of the GPU (the launch queue full)
void gpu_load(const std::string& kind, std::atomic<bool>& stop) {
  cudaStream_t s = cudaStreamLegacy;
  if (kind != "legacy") s = new_stream(g_load_ctx);
  const size_t bytes = size_t(1) << 29;
  void *a, *b;
  CK(cudaMalloc(&a, bytes));
  CK(cudaMalloc(&b, bytes));
  CK(cudaMemset(a, 0, bytes));
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  while (!stop.load()) {
    if (kind == "flood") {  // the launch queue kept full, as a host that runs ahead of its GPU keeps it
      for (int i = 0; i < 20000 && !stop.load(); ++i) burn<<<sms, 256, 0, s>>>(static_cast<float*>(a), 2000);
      CK(cudaStreamSynchronize(s));
      continue;
    }
    for (int i = 0; i < 4; ++i) {
      if (kind == "sm" || kind == "legacy")
        burn<<<sms * 8, 256, 0, s>>>(static_cast<float*>(a), kind == "legacy" ? 2000000 : 20000);
      else
        CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s));
    }
    CK(cudaStreamSynchronize(s));
  }
  cudaFree(a), cudaFree(b);
  if (kind != "legacy") cudaStreamDestroy(s);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// min, median, mean, 90th percentile and max of a sample
std::string spread(std::vector<double> v) {
  if (v.empty()) return "-";
  std::sort(v.begin(), v.end());
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  char b[128];
  std::snprintf(b, sizeof b, "%.2f / %.2f / %.2f / %.2f / %.2f", v.front(), v[v.size() / 2], mean,
                v[v.size() * 9 / 10], v.back());
  return b;
}

// WINDOW=N: for each N calls of the first thread in turn, the wall-clock second it ended, the images a second
// (all threads: each decodes `per_call` images a call in step with it) and the median call + sync
void print_windows(const std::vector<CallTimes>& t, int per_call) {
  for (size_t i = g_window; i < t.size(); i += g_window) {
    std::vector<double> calls;
    for (size_t j = i - g_window + 1; j <= i; ++j) calls.push_back(t[j].wall + t[j].sync);
    std::printf("  window ending %.3f s: %6.0f img/s, call + sync median %.2f ms\n", t[i].done * 1e-3,
                g_window * per_call / (t[i].done - t[i - g_window].done) * 1e3, median(calls));
  }
}

void run(const std::vector<Image>& set, const std::string& load_kind, int spin, int threads, const std::string& alloc) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> background;
  for (int i = 0; i < spin; ++i)
    background.emplace_back([&] {
      volatile double x = 1;
      while (!stop.load(std::memory_order_relaxed)) x = x * 1.0000001 + 1e-9;
    });
  if (load_kind != "none") background.emplace_back([&] { gpu_load(load_kind, stop); });
  const int per = kBatch / threads;
  std::vector<std::vector<CallTimes>> times(threads);
  std::vector<std::thread> workers;
  double wall0 = 0;
  std::atomic<int> ready{0};
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      Decoder d(per, size_t(per) * 4096 * 1024 * 3, alloc);
      for (int c = 0; c < 3; ++c) d.decode(set, size_t(t) * per, per);
      ready.fetch_add(1);
      while (ready.load() < threads) std::this_thread::yield();
      for (int c = 0; c < g_calls; ++c) times[t].push_back(d.decode(set, size_t(c * kBatch + t * per), per));
    });
  while (ready.load() < threads) std::this_thread::yield();
  g_alloc.reset();
  wall0 = now_ms(CLOCK_MONOTONIC);
  for (auto& w : workers) w.join();
  const double wall = now_ms(CLOCK_MONOTONIC) - wall0;
  stop.store(true);
  for (auto& b : background) b.join();
  std::vector<double> w, c, s, all, build;
  double images = 0;
  for (const auto& tt : times)
    for (const auto& x : tt) {
      w.push_back(x.wall), c.push_back(x.cpu), s.push_back(x.sync), all.push_back(x.wall + x.sync);
      build.push_back(x.build), images += x.images;
    }
  const long calls = static_cast<long>(threads) * g_calls;
  std::printf("alloc %-7s load %-4s spin %2d threads %d: %6.0f img/s | a call of %3d: %6.2f ms wall, %6.2f ms thread "
              "CPU, then %5.2f ms stream sync | call + sync min/median/mean/p90/max %s ms | allocations a call: "
              "device %.2f (%.1f MB), pinned %.2f (%.1f MB), %.2f ms in the allocator\n",
              alloc.c_str(), load_kind.c_str(), spin, threads, g_calls * kBatch / wall * 1e3, per, median(w),
              median(c), median(s), spread(all).c_str(), double(g_alloc.dev) / calls,
              double(g_alloc.dev_bytes) / calls / 1e6, double(g_alloc.pinned) / calls,
              double(g_alloc.pinned_bytes) / calls / 1e6, double(g_alloc.us) / calls / 1e3);
  if (g_mosaic > 1)
    std::printf("  mosaics of %d windows: %.1f JPEGs a call, laid out in %.2f ms (median, host, before the call)\n",
                g_mosaic, images / static_cast<double>(calls), median(build));
  if (g_window > 0) print_windows(times.front(), threads * per);
  std::fflush(stdout);
}

// COUNT=1: the CUDA calls of 8 decode calls on one thread, counted through CUPTI after 3 uncounted ones
void count_calls(const std::vector<Image>& set, const std::string& alloc) {
  static CUpti_SubscriberHandle sub = nullptr;
  if (!sub && cuptiSubscribe(&sub, reinterpret_cast<CUpti_CallbackFunc>(on_api), nullptr) != CUPTI_SUCCESS) {
    std::printf("  CUPTI subscription failed: calls not counted\n");
    return;
  }
  std::thread([&] {
    Decoder d(kBatch, size_t(kBatch) * 4096 * 1024 * 3, alloc);
    for (int c = 0; c < 3; ++c) d.decode(set, 0, kBatch);
    g_counts.clear();
    cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API);
    cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_DRIVER_API);
    t_counting = true;
    for (int c = 0; c < 8; ++c) d.decode(set, size_t(c) * kBatch, kBatch);
    t_counting = false;
    cuptiEnableDomain(0, sub, CUPTI_CB_DOMAIN_RUNTIME_API);
    cuptiEnableDomain(0, sub, CUPTI_CB_DOMAIN_DRIVER_API);
  }).join();
  print_counts(8);
}

nvjpegOutputFormat_t format_named(const std::string& name) {
  const std::map<std::string, nvjpegOutputFormat_t> formats = {
      {"RGBI", NVJPEG_OUTPUT_RGBI}, {"BGRI", NVJPEG_OUTPUT_BGRI}, {"RGB", NVJPEG_OUTPUT_RGB},
      {"YUV", NVJPEG_OUTPUT_YUV},   {"Y", NVJPEG_OUTPUT_Y},       {"NV12", NVJPEG_OUTPUT_NV12}};
  const auto it = formats.find(name);
  if (it == formats.end()) {
    std::fprintf(stderr, "FORMATS: unknown format %s (RGBI BGRI RGB YUV Y NV12)\n", name.c_str());
    std::exit(2);
  }
  return it->second;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [spin threads] [loads: none sm mem]\n", argv[0]);
    return 2;
  }
  const int spin = argc > 2 ? std::atoi(argv[2]) : 14;
  auto words = [](const char* env, std::vector<std::string> fallback) {
    const char* v = std::getenv(env);
    if (!v || !*v) return fallback;
    std::istringstream in(v);
    return std::vector<std::string>(std::istream_iterator<std::string>(in), std::istream_iterator<std::string>());
  };
  auto on = [](const char* env) { return std::getenv(env) && std::string(std::getenv(env)) == "1"; };
  auto number = [](const char* env, int fallback) { return std::getenv(env) ? std::atoi(std::getenv(env)) : fallback; };
  if (on("BLOCKING"))
    CK(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
  const std::vector<std::string> allocs = words("ALLOCS", {"default", "count"});
  std::vector<int> thread_counts, spins;
  for (const auto& t : words("THREADS", {"1", "2", "4"})) thread_counts.push_back(std::atoi(t.c_str()));
  for (const auto& t : words("SPINS", {"0", std::to_string(spin)})) spins.push_back(std::atoi(t.c_str()));
  nvjpegHandle_t h;
  NJ(nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, nullptr, nullptr, 0, &h));
  std::vector<Image> set = load(argv[1], h, 4096);
  nvjpegDestroy(h);
  std::vector<int> mosaic_sizes;
  for (const auto& k : words("MOSAIC", {"0"})) mosaic_sizes.push_back(std::atoi(k.c_str()));
  const bool mosaics = std::any_of(mosaic_sizes.begin(), mosaic_sizes.end(), [](int k) { return k > 1; });
  if (on("REWRITE") || mosaics) rewrite(set);
  const bool pinned = on("PINNED");
  if (pinned) pin(set);
  std::printf("%zu JPEGs from %s, bitstreams in %s memory\n", set.size(), argv[1], pinned ? "pinned" : "pageable");
  std::vector<std::string> loads;
  for (int i = 3; i < argc; ++i) loads.push_back(argv[i]);
  if (loads.empty()) loads = {"none", "sm", "mem"};
  const bool count = on("COUNT");
  g_calls = std::max(1, number("CALLS", g_calls));
  g_window = std::max(0, number("WINDOW", g_window));
  for (const auto& k : words("PARTITION", {"0"})) {
    partition(std::atoi(k.c_str()));  // once for every setting below
    for (const auto& f : words("FLAGS", {"0"}))
      for (const auto& format : words("FORMATS", {"RGBI"}))
        for (const auto& roi : words("ROI", {"1"})) {
          g_flags = static_cast<unsigned>(std::atoi(f.c_str()));
          g_format = format_named(format);
          g_roi = roi == "1";
          std::printf("nvjpegCreateEx flags %u, output %s, %s\n", g_flags, format.c_str(),
                      g_roi ? "crop window" : "whole image");
          for (int k : mosaic_sizes) {
            g_mosaic = k;
            if (k > 1) std::printf("mosaics of %d windows, decoded whole\n", k);
            for (const std::string& kind : loads)
              for (const std::string& alloc : allocs)
                for (int s : spins)
                  for (int t : thread_counts) run(set, kind, s, t, alloc);
            if (count) count_calls(set, allocs.front());
          }
        }
  }
  return 0;
}
