// The input pipeline on the CPU: decode against Pillow, crop-only and DCT-scaled decode against full decode,
// resize against torchvision, RRC sampling, centre crop, thread-count independence, sharding, bad files, IDX.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <zlib.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "core/check.h"
#include "core/fs.h"
#include "core/thread_priority.h"
#include "data/augment.h"
#include "data/auto_loader.h"
#include "data/bad_samples.h"
#include "data/cifar.h"
#include "data/gpu_resize.h"
#include "data/idx.h"
#include "data/image_folder.h"
#include "data/image_loader.h"
#include "data/image_ops.h"
#include "data/jpeg_cut.h"
#include "data/jpeg_decoder.h"
#include "data/jpeg_encoder.h"
#include "data/jpeg_mosaic.h"
#include "data/memory_loader.h"
#include "data/pack.h"
#include "data/sample_read.h"
#include "data/sharding.h"
#include "data/shards.h"
#include "test_support/test_support.h"

namespace trainer {
namespace {

std::vector<uint8_t> bytes_of(const std::string& path) {
  const std::string s = test::read_file(path);
  return std::vector<uint8_t>(s.begin(), s.end());
}

// mean and max absolute difference of two RGB buffers
std::pair<double, int> diff(const uint8_t* a, const uint8_t* b, size_t n) {
  double sum = 0;
  int mx = 0;
  for (size_t i = 0; i < n; ++i) {
    const int d = std::abs(int(a[i]) - int(b[i]));
    sum += d;
    mx = std::max(mx, d);
  }
  return {sum / n, mx};
}

class Images : public test::FixtureSuite {
 protected:
  static void SetUpTestSuite() { load_fixtures("data", "tests/data/make_images.py", ""); }
  static nlohmann::json meta() {
    std::ifstream f(fixture_path("meta.json"));
    return nlohmann::json::parse(f);
  }
  static RgbImage decode_full(const std::string& name, JpegDecodeOptions o = {}) {
    JpegDecoder dec;
    auto b = bytes_of(fixture_path(name + ".jpg"));
    RgbImage img;
    dec.decode(b.data(), b.size(), o, img, name);
    return img;
  }
};

TEST_F(Images, JpegVariantsMatchPillow) {
  for (const std::string name : {"baseline", "progressive", "gray", "cmyk", "odd", "exif", "s444", "s422"}) {
    SCOPED_TRACE(name);
    const RgbImage img = decode_full(name);
    const auto m = meta()[name];
    ASSERT_EQ(img.width, m["w"].get<int>());
    ASSERT_EQ(img.height, m["h"].get<int>());
    const auto ref = bytes_of(fixture_path(name + ".rgb"));
    ASSERT_EQ(ref.size(), img.pixels.size());
    const auto [mean, mx] = diff(img.pixels.data(), ref.data(), ref.size());
    EXPECT_LT(mean, 0.5);
    EXPECT_LE(mx, name == "cmyk" ? 3 : 2);
  }
}

TEST_F(Images, PngWithAlphaMatchesPillow) {
  auto b = bytes_of(fixture_path("alpha.png"));
  RgbImage img;
  decode_png(b.data(), b.size(), img, "alpha.png");
  ASSERT_EQ(img.width, 61);
  ASSERT_EQ(img.height, 47);
  const auto ref = bytes_of(fixture_path("alpha.rgb"));
  EXPECT_EQ(diff(img.pixels.data(), ref.data(), ref.size()).second, 0);
}

TEST_F(Images, CropDecodeEqualsFullDecodeThenCrop) {
  for (const std::string name : {"baseline", "progressive"}) {
    const RgbImage full = decode_full(name);
    JpegDecodeOptions o;
    o.crop = true;
    o.window = {45, 33, 150, 120};
    const RgbImage crop = decode_full(name, o);
    ASSERT_EQ(crop.width, 150);
    ASSERT_EQ(crop.height, 120);
    double sum = 0;
    int mx = 0;
    for (int y = 0; y < crop.height; ++y)
      for (int x = 0; x < crop.width * 3; ++x) {
        const int d = std::abs(int(crop.pixels[(y * crop.width) * 3 + x]) -
                               int(full.pixels[((y + 33) * full.width + 45) * 3 + x]));
        sum += d;
        mx = std::max(mx, d);
      }
    // chroma upsampling at the window's left edge sees one fewer neighbour: tiny edge differences only
    EXPECT_LT(sum / (crop.width * crop.height * 3), 0.05) << name;
    EXPECT_LE(mx, 4) << name;
  }
}

// Windows over a w x h image: random ones (half of them narrow), and ones touching each edge, the corners and
// MCU boundaries; windows whose first or last row lies on, next to or near an MCU row's first or last row at
// every scale (where the cut keeps or drops its margin rows).
std::vector<Rect> test_windows(int w, int h, int random, uint32_t seed) {
  std::vector<Rect> out = {{0, 0, w, h},          {0, 0, 1, 1},           {w - 1, h - 1, 1, 1},
                           {std::min(16, w - 1), std::min(16, h - 1), 1, 1}, {0, h / 2, w, h - h / 2},
                           {w / 3, 0, w / 3 + 1, h / 4 + 1}, {w / 2, h / 2, w - w / 2, h - h / 2}};
  for (int top : {16, 17, 18, 19, 20, 23, 24, 25, 31})
    for (int bottom : {63, 64, 65, 66, 71, 72, 73, 79, 80}) {
      if (bottom > h) continue;
      const int x = (top * 7 + bottom) % std::max(1, w / 2);
      out.push_back({x, top, std::min(w - x, 20 + top), bottom - top});
    }
  std::mt19937 g(seed);
  for (int i = 0; i < random; ++i) {
    // every other one at most 40 px wide or high: libjpeg's choices that depend on the frame's size show there
    const int ww = std::uniform_int_distribution<int>(1, i % 2 ? std::min(w, 40) : w)(g);
    const int hh = std::uniform_int_distribution<int>(1, i % 4 == 1 ? std::min(h, 40) : h)(g);
    out.push_back({std::uniform_int_distribution<int>(0, w - ww)(g), std::uniform_int_distribution<int>(0, h - hh)(g),
                   ww, hh});
  }
  return out;
}

// Decodes `win` of `jpg` at 1/d both ways (cut out first, and plain crop decoding) and expects the same pixels.
// Returns whether the cut was taken.
bool expect_cut_equals_plain(JpegDecoder& dec, const std::vector<uint8_t>& jpg, Rect win, int d,
                             const std::string& what) {
  JpegDecodeOptions o;
  o.crop = true;
  o.window = win;
  o.scale_denom = d;
  RgbImage cut, plain;
  dec.decode(jpg.data(), jpg.size(), o, cut, what);
  o.cut = false;
  dec.decode(jpg.data(), jpg.size(), o, plain, what);
  EXPECT_EQ(cut.width, plain.width) << what << " window " << win.x << "," << win.y << " " << win.w << "x" << win.h
                                    << " 1/" << d;
  EXPECT_EQ(cut.height, plain.height) << what;
  EXPECT_TRUE(cut.pixels == plain.pixels) << what << " window " << win.x << "," << win.y << " " << win.w << "x"
                                          << win.h << " 1/" << d;
  std::vector<uint8_t> tmp;
  Rect at;
  return cut_jpeg_window(jpg.data(), jpg.size(), win, d, tmp, &at);
}

// trainer pack's lossless rewrite keeps every pixel and puts a restart marker after every MCU; a window cut out
// of it decodes to exactly what plain crop decoding gives, at every DCT scale, for colour (4:2:0, 4:2:2, 4:4:4),
// grayscale, a progressive original, odd sizes and an EXIF-carrying file. CMYK files are left alone.
TEST_F(Images, RestartRewriteIsLosslessAndCutDecodeEqualsPlainCropDecode) {
  JpegDecoder dec;
  int windows = 0, cuts = 0;
  for (const std::string name : {"baseline", "progressive", "gray", "odd", "exif", "s444", "s422"}) {
    SCOPED_TRACE(name);
    const auto orig = bytes_of(fixture_path(name + ".jpg"));
    std::vector<uint8_t> rst;
    ASSERT_TRUE(transcode_with_restarts(orig.data(), orig.size(), rst, name));
    RestartIndex idx;
    ASSERT_TRUE(index_restart_intervals(rst.data(), rst.size(), idx));
    EXPECT_EQ(idx.interval, 1);
    EXPECT_EQ(idx.starts.size(), static_cast<size_t>(idx.mcu_cols) * idx.mcu_rows);
    EXPECT_EQ(idx.mcu_w, name == "gray" || name == "s444" ? 8 : 16);
    EXPECT_EQ(idx.mcu_h, name == "gray" || name == "s444" || name == "s422" ? 8 : 16);
    RgbImage a, b;
    dec.decode(orig.data(), orig.size(), {}, a, name);
    dec.decode(rst.data(), rst.size(), {}, b, name);
    ASSERT_EQ(a.width, b.width);
    ASSERT_EQ(a.height, b.height);
    EXPECT_TRUE(a.pixels == b.pixels) << "the rewrite changed pixels";
    for (const Rect& w : test_windows(a.width, a.height, 60, 11))
      for (int d : {1, 2, 4, 8}) {
        cuts += expect_cut_equals_plain(dec, rst, w, d, name);
        ++windows;
      }
  }
  // all but the windows that start at the top at full width (nothing to save there)
  EXPECT_GT(cuts, windows * 3 / 4) << cuts << " of " << windows;
  const auto cmyk = bytes_of(fixture_path("cmyk.jpg"));
  std::vector<uint8_t> out = {1, 2, 3};
  EXPECT_FALSE(transcode_with_restarts(cmyk.data(), cmyk.size(), out, "cmyk"));
  EXPECT_EQ(out.size(), 3u);
  // files without restart markers (every fixture as written) are decoded the plain way
  std::vector<uint8_t> tmp;
  Rect at;
  EXPECT_FALSE(cut_jpeg_window(cmyk.data(), cmyk.size(), {40, 40, 50, 50}, 1, tmp, &at));
  const auto base = bytes_of(fixture_path("baseline.jpg"));
  EXPECT_FALSE(cut_jpeg_window(base.data(), base.size(), {40, 40, 50, 50}, 1, tmp, &at));
}

// The frame as the hybrid share's cost model reads it (headers only): every fixture's size as decoded, progressive
// where it is, cuttable only once rewritten with restart markers; no frame in a file that is not a JPEG or ends before its frame header.
TEST_F(Images, FrameHeaderGivesTheSizeAndWhetherTheFileCanBeCut) {
  for (const std::string name : {"baseline", "progressive", "gray", "cmyk", "odd", "exif", "s444", "s422"}) {
    SCOPED_TRACE(name);
    const auto orig = bytes_of(fixture_path(name + ".jpg"));
    const auto m = meta()[name];
    JpegFrame f;
    ASSERT_TRUE(read_jpeg_frame(orig.data(), orig.size(), f));
    EXPECT_EQ(f.width, m["w"].get<int>());
    EXPECT_EQ(f.height, m["h"].get<int>());
    EXPECT_FALSE(f.cuttable) << "written without restart markers";
    EXPECT_EQ(f.progressive, name == "progressive");
    std::vector<uint8_t> rst;
    if (!transcode_with_restarts(orig.data(), orig.size(), rst, name)) continue;  // CMYK stays as it is
    JpegFrame g;
    ASSERT_TRUE(read_jpeg_frame(rst.data(), rst.size(), g));
    EXPECT_EQ(g.width, f.width);
    EXPECT_EQ(g.height, f.height);
    EXPECT_TRUE(g.cuttable);
    EXPECT_FALSE(g.progressive) << "the rewrite is sequential";
  }
  const auto base = bytes_of(fixture_path("baseline.jpg"));
  JpegFrame f;
  EXPECT_FALSE(read_jpeg_frame(base.data(), 40, f)) << "cut off before its frame header";
  const std::vector<uint8_t> text = {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'};
  EXPECT_FALSE(read_jpeg_frame(text.data(), text.size(), f));
  const auto png = bytes_of(fixture_path("alpha.png"));
  EXPECT_FALSE(read_jpeg_frame(png.data(), png.size(), f));
}

// Restart intervals of several MCUs or of whole rows (other encoders' choices) are cut along their own
// boundaries; intervals that do not tile rectangles are decoded the plain way. A marker out of sequence or a
// truncated file is never cut past: the plain path reports it, naming the file.
TEST_F(Images, CutDecodeFollowsTheIntervalsAndNeverHidesCorruption) {
  JpegDecoder dec;
  const RgbImage src = decode_full("baseline");  // 320 x 240: 20 x 15 MCUs of 16 x 16
  for (int r : {1, 2, 5, 20, 40, 3, 7, 30}) {
    SCOPED_TRACE("interval " + std::to_string(r));
    std::vector<uint8_t> jpg;
    encode_jpeg(src, 90, jpg, "x.jpg", r);
    const bool tiles = 20 % r == 0 || r % 20 == 0;
    RestartIndex idx;
    EXPECT_EQ(index_restart_intervals(jpg.data(), jpg.size(), idx), tiles);
    int cuts = 0;
    for (const Rect& w : test_windows(src.width, src.height, 12, static_cast<uint32_t>(r)))
      for (int d : {1, 2}) cuts += expect_cut_equals_plain(dec, jpg, w, d, "x.jpg");
    if (tiles) EXPECT_GT(cuts, 0);
    else EXPECT_EQ(cuts, 0);
  }
  std::vector<uint8_t> jpg;
  encode_jpeg(src, 90, jpg, "x.jpg", 1);
  RestartIndex idx;
  ASSERT_TRUE(index_restart_intervals(jpg.data(), jpg.size(), idx));
  const Rect low = {100, 180, 120, 50};  // MCU rows 10-14
  JpegDecodeOptions o;
  o.crop = true;
  o.window = low;
  RgbImage img;
  // marker 100 (row 5) renumbered: the cut declines and the plain decoder, reading past it, reports it
  auto bad = jpg;
  const size_t at100 = idx.starts[100] - 1;  // the marker's second byte
  bad[at100] = static_cast<uint8_t>(0xD0 + ((bad[at100] - 0xD0 + 3) & 7));
  std::vector<uint8_t> tmp;
  Rect at;
  EXPECT_FALSE(cut_jpeg_window(bad.data(), bad.size(), low, 1, tmp, &at));
  try {
    dec.decode(bad.data(), bad.size(), o, img, "renumbered.jpg");
    ADD_FAILURE() << "a marker out of sequence went unnoticed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("renumbered.jpg"), std::string::npos) << e.what();
  }
  // truncated inside MCU row 8: a window in rows 0-6 is still cut and equals the whole file's; one below throws
  const std::vector<uint8_t> cut(jpg.begin(), jpg.begin() + idx.starts[8 * 20 + 5]);
  const Rect high = {30, 20, 150, 60};
  EXPECT_TRUE(expect_cut_equals_plain(dec, cut, high, 1, "truncated.jpg"));
  RgbImage whole, part;
  o.window = high;
  dec.decode(jpg.data(), jpg.size(), o, whole, "x.jpg");
  dec.decode(cut.data(), cut.size(), o, part, "truncated.jpg");
  EXPECT_TRUE(whole.pixels == part.pixels);
  o.window = low;
  EXPECT_FALSE(cut_jpeg_window(cut.data(), cut.size(), low, 1, tmp, &at));
  EXPECT_THROW(dec.decode(cut.data(), cut.size(), o, img, "truncated.jpg"), Error);
}

TEST_F(Images, DctScaledDecodeApproximatesFullDecodeThenResize) {
  const RgbImage full = decode_full("baseline");
  for (int d : {2, 4}) {
    JpegDecodeOptions o;
    o.scale_denom = d;
    const RgbImage small = decode_full("baseline", o);
    ASSERT_EQ(small.width, (full.width + d - 1) / d);
    std::vector<uint8_t> ref(small.pixels.size());
    resize_rgb(full.pixels.data(), full.width, full.height, {0, 0, full.width, full.height}, ref.data(), small.width,
               small.height, small.width * 3, false);
    const auto [mean, mx] = diff(small.pixels.data(), ref.data(), ref.size());
    EXPECT_LT(mean, 4.0) << "1/" << d;  // IDCT scaling is a different (sharper) low-pass than the triangle filter
  }
}

TEST_F(Images, ResizeMatchesTorchvisionAntialiasedBilinear) {
  const auto src = bytes_of(fixture_path("resize_src.rgb"));
  for (auto [w, h] : std::vector<std::pair<int, int>>{{224, 224}, {97, 61}, {480, 352}}) {
    std::vector<uint8_t> out(static_cast<size_t>(w) * h * 3);
    resize_rgb(src.data(), 300, 200, {0, 0, 300, 200}, out.data(), w, h, w * 3, false);
    const auto ref = bytes_of(fixture_path("resize_" + std::to_string(w) + "x" + std::to_string(h) + ".rgb"));
    const auto [mean, mx] = diff(out.data(), ref.data(), ref.size());
    // torchvision (like PIL) rounds its horizontal pass to uint8 before the vertical one; we keep floats, so
    // about a fifth of the values differ by one level and none by more
    EXPECT_LE(mx, 1) << w << "x" << h;
    EXPECT_LT(mean, 0.25) << w << "x" << h;
  }
}

// data.interpolation bicubic (ViT's eval): PIL's cubic (a = -0.5) with the antialiased support, shrinking and
// enlarging, against torchvision's uint8 bicubic resize.
TEST_F(Images, ResizeMatchesTorchvisionAntialiasedBicubic) {
  const auto src = bytes_of(fixture_path("resize_src.rgb"));
  for (auto [w, h] : std::vector<std::pair<int, int>>{{224, 224}, {97, 61}, {480, 352}}) {
    std::vector<uint8_t> out(static_cast<size_t>(w) * h * 3), bilinear(out.size());
    resize_rgb(src.data(), 300, 200, {0, 0, 300, 200}, out.data(), w, h, w * 3, false, Interpolation::bicubic);
    resize_rgb(src.data(), 300, 200, {0, 0, 300, 200}, bilinear.data(), w, h, w * 3, false);
    const auto ref = bytes_of(fixture_path("resize_bicubic_" + std::to_string(w) + "x" + std::to_string(h) + ".rgb"));
    const auto [mean, mx] = diff(out.data(), ref.data(), ref.size());
    const auto [mean_bilinear, mx_bilinear] = diff(bilinear.data(), ref.data(), ref.size());
    std::printf("  %dx%d: bicubic vs torchvision mean %.3f max %d; bilinear vs it mean %.3f\n", w, h, mean, mx,
                mean_bilinear);
    // torchvision rounds its first pass to uint8; we keep floats (clamped to 0..255 as that rounding clamps)
    EXPECT_LE(mx, 2) << w << "x" << h;
    EXPECT_LT(mean, 0.3) << w << "x" << h;
    EXPECT_GT(mean_bilinear, 2 * mean) << "the bicubic reference is not told apart from bilinear";
  }
  EXPECT_EQ(interpolation_from("bicubic"), Interpolation::bicubic);
  EXPECT_THROW(interpolation_from("lanczos"), Error);
}

// The horizontal pass two pixels per AVX2 vector gives the very bytes of the four-lane pass: 3, 5 and 7 taps
// (unrolled; 3 where the width grows while the height shrinks) and 9 to 300 (counted at run time), odd and even
// output widths, one pixel wide, windows off the origin, with and without the flip, into a strided destination.
TEST_F(Images, ResizeInAvx2PairsGivesTheBytesOfTheFourLanePass) {
  if (!__builtin_cpu_supports("avx2")) GTEST_SKIP() << "this CPU has no AVX2: only the four-lane pass exists";
  const auto src = bytes_of(fixture_path("resize_src.rgb"));  // 300 x 200
  int compared = 0;
  for (const Rect r : {Rect{0, 0, 300, 200}, Rect{17, 9, 251, 177}, Rect{101, 3, 64, 190}})
    for (const int w : {224, 223, 97, 40, 13, 2, 1})
      for (const int h : {150, 61, 7})
        for (const bool flip : {false, true}) {
          if (w >= r.w && h >= r.h) continue;  // enlarging both ways goes through OpenCV, not these passes
          const int stride = w * 3 + 5;
          std::vector<uint8_t> a(static_cast<size_t>(stride) * h, 7), b(a);
          resize_rgb(src.data(), 300, 200, r, a.data(), w, h, stride, flip, Interpolation::bilinear, ResizeSimd::best);
          resize_rgb(src.data(), 300, 200, r, b.data(), w, h, stride, flip, Interpolation::bilinear,
                     ResizeSimd::four_lanes);
          ASSERT_TRUE(a == b) << r.x << "," << r.y << " " << r.w << "x" << r.h << " -> " << w << "x" << h
                              << (flip ? " flipped" : "");
          ++compared;
        }
  EXPECT_GT(compared, 100);
}

TEST_F(Images, CorruptTruncatedEmptyAndNonImageFilesThrowWithPath) {
  auto good = bytes_of(fixture_path("baseline.jpg"));
  JpegDecoder dec;
  RgbImage img;
  std::vector<uint8_t> trunc(good.begin(), good.begin() + good.size() / 3);
  try {
    dec.decode(trunc.data(), trunc.size(), {}, img, "cut.jpg");
    FAIL() << "a truncated JPEG decoded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cut.jpg"), std::string::npos) << e.what();
  }
  EXPECT_THROW(dec.decode(good.data(), 0, {}, img, "empty.jpg"), Error);
  const std::string text = "hello, not an image";
  int w, h;
  EXPECT_THROW(read_image_size(dec, reinterpret_cast<const uint8_t*>(text.data()), text.size(), "t.jpg", &w, &h),
               Error);
  // a header claiming 65500 x 65500 is refused before any allocation
  auto huge = good;
  for (size_t i = 0; i + 8 < huge.size(); ++i)
    if (huge[i] == 0xFF && huge[i + 1] == 0xC0) {
      huge[i + 5] = 0xFF, huge[i + 6] = 0xDC, huge[i + 7] = 0xFF, huge[i + 8] = 0xDC;
      break;
    }
  try {
    dec.decode(huge.data(), huge.size(), {}, img, "huge.jpg");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("refusing"), std::string::npos) << e.what();
  }
  // the decoder is reusable after errors
  dec.decode(good.data(), good.size(), {}, img, "good.jpg");
  EXPECT_EQ(img.width, 320);
}

TEST(ImageOps, CenterCropWindowIsTorchvisions) {
  const Rect r = center_crop_window(500, 400, 224, 0.875);  // Resize(256) -> 320x256, CenterCrop(224)
  EXPECT_EQ(r.w, 350);
  EXPECT_EQ(r.h, 350);
  EXPECT_EQ(r.x, 75);
  EXPECT_EQ(r.y, 25);
}

TEST(ImageOps, RrcDrawsFollowTorchvisionsDistribution) {
  const int W = 500, H = 400, N = 20000;
  double log_ratio_sum = 0, area_sum = 0;
  int fallback_like = 0;
  for (int i = 0; i < N; ++i) {
    SampleRng rng(1, 0, static_cast<uint64_t>(i));
    const Rect r = draw_rrc(rng, W, H, 0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0);
    ASSERT_TRUE(r.x >= 0 && r.y >= 0 && r.w > 0 && r.h > 0 && r.x + r.w <= W && r.y + r.h <= H);
    const double frac = double(r.w) * r.h / (W * H);
    area_sum += frac;
    log_ratio_sum += std::log(double(r.w) / r.h);
    fallback_like += (r.w == W || r.h == H);
    SampleRng again(1, 0, static_cast<uint64_t>(i));
    const Rect r2 = draw_rrc(again, W, H, 0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0);
    ASSERT_TRUE(r.x == r2.x && r.y == r2.y && r.w == r2.w && r.h == r2.h) << "draws must be reproducible";
  }
  // accepted draws have area fraction ~U(0.08, 1) truncated by the 500x400 bounds: mean well inside (0.3, 0.55)
  EXPECT_GT(area_sum / N, 0.3);
  EXPECT_LT(area_sum / N, 0.55);
  EXPECT_NEAR(log_ratio_sum / N, 0.0, 0.03);  // log-uniform aspect, symmetric range
  EXPECT_LT(fallback_like, N / 4);
}

// ---- loader ----

class Folder : public test::FixtureSuite {
 protected:
  static void SetUpTestSuite() { load_fixtures("data", "tests/data/make_images.py", ""); }
  // root/<class>/*.jpg: 3 classes x 7 files, copies of the fixtures
  static std::string make_folder(test::TempDir& dir, int bad_files = 0) {
    const std::string root = dir.file("set");
    int k = 0;
    for (const std::string cls : {"cat", "dog", "emu"}) {
      fs::make_dirs(root + "/" + cls);
      for (int i = 0; i < 7; ++i) {
        const char* src[] = {"baseline", "progressive", "gray", "cmyk", "odd", "exif", "baseline"};
        test::write_file(root + "/" + cls + "/" + std::to_string(i) + ".jpg",
                         test::read_file(fixture_path(std::string(src[i]) + ".jpg")));
        ++k;
      }
    }
    if (bad_files > 0) test::write_file(root + "/cat/zz_empty.jpg", "");
    if (bad_files > 1) test::write_file(root + "/dog/zz_text.jpg", "this is text");
    if (bad_files > 2) {
      const std::string good = test::read_file(fixture_path("baseline.jpg"));
      test::write_file(root + "/emu/zz_cut.jpg", good.substr(0, good.size() / 2));
    }
    return root;
  }
  static std::vector<torch::Tensor> epoch(ImageLoader& l, int64_t e) {
    l.set_epoch(e);
    std::vector<torch::Tensor> out;
    Batch b;
    while (l.next(b)) out.push_back(b.images.clone());
    return out;
  }
  static ImageLoaderOptions options(int workers) {
    ImageLoaderOptions o;
    o.batch_size = 4;
    o.image_size = 32;
    o.workers = workers;
    o.prefetch = 2;
    o.normalize = false;
    o.seed = 9;
    return o;
  }
};

TEST_F(Folder, ScanSortsClassesAndFindsImages) {
  test::TempDir dir;
  const auto list = scan_image_folder(make_folder(dir));
  EXPECT_EQ(list.classes, (std::vector<std::string>{"cat", "dog", "emu"}));
  EXPECT_EQ(list.samples.size(), 21u);
  EXPECT_EQ(list.samples.back().label, 2);
  EXPECT_THROW(scan_image_folder(dir.file("nope")), Error);
  fs::make_dirs(dir.file("set/empty_class"));
  try {
    scan_image_folder(dir.file("set"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("empty_class"), std::string::npos) << e.what();
  }
}

TEST_F(Folder, SameBatchesWithOneOrFourThreads) {
  test::TempDir dir;
  const auto list = scan_image_folder(make_folder(dir));
  ImageLoader one(list.samples, options(1), torch::kCPU), four(list.samples, options(4), torch::kCPU);
  for (int64_t e : {0, 1}) {
    const auto a = epoch(one, e), b = epoch(four, e);
    ASSERT_EQ(a.size(), 5u);  // 21 samples, batch 4, drop_last
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "epoch " << e << " batch " << i;
  }
  // a new epoch draws new crops
  EXPECT_FALSE(torch::equal(epoch(one, 0)[0], epoch(one, 1)[0]));
}

// data.thread_nice: the CPU loader's decode threads run below the thread that made the loader (the training
// thread): counted from /proc as this process's threads at that niceness while the loader lives, and gone after.
TEST_F(Folder, DecodeThreadsRunAtTheDataThreadsNiceness) {
  auto threads_at = [](int nice) {
    int n = 0;
    for (const std::string& tid : fs::list_dir("/proc/self/task")) {
      std::ifstream f("/proc/self/task/" + tid + "/stat");
      std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      const size_t close = stat.rfind(')');
      if (close == std::string::npos) continue;
      std::istringstream rest(stat.substr(close + 2));  // from field 3 (state); niceness is field 19
      std::string field;
      for (int i = 3; i <= 19 && rest >> field; ++i) {}
      n += std::stoi(field) == nice;
    }
    return n;
  };
  test::TempDir dir;
  const auto list = scan_image_folder(make_folder(dir));
  const int unrelated = threads_at(13), before = this_thread_nice();  // the pool's helpers of an earlier test may sit at some niceness
  set_data_thread_nice(13);
  {
    ImageLoader l(list.samples, options(3), torch::kCPU);
    EXPECT_EQ(epoch(l, 0).size(), 5u);
    EXPECT_GE(threads_at(13) - unrelated, 3) << "the 3 decode threads";
    EXPECT_EQ(this_thread_nice(), before) << "the thread that made the loader keeps its own";
  }
  set_data_thread_nice(0);
  EXPECT_EQ(threads_at(13), unrelated) << "the decode threads end with the loader";
}

// Training: once an epoch's tasks are handed out the threads go on with the next epoch. What the loader gives
// after set_epoch(e + 1) equals what a loader started at e + 1 gives (order, draws, labels), whatever the ring
// depth; the threads make the next epoch's first batches before set_epoch is called; a partly taken epoch, a
// resume mid-epoch and the same epoch again start over and give the same; evaluation never goes on.
TEST_F(Folder, GoesOnIntoTheNextEpochAsSetEpochWould) {
  test::TempDir dir;
  const auto list = scan_image_folder(make_folder(dir));
  struct Taken {
    std::vector<torch::Tensor> images, labels;
    std::vector<std::vector<int64_t>> indices;
  };
  auto take = [](ImageLoader& l, size_t at_most) {
    Taken t;
    Batch b;
    while (t.images.size() < at_most && l.next(b)) {
      t.images.push_back(b.images.clone());
      t.labels.push_back(b.labels.clone());
      t.indices.push_back(b.indices);
    }
    return t;
  };
  auto expect_same = [](const Taken& a, const Taken& b, const std::string& what) {
    ASSERT_EQ(a.images.size(), b.images.size()) << what;
    for (size_t k = 0; k < a.images.size(); ++k) {
      EXPECT_EQ(a.indices[k], b.indices[k]) << what << " batch " << k;
      EXPECT_TRUE(torch::equal(a.labels[k], b.labels[k])) << what << " batch " << k;
      EXPECT_TRUE(torch::equal(a.images[k], b.images[k])) << what << " batch " << k;
    }
  };
  for (const int prefetch : {1, 8}) {     // a ring of 2 slots, and one deeper than an epoch (5 batches)
    for (const bool drop_last : {true, false}) {
      ImageLoaderOptions o = options(3);
      o.prefetch = prefetch;
      o.drop_last = drop_last;
      const std::string tag = "prefetch " + std::to_string(prefetch) + (drop_last ? ", drop_last" : ", keep last");
      auto fresh = [&](int64_t e, int64_t start_batch) {
        ImageLoader l(list.samples, o, torch::kCPU);
        l.set_epoch(e, start_batch);
        return take(l, 1000);
      };
      ImageLoader l(list.samples, o, torch::kCPU);
      for (int64_t e = 0; e < 3; ++e) {
        if (e > 0) l.set_epoch(e);
        const Taken got = take(l, 1000);
        EXPECT_EQ(got.images.size(), drop_last ? 5u : 6u) << tag;
        expect_same(got, fresh(e, 0), tag + ", epoch " + std::to_string(e) + " after a whole epoch");
        if (e == 0) {  // the threads make the next epoch's first batch before anyone asks for it
          const int64_t made = static_cast<int64_t>(got.images.size() - 1) * 4 + got.images.back().size(0);
          const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
          while (l.stage_totals().samples < made + 4 && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
          EXPECT_GE(l.stage_totals().samples, made + 4) << tag << ": nothing of epoch 1 made ahead";
        }
      }
      l.set_epoch(3);
      ASSERT_EQ(take(l, 1).images.size(), 1u);  // epoch 3 partly taken: the next call starts over
      l.set_epoch(4);
      expect_same(take(l, 1000), fresh(4, 0), tag + ", epoch 4 after a partly taken epoch");
      l.set_epoch(5, 2);  // resume mid-epoch
      expect_same(take(l, 1000), fresh(5, 2), tag + ", epoch 5 from batch 2");
      l.set_epoch(6);
      expect_same(take(l, 1000), fresh(6, 0), tag + ", epoch 6 after a resumed epoch");
      l.set_epoch(6);  // the same epoch again
      expect_same(take(l, 1000), fresh(6, 0), tag + ", epoch 6 again");
    }
  }
  // evaluation: the same centre crops every time, and the threads stop at the end of the pass
  ImageLoaderOptions o = options(2);
  o.train = false;
  ImageLoader eval(list.samples, o, torch::kCPU);
  const Taken first = take(eval, 1000);
  const int64_t made = eval.stage_totals().samples;
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(eval.stage_totals().samples, made) << "an evaluation loader went on past its pass";
  eval.set_epoch(0);
  expect_same(take(eval, 1000), first, "evaluation again");
}

TEST_F(Folder, RandAugmentJitterAndErasingKeepThreadIndependenceAndSpareEval) {
  test::TempDir dir;
  const auto list = scan_image_folder(make_folder(dir));
  ImageLoaderOptions o = options(1);
  o.normalize = true;
  o.channels_last = false;
  o.augment.jitter = {0.4, 0.4, 0.4, 0.1};
  o.augment.erase_prob = 0.5;
  o.augment.auto_augment.policy = "rand";  // RandAugment too: grouped by op, still per-sample draws
  ImageLoaderOptions o4 = o;
  o4.workers = 4;
  ImageLoaderOptions plain = o;
  plain.augment = AugmentOptions{};
  ImageLoader one(list.samples, o, torch::kCPU), four(list.samples, o4, torch::kCPU), off(list.samples, plain, torch::kCPU);
  const auto a = epoch(one, 0), b = epoch(four, 0), c = epoch(off, 0);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::equal(a[i], b[i])) << "batch " << i;
    EXPECT_FALSE(torch::equal(a[i], c[i])) << "batch " << i << " was not augmented";
  }
  o.train = plain.train = false;
  ImageLoader ea(list.samples, o, torch::kCPU), eb(list.samples, plain, torch::kCPU);
  const auto x = epoch(ea, 0), y = epoch(eb, 0);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_TRUE(torch::equal(x[i], y[i])) << "eval batch " << i << " augmented";
}

TEST_F(Folder, RamCacheServesLaterEpochsWithoutTheFiles) {
  test::TempDir dir;
  const auto list = scan_image_folder(make_folder(dir));
  ImageLoaderOptions o = options(3);
  o.drop_last = false;  // every sample read (and cached) in epoch 0
  ImageLoader plain(list.samples, o, torch::kCPU);
  o.cache_gb = 1;
  ImageLoader cached(list.samples, o, torch::kCPU);
  const auto e0 = epoch(cached, 0), want0 = epoch(plain, 0);
  EXPECT_GT(cached.cached_bytes(), 21 * 1000);
  fs::remove_tree(dir.file("set"));  // later epochs must not touch the disk
  const auto e1 = epoch(cached, 1);
  EXPECT_EQ(cached.bad_samples(), 0);
  for (size_t i = 0; i < e0.size(); ++i) EXPECT_TRUE(torch::equal(e0[i], want0[i])) << "batch " << i;
  EXPECT_FALSE(torch::equal(e0[0], e1[0]));
  // a cache too small for the set: the rest comes from disk
  const auto again = scan_image_folder(make_folder(dir));
  ImageLoaderOptions tiny = options(2);
  tiny.cache_gb = 40000.0 / (1 << 30);  // a few files' worth
  ImageLoader small(again.samples, tiny, torch::kCPU);
  epoch(small, 0);
  EXPECT_LE(small.cached_bytes(), 40000);
  EXPECT_GT(small.cached_bytes(), 0);
}

// data.cache: restart. Epoch 0 rewrites each JPEG with a restart marker after every MCU as it caches it; later
// epochs cut the crop windows out of the cached files (as from trainer pack's shards) and give the pixels plain
// crop decoding gives.
TEST_F(Folder, RestartCacheCutsLaterEpochsWindowsWithTheSamePixels) {
  test::TempDir dir;
  const auto list = scan_image_folder(make_folder(dir));
  ImageLoaderOptions o = options(2);
  o.drop_last = false;
  ImageLoader plain(list.samples, o, torch::kCPU);
  o.cache_gb = 1;
  o.cache_restart = true;
  ImageLoader cached(list.samples, o, torch::kCPU);
  const auto a0 = epoch(cached, 0), b0 = epoch(plain, 0), b1 = epoch(plain, 1);
  EXPECT_EQ(plain.stage_totals().cut, 0) << "the fixtures have no restart markers of their own";
  int64_t files = 0;
  for (const auto& s : list.samples) files += static_cast<int64_t>(fs::read_text(s.path).size());
  EXPECT_GT(cached.cached_bytes(), files) << "the budget counts the rewritten files (a marker per MCU is larger)";
  fs::remove_tree(dir.file("set"));
  const StageTotals before = cached.stage_totals();
  const auto a1 = epoch(cached, 1);
  const StageTotals after = cached.stage_totals();
  EXPECT_GT(after.cut - before.cut, (after.samples - before.samples) / 2) << "later epochs cut their windows out";
  EXPECT_EQ(cached.bad_samples(), 0);
  ASSERT_EQ(a0.size(), b0.size());
  ASSERT_EQ(a1.size(), b1.size());
  for (size_t i = 0; i < a0.size(); ++i) EXPECT_TRUE(torch::equal(a0[i], b0[i])) << "epoch 0 batch " << i;
  for (size_t i = 0; i < a1.size(); ++i) EXPECT_TRUE(torch::equal(a1[i], b1[i])) << "epoch 1 batch " << i;
}

TEST_F(Folder, DecodedCacheSkipsReadAndDecodeInLaterEpochs) {
  test::TempDir dir;
  const auto list = scan_image_folder(make_folder(dir));
  ImageLoaderOptions o = options(2);
  o.drop_last = false;
  o.dct_scale = false;  // a decoded cache holds full images: compare with full decodes
  o.crop_decode = false;
  ImageLoader plain(list.samples, o, torch::kCPU);
  o.cache_gb = 1;
  o.cache_decoded = true;
  ImageLoader cached(list.samples, o, torch::kCPU);
  const auto a0 = epoch(cached, 0), b0 = epoch(plain, 0), b1 = epoch(plain, 1);
  EXPECT_GT(cached.cached_bytes(), 21 * 320 * 240);  // most fixtures are 320 x 240 RGB
  fs::remove_tree(dir.file("set"));
  const StageTotals before = cached.stage_totals();
  const auto a1 = epoch(cached, 1);
  const StageTotals after = cached.stage_totals();
  EXPECT_EQ(after.decode_ns, before.decode_ns) << "a later epoch decoded";
  EXPECT_EQ(cached.bad_samples(), 0);
  ASSERT_EQ(a1.size(), b1.size());
  for (size_t i = 0; i < a0.size(); ++i) EXPECT_TRUE(torch::equal(a0[i], b0[i])) << "epoch 0 batch " << i;
  for (size_t i = 0; i < a1.size(); ++i) EXPECT_TRUE(torch::equal(a1[i], b1[i])) << "epoch 1 batch " << i;
}

// The bad-file policy (bad_samples.h): evaluation leaves a bad file out (index and label -1, black pixels) and
// shows every good sample once; training puts the seeded substitute in its place (its index, label and pixels);
// each bad file counts once however often it is drawn.
TEST_F(Folder, BadFilesAreLeftOutInEvaluationAndSubstitutedInTraining) {
  test::TempDir dir;
  const auto list = scan_image_folder(make_folder(dir, 3));
  ASSERT_EQ(list.samples.size(), 24u);
  auto is_bad = [&](int64_t i) { return list.samples[static_cast<size_t>(i)].path.find("/zz_") != std::string::npos; };
  {
    ImageLoaderOptions o = options(2);
    o.train = false;  // every sample once, in order
    ImageLoader l(list.samples, o, torch::kCPU);
    for (int64_t e : {0, 1}) {
      l.set_epoch(e);
      Batch b;
      int64_t seen = 0, left_out = 0, k = 0;
      while (l.next(b)) {
        for (int64_t i = 0; i < b.labels.size(0); ++i, ++k) {
          const int64_t index = b.indices[static_cast<size_t>(i)];
          if (is_bad(k)) {
            EXPECT_EQ(index, -1) << "sample " << k;
            EXPECT_EQ(b.labels[i].item<int64_t>(), -1) << "sample " << k;
            EXPECT_EQ(b.images[i].max().item<int>(), 0) << "black pixels for sample " << k;
            ++left_out;
          } else {
            EXPECT_EQ(index, k);
            EXPECT_EQ(b.labels[i].item<int64_t>(), list.samples[static_cast<size_t>(k)].label);
            ++seen;
          }
        }
      }
      EXPECT_EQ(seen, 21);
      EXPECT_EQ(left_out, 3);
    }
    EXPECT_EQ(l.bad_samples(), 3) << "three files, however often drawn";
  }
  ImageLoaderOptions o = options(2);
  o.train = true;
  o.drop_last = false;
  ImageLoader l(list.samples, o, torch::kCPU);
  ImageLoaderOptions single = o;
  single.workers = 1;
  for (int64_t e : {0, 1}) {
    const EpochPlan plan = plan_epoch(o, static_cast<int64_t>(list.samples.size()), e);
    l.set_epoch(e);
    Batch b;
    int64_t k = 0, substituted = 0;
    while (l.next(b)) {
      for (int64_t i = 0; i < b.labels.size(0); ++i, ++k) {
        int64_t want = (*plan.order)[static_cast<size_t>(k)];
        for (int attempt = 1; is_bad(want); ++attempt) want = substitute_sample(want, attempt, list.samples.size());
        if (want != (*plan.order)[static_cast<size_t>(k)]) ++substituted;
        EXPECT_EQ(b.indices[static_cast<size_t>(i)], want) << "epoch " << e << " sample " << k;
        EXPECT_EQ(b.labels[i].item<int64_t>(), list.samples[static_cast<size_t>(want)].label);
      }
    }
    EXPECT_EQ(substituted, 3) << "epoch " << e;
  }
  EXPECT_EQ(l.bad_samples(), 3);
  // the substitutes' pixels do not depend on the thread count
  ImageLoader one(list.samples, single, torch::kCPU);
  const auto a = epoch(l, 2), c = epoch(one, 2);
  ASSERT_EQ(a.size(), c.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], c[i])) << "batch " << i;
}

// data.dtype bfloat16: the loaders hand out the float32 batch rounded to bfloat16 (as autocast would cast it), in
// the same layout; training (colour jitter and erasing on) and evaluation, both memory orders.
TEST_F(Folder, Bfloat16BatchesAreTheFloat32BatchesRounded) {
  test::TempDir dir;
  const auto list = scan_image_folder(make_folder(dir));
  for (const bool train : {true, false})
  for (const bool channels_last : {true, false}) {
    ImageLoaderOptions o = options(2);
    o.normalize = true;
    o.train = train;
    o.channels_last = channels_last;
    o.augment.jitter = {0.4, 0.4, 0.4, 0.1};
    o.augment.erase_prob = 0.5;
    ImageLoader f32(list.samples, o, torch::kCPU);
    o.dtype = torch::kBFloat16;
    ImageLoader b16(list.samples, o, torch::kCPU);
    const auto a = epoch(f32, 1), b = epoch(b16, 1);
    ASSERT_EQ(a.size(), b.size());
    ASSERT_GT(a.size(), 0u);
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].scalar_type(), torch::kFloat32);
      ASSERT_EQ(b[i].scalar_type(), torch::kBFloat16);
      EXPECT_EQ(b[i].strides(), a[i].strides()) << "the same memory order";
      EXPECT_TRUE(torch::equal(b[i], a[i].to(torch::kBFloat16))) << (train ? "train" : "eval") << " batch " << i;
    }
  }
  InMemoryDataset ds = make_synthetic(40, 12, 3, 4, 5);
  MemoryLoaderOptions m;
  m.batch_size = 8;
  m.mean = {0.5, 0.5, 0.5};
  m.std = {0.25, 0.25, 0.25};
  m.augment.jitter = {0.4, 0.4, 0.4, 0.1};
  MemoryLoader mf(ds, m, torch::kCPU);
  m.dtype = torch::kBFloat16;
  MemoryLoader mb(ds, m, torch::kCPU);
  mf.set_epoch(1);
  mb.set_epoch(1);
  Batch x, y;
  int n = 0;
  while (mf.next(x)) {
    ASSERT_TRUE(mb.next(y));
    ASSERT_EQ(y.images.scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(torch::equal(y.images, x.images.to(torch::kBFloat16))) << "memory loader batch " << n;
    ++n;
  }
  EXPECT_EQ(n, 5);
}

// An evaluation batch through the loader (a cropped decode) equals the full decode resized through eval_map.
TEST_F(Folder, EvalIsCentreCropResize) {
  test::TempDir dir;
  auto list = scan_image_folder(make_folder(dir));
  for (const Interpolation filter : {Interpolation::bilinear, Interpolation::bicubic}) {
  ImageLoaderOptions o = options(1);
  o.train = false;
  o.image_size = 64;
  o.crop_pct = 0.875;
  o.dct_scale = false;
  o.eval_filter = filter;
  ImageLoader l({list.samples[0]}, o, torch::kCPU);
  Batch b;
  ASSERT_TRUE(l.next(b));
  // by hand: full decode, window, resize
  JpegDecoder dec;
  auto bytes = bytes_of(list.samples[0].path);
  RgbImage full;
  dec.decode(bytes.data(), bytes.size(), {}, full, "x");
  std::vector<uint8_t> ref(64 * 64 * 3);
  resize_rgb_mapped(full.pixels.data(), full.width, full.height, eval_map(full.width, full.height, 64, 0.875),
                    ref.data(), 64, 64, 64 * 3, false, filter);
  auto got = b.images.contiguous();
  const auto [mean, mx] = diff(got.data_ptr<uint8_t>(), ref.data(), ref.size());
  EXPECT_LT(mean, 0.3);
  EXPECT_LE(mx, 4);
  }
}

// An evaluation batch equals torchvision's Resize(floor(size / crop_pct)) + CenterCrop(size) of Pillow's decode:
// the same geometry (the crop taken on the resized grid, its filter taps reaching over the crop's edge) and filter,
// with full-resolution decodes (dct_scale off) whole or cropped. What differs is rounding: Pillow resizes
// horizontally first through a uint8 image, trainer vertically first in floats (0.1-0.2 levels mean, at most 1;
// the old geometry, the integer crop window resized with its taps clipped at the window, was 1.9-5.5 and up to 22).
TEST_F(Folder, EvalEqualsTorchvisionsResizeThenCentreCrop) {
  std::ifstream mf(fixture_path("meta.json"));
  const auto m = nlohmann::json::parse(mf)["eval"];
  for (const auto& file : m["files"]) {
    for (const auto& c : m["cases"]) {
      for (const bool crop_decode : {true, false}) {
        const std::string name = file.get<std::string>();
        const int size = c[0].get<int>();
        const std::string interp = c[2].get<std::string>();
        SCOPED_TRACE(testing::Message() << name << " size " << size << " " << interp
                                        << (crop_decode ? " crop decode" : " whole decode"));
        ImageSample s;
        s.path = fixture_path(name + ".jpg");
        ImageLoaderOptions o = options(1);
        o.train = false;
        o.image_size = size;
        o.crop_pct = c[1].get<double>();
        o.dct_scale = false;
        o.crop_decode = crop_decode;
        o.eval_filter = interpolation_from(interp);
        ImageLoader l({s}, o, torch::kCPU);
        Batch b;
        ASSERT_TRUE(l.next(b));
        const auto ref = bytes_of(fixture_path(name + "_" + std::to_string(size) + "_" + interp + ".rgb"));
        ASSERT_EQ(ref.size(), static_cast<size_t>(size * size * 3));
        auto got = b.images.contiguous();
        const auto [mean, mx] = diff(got.data_ptr<uint8_t>(), ref.data(), ref.size());
        std::printf("  %s %d px %s%s: mean %.3f, max %d levels from torchvision\n", name.c_str(), size,
                    interp.c_str(), crop_decode ? " (crop decode)" : "", mean, mx);
        EXPECT_LT(mean, 0.3);
        EXPECT_LE(mx, 2);
      }
    }
  }
}

// data.decode auto. The rules on figures: the CPU path stays when it waits under 2% and its threads could make
// 10% more than training takes; the GPU path stays when its end-to-end rate beats what the CPU path gives:
// min(demand, the larger of what its threads made over the window and their busy-time capacity).
TEST(AutoDecode, RulesKeepTheCpuPathOnlyWhenItKeepsUp) {
  AutoDecodeOptions o;
  DecodeWindow cpu;
  cpu.images = 2560;
  cpu.work_s = 1.0;
  cpu.wait_s = 0.01;    // 1% waiting; training takes 2,560 img/s
  cpu.capacity = 3000;  // 1.17 x demand
  EXPECT_TRUE(cpu_decode_keeps_up(cpu, o));
  cpu.capacity = 2700;  // 1.05 x: too tight
  EXPECT_FALSE(cpu_decode_keeps_up(cpu, o));
  cpu.capacity = 0;     // not known: the waits decide
  EXPECT_TRUE(cpu_decode_keeps_up(cpu, o));
  cpu.capacity = 5000;
  cpu.wait_s = 0.03;    // 2.9% waiting, whatever the threads' rate
  EXPECT_FALSE(cpu_decode_keeps_up(cpu, o));
  EXPECT_TRUE(cpu_decode_keeps_up(DecodeWindow{}, o));  // nothing measured: no switch

  cpu.wait_s = 0.6;      // the window delivered 1,600 img/s
  cpu.capacity = 2000;  // and the threads could make 2,000 (what they made is not known)
  EXPECT_DOUBLE_EQ(cpu_decode_expected_rate(cpu), 2000);
  DecodeWindow gpu;
  gpu.images = 2400;
  gpu.work_s = 0.9;
  gpu.wait_s = 0.1;  // 2,400 img/s end to end
  EXPECT_TRUE(gpu_decode_is_faster(cpu, gpu));
  gpu.wait_s = 0.4;  // 1,714 img/s
  EXPECT_FALSE(gpu_decode_is_faster(cpu, gpu));
  // what the threads made counts, not their busy-time estimate below it (ResNet-50 on the H200, run83: 6,883 from
  // the busy time while the CPU path trained at 7,792 end to end): a GPU path slower than it loses
  cpu.wait_s = 0.03;  // 2,485 img/s handed out
  cpu.capacity = 2200;
  cpu.produced = 2450;
  EXPECT_DOUBLE_EQ(cpu_decode_expected_rate(cpu), 2450);
  gpu.wait_s = 0.1;  // 2,400 img/s: faster than the estimate, slower than the CPU path made
  EXPECT_FALSE(gpu_decode_is_faster(cpu, gpu));
  // nor what the window handed out from the ring filled before it (run87: 8,137 img/s handed out at a 6.2% wait,
  // 6,079 from the busy time; the CPU path then trained at 78% of GPU decode's speed)
  cpu.produced = 1900;
  cpu.capacity = 1850;
  EXPECT_DOUBLE_EQ(cpu_decode_expected_rate(cpu), 1900);
  EXPECT_TRUE(gpu_decode_is_faster(cpu, gpu));
  cpu.produced = 1500;  // made less than they could (the ring was full for part of the window): the capacity counts
  EXPECT_DOUBLE_EQ(cpu_decode_expected_rate(cpu), 1850);
  cpu.produced = 4000;  // and never above training's rate
  EXPECT_DOUBLE_EQ(cpu_decode_expected_rate(cpu), 2560);
  cpu.produced = 0;
  cpu.capacity = 0;  // neither known: training's rate is what the CPU path is taken to give
  EXPECT_NEAR(cpu_decode_expected_rate(cpu), 2560 / 1.0, 1e-9);
  EXPECT_FALSE(gpu_decode_is_faster(cpu, DecodeWindow{}));
}

// A factory of CPU ImageLoaders standing for either decode path in the auto tests; counts what it made.
AutoDecodeLoader::Factory cpu_loaders(const std::vector<ImageSample>& samples, const ImageLoaderOptions& o,
                                      int* made = nullptr) {
  return [&samples, o, made]() -> std::unique_ptr<Loader> {
    if (made) ++*made;
    return std::make_unique<ImageLoader>(samples, o, torch::kCPU);
  };
}

// The switch itself, on the CPU with two ImageLoaders standing for the two paths and the rules forced: whatever is
// decided and wherever the switch falls (mid-epoch, windows across an epoch end), the batches are those of one
// plain loader (order, labels, pixels); each path is made once; the windows count only batches with training
// time before them; a follower takes the decision at its next set_epoch.
TEST_F(Folder, AutoDecodeSwitchesMidEpochAndKeepsEveryBatch) {
  test::TempDir dir;
  const auto list = scan_image_folder(make_folder(dir));  // 21 samples: 5 batches of 4 per epoch
  const ImageLoaderOptions o = options(2);
  std::vector<Batch> want;
  {
    ImageLoader plain(list.samples, o, torch::kCPU);
    for (int64_t e = 0; e < 3; ++e) {
      plain.set_epoch(e);
      Batch b;
      while (plain.next(b)) want.push_back({b.images.clone(), b.labels.clone(), b.indices});
    }
  }
  ASSERT_EQ(want.size(), 15u);
  // keep_cpu, keep_gpu: the forced decisions; 0 = CPU stays; 1 = GPU tried and kept; 2 = tried, CPU back
  for (const int outcome : {0, 1, 2}) {
    const std::string tag = "outcome " + std::to_string(outcome);
    int cpu_made = 0, gpu_made = 0;
    AutoDecodeOptions ao;
    ao.warm_batches = 3;  // warm: epoch 0 batches 0-2; CPU window: 3, 4, (epoch 1 batch 0 not counted), 1
    ao.window_batches = 3;
    ao.gpu_warm_batches = 1;  // switch after epoch 1 batch 1; GPU warm: batch 2; window: 3, 4, (epoch 2: 0), 1
    ao.keep_cpu = [&](const DecodeWindow&, const AutoDecodeOptions&) { return outcome == 0; };
    ao.keep_gpu = [&](const DecodeWindow&, const DecodeWindow&) { return outcome == 1; };
    AutoDecodeLoader l(cpu_loaders(list.samples, o, &cpu_made), cpu_loaders(list.samples, o, &gpu_made),
                       /*workers=*/2, ao);
    int cpu_follower = 0, gpu_follower = 0;
    AutoDecodeLoader follower(cpu_loaders(list.samples, o, &cpu_follower), cpu_loaders(list.samples, o, &gpu_follower),
                              &l);
    std::vector<Batch> got;
    std::vector<int64_t> decided_at;  // batch numbers (across epochs) after which it had decided
    for (int64_t e = 0; e < 3; ++e) {
      l.set_epoch(e);
      Batch b;
      while (l.next(b)) {
        got.push_back({b.images.clone(), b.labels.clone(), b.indices});
        if (l.decided()) decided_at.push_back(static_cast<int64_t>(got.size()) - 1);
      }
    }
    ASSERT_EQ(got.size(), want.size()) << tag;
    for (size_t k = 0; k < got.size(); ++k) {
      EXPECT_EQ(got[k].indices, want[k].indices) << tag << " batch " << k;
      EXPECT_TRUE(torch::equal(got[k].labels, want[k].labels)) << tag << " batch " << k;
      EXPECT_TRUE(torch::equal(got[k].images, want[k].images)) << tag << " batch " << k;
    }
    ASSERT_TRUE(l.decided()) << tag;
    ASSERT_FALSE(decided_at.empty()) << tag;
    EXPECT_EQ(decided_at.front(), outcome == 0 ? 6 : 11) << tag;  // epoch 1 batch 1, or epoch 2 batch 1
    EXPECT_EQ(l.on_gpu(), outcome == 1) << tag;
    EXPECT_EQ(cpu_made, 1) << tag << ": the CPU loader waits while the GPU one is tried, and comes back";
    EXPECT_EQ(gpu_made, outcome == 0 ? 0 : 1) << tag;
    EXPECT_EQ(l.cpu_window().images, 12) << tag;  // 3 batches of 4, the first of epoch 1 not counted
    EXPECT_GT(l.cpu_window().work_s, 0) << tag;
    EXPECT_GT(l.cpu_window().capacity, 0) << tag << ": an ImageLoader's stage totals give its threads' rate";
    EXPECT_GT(l.cpu_window().produced, 0) << tag << ": and what they made over the window";
    EXPECT_EQ(l.gpu_window().images, outcome == 0 ? 0 : 12) << tag;
    EXPECT_NE(l.why().find(outcome == 1 ? "auto: gpu" : "auto: cpu"), std::string::npos) << tag << ": " << l.why();
    // the follower was made before the decision (CPU) and takes it at its next set_epoch
    follower.set_epoch(0);
    Batch fb;
    EXPECT_TRUE(follower.next(fb)) << tag;
    EXPECT_EQ(follower.on_gpu(), outcome == 1) << tag;
    EXPECT_EQ(cpu_follower, 1) << tag;
    EXPECT_EQ(gpu_follower, outcome == 1 ? 1 : 0) << tag;
    EXPECT_TRUE(torch::equal(fb.images, want[0].images)) << tag;
  }
}

// Given a wait for the device, each window is timed from one wait to the next (the steps of the batches handed out
// in it, the device's queued work included): the opening batch and all but the last count as trained in it, and
// its end-to-end rate is taken from that time; a window across an epoch's end keeps the host-time figures.
TEST_F(Folder, AutoDecodeTimesEachWindowBetweenWaitsForTheDevice) {
  test::TempDir dir;
  const auto list = scan_image_folder(make_folder(dir));  // 5 batches of 4 per epoch
  const ImageLoaderOptions o = options(2);
  int syncs = 0;
  AutoDecodeOptions ao;
  ao.warm_batches = 1;      // the CPU window opens at epoch 0 batch 0 and takes batches 1-3
  ao.window_batches = 3;
  ao.gpu_warm_batches = 1;  // the GPU window opens at batch 4 and crosses into epoch 1
  ao.keep_cpu = [](const DecodeWindow&, const AutoDecodeOptions&) { return false; };
  ao.keep_gpu = [](const DecodeWindow&, const DecodeWindow&) { return false; };
  ao.sync = [&syncs] {  // stands for a device that still has 20 ms of queued steps
    ++syncs;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  };
  AutoDecodeLoader l(cpu_loaders(list.samples, o), cpu_loaders(list.samples, o), /*workers=*/2, ao);
  for (int64_t e = 0; e < 2; ++e) {
    l.set_epoch(e);
    Batch b;
    while (l.next(b)) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the host's side of a step
  }
  ASSERT_TRUE(l.decided());
  EXPECT_EQ(syncs, 3) << "the CPU window's two edges and the GPU window's opening; its end, past an epoch's end, "
                         "needs none";
  const DecodeWindow& cpu = l.cpu_window();
  EXPECT_EQ(cpu.images, 12);
  EXPECT_EQ(cpu.synced_images, 12) << "batches 0, 1 and 2 trained between the two waits";
  EXPECT_GE(cpu.synced_s, 0.020 + 3 * 0.005) << "the closing wait and three steps' host time";
  EXPECT_DOUBLE_EQ(cpu.rate(), cpu.synced_images / cpu.synced_s);
  EXPECT_LT(cpu.rate(), cpu.images / (cpu.work_s + cpu.wait_s)) << "the queued device work counts";
  const DecodeWindow& gpu = l.gpu_window();
  EXPECT_EQ(gpu.images, 12);
  EXPECT_EQ(gpu.synced_s, 0);
  EXPECT_EQ(gpu.synced_images, 0);
  EXPECT_DOUBLE_EQ(gpu.rate(), gpu.images / (gpu.work_s + gpu.wait_s));
}

// Where the CPU path's RAM cache serves decoded images from its second epoch (epochs_before_measuring 1), the
// windows wait for the second epoch the loader is set to: the first epoch's decoding decides nothing, also in a run
// resumed at a later epoch (its cache starts empty).
TEST_F(Folder, AutoDecodeWaitsAnEpochWhereARamCacheServesTheCpuPath) {
  test::TempDir dir;
  const auto list = scan_image_folder(make_folder(dir));  // 5 batches of 4 per epoch
  const ImageLoaderOptions o = options(2);
  for (const int64_t first : {0, 3}) {
    const std::string tag = "from epoch " + std::to_string(first);
    AutoDecodeOptions ao;
    ao.warm_batches = 1;
    ao.window_batches = 3;
    ao.epochs_before_measuring = 1;
    ao.keep_cpu = [](const DecodeWindow&, const AutoDecodeOptions&) { return true; };
    AutoDecodeLoader l(cpu_loaders(list.samples, o), cpu_loaders(list.samples, o), /*workers=*/2, ao);
    int64_t taken = 0, decided_at = -1;
    for (int64_t e = first; e < first + 3 && decided_at < 0; ++e) {
      l.set_epoch(e);
      Batch b;
      while (l.next(b)) {
        if (l.decided() && decided_at < 0) decided_at = taken;
        ++taken;
      }
    }
    // the window opens at the second epoch's first batch and takes its batches 1-3
    EXPECT_EQ(decided_at, 5 + 3) << tag;
    EXPECT_EQ(l.cpu_window().images, 12) << tag;
  }
}

// A GPU path that cannot start, or fails on trial, hands back to the CPU path: every batch still comes, in order.
TEST_F(Folder, AutoDecodeFallsBackToTheCpuPathWhenTheGpuPathFails) {
  test::TempDir dir;
  const auto list = scan_image_folder(make_folder(dir));  // 5 batches of 4 per epoch
  const ImageLoaderOptions o = options(2);
  std::vector<std::vector<int64_t>> want;
  {
    ImageLoader plain(list.samples, o, torch::kCPU);
    for (int64_t e = 0; e < 2; ++e) {
      plain.set_epoch(e);
      Batch b;
      while (plain.next(b)) want.push_back(b.indices);
    }
  }
  // stands for a GPU loader whose decoder fails at its second batch
  struct Failing : Loader {
    ImageLoader inner;
    int calls = 0;
    Failing(const std::vector<ImageSample>& s, const ImageLoaderOptions& o) : inner(s, o, torch::kCPU) {}
    void set_epoch(int64_t e, int64_t b) override { inner.set_epoch(e, b); }
    int64_t batches_per_epoch() const override { return inner.batches_per_epoch(); }
    int64_t samples_per_epoch() const override { return inner.samples_per_epoch(); }
    bool next(Batch& out) override {
      if (++calls == 2) throw Error("nvJPEG: decode failed (stand-in)");
      return inner.next(out);
    }
  };
  for (const bool at_start : {true, false}) {
    auto make_gpu = [&]() -> std::unique_ptr<Loader> {
      if (at_start) throw Error("no nvJPEG here (stand-in)");
      return std::make_unique<Failing>(list.samples, o);
    };
    AutoDecodeOptions ao;
    ao.warm_batches = 1;
    ao.window_batches = 2;  // the CPU window ends at epoch 0 batch 2; the GPU one would end in epoch 1
    ao.gpu_warm_batches = 1;
    ao.keep_cpu = [](const DecodeWindow&, const AutoDecodeOptions&) { return false; };
    ao.keep_gpu = [](const DecodeWindow&, const DecodeWindow&) { return true; };
    AutoDecodeLoader l(cpu_loaders(list.samples, o), make_gpu, 2, ao);
    std::vector<std::vector<int64_t>> got;
    for (int64_t e = 0; e < 2; ++e) {
      l.set_epoch(e);
      Batch b;
      while (l.next(b)) got.push_back(b.indices);
    }
    EXPECT_EQ(got, want) << (at_start ? "GPU path cannot start" : "GPU path fails on trial");
    EXPECT_TRUE(l.decided());
    EXPECT_FALSE(l.on_gpu());
    const std::string stand_in = at_start ? "could not start: no nvJPEG here" : "failed on trial: nvJPEG: decode failed";
    EXPECT_NE(l.why().find(stand_in), std::string::npos) << l.why();
  }
  // epochs of one batch: nothing to measure, so the CPU path is decided at once (a bench waiting for the decision
  // would otherwise wait for ever)
  ImageLoaderOptions one = o;
  one.batch_size = 16;  // 21 samples, drop_last: one batch an epoch
  int gpu_made = 0;
  AutoDecodeLoader l(cpu_loaders(list.samples, one), cpu_loaders(list.samples, one, &gpu_made), 2);
  l.set_epoch(0);
  EXPECT_TRUE(l.decided());
  EXPECT_FALSE(l.on_gpu());
  EXPECT_EQ(gpu_made, 0);
  Batch b;
  EXPECT_TRUE(l.next(b));
  EXPECT_FALSE(l.next(b));
}

// ---- device-side augmentation ----

TEST_F(Images, ColorJitterMatchesTorchvision) {
  std::ifstream mf(fixture_path("meta.json"));
  const auto meta = nlohmann::json::parse(mf)["jitter"];
  const auto shape = meta["shape"].get<std::vector<int64_t>>();
  auto load = [&](const std::string& f) {
    const std::string b = test::read_file(fixture_path(f));
    return torch::from_blob(const_cast<char*>(b.data()), shape, torch::kFloat32).clone();
  };
  torch::Tensor x = load("jitter_in.f32");
  const torch::Tensor want = load("jitter_out.f32");
  std::vector<float> fv;
  std::vector<int64_t> ov;
  for (const auto& r : meta["factors"]) for (double v : r.get<std::vector<double>>()) fv.push_back(static_cast<float>(v));
  for (const auto& r : meta["orders"]) for (int64_t v : r.get<std::vector<int64_t>>()) ov.push_back(v);
  color_jitter_(x, torch::tensor(fv).view({4, 4}), torch::tensor(ov).view({4, 4}));
  const double err = (x - want).abs().max().item<double>();
  EXPECT_LT(err, 2e-5) << "max abs difference to torchvision " << err;
}

// The batch is jittered by grouping its samples per pass by the operation they take then: the same as jittering
// each sample alone (a batch of one takes each operation whole), with mixed orders, a pass where every sample
// takes the same operation, and operations switched off.
TEST(Augment, GroupedJitterEqualsPerSampleJitter) {
  torch::manual_seed(11);
  const int64_t B = 12;
  const torch::Tensor x0 = torch::rand({B, 3, 9, 7});
  torch::Tensor factors = torch::empty({B, 4});
  factors.narrow(1, 0, 3).uniform_(0.6, 1.4);
  factors.narrow(1, 3, 1).uniform_(-0.1, 0.1);
  // each row a permutation of the four operations; in pass 2 every sample takes contrast (1)
  torch::Tensor order = torch::empty({B, 4}, torch::kInt64);
  const int64_t others[3] = {0, 2, 3};
  for (int64_t i = 0; i < B; ++i) {
    const torch::Tensor p = torch::randperm(3, torch::kInt64);
    order[i][0] = others[p[0].item<int64_t>()];
    order[i][1] = others[p[1].item<int64_t>()];
    order[i][2] = 1;
    order[i][3] = others[p[2].item<int64_t>()];
  }
  EXPECT_GT(std::get<0>(at::_unique(order.select(1, 0))).numel(), 1) << "pass 0 mixes operations";
  for (const std::array<bool, 4> ops : {std::array<bool, 4>{true, true, true, true}, {true, false, true, false}}) {
    torch::Tensor batch = x0.clone();
    color_jitter_(batch, factors, order, ops);
    for (int64_t i = 0; i < B; ++i) {
      torch::Tensor one = x0.narrow(0, i, 1).clone();
      color_jitter_(one, factors.narrow(0, i, 1), order.narrow(0, i, 1), ops);
      EXPECT_TRUE(torch::allclose(batch.narrow(0, i, 1), one, 0, 1e-6)) << "sample " << i;
    }
    EXPECT_FALSE(torch::allclose(batch, x0)) << "jittered";
  }
  torch::Tensor x = x0.clone();
  EXPECT_THROW(color_jitter_(x, factors, order.narrow(0, 0, 3)), Error) << "one order row per sample";
}

TEST(Augment, DrawsFollowTorchvisionsRangesAndRepeat) {
  AugmentOptions o;
  o.jitter = {0.4, 0.3, 0.2, 0.1};
  o.erase_prob = 0.25;
  int erased = 0;
  std::set<std::vector<int64_t>> orders;
  const int n = 4000;
  double area = 0;
  for (int i = 0; i < n; ++i) {
    const SampleAugment a = draw_augment(o, 3, 1, i, 40, 60);
    const SampleAugment b = draw_augment(o, 3, 1, i, 40, 60);
    ASSERT_EQ(a.factor[0], b.factor[0]);
    ASSERT_EQ(a.erase[1], b.erase[1]);
    ASSERT_TRUE(a.factor[0] >= 0.6f && a.factor[0] <= 1.4f && a.factor[1] >= 0.7f && a.factor[1] <= 1.3f &&
                a.factor[2] >= 0.8f && a.factor[2] <= 1.2f && a.factor[3] >= -0.1f && a.factor[3] <= 0.1f);
    orders.insert(std::vector<int64_t>(a.order, a.order + 4));
    if (a.erase[2] > 0) {
      ++erased;
      ASSERT_TRUE(a.erase[0] >= 0 && a.erase[0] + a.erase[2] <= 40 && a.erase[1] >= 0 && a.erase[1] + a.erase[3] <= 60);
      area += double(a.erase[2] * a.erase[3]) / (40 * 60);
    }
  }
  EXPECT_EQ(orders.size(), 24u) << "every order of the four operations occurs";
  EXPECT_NEAR(erased / double(n), 0.25, 0.03);
  EXPECT_GT(area / erased, 0.1);  // mean of U(0.02, 0.33) is 0.175, less the boxes that did not fit
  EXPECT_LT(area / erased, 0.2);
  EXPECT_NE(draw_augment(o, 4, 1, 7, 40, 60).factor[0], draw_augment(o, 3, 1, 7, 40, 60).factor[0]);
}

TEST(Augment, ErasingFillsOnlyTheBox) {
  auto x = torch::rand({2, 3, 8, 10}) + 1.0;
  auto before = x.clone();
  auto boxes = torch::tensor({2, 3, 4, 5, 0, 0, 0, 0}, torch::kInt64).view({2, 4});
  erase_(x, boxes, /*pixel=*/false);
  using namespace torch::indexing;
  EXPECT_TRUE(x[0].index({Slice(), Slice(2, 6), Slice(3, 8)}).eq(0).all().item<bool>());
  auto outside = x[0].clone();
  outside.index_put_({Slice(), Slice(2, 6), Slice(3, 8)}, before[0].index({Slice(), Slice(2, 6), Slice(3, 8)}));
  EXPECT_TRUE(torch::equal(outside, before[0]));
  EXPECT_TRUE(torch::equal(x[1], before[1])) << "h == 0 leaves the sample alone";
  erase_(x, boxes, /*pixel=*/true, /*noise_seed=*/11);
  const auto noise = x[0].index({Slice(), Slice(2, 6), Slice(3, 8)});
  EXPECT_GT(noise.std().item<double>(), 0.5);
}

// erase_mode pixel: the noise comes from a generator of its own (seed, epoch, batch), so a loader thread and the
// training thread never race for the global generator: the same batch gets the same noise whatever was drawn
// globally meanwhile, the global generator is left as it was, and another batch gets other noise.
TEST(Augment, PixelErasingNoiseIsItsOwnAndReproducible) {
  AugmentOptions o;
  o.erase_prob = 1.0;
  o.erase_pixel = true;
  const BatchAugmenter aug(o, /*seed=*/5);
  const auto mean = torch::zeros({1, 3, 1, 1}), inv_std = torch::ones({1, 3, 1, 1});
  auto run = [&](const std::vector<int64_t>& indices, uint64_t global_seed) {
    torch::manual_seed(global_seed);
    auto x = torch::full({2, 3, 32, 32}, 100.0f);
    aug.augment_and_normalize_(x, indices, /*epoch=*/1, /*train=*/true, mean, inv_std);
    return x;
  };
  const auto a = run({3, 8}, 1);
  torch::manual_seed(77);
  const auto before = torch::rand({4});
  const auto b = run({3, 8}, 2);
  torch::manual_seed(77);
  auto c = torch::full({2, 3, 32, 32}, 100.0f);
  aug.augment_and_normalize_(c, {3, 8}, 1, true, mean, inv_std);
  EXPECT_TRUE(torch::equal(torch::rand({4}), before)) << "erasing drew from the global generator";
  EXPECT_TRUE(torch::equal(a, b)) << "the same batch got other noise";
  EXPECT_LT(a.lt(50).to(torch::kFloat).mean().item<double>(), 0.9);  // some pixels were erased with noise
  EXPECT_GT(a.lt(50).to(torch::kFloat).mean().item<double>(), 0.0);
  EXPECT_FALSE(torch::equal(a, run({4, 9}, 1))) << "another batch got the same noise";
}

// ---- packed shards ----

class Shards : public Folder {
 protected:
  static std::string run_python(const std::string& code) {
    test::TempDir d;
    test::write_file(d.file("t.py"), code);
    const std::string out = d.file("out.txt");
    const int rc = std::system((test::python() + " " + test::shell_quote(d.file("t.py")) + " > " + out + " 2>&1").c_str());
    std::string text = test::read_file(out);
    if (rc != 0) ADD_FAILURE() << "python failed:\n" << text;
    return text;
  }
  // pack options for `root` into `out`, in the source order (packed sample i is source sample i)
  static PackOptions in_order(const std::string& root, const std::string& out, int threads) {
    PackOptions o;
    o.src = root;
    o.out = out;
    o.shuffle = false;
    o.threads = threads;
    return o;
  }
  static std::string error_of(const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  }
};

TEST_F(Shards, PackKeepsBytesLabelsAndOrderAndPythonReadsThem) {
  test::TempDir dir;
  const std::string root = make_folder(dir);
  const ImageList src = scan_image_folder(root);
  PackOptions o = in_order(root, dir.file("shards"), 3);
  o.shard_samples = 8;  // 21 samples: 3 shards
  o.restart_markers = false;  // byte for byte
  int64_t last = 0;
  const PackStats st = pack_dataset(o, [&](int64_t done, int64_t total) {
    EXPECT_EQ(total, 21);
    last = done;
  });
  EXPECT_EQ(last, 21);
  EXPECT_EQ(st.samples, 21);
  EXPECT_EQ(st.shards, 3);
  EXPECT_EQ(st.skipped, 0);
  const ImageList packed = scan_shards(o.out);
  EXPECT_EQ(packed.classes, src.classes);
  ASSERT_EQ(packed.samples.size(), src.samples.size());
  for (size_t i = 0; i < src.samples.size(); ++i) {
    const auto& p = packed.samples[i];
    EXPECT_EQ(p.label, src.samples[i].label);
    const std::string tar = test::read_file(p.path);
    EXPECT_EQ(tar.substr(static_cast<size_t>(p.offset), static_cast<size_t>(p.size)), test::read_file(src.samples[i].path))
        << p.name();
  }
  // the loader gives the same batches from the shards as from the files
  ImageLoaderOptions lo = options(2);
  lo.train = false;
  ImageLoader a(src.samples, lo, torch::kCPU), b(packed.samples, lo, torch::kCPU);
  const auto ea = epoch(a, 0), eb = epoch(b, 0);
  ASSERT_EQ(ea.size(), eb.size());
  for (size_t i = 0; i < ea.size(); ++i) EXPECT_TRUE(torch::equal(ea[i], eb[i])) << "batch " << i;
  // WebDataset-compatible: Python's tarfile reads key.jpg + key.cls pairs with the same bytes and labels
  const std::string out = run_python(
      "import tarfile, glob, sys\n"
      "n = 0\n"
      "for t in sorted(glob.glob(" + std::string("'") + o.out + "/*.tar')):\n"
      "    with tarfile.open(t) as f:\n"
      "        names = f.getnames()\n"
      "        for m in names:\n"
      "            if m.endswith('.jpg'):\n"
      "                k = m[:-4]\n"
      "                assert k + '.cls' in names, k\n"
      "                label = int(f.extractfile(k + '.cls').read())\n"
      "                data = f.extractfile(m).read()\n"
      "                assert data[:2] == b'\\xff\\xd8', m\n"
      "                print(k, label, len(data))\n"
      "                n += 1\n"
      "print('samples', n)\n");
  EXPECT_NE(out.find("samples 21"), std::string::npos) << out;
  EXPECT_NE(out.find("000000020 2 "), std::string::npos) << out;
}

// By default pack rewrites JPEGs losslessly with restart markers: Pillow decodes every packed image to the same
// pixels as its source file, and the loader's training batches (RandomResizedCrop windows cut out of the packed
// files) equal those it makes from the source files, bit for bit. CMYK files are packed as they are.
TEST_F(Shards, PackRewritesJpegsWithRestartMarkersAndTheSamePixels) {
  test::TempDir dir;
  const std::string root = make_folder(dir);
  const ImageList src = scan_image_folder(root);
  const PackOptions o = in_order(root, dir.file("shards"), 2);
  const PackStats st = pack_dataset(o);
  EXPECT_EQ(st.samples, 21);
  EXPECT_EQ(st.transcoded, 18);  // all but the three CMYK files
  const ImageList packed = scan_shards(o.out);
  ASSERT_EQ(packed.samples.size(), src.samples.size());
  int with_markers = 0;
  for (const auto& p : packed.samples) {
    const std::string tar = test::read_file(p.path);
    RestartIndex idx;
    with_markers += index_restart_intervals(reinterpret_cast<const uint8_t*>(tar.data()) + p.offset,
                                            static_cast<size_t>(p.size), idx);
  }
  EXPECT_EQ(with_markers, 18);
  for (const bool train : {true, false}) {
    ImageLoaderOptions lo = options(2);
    lo.train = train;
    ImageLoader a(src.samples, lo, torch::kCPU), b(packed.samples, lo, torch::kCPU);
    for (int64_t e : {0, 1}) {
      const auto ea = epoch(a, e), eb = epoch(b, e);
      ASSERT_EQ(ea.size(), eb.size());
      for (size_t i = 0; i < ea.size(); ++i)
        EXPECT_TRUE(torch::equal(ea[i], eb[i])) << (train ? "train" : "eval") << " epoch " << e << " batch " << i;
    }
    // the packed files' windows were cut out (all but the CMYK ones and windows from the top at full width)
    EXPECT_EQ(a.stage_totals().cut, 0);
    EXPECT_GT(b.stage_totals().cut, b.stage_totals().samples / 2) << b.stage_totals().cut << " of "
                                                                    << b.stage_totals().samples;
  }
  const std::string out = run_python(
      "import io, tarfile, glob\n"
      "import numpy as np\n"
      "from PIL import Image\n"
      "src = sorted(glob.glob('" + root + "/*/*.jpg'))\n"
      "i = same = 0\n"
      "for t in sorted(glob.glob('" + o.out + "/*.tar')):\n"
      "    with tarfile.open(t) as f:\n"
      "        for m in sorted(n for n in f.getnames() if n.endswith('.jpg')):\n"
      "            a = np.asarray(Image.open(io.BytesIO(f.extractfile(m).read())).convert('RGB'))\n"
      "            b = np.asarray(Image.open(src[i]).convert('RGB'))\n"
      "            same += a.shape == b.shape and bool((a == b).all())\n"
      "            i += 1\n"
      "print('same', same, 'of', i)\n");
  EXPECT_NE(out.find("same 21 of 21"), std::string::npos) << out;
}

// --huffman standard: the rewritten JPEGs keep their pixels and, being of one quality and layout, share all their
// coding tables (one mosaic key for the twelve), where tables fitted to each picture give twelve.
TEST_F(Shards, PackWithStandardTablesGivesFilesThatTileTogether) {
  test::TempDir dir;
  const std::string root = dir.file("set");
  for (int c = 0; c < 3; ++c) {
    fs::make_dirs(root + "/c" + std::to_string(c));
    for (int i = 0; i < 4; ++i) {  // twelve different pictures at quality 90
      RgbImage img;
      img.width = 48 + 16 * i;
      img.height = 40 + 8 * c;
      img.pixels.resize(size_t(img.width) * img.height * 3);
      for (size_t k = 0; k < img.pixels.size(); ++k)
        img.pixels[k] = static_cast<uint8_t>((k * (7 + i + 3 * c) / 5 + k % 251 * (c + 1)) & 255);
      std::vector<uint8_t> jpg;
      encode_jpeg(img, 90, jpg, "x.jpg");
      test::write_file(root + "/c" + std::to_string(c) + "/" + std::to_string(i) + ".jpg",
                       std::string(jpg.begin(), jpg.end()));
    }
  }
  std::map<std::string, int> keys[2];
  std::vector<RgbImage> pixels[2];
  JpegDecoder jpeg;
  for (const bool standard : {false, true}) {
    PackOptions o = in_order(root, dir.file(standard ? "standard" : "fitted"), 2);
    o.standard_huffman = standard;
    EXPECT_EQ(pack_dataset(o).transcoded, 12);
    for (const auto& p : scan_shards(o.out).samples) {
      const std::string tar = test::read_file(p.path);
      const auto* b = reinterpret_cast<const uint8_t*>(tar.data()) + p.offset;
      keys[standard][mosaic_key(b, static_cast<size_t>(p.size))]++;
      pixels[standard].emplace_back();
      jpeg.decode(b, static_cast<size_t>(p.size), {}, pixels[standard].back(), p.name());
    }
  }
  EXPECT_EQ(keys[0].size(), 12u) << "fitted tables: one set a picture";
  ASSERT_EQ(keys[1].size(), 1u) << "standard tables: one set for all";
  EXPECT_FALSE(keys[1].begin()->first.empty()) << "restart markers after every MCU: the files can be tiled";
  ASSERT_EQ(pixels[0].size(), pixels[1].size());
  for (size_t i = 0; i < pixels[0].size(); ++i)
    EXPECT_TRUE(pixels[0][i].pixels == pixels[1][i].pixels) << "sample " << i << ": the rewrite is lossless";
}

TEST_F(Shards, ReencodeShrinksToMaxSide) {
  test::TempDir dir;
  PackOptions o;
  o.src = make_folder(dir);
  o.out = dir.file("small");
  o.max_side = 64;
  const PackStats st = pack_dataset(o);
  EXPECT_EQ(st.reencoded, 21);
  JpegDecoder jpeg;
  for (const auto& s : scan_shards(o.out).samples) {
    const std::string tar = test::read_file(s.path);
    const auto* p = reinterpret_cast<const uint8_t*>(tar.data()) + s.offset;
    const JpegInfo info = jpeg.read_info(p, static_cast<size_t>(s.size), s.name());
    EXPECT_LE(std::max(info.width, info.height), 64) << s.name();
    EXPECT_EQ(info.components, 3) << s.name();
  }
  EXPECT_LT(st.bytes_out, st.bytes_in);
}

// pack on a JPEG whose header claims 60000 x 60000 px: refused by the decoder's pixel limit before any
// allocation, with that reason, and skipped, with restart markers (whose lossless rewrite read every coefficient
// first: about 11 GB) and without them (which packed it as it was).
TEST_F(Shards, PackRefusesHugeHeadersBeforeAllocating) {
  std::string huge = test::read_file(fixture_path("baseline.jpg"));
  for (size_t i = 0; i + 8 < huge.size(); ++i)
    if (static_cast<uint8_t>(huge[i]) == 0xFF && static_cast<uint8_t>(huge[i + 1]) == 0xC0) {
      huge[i + 5] = '\xEA', huge[i + 6] = '\x60', huge[i + 7] = '\xEA', huge[i + 8] = '\x60';  // 60000 x 60000
      break;
    }
  std::vector<uint8_t> out;
  try {
    transcode_with_restarts(reinterpret_cast<const uint8_t*>(huge.data()), huge.size(), out, "huge.jpg");
    FAIL() << "a 60000x60000 header was rewritten";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("huge.jpg: refusing a 60000x60000 JPEG (limit"), std::string::npos)
        << e.what();
  }
  for (const bool restart_markers : {true, false}) {
    test::TempDir dir;
    PackOptions o;
    o.src = make_folder(dir);
    test::write_file(o.src + "/cat/zz_huge.jpg", huge);
    o.out = dir.file("s");
    o.restart_markers = restart_markers;
    const PackStats st = pack_dataset(o);
    EXPECT_EQ(st.skipped, 1) << "restart markers " << restart_markers;
    EXPECT_EQ(st.samples, 21);
    for (const auto& smp : scan_shards(o.out).samples) EXPECT_EQ(smp.name().find("zz_huge"), std::string::npos);
  }
}

// A flipped byte in one member's tar header, the index untouched (it bypasses the scan that checks headers): the
// sample's read checks its own header, names it, and the loader skips that one sample as a bad file.
TEST_F(Shards, DamagedMemberHeaderIsCaughtDespiteTheIndex) {
  test::TempDir dir;
  PackOptions o;
  o.src = make_folder(dir);
  o.out = dir.file("s");
  o.restart_markers = false;
  pack_dataset(o);
  const auto samples = scan_shards(o.out).samples;
  ASSERT_EQ(samples.size(), 21u);
  const ImageSample victim = samples[5];
  std::string tar = test::read_file(victim.path);
  tar[static_cast<size_t>(victim.offset - 512 + 3)] ^= 0x20;  // inside the member's name field
  test::write_file(victim.path, tar);
  ASSERT_TRUE(fs::exists(victim.path + ".idx"));
  std::vector<uint8_t> bytes;
  try {
    read_sample_bytes(victim, bytes);
    FAIL() << "a damaged header went unnoticed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has a bad checksum"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(read_sample_bytes(samples[4], bytes));
  EXPECT_NO_THROW(read_sample_bytes(samples[6], bytes));
  ImageLoaderOptions lo;
  lo.batch_size = 7;
  lo.image_size = 32;
  lo.workers = 2;
  ImageLoader l(scan_shards(o.out).samples, lo, torch::kCPU);
  l.set_epoch(0);
  Batch b;
  while (l.next(b)) {
  }
  EXPECT_EQ(l.bad_samples(), 1);
}

// A batch read into one buffer (the GPU loader's): folder files and shard members side by side, each the bytes
// read_sample_bytes gives, in one buffer of their sizes' total from the caller; a missing file, a member past its
// shard's end and a file that changed size are named, the rest still read; the same with one thread or three.
TEST_F(Shards, ReadBatchPutsEveryFileInOneBufferAndNamesTheOnesThatFail) {
  test::TempDir dir;
  const std::string root = make_folder(dir);
  test::write_file(root + "/emu/zz_empty.jpg", "");
  PackOptions o = in_order(root, dir.file("s"), 2);
  o.restart_markers = false;
  pack_dataset(o);
  const auto folder = scan_image_folder(root).samples;
  const auto shard = scan_shards(o.out).samples;
  std::vector<ImageSample> batch(folder.begin(), folder.begin() + 6);
  batch.insert(batch.end(), shard.begin() + 3, shard.begin() + 9);
  batch.push_back(folder.back());  // the empty file
  ImageSample missing = folder[1];
  missing.path = root + "/cat/gone.jpg";
  batch.push_back(missing);
  ImageSample past_end = shard[2];
  past_end.size = 1 << 20;  // its index says more than the shard holds (scan_shards checks indexes; this one skipped it)
  batch.push_back(past_end);
  std::vector<const ImageSample*> at;
  for (const auto& s : batch) at.push_back(&s);
  for (int threads : {1, 3}) {
    std::vector<uint8_t> arena;
    int calls = 0;
    const BatchBytes r = read_batch(at, threads, [&](size_t n) {
      ++calls;
      arena.resize(n);
      return arena.data();
    });
    EXPECT_EQ(calls, 1);
    size_t good = 0;
    for (size_t i = 0; i + 2 < batch.size(); ++i) {
      std::vector<uint8_t> want;
      read_sample_bytes(batch[i], want);
      good += want.size();
      ASSERT_TRUE(r.errors[i].empty()) << batch[i].name() << ": " << r.errors[i];
      ASSERT_EQ(r.files[i].second, want.size()) << batch[i].name();
      EXPECT_TRUE(std::equal(want.begin(), want.end(), r.files[i].first)) << batch[i].name();
      EXPECT_GE(r.files[i].first, arena.data());
      EXPECT_LE(r.files[i].first + r.files[i].second, arena.data() + arena.size());
    }
    EXPECT_EQ(r.files[12].second, 0u) << "the empty file reads as empty, not as an error";
    EXPECT_EQ(r.total, good + (1 << 20)) << "a slice for every file that could be sized";
    EXPECT_EQ(arena.size(), r.total);
    EXPECT_EQ(r.files[13].first, nullptr);
    EXPECT_NE(r.errors[13].find("gone.jpg: cannot open"), std::string::npos) << r.errors[13];
    EXPECT_EQ(r.files[14].first, nullptr);
    EXPECT_NE(r.errors[14].find(":" + past_end.key + ": short read"), std::string::npos) << r.errors[14];
  }
  // a file's size is taken before it is read: one that changes in between is an error, not a torn read
  const ImageSample& grows = folder[0];
  std::vector<uint8_t> buf(sample_byte_size(grows));
  test::write_file(grows.path, test::read_file(grows.path) + "more");
  EXPECT_NE(error_of([&] { read_sample_into(grows, buf.data(), buf.size()); }).find("changed size while being read ("),
            std::string::npos);
}

TEST_F(Shards, BadIndexTarAndOptionsAreClearErrors) {
  test::TempDir dir;
  PackOptions o;
  o.src = make_folder(dir, /*bad_files=*/2);
  o.out = dir.file("s");
  const PackStats st = pack_dataset(o);
  EXPECT_EQ(st.skipped, 2);  // empty and text files are named and skipped
  EXPECT_EQ(st.samples, 21);
  const std::string tar = o.out + "/shard-000000.tar", idx = tar + ".idx";
  const std::string good_idx = test::read_file(idx);
  // no index: the tar is scanned and gives the same samples
  fs::remove_tree(idx);
  const auto scanned = scan_shards(o.out);
  test::write_file(idx, good_idx);
  const auto indexed = scan_shards(o.out);
  ASSERT_EQ(scanned.samples.size(), indexed.samples.size());
  for (size_t i = 0; i < scanned.samples.size(); ++i) {
    EXPECT_EQ(scanned.samples[i].offset, indexed.samples[i].offset);
    EXPECT_EQ(scanned.samples[i].label, indexed.samples[i].label);
  }
  // a damaged index names the file and line
  std::string bad = good_idx;
  bad.replace(bad.find('\n') + 1, 1, "x");
  test::write_file(idx, bad);
  EXPECT_NE(error_of([&] { scan_shards(o.out); }).find("shard-000000.tar.idx:2"), std::string::npos);
  test::write_file(idx, good_idx.substr(0, good_idx.size() / 2));
  EXPECT_NE(error_of([&] { scan_shards(o.out); }).find("truncated index"), std::string::npos);
  // a tar that changed since its index
  test::write_file(idx, good_idx);
  const std::string t = test::read_file(tar);
  test::write_file(tar, t + std::string(512, '\0'));
  EXPECT_NE(error_of([&] { scan_shards(o.out); }).find("the tar changed"), std::string::npos);
  // a truncated or corrupt tar without index names the byte
  fs::remove_tree(idx);
  test::write_file(tar, t.substr(0, 700));
  EXPECT_NE(error_of([&] { scan_shards(o.out); }).find("runs past the end"), std::string::npos);
  std::string flipped = t;
  flipped[10] ^= 0x40;
  test::write_file(tar, flipped);
  EXPECT_NE(error_of([&] { scan_shards(o.out); }).find("byte 0: bad checksum"), std::string::npos);
  EXPECT_NE(error_of([&] { scan_shards(dir.file("none")); }).find("no such shard folder"), std::string::npos);
  fs::make_dirs(dir.file("empty"));
  EXPECT_NE(error_of([&] { scan_shards(dir.file("empty")); }).find("no .tar shards"), std::string::npos);
  EXPECT_THROW(parse_pack_args({"--src", o.src}), ConfigError);
  EXPECT_THROW(parse_pack_args({"--src", o.src, "--out", "x", "--quality", "101"}), ConfigError);
  EXPECT_THROW(parse_pack_args({"--src", o.src, "--out", "x", "--bogus"}), ConfigError);
  EXPECT_EQ(parse_pack_args({"--src=" + o.src, "--out", "x", "--max-side", "256"}).max_side, 256);
  EXPECT_FALSE(parse_pack_args({"--src", o.src, "--out", "x"}).standard_huffman);
  EXPECT_TRUE(parse_pack_args({"--src", o.src, "--out", "x", "--huffman", "standard"}).standard_huffman);
  try {
    parse_pack_args({"--src", o.src, "--out", "x", "--huffman=optimal"});
    ADD_FAILURE() << "an unknown --huffman value was taken";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("pack --huffman: expected fitted or standard, got 'optimal'"),
              std::string::npos) << e.what();
  }
}

TEST_F(Shards, ReadsPythonWrittenTarsWithLongNamesAndExtraFields) {
  test::TempDir dir;
  fs::make_dirs(dir.file("py"));
  const std::string img = fixture_path("odd.jpg");
  run_python(
      "import tarfile, io\n"
      "data = open('" + img + "', 'rb').read()\n"
      "def add(t, name, b):\n"
      "    i = tarfile.TarInfo(name); i.size = len(b); t.addfile(i, io.BytesIO(b))\n"
      "for fmt, path in ((tarfile.PAX_FORMAT, 'pax.tar'), (tarfile.GNU_FORMAT, 'gnu.tar')):\n"
      "    with tarfile.open('" + dir.file("py") + "/' + path, 'w', format=fmt) as t:\n"
      "        long = 'd' * 120 + '/sample_0001'\n"
      "        add(t, long + '.jpg', data); add(t, long + '.cls', b'4\\n'); add(t, long + '.json', b'{}')\n"
      "        add(t, 'x/short.cls', b' 7 '); add(t, 'x/short.jpeg', data); add(t, 'x/other.0.jpg', data)\n");
  const ImageList l = scan_shards(dir.file("py"));
  ASSERT_EQ(l.samples.size(), 4u);
  const std::string want = test::read_file(img);
  for (const auto& s : l.samples) {
    EXPECT_EQ(test::read_file(s.path).substr(static_cast<size_t>(s.offset), static_cast<size_t>(s.size)), want) << s.name();
  }
  EXPECT_EQ(l.samples[0].label, 4);
  EXPECT_EQ(l.samples[0].key, std::string(120, 'd') + "/sample_0001.jpg");
  EXPECT_EQ(l.samples[1].label, 7);
  EXPECT_EQ(l.samples[1].key, "x/short.jpeg");  // x/other.0.jpg: key x/other, field "0.jpg" (WebDataset's rule)
}

TEST(Sharding, EverySampleOncePerEpochAcrossRanks) {
  for (int world : {1, 2, 3, 4}) {
    std::multiset<int64_t> all;
    size_t per_rank = 0;
    for (int r = 0; r < world; ++r) {
      ShardSpec s;
      s.dataset_size = 96;  // divisible by every world size here: no padding
      s.seed = 4;
      s.epoch = 2;
      s.rank = r;
      s.world_size = world;
      const auto idx = epoch_indices(s);
      if (r == 0) per_rank = idx.size();
      EXPECT_EQ(idx.size(), per_rank);
      all.insert(idx.begin(), idx.end());
    }
    EXPECT_EQ(all.size(), 96u);
    for (int64_t i = 0; i < 96; ++i) EXPECT_EQ(all.count(i), 1u) << "world " << world << " index " << i;
  }
  ShardSpec s;  // 10 samples over 4 ranks: padded to 12 by wrapping, so every sample at least once
  s.dataset_size = 10;
  s.world_size = 4;
  std::set<int64_t> seen;
  for (int r = 0; r < 4; ++r) {
    s.rank = r;
    const auto idx = epoch_indices(s);
    EXPECT_EQ(idx.size(), 3u);
    seen.insert(idx.begin(), idx.end());
  }
  EXPECT_EQ(seen.size(), 10u);
}

// ---- IDX ----

void write_idx(const std::string& path, const std::vector<int>& dims, const std::vector<uint8_t>& data, bool gz) {
  std::string s = {0, 0, 8, static_cast<char>(dims.size())};
  for (int d : dims) s += {char(d >> 24), char((d >> 16) & 255), char((d >> 8) & 255), char(d & 255)};
  s.append(data.begin(), data.end());
  if (!gz) return test::write_file(path, s);
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, s.data(), static_cast<unsigned>(s.size()));
  gzclose(f);
}

TEST(Idx, ReadsRawAndGzippedAndRejectsBadFiles) {
  test::TempDir dir;
  std::vector<uint8_t> px(2 * 3 * 4);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i * 7);
  write_idx(dir.file("s-images-idx3-ubyte.gz"), {2, 3, 4}, px, true);
  write_idx(dir.file("s-labels-idx1-ubyte"), {2}, {1, 0}, false);
  const InMemoryDataset d = load_idx_split(dir.path(), "s");
  EXPECT_EQ(d.images.sizes(), (std::vector<int64_t>{2, 3, 4, 1}));
  EXPECT_EQ(d.images[1][2][3][0].item<int>(), px[23]);
  EXPECT_EQ(d.labels[0].item<int64_t>(), 1);
  EXPECT_EQ(d.num_classes, 2);
  write_idx(dir.file("cut-images-idx3-ubyte"), {5, 3, 4}, px, false);  // promises 60 bytes, holds 24
  try {
    read_idx(dir.file("cut-images-idx3-ubyte"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cut-images-idx3-ubyte"), std::string::npos);
  }
  test::write_file(dir.file("bad"), "PK\x03\x04 not idx");
  EXPECT_THROW(read_idx(dir.file("bad")), Error);
  EXPECT_THROW(load_idx_split(dir.path(), "missing"), Error);
}

}  // namespace
}  // namespace trainer

namespace trainer {
namespace {

std::string cifar_record(int coarse, int label, int seed, bool hundred) {
  std::string r;
  if (hundred) r.push_back(static_cast<char>(coarse));
  r.push_back(static_cast<char>(label));
  for (int c = 0; c < 3; ++c)
    for (int p = 0; p < 1024; ++p) r.push_back(static_cast<char>((seed + c * 100 + p) & 0xFF));
  return r;
}

TEST(Cifar, PlanarRecordsBecomeHwcImagesWithLabels) {
  const std::string ten = cifar_record(0, 3, 0, false) + cifar_record(0, 9, 7, false);
  const auto d = parse_cifar(reinterpret_cast<const uint8_t*>(ten.data()), ten.size(), 1, "t.bin");
  ASSERT_EQ(d.images.sizes(), (std::vector<int64_t>{2, 32, 32, 3}));
  EXPECT_EQ(d.labels[0].item<int64_t>(), 3);
  EXPECT_EQ(d.labels[1].item<int64_t>(), 9);
  EXPECT_EQ(d.num_classes, 10);
  // pixel (row 1, col 2) of image 1: planar index 34; channel c holds (7 + c*100 + 34) & 255
  for (int c = 0; c < 3; ++c) EXPECT_EQ(d.images[1][1][2][c].item<int>(), (7 + c * 100 + 34) & 0xFF);

  const std::string hundred = cifar_record(11, 87, 1, true);
  const auto h = parse_cifar(reinterpret_cast<const uint8_t*>(hundred.data()), hundred.size(), 2, "h.bin");
  EXPECT_EQ(h.labels[0].item<int64_t>(), 87);  // the fine label
  EXPECT_EQ(h.num_classes, 100);

  try {
    parse_cifar(reinterpret_cast<const uint8_t*>(ten.data()), ten.size() - 5, 1, "cut.bin");
    FAIL() << "a truncated file was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cut.bin: 6141 bytes is not a whole number of 3073-byte"), std::string::npos)
        << e.what();
  }
  const std::string bad = cifar_record(0, 12, 0, false);
  EXPECT_THROW(parse_cifar(reinterpret_cast<const uint8_t*>(bad.data()), bad.size(), 1, "b.bin"), Error);

  test::TempDir dir;
  fs::write_text_atomic(dir.file("test_batch.bin"), ten);
  const auto split = load_cifar_split(dir.path(), "cifar10", "test");
  EXPECT_EQ(split.images.size(0), 2);
  try {
    load_cifar_split(dir.path(), "cifar10", "train");
    FAIL() << "missing batches accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("data_batch_1.bin missing"), std::string::npos) << e.what();
  }
}

// The GPU path's crop-resize without its CUDA kernel (ATen per sample; what builds without nvcc run), here on
// CPU tensors: a strided (planar) view of an image gives what the contiguous image gives, and folding the
// normalisation and channels_last into the call equals normalising the plain output.
TEST(CropResize, AtenPathTakesStridedImagesAndFoldsNormalisation) {
  torch::manual_seed(5);
  const auto u8 = torch::TensorOptions().dtype(torch::kUInt8);
  const torch::Tensor a = torch::randint(0, 256, {90, 120, 3}, u8), b = torch::randint(0, 256, {40, 33, 3}, u8);
  const torch::Tensor b_planar = b.permute({2, 0, 1}).contiguous().permute({1, 2, 0});  // (H, W, 3) view of planes
  ASSERT_FALSE(b_planar.is_contiguous());
  const std::vector<Rect> windows = {{7, 3, 100, 80}, {2, 5, 30, 20}};
  const std::vector<char> flips = {1, 0};
  const torch::Tensor plain = gpu_crop_resize({a, b}, windows, flips, 24, /*batched_kernel=*/false);
  const torch::Tensor strided = gpu_crop_resize({a, b_planar}, windows, flips, 24, false);
  EXPECT_TRUE(torch::equal(plain, strided));
  // the crop really is the window: a different window of b changes the output
  const torch::Tensor moved = gpu_crop_resize({a, b}, {windows[0], Rect{3, 5, 30, 20}}, flips, 24, false);
  EXPECT_TRUE(torch::equal(moved[0], plain[0]));
  EXPECT_FALSE(torch::equal(moved[1], plain[1]));
  const GpuResizeOutput norm = GpuResizeOutput::normalized({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}, true);
  const torch::Tensor mean = torch::tensor({norm.mean255[0], norm.mean255[1], norm.mean255[2]}).view({1, 3, 1, 1});
  const torch::Tensor inv = torch::tensor({norm.inv_std255[0], norm.inv_std255[1], norm.inv_std255[2]}).view({1, 3, 1, 1});
  const torch::Tensor folded = gpu_crop_resize({a, b_planar}, windows, flips, 24, false, norm);
  EXPECT_TRUE(folded.is_contiguous(torch::MemoryFormat::ChannelsLast));
  const torch::Tensor by_hand = (plain - mean) * inv;
  EXPECT_LT((folded - by_hand).abs().max().item<double>(), 1e-5);
  EXPECT_THROW(gpu_crop_resize({a, b}, {windows[0], Rect{20, 30, 30, 20}}, flips, 24, false), Error)
      << "a window outside its image is refused";
}

}  // namespace
}  // namespace trainer
