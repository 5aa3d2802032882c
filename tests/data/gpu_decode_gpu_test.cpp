// GPU decode (data.decode: gpu, label gpu): nvJPEG against the CPU decoder, the batched crop-resize kernel
// against ATen, the GPU loader against the CPU loader (order, crops, bad files), its epoch hand-over, and the auto
// loader switching between the two. Each test skips without a CUDA device or without nvJPEG in the build.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/fs.h"
#include "data/auto_loader.h"
#include "data/gpu_image_loader.h"
#include "data/image_folder.h"
#include "data/image_loader.h"
#include "data/image_ops.h"
#include "data/jpeg_decoder.h"
#include "data/jpeg_encoder.h"
#include "runtime/env.h"
#include "test_support/image_fixtures.h"
#include "test_support/test_support.h"

namespace trainer {
namespace {

#define REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "needs a CUDA device; none is usable here"

#define REQUIRE_NVJPEG()                                                                     \
  REQUIRE_GPU();                                                                             \
  if (!gpu_decode_available()) GTEST_SKIP() << "this build has no nvJPEG"

// The batched crop-resize kernel gives what ATen's per-sample crop + _upsample_bilinear2d_aa + flip gives, for
// shrinking (antialiased), enlarging, thin and full windows, odd sizes and flips, with its weights tabled (short
// filters) and computed in place (long ones).
TEST(GpuDecode, BatchedCropResizeKernelMatchesAtenPerSample) {
  REQUIRE_GPU();
  if (!gpu_crop_resize_kernel_available()) GTEST_SKIP() << "this build has no CUDA kernels of its own (no nvcc)";
  torch::manual_seed(3);
  torch::Device dev(torch::kCUDA, 0);
  const int64_t S = 56;
  struct Case { int64_t h, w; Rect r; bool flip; bool planar = false; };
  const std::vector<Case> cases = {
      {480, 640, {0, 0, 640, 480}, false},   // whole image, shrink 11x (wide antialias support)
      {480, 640, {100, 37, 301, 250}, true}, // shrink about 5x, flipped
      {33, 47, {3, 5, 20, 17}, false},       // enlarge (plain bilinear)
      {33, 47, {0, 0, 47, 33}, true},        // enlarge, flipped
      {200, 90, {10, 0, 7, 200}, false},     // thin: enlarge one way, shrink the other
      {57, 57, {1, 1, 56, 56}, true},        // nearly the identity
      {120, 90, {5, 9, 80, 100}, true, true},  // a planar decode's (H, W, 3) view
      {900, 60, {0, 20, 60, 870}, false},    // tall: enlarge across, shrink 16x down (weights computed in place)
      {300, 300, {2, 3, 290, 291}, true},    // shrink about 5x both ways (the kernel's tabled weights)
  };
  std::vector<torch::Tensor> images;
  std::vector<Rect> windows;
  std::vector<char> flips;
  for (const Case& c : cases) {
    const auto u8 = torch::TensorOptions().dtype(torch::kUInt8);
    images.push_back(c.planar ? torch::randint(0, 256, {3, c.h, c.w}, u8).to(dev).permute({1, 2, 0})
                              : torch::randint(0, 256, {c.h, c.w, 3}, u8).to(dev));
    windows.push_back(c.r);
    flips.push_back(c.flip ? 1 : 0);
  }
  for (const int64_t size : {S, int64_t{45}}) {  // 45: tiles cut off at both edges
    const torch::Tensor fast = gpu_crop_resize(images, windows, flips, size, /*batched_kernel=*/true).cpu();
    const torch::Tensor ref = gpu_crop_resize(images, windows, flips, size, /*batched_kernel=*/false).cpu();
    ASSERT_EQ(fast.sizes(), ref.sizes());
    for (size_t i = 0; i < cases.size(); ++i) {
      const double worst = (fast[static_cast<int64_t>(i)] - ref[static_cast<int64_t>(i)]).abs().max().item<double>();
      std::printf("  size %lld case %zu: max |kernel - ATen| %.2e (0..255 scale)\n", static_cast<long long>(size), i,
                  worst);
      EXPECT_LT(worst, 2e-3) << "size " << size << " case " << i;
    }
  }
  const torch::Tensor fast = gpu_crop_resize(images, windows, flips, S, /*batched_kernel=*/true).cpu();
  // normalisation and the channels_last layout folded into the kernel: as normalising its plain output
  const GpuResizeOutput norm = GpuResizeOutput::normalized({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}, true);
  const torch::Tensor mean = torch::tensor({norm.mean255[0], norm.mean255[1], norm.mean255[2]}).view({1, 3, 1, 1});
  const torch::Tensor inv = torch::tensor({norm.inv_std255[0], norm.inv_std255[1], norm.inv_std255[2]}).view({1, 3, 1, 1});
  const torch::Tensor folded = gpu_crop_resize(images, windows, flips, S, true, norm);
  EXPECT_TRUE(folded.is_contiguous(torch::MemoryFormat::ChannelsLast));
  const torch::Tensor by_hand = (fast - mean) * inv;
  EXPECT_LT((folded.cpu() - by_hand).abs().max().item<double>(), 1e-4);
  const torch::Tensor folded_ref = gpu_crop_resize(images, windows, flips, S, false, norm).cpu();
  EXPECT_LT((folded.cpu() - folded_ref).abs().max().item<double>(), 1e-4);
  // bfloat16 out (data.dtype): the float32 result rounded as a cast would, kernel and ATen path alike
  GpuResizeOutput norm16 = norm;
  norm16.dtype = torch::kBFloat16;
  for (const bool batched : {true, false}) {
    const torch::Tensor f = gpu_crop_resize(images, windows, flips, S, batched, norm);
    const torch::Tensor h = gpu_crop_resize(images, windows, flips, S, batched, norm16);
    ASSERT_EQ(h.scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(h.is_contiguous(torch::MemoryFormat::ChannelsLast));
    EXPECT_TRUE(torch::equal(h, f.to(torch::kBFloat16))) << (batched ? "kernel" : "ATen path");
  }
  // the ATen reference itself flips: the unflipped kernel output of case 1 mirrors the flipped one
  std::vector<char> none(flips.size(), 0);
  const torch::Tensor unflipped = gpu_crop_resize(images, windows, none, S, true).cpu();
  EXPECT_TRUE(torch::allclose(unflipped[1].flip({2}), fast[1]));
  EXPECT_FALSE(torch::allclose(unflipped[1], fast[1]));
}

// nvJPEG's hardware path writes a batch's pixels when the call is made, not in stream order (torchcodec #1634).
// So a block the caching allocator frees on the decode's stream while a read of it is still queued must never
// become the decode's output: queue ~50 ms of work, then a sum over a buffer of exactly the decode's output size,
// free the buffer and decode on the same stream; the sum must still see the buffer's own bytes.
TEST(GpuDecode, DecodeNeverOverwritesMemoryQueuedWorkStillReads) {
  REQUIRE_NVJPEG();
  const std::string fx = test::python_fixtures("data", "tests/data/make_images.py", "");
  torch::Device dev(torch::kCUDA, 0);
  GpuJpegDecoder gpu(dev);
  const std::string bytes = test::read_file(fx + "/baseline.jpg");
  const GpuJpegDecoder::Files in = {{reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}};
  const auto info = gpu.inspect(in);
  ASSERT_TRUE(info[0].supported);
  const int64_t n = int64_t(info[0].width) * info[0].height * 3;  // bytes of the decode's output buffer
  const torch::Tensor a = torch::randn({4096, 4096}, torch::TensorOptions().device(dev)).div_(64);
  int wrong = 0;
  for (int it = 0; it < 20; ++it) {
    torch::Tensor victim = torch::full({n}, 7, torch::TensorOptions().dtype(torch::kUInt8).device(dev));
    torch::Tensor b = a;
    for (int k = 0; k < 20; ++k) b = torch::tanh(b.matmul(a));  // queued ahead of the read
    const torch::Tensor sum = victim.sum(torch::kInt64);        // the read, still queued
    victim.reset();                                             // freed on this stream meanwhile
    const auto out = gpu.decode(in, info);
    ASSERT_TRUE(out[0].defined());
    if (sum.item<int64_t>() != 7 * n) ++wrong;
  }
  EXPECT_EQ(wrong, 0) << "the decode wrote into memory a queued read still used, in " << wrong << " of 20 tries ("
                      << (gpu.hardware() ? "hardware engines" : "default backend") << ")";
}

TEST(GpuDecode, NvjpegPixelsMatchTheCpuDecoder) {
  REQUIRE_NVJPEG();
  const std::string fx = test::python_fixtures("data", "tests/data/make_images.py", "");
  torch::Device dev(torch::kCUDA, 0);
  GpuJpegDecoder gpu(dev);
  std::vector<std::string> names = {"baseline", "odd", "exif", "gray", "progressive", "cmyk"};
  std::vector<std::string> bytes;
  for (const auto& n : names) bytes.push_back(test::read_file(fx + "/" + n + ".jpg"));
  std::vector<std::pair<const uint8_t*, size_t>> in;
  for (const auto& b : bytes) in.push_back({reinterpret_cast<const uint8_t*>(b.data()), b.size()});
  const auto out = gpu.decode(in);
  torch::cuda::synchronize();
  ASSERT_EQ(out.size(), names.size());
  int decoded = 0;
  JpegDecoder cpu;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!out[i].defined()) {
      std::printf("  %s: not taken by nvJPEG (%s backend): CPU fallback\n", names[i].c_str(),
                  gpu.hardware() ? "hardware" : "default");
      continue;
    }
    ++decoded;
    RgbImage ref;
    cpu.decode(reinterpret_cast<const uint8_t*>(bytes[i].data()), bytes[i].size(), JpegDecodeOptions{}, ref, names[i]);
    const auto want = torch::from_blob(ref.pixels.data(), {ref.height, ref.width, 3}, torch::kUInt8).to(torch::kFloat32);
    ASSERT_EQ(out[i].sizes(), want.sizes()) << names[i];
    const auto diff = (out[i].cpu().to(torch::kFloat32) - want).abs();
    const double mean = diff.mean().item<double>();
    std::printf("  %s: nvJPEG vs libjpeg-turbo mean |diff| %.3f, max %.0f\n", names[i].c_str(), mean,
                diff.max().item<double>());
    EXPECT_LT(mean, 2.0) << names[i] << ": nvJPEG and libjpeg-turbo differ by more than IDCT/upsampling rounding";
  }
  EXPECT_GE(decoded, 3) << "baseline, odd and exif JPEGs are plain baseline files";
  EXPECT_FALSE(out[5].defined()) << "CMYK goes to the CPU decoder";
}

// Shards from `trainer pack` hold JPEGs rewritten with a restart marker after every MCU (same coefficients): the
// engines take them and give the same pixels as for the files they came from (the progressive original, which
// the engines do not take, against the CPU decoder).
TEST(GpuDecode, RestartMarkerRewritesDecodeLikeTheirSources) {
  REQUIRE_NVJPEG();
  const std::string fx = test::python_fixtures("data", "tests/data/make_images.py", "");
  torch::Device dev(torch::kCUDA, 0);
  GpuJpegDecoder gpu(dev);
  const std::vector<std::string> names = {"baseline", "odd", "exif", "gray", "s444", "s422", "progressive"};
  std::vector<std::vector<uint8_t>> orig, rst(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string b = test::read_file(fx + "/" + names[i] + ".jpg");
    orig.emplace_back(b.begin(), b.end());
    ASSERT_TRUE(transcode_with_restarts(orig[i].data(), orig[i].size(), rst[i], names[i]));
  }
  GpuJpegDecoder::Files a, b;
  for (size_t i = 0; i < names.size(); ++i) {
    a.push_back({orig[i].data(), orig[i].size()});
    b.push_back({rst[i].data(), rst[i].size()});
  }
  const auto from_orig = gpu.decode(a), from_rst = gpu.decode(b);
  torch::cuda::synchronize();
  JpegDecoder cpu;
  for (size_t i = 0; i < names.size(); ++i) {
    SCOPED_TRACE(names[i]);
    if (gpu.hardware()) EXPECT_TRUE(from_rst[i].defined()) << "the engines refused a restart-marker rewrite";
    if (!from_rst[i].defined()) continue;
    torch::Tensor want;
    RgbImage ref;
    if (from_orig[i].defined() && names[i] != "progressive") {
      want = from_orig[i].cpu();
    } else {
      cpu.decode(orig[i].data(), orig[i].size(), JpegDecodeOptions{}, ref, names[i]);
      want = torch::from_blob(ref.pixels.data(), {ref.height, ref.width, 3}, torch::kUInt8);
    }
    ASSERT_EQ(from_rst[i].sizes(), want.sizes());
    const auto diff = (from_rst[i].cpu().to(torch::kFloat32) - want.to(torch::kFloat32)).abs();
    std::printf("  %s: restart rewrite vs %s: mean |diff| %.4f, max %.0f\n", names[i].c_str(),
                names[i] == "progressive" ? "libjpeg-turbo" : "the source on nvJPEG", diff.mean().item<double>(),
                diff.max().item<double>());
    if (names[i] == "progressive") EXPECT_LT(diff.mean().item<double>(), 2.0);
    else EXPECT_EQ(diff.max().item<double>(), 0.0) << "same coefficients, same decoder: the pixels must agree";
  }
}

// Crop-only decode on the engines (nvJPEG regions) gives the pixels of the whole-image decode's crop: the region
// decode starts at the region's first MCU, so only chroma upsampling at the region's edges may round differently.
TEST(GpuDecode, RegionDecodeMatchesTheWholeImageCrop) {
  REQUIRE_NVJPEG();
  const std::string fx = test::python_fixtures("data", "tests/data/make_images.py", "");
  torch::Device dev(torch::kCUDA, 0);
  GpuJpegDecoder gpu(dev);
  if (!gpu.hardware()) GTEST_SKIP() << "region decode is a hardware-engine feature; this device has none";
  gpu.preallocate(8);
  std::vector<std::string> bytes;
  for (const char* n : {"baseline", "odd", "exif", "baseline"}) bytes.push_back(test::read_file(fx + "/" + n + ".jpg"));
  GpuJpegDecoder::Files in;
  for (const auto& b : bytes) in.push_back({reinterpret_cast<const uint8_t*>(b.data()), b.size()});
  const auto whole = gpu.decode(in);
  // regions with odd corners and sizes, one touching the far corner, one the whole image (decoded whole)
  auto region = [](size_t i, int w, int h) {
    switch (i) {
      case 0: return Rect{7, 13, w / 2 + 1, h / 3 + 2};
      case 1: return Rect{w - 9, h - 11, 9, 11};
      case 2: return Rect{1, 0, w - 3, h - 5};
      default: return Rect{0, 0, w, h};
    }
  };
  const auto info = gpu.inspect(in, 2, region);
  const auto part = gpu.decode(in, info);
  torch::cuda::synchronize();
  int cropped = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_TRUE(whole[i].defined() && part[i].defined()) << "file " << i << " is a plain baseline JPEG";
    const Rect r = region(i, info[i].width, info[i].height);
    if (i == 3) {
      EXPECT_EQ(info[i].roi.w, 0) << "the whole image is decoded whole";
      EXPECT_TRUE(torch::equal(whole[i], part[i]));
      continue;
    }
    if (info[i].roi.w == 0) {  // the engines refused this region: decoded whole, still correct
      std::printf("  file %zu: region refused by the engines, decoded whole\n", i);
      EXPECT_TRUE(torch::equal(whole[i], part[i]));
      continue;
    }
    ++cropped;
    ASSERT_EQ(part[i].size(0), r.h);
    ASSERT_EQ(part[i].size(1), r.w);
    const auto want = whole[i].narrow(0, r.y, r.h).narrow(1, r.x, r.w).to(torch::kFloat32);
    const auto diff = (part[i].to(torch::kFloat32) - want).abs();
    std::printf("  file %zu region %d,%d %dx%d: mean |diff| %.3f, max %.0f\n", i, r.x, r.y, r.w, r.h,
                diff.mean().item<double>(), diff.max().item<double>());
    EXPECT_LT(diff.mean().item<double>(), 1.0) << "file " << i;
  }
  EXPECT_GE(cropped, 1) << "the engines took none of the regions";
}

// An ImageFolder of 3 classes of 6 files each -- JPEGs the engines take (baseline, EXIF, odd sizes), a CMYK JPEG
// and a PNG they do not -- and one corrupt JPEG, under dir; returns its root.
std::string write_mixed_set(const test::TempDir& dir) {
  const std::string fx = test::python_fixtures("data", "tests/data/make_images.py", "");
  const char* src[] = {"baseline.jpg", "exif.jpg", "odd.jpg", "cmyk.jpg", "alpha.png", "baseline.jpg"};
  for (int c = 0; c < 3; ++c) {
    const std::string d = dir.file("set/c" + std::to_string(c));
    fs::make_dirs(d);
    for (int i = 0; i < 6; ++i) {
      const std::string ext = std::string(src[i]).substr(std::string(src[i]).find('.'));
      test::write_file(d + "/" + std::to_string(i) + ext, test::read_file(fx + "/" + src[i]));
    }
  }
  test::write_file(dir.file("set/c0/zz_bad.jpg"), "\xff\xd8\xff not really a jpeg");
  return dir.file("set");
}

// What the tests on that set share: batches of 8 at 48 px over 3 threads, the last batch kept, no DCT scaling (the
// GPU path resizes from the full-resolution crop), seed 17.
ImageLoaderOptions mixed_set_options(bool train) {
  ImageLoaderOptions o;
  o.batch_size = 8;
  o.image_size = 48;
  o.workers = 3;
  o.train = train;
  o.drop_last = false;
  o.dct_scale = false;
  o.seed = 17;
  return o;
}

// The GPU path gives the CPU path's batches: same order, labels, crop boxes and flips, pixels within the
// difference of the two resize implementations; PNG and CMYK files go through the CPU fallback, and the corrupt
// file is substituted (training) or left out (evaluation) as the CPU path does it.
TEST(GpuDecode, LoaderMatchesTheCpuLoaderAndFallsBack) {
  REQUIRE_NVJPEG();
  test::TempDir dir;
  const auto list = scan_image_folder(write_mixed_set(dir));
  torch::Device dev(torch::kCUDA, 0);
  for (const bool crop : {false, true})
  for (const bool train : {false, true}) {
    ImageLoaderOptions o = mixed_set_options(train);
    o.crop_decode = false;
    o.channels_last = false;
    ImageLoader cpu(list.samples, o, dev);  // reference: whole-image decode on the CPU
    o.crop_decode = crop;                   // the GPU path: whole image, or the crop window on the engines
    o.channels_last = crop;                 // and NCHW or channels_last out of its resize kernel
    GpuImageLoader gpu(list.samples, o, dev);
    o.dtype = torch::kBFloat16;  // data.dtype bfloat16: the same batches rounded
    GpuImageLoader gpu16(list.samples, o, dev);
    for (int64_t e : {0, 1}) {
      cpu.set_epoch(e);
      gpu.set_epoch(e);
      gpu16.set_epoch(e);
      Batch a, b, h;
      int batches = 0;
      while (cpu.next(a)) {
        ASSERT_TRUE(gpu.next(b));
        ASSERT_TRUE(gpu16.next(h));
        ASSERT_EQ(h.images.scalar_type(), torch::kBFloat16);
        EXPECT_EQ(h.images.strides(), b.images.strides());
        EXPECT_TRUE(torch::equal(h.images, b.images.to(torch::kBFloat16))) << "bfloat16 batch " << batches;
        EXPECT_EQ(h.indices, b.indices);
        ++batches;
        ASSERT_EQ(a.images.sizes(), b.images.sizes());
        // one bad-file policy (bad_samples.h): the same substitutes (training) and the same places left out,
        // black (evaluation), so indices and labels are equal and pixels within the resize tolerance throughout
        EXPECT_EQ(a.indices, b.indices) << (train ? "train" : "eval") << " epoch " << e << " batch " << batches;
        EXPECT_TRUE(torch::equal(a.labels.cpu(), b.labels.cpu())) << "epoch " << e << " batch " << batches;
        for (int64_t i = 0; i < a.images.size(0); ++i) {
          const int64_t index = a.indices[static_cast<size_t>(i)];
          if (index < 0) EXPECT_FALSE(train) << "training substitutes bad files";
          const double d = (a.images[i] - b.images[i]).abs().mean().item<double>();
          EXPECT_LT(d, 0.08) << (train ? "train" : "eval") << " epoch " << e << " sample "
                             << (index < 0 ? std::string("(left out)") : list.samples[static_cast<size_t>(index)].path)
                             << ": mean |diff| " << d << " (normalised units)";
        }
      }
      EXPECT_FALSE(gpu.next(b));
      EXPECT_FALSE(gpu16.next(h));
      EXPECT_GT(batches, 1);
    }
    const GpuDecodeStats st = gpu.stats();
    EXPECT_GT(st.gpu, 0);
    EXPECT_GE(st.cpu_fallback, 6 * 2) << "CMYK and PNG files go to the CPU decoder";
    EXPECT_EQ(st.bad, 1) << "the corrupt file, counted once over two epochs";
    EXPECT_EQ(gpu.bad_samples(), cpu.bad_samples());
    // evaluation decodes whole images: torchvision's resize before the centre crop reads past the crop's edge
    if (!crop || !gpu.hardware() || !train) EXPECT_EQ(st.gpu_cropped, 0);
    else EXPECT_GT(st.gpu_cropped, 0) << "crop_decode on the hardware engines decodes training crop windows";
    std::printf("  crop_decode %d, %s: %lld by nvJPEG (%s; %lld crop window only), %lld by the CPU "
                "fallback, %lld replaced\n", crop ? 1 : 0, train ? "train" : "eval",
                static_cast<long long>(st.gpu), gpu.hardware() ? "hardware engines" : "default backend",
                static_cast<long long>(st.gpu_cropped), static_cast<long long>(st.cpu_fallback),
                static_cast<long long>(st.bad));
  }
}

// data.decode hybrid: a fixed share of each training batch (and an adapted one) made by the CPU threads gives the GPU
// path's batches: the same samples, labels and substitutes, pixels within the two decoders' tolerance, over two
// epochs; the CPU threads took their share in training, none in evaluation.
TEST(GpuDecode, HybridSplitGivesTheGpuPathsBatches) {
  REQUIRE_NVJPEG();
  test::TempDir dir;
  const auto list = scan_image_folder(write_mixed_set(dir));
  torch::Device dev(torch::kCUDA, 0);
  for (const bool crop : {false, true})
  for (const bool train : {false, true})
  for (const double share : {0.5, -1.0}) {
    SCOPED_TRACE(testing::Message() << "crop_decode " << crop << (train ? " train" : " eval") << " share " << share);
    ImageLoaderOptions o = mixed_set_options(train);
    o.crop_decode = crop;
    GpuImageLoader gpu(list.samples, o, dev);
    o.host_share = share;
    GpuImageLoader hybrid(list.samples, o, dev);
    for (int64_t e : {0, 1}) {
      gpu.set_epoch(e);
      hybrid.set_epoch(e);
      Batch a, b;
      while (gpu.next(a)) {
        ASSERT_TRUE(hybrid.next(b));
        ASSERT_EQ(a.images.sizes(), b.images.sizes());
        EXPECT_EQ(a.images.strides(), b.images.strides());
        EXPECT_EQ(a.indices, b.indices) << "epoch " << e;
        EXPECT_TRUE(torch::equal(a.labels.cpu(), b.labels.cpu())) << "epoch " << e;
        for (int64_t i = 0; i < a.images.size(0); ++i) {
          const double d = (a.images[i] - b.images[i]).abs().mean().item<double>();
          EXPECT_LT(d, 0.08) << "epoch " << e << " position " << i << ": mean |diff| " << d;
        }
      }
      EXPECT_FALSE(hybrid.next(b));
    }
    const GpuDecodeStats st = hybrid.stats();
    if (train) EXPECT_GT(st.cpu_hybrid, 0) << "the CPU threads took their share";
    else EXPECT_EQ(st.cpu_hybrid, 0) << "evaluation batches go to nvJPEG whole";
    EXPECT_GT(st.gpu, 0) << "and nvJPEG the rest";
    // the share is of the JPEGs: the PNGs go to the CPU fallback as before. (The counts cover what the producer
    // made, batches made ahead and dropped at set_epoch too, so the two loaders' counts are not compared.)
    EXPECT_GE(st.cpu_fallback, 3 * 2) << "PNG files go to the CPU decoder";
    EXPECT_EQ(hybrid.bad_samples(), gpu.bad_samples());
    EXPECT_GE(st.host_share, 0);  // of the last batch
    EXPECT_LE(st.host_share, 1);
    if (share >= 0 && train) {  // a fixed share: that much of every batch, rounded
      const double took = static_cast<double>(st.cpu_hybrid) / static_cast<double>(st.cpu_hybrid + st.gpu);
      EXPECT_NEAR(took, share, 0.2);
    }
    std::printf("  crop_decode %d, %s, share %.2f: %lld by nvJPEG, %lld by the CPU threads (hybrid), share now %.3f\n",
                crop ? 1 : 0, train ? "train" : "eval", share, static_cast<long long>(st.gpu),
                static_cast<long long>(st.cpu_hybrid), st.host_share);
  }
}

// The hybrid share is the CPU loader's output: with all of each training batch's JPEGs given to the CPU threads (and
// DCT scaling on), every JPEG, CMYK too, comes out equal to the CPU loader's sample, bit for bit in float32, over two
// epochs, but for the corrupt file's substitute (one an epoch, decoded whole and resized on the GPU); the PNGs go to
// the fallback (whole image, resized on the GPU: HybridSplitGivesTheGpuPathsBatches covers those).
TEST(GpuDecode, HybridShareIsTheCpuLoadersOutput) {
  REQUIRE_NVJPEG();
  test::TempDir dir;
  const auto list = scan_image_folder(write_mixed_set(dir));
  torch::Device dev(torch::kCUDA, 0);
  ImageLoaderOptions o = mixed_set_options(/*train=*/true);
  o.dct_scale = true;
  o.image_size = 24;  // small beside the fixtures, so that the CPU side decodes at a DCT scale
  ImageLoader cpu(list.samples, o, dev);
  o.host_share = 1.0;
  GpuImageLoader hybrid(list.samples, o, dev);
  auto jpeg = [&](int64_t index) {  // the mixed set's file 4 is a PNG
    return list.samples[static_cast<size_t>(index)].path.find("/4.png") == std::string::npos;
  };
  for (int64_t e : {0, 1}) {
    cpu.set_epoch(e);
    hybrid.set_epoch(e);
    Batch a, b;
    int64_t takes = 0, equal = 0;
    while (cpu.next(a)) {
      ASSERT_TRUE(hybrid.next(b));
      ASSERT_EQ(a.images.sizes(), b.images.sizes());
      EXPECT_EQ(a.indices, b.indices) << "epoch " << e;
      for (int64_t i = 0; i < a.images.size(0); ++i) {
        if (!jpeg(a.indices[static_cast<size_t>(i)])) continue;
        ++takes;
        if ((a.images[i] - b.images[i]).abs().max().item<double>() <= 1e-6) ++equal;
      }
    }
    EXPECT_FALSE(hybrid.next(b));
    EXPECT_GT(takes, 8) << "epoch " << e;
    EXPECT_GE(equal, takes - 1) << "epoch " << e << ": of " << takes
                                << " JPEG samples, all but the corrupt file's substitute are the CPU loader's";
  }
  const GpuDecodeStats st = hybrid.stats();
  EXPECT_GT(st.cpu_hybrid, 0);
  EXPECT_EQ(st.gpu, 0) << "a share of 1 leaves nvJPEG nothing";
}

// data.gpu_decode_sms: the loader's side stream on a green context of a few SMs gives the same batches, bit for
// bit (the same kernels on fewer SMs), over an epoch boundary; a partition the GPU cannot make names the key.
TEST(GpuDecode, LoaderOnAFewSmsGivesTheSameBatches) {
  REQUIRE_NVJPEG();
  test::TempDir dir;
  const auto list = scan_image_folder(write_mixed_set(dir));
  torch::Device dev(torch::kCUDA, 0);
  ImageLoaderOptions o = mixed_set_options(/*train=*/true);
  GpuImageLoader all(list.samples, o, dev);
  o.decode_sms = 16;
  GpuImageLoader few(list.samples, o, dev);
  int64_t batches = 0;
  for (int64_t e : {0, 1}) {
    all.set_epoch(e);
    few.set_epoch(e);
    Batch a, b;
    while (all.next(a)) {
      ASSERT_TRUE(few.next(b));
      ++batches;
      EXPECT_EQ(a.indices, b.indices) << "epoch " << e;
      EXPECT_TRUE(torch::equal(a.labels.cpu(), b.labels.cpu())) << "epoch " << e;
      EXPECT_TRUE(torch::equal(a.images.cpu(), b.images.cpu())) << "epoch " << e;
    }
    EXPECT_FALSE(few.next(b));
  }
  EXPECT_GT(batches, 2);
  o.decode_sms = 100000;
  try {
    GpuImageLoader none(list.samples, o, dev);
    ADD_FAILURE() << "a partition larger than the GPU was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("data.gpu_decode_sms: 100000 SMs"), std::string::npos) << e.what();
  }
}

// Two GPU loaders, one with `change` made to its options, give the same batches in the same order (bad files and
// fallbacks included) across kept epochs, a partly taken epoch, a resume mid-epoch and evaluation.
void expect_same_batches_with(const std::function<void(ImageLoaderOptions&)>& change) {
  test::TempDir dir;
  const auto list = scan_image_folder(write_mixed_set(dir));
  torch::Device dev(torch::kCUDA, 0);
  for (bool train : {true, false}) {
    ImageLoaderOptions o = mixed_set_options(train);
    GpuImageLoader one(list.samples, o, dev);
    change(o);
    GpuImageLoader two(list.samples, o, dev);
    int64_t batches = 0;
    auto expect_same_from = [&](int64_t epoch, int64_t start, int64_t at_most, const std::string& what) {
      one.set_epoch(epoch, start);
      two.set_epoch(epoch, start);
      Batch a, b;
      for (int64_t k = 0; k < at_most && one.next(a); ++k) {
        ASSERT_TRUE(two.next(b)) << what << " batch " << k;
        ++batches;
        EXPECT_EQ(a.indices, b.indices) << what << " batch " << k;
        EXPECT_TRUE(torch::equal(a.labels.cpu(), b.labels.cpu())) << what << " batch " << k;
        EXPECT_TRUE(torch::equal(a.images.cpu(), b.images.cpu())) << what << " batch " << k;
      }
    };
    const std::string kind = train ? "training" : "evaluation";
    expect_same_from(0, 0, 1 << 20, kind + " epoch 0");
    Batch rest;
    EXPECT_FALSE(two.next(rest)) << kind;
    expect_same_from(1, 0, 1 << 20, kind + " epoch 1 (kept from the producer)");
    expect_same_from(2, 0, 1, kind + " epoch 2, one batch");
    expect_same_from(3, 1, 1 << 20, kind + " epoch 3 from batch 1");
    EXPECT_GT(batches, 4) << kind;
    EXPECT_EQ(one.bad_samples(), two.bad_samples()) << kind;
  }
}

// data.gpu_decode_calls 2: two nvJPEG calls in flight give the one-call batches in the one-call order.
TEST(GpuDecode, TwoCallsInFlightGiveTheOneCallBatches) {
  REQUIRE_NVJPEG();
  expect_same_batches_with([](ImageLoaderOptions& o) { o.decode_calls = 2; });
}

// data.gpu_decode_mosaic: the training windows of files that share their tables, decoded as tiles of mosaic JPEGs,
// give the batches of the files decoded one by one: same samples, labels and substitutes over two epochs and a
// resume, pixels within the tolerance of region decoding (only the windows' edge rows and columns may differ).
// The set: fixtures rewritten with restart markers and the standard tables (the quality 90 ones together, the
// quality 85 ones apart), in each class one of a layout no other file has (4:4:4, 4:2:2, grayscale, with fitted
// tables: decoded on its own), CMYK and PNG files (the fallback) and a corrupt file.
TEST(GpuDecode, MosaicTilesGiveTheOneByOneBatches) {
  REQUIRE_NVJPEG();
  const std::string fx = test::python_fixtures("data", "tests/data/make_images.py", "");
  test::TempDir dir;
  const char* alone[] = {"s444", "s422", "gray"};
  for (int c = 0; c < 3; ++c) {
    const std::string d = dir.file("set/c" + std::to_string(c));
    fs::make_dirs(d);
    const char* src[] = {"baseline", "exif", "progressive", "odd", "odd", "baseline", alone[c]};
    for (int i = 0; i < 7; ++i) {
      const std::string b = test::read_file(fx + "/" + src[i] + ".jpg");
      std::vector<uint8_t> rst;
      const auto tables = i == 6 ? HuffmanTables::fitted : HuffmanTables::standard;
      ASSERT_TRUE(transcode_with_restarts(reinterpret_cast<const uint8_t*>(b.data()), b.size(), rst, src[i], 1,
                                          tables));
      test::write_file(d + "/" + std::to_string(i) + ".jpg", std::string(rst.begin(), rst.end()));
    }
    test::write_file(d + "/7.jpg", test::read_file(fx + "/cmyk.jpg"));
    test::write_file(d + "/8.png", test::read_file(fx + "/alpha.png"));
  }
  test::write_file(dir.file("set/c1/zz_bad.jpg"), "\xff\xd8\xff not really a jpeg");
  const auto list = scan_image_folder(dir.file("set"));
  torch::Device dev(torch::kCUDA, 0);
  for (const bool train : {true, false}) {
    SCOPED_TRACE(train ? "training" : "evaluation");
    ImageLoaderOptions o = mixed_set_options(train);
    o.batch_size = 12;
    GpuImageLoader plain(list.samples, o, dev);
    o.decode_mosaic = 4;
    GpuImageLoader tiled(list.samples, o, dev);
    auto expect_alike_from = [&](int64_t epoch, int64_t start) {
      plain.set_epoch(epoch, start);
      tiled.set_epoch(epoch, start);
      Batch a, b;
      int64_t k = 0;
      while (plain.next(a)) {
        ASSERT_TRUE(tiled.next(b)) << "epoch " << epoch << " batch " << k;
        EXPECT_EQ(a.indices, b.indices) << "epoch " << epoch << " batch " << k;
        EXPECT_TRUE(torch::equal(a.labels.cpu(), b.labels.cpu())) << "epoch " << epoch << " batch " << k;
        ASSERT_EQ(a.images.sizes(), b.images.sizes());
        for (int64_t i = 0; i < a.images.size(0); ++i) {
          const double d = (a.images[i] - b.images[i]).abs().mean().item<double>();
          EXPECT_LT(d, 0.08) << "epoch " << epoch << " batch " << k << " position " << i << ": mean |diff| " << d;
        }
        ++k;
      }
      EXPECT_FALSE(tiled.next(b)) << "epoch " << epoch;
      EXPECT_GT(k, 1) << "epoch " << epoch;
    };
    expect_alike_from(0, 0);
    expect_alike_from(1, 0);
    expect_alike_from(2, 1);
    EXPECT_EQ(plain.bad_samples(), tiled.bad_samples());
    const GpuDecodeStats st = tiled.stats();
    std::printf("  %s: %lld by nvJPEG, %lld of them as tiles of %lld mosaics, %lld by the CPU fallback\n",
                train ? "training" : "evaluation", static_cast<long long>(st.gpu), static_cast<long long>(st.gpu_tiled),
                static_cast<long long>(st.gpu_mosaics), static_cast<long long>(st.cpu_fallback));
    if (!train) {
      EXPECT_EQ(st.gpu_tiled, 0) << "evaluation resizes whole images: no mosaics";
      continue;
    }
    EXPECT_GT(st.gpu_mosaics, 0);
    EXPECT_GE(st.gpu_tiled, 2 * st.gpu_mosaics) << "a mosaic holds at least two windows";
    EXPECT_LT(st.gpu_tiled, st.gpu) << "the files of a layout of their own are decoded on their own";
    EXPECT_GE(st.cpu_fallback, 3 * 2) << "CMYK and PNG files go to the CPU decoder";
  }
}

// data.interpolation bicubic (ViT's eval): the GPU path's ATen bicubic resize gives the CPU path's bicubic batches
// within the paths' tolerance, and closer than its bilinear resize does.
TEST(GpuDecode, BicubicEvaluationMatchesTheCpuLoader) {
  REQUIRE_NVJPEG();
  test::TempDir dir;
  const auto list = test::jpeg_folder(dir, 2, 3);
  torch::Device dev(torch::kCUDA, 0);
  ImageLoaderOptions o;
  o.batch_size = 6;
  o.image_size = 48;
  o.workers = 2;
  o.train = false;
  o.dct_scale = false;
  o.crop_decode = false;
  o.channels_last = false;
  o.eval_filter = Interpolation::bicubic;
  ImageLoader cpu(list.samples, o, dev);
  GpuImageLoader gpu(list.samples, o, dev);
  o.eval_filter = Interpolation::bilinear;
  GpuImageLoader bilinear(list.samples, o, dev);
  Batch a, b, c;
  ASSERT_TRUE(cpu.next(a));
  ASSERT_TRUE(gpu.next(b));
  ASSERT_TRUE(bilinear.next(c));
  EXPECT_EQ(a.indices, b.indices);
  const double d = (a.images - b.images).abs().mean().item<double>();
  const double other = (a.images - c.images).abs().mean().item<double>();
  std::printf("  CPU bicubic against GPU bicubic: mean |diff| %.4f, against GPU bilinear %.4f (normalised units)\n", d,
              other);
  EXPECT_LT(d, 0.08);  // the two decoders and the two resize implementations, as the bilinear comparison allows
  EXPECT_LT(d, other) << "the GPU path's eval resize is not the bicubic one";
}

// Training: the producer goes on into the next epoch once an epoch is made. What it hands out after
// set_epoch(e + 1) equals what a loader started at epoch e + 1 gives; a call after a partly taken epoch, or one
// that resumes mid-epoch, starts over and gives the same. Prefetch deeper than an epoch: at most one epoch ahead.
TEST(GpuDecode, LoaderGoesOnIntoTheNextEpochAsSetEpochWould) {
  REQUIRE_NVJPEG();
  test::TempDir dir;
  const auto list = test::jpeg_folder(dir, 3, 6);
  torch::Device dev(torch::kCUDA, 0);
  ImageLoaderOptions o;
  o.batch_size = 4;  // 18 samples: 4 batches an epoch (drop_last)
  o.image_size = 32;
  o.workers = 2;
  o.prefetch = 6;    // deeper than an epoch
  o.seed = 5;
  using Epoch = std::vector<Batch>;
  auto take = [](GpuImageLoader& l, int64_t at_most) {
    Epoch out;
    Batch b;
    while (static_cast<int64_t>(out.size()) < at_most && l.next(b)) out.push_back(b);
    return out;
  };
  auto fresh = [&](int64_t epoch, int64_t start_batch) {
    GpuImageLoader l(list.samples, o, dev);
    l.set_epoch(epoch, start_batch);
    return take(l, 1 << 20);
  };
  auto expect_same = [](const Epoch& a, const Epoch& b, const std::string& what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    for (size_t k = 0; k < a.size(); ++k) {
      EXPECT_EQ(a[k].indices, b[k].indices) << what << " batch " << k;
      EXPECT_TRUE(torch::equal(a[k].labels.cpu(), b[k].labels.cpu())) << what << " batch " << k;
      EXPECT_TRUE(torch::allclose(a[k].images.cpu(), b[k].images.cpu(), 1e-5, 1e-5)) << what << " batch " << k;
    }
  };
  GpuImageLoader l(list.samples, o, dev);
  for (int64_t e = 0; e < 3; ++e) {  // whole epochs: the producer's next epoch is kept
    if (e > 0) l.set_epoch(e);
    const Epoch got = take(l, 1 << 20);
    EXPECT_EQ(got.size(), 4u);
    expect_same(got, fresh(e, 0), "epoch " + std::to_string(e) + " after a whole epoch");
    if (e > 0) {  // a new shuffle each epoch
      const Epoch before = fresh(e - 1, 0);
      EXPECT_NE(got[0].indices, before[0].indices);
    }
  }
  l.set_epoch(3);
  ASSERT_EQ(take(l, 1).size(), 1u);  // epoch 3 partly taken: the next call starts over
  l.set_epoch(4);
  expect_same(take(l, 1 << 20), fresh(4, 0), "epoch 4 after a partly taken epoch");
  l.set_epoch(5, 2);  // resume mid-epoch
  const Epoch whole = fresh(5, 0);
  expect_same(take(l, 1 << 20), Epoch(whole.begin() + 2, whole.end()), "epoch 5 from batch 2");
  l.set_epoch(6);
  expect_same(take(l, 1 << 20), fresh(6, 0), "epoch 6 after a resumed epoch");
  l.set_epoch(6);  // the same epoch again: starts over
  expect_same(take(l, 1 << 20), fresh(6, 0), "epoch 6 again");
}

// data.decode auto with the real loaders: the GPU loader takes over mid-epoch (and, when it loses, the CPU one
// comes back) with the same samples in the same order, pixels within the paths' tolerance, the same dtype and
// layout. With the real rules on the pipeline alone (no training: training takes all it gets) it decides within
// its windows and says which.
TEST(GpuDecode, AutoSwitchesMidEpochWithTheSameSamples) {
  REQUIRE_NVJPEG();
  test::TempDir dir;
  const auto list = test::jpeg_folder(dir, 3, 6);  // 18 samples: 4 batches of 4 an epoch
  torch::Device dev(torch::kCUDA, 0);
  ImageLoaderOptions o;
  o.batch_size = 4;
  o.image_size = 48;
  o.workers = 2;
  o.seed = 23;
  o.dct_scale = false;  // the GPU path resizes from the full-resolution crop
  std::vector<Batch> want;
  {
    ImageLoader plain(list.samples, o, dev);
    for (int64_t e = 0; e < 3; ++e) {
      plain.set_epoch(e);
      Batch b;
      while (plain.next(b)) want.push_back(b);
    }
  }
  ASSERT_EQ(want.size(), 12u);
  auto make_cpu = [&]() -> std::unique_ptr<Loader> { return std::make_unique<ImageLoader>(list.samples, o, dev); };
  auto make_gpu = [&]() -> std::unique_ptr<Loader> { return std::make_unique<GpuImageLoader>(list.samples, o, dev); };
  for (const bool keep_gpu : {true, false}) {
    AutoDecodeOptions ao;
    ao.warm_batches = 2;  // switch after epoch 0 batch 2 (mid-epoch), GPU window into epoch 1
    ao.window_batches = 1;
    ao.gpu_warm_batches = 2;
    ao.keep_cpu = [](const DecodeWindow&, const AutoDecodeOptions&) { return false; };
    ao.keep_gpu = [&](const DecodeWindow&, const DecodeWindow&) { return keep_gpu; };
    AutoDecodeLoader l(make_cpu, make_gpu, o.workers, ao);
    size_t k = 0;
    bool seen_gpu = false;
    for (int64_t e = 0; e < 3; ++e) {
      l.set_epoch(e);
      Batch b;
      while (l.next(b)) {
        ASSERT_LT(k, want.size());
        seen_gpu = seen_gpu || l.on_gpu();
        const Batch& a = want[k];
        EXPECT_EQ(b.indices, a.indices) << "batch " << k;
        EXPECT_TRUE(torch::equal(b.labels.cpu(), a.labels.cpu())) << "batch " << k;
        EXPECT_EQ(b.images.scalar_type(), a.images.scalar_type()) << "batch " << k;
        EXPECT_EQ(b.images.strides(), a.images.strides()) << "batch " << k;
        const double d = (b.images.to(torch::kFloat32) - a.images.to(torch::kFloat32)).abs().mean().item<double>();
        EXPECT_LT(d, 0.08) << "batch " << k << ": mean |diff| " << d << " (normalised units)";
        ++k;
      }
    }
    EXPECT_EQ(k, want.size());
    EXPECT_TRUE(seen_gpu) << "the GPU loader was never tried";
    EXPECT_TRUE(l.decided());
    EXPECT_EQ(l.on_gpu(), keep_gpu);
    EXPECT_EQ(l.gpu_window().images, 4);
    std::printf("  keep_gpu %d: %s\n", keep_gpu ? 1 : 0, l.why().c_str());
  }
  // the real rules (AutoDecodeOptions' defaults, as data.decode: auto builds them): decided within its windows on
  // the pipeline alone
  AutoDecodeLoader a(make_cpu, make_gpu, o.workers);
  const AutoDecodeOptions defaults;  // windows count no epoch's first batch: 3 of every 4 here, plus epoch ends
  const int64_t needed = 2 * (defaults.warm_batches + 2 * defaults.window_batches + defaults.gpu_warm_batches);
  int64_t e = 0;
  a.set_epoch(e);
  Batch b;
  for (int64_t i = 0; i < needed && !a.decided(); ++i)
    if (!a.next(b)) a.set_epoch(++e);
  EXPECT_TRUE(a.decided()) << "not decided after " << needed << " batches";
  EXPECT_NE(a.why().find("data.decode auto: "), std::string::npos) << a.why();
  std::printf("  real rules, pipeline alone: %s\n", a.why().c_str());
}

}  // namespace
}  // namespace trainer
