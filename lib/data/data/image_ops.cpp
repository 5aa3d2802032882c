#include "data/image_ops.h"

#include <png.h>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/check.h"

namespace trainer {

Rect draw_rrc(SampleRng& rng, int width, int height, double scale_lo, double scale_hi, double ratio_lo,
              double ratio_hi) {
  const double area = static_cast<double>(width) * height;
  const double log_lo = std::log(ratio_lo), log_hi = std::log(ratio_hi);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * rng.uniform(scale_lo, scale_hi);
    const double aspect = std::exp(rng.uniform(log_lo, log_hi));
    const int w = static_cast<int>(std::lround(std::sqrt(target * aspect)));
    const int h = static_cast<int>(std::lround(std::sqrt(target / aspect)));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      const int y = static_cast<int>(rng.randint(0, height - h));
      const int x = static_cast<int>(rng.randint(0, width - w));
      return {x, y, w, h};
    }
  }
  const double in_ratio = static_cast<double>(width) / height;
  int w = width, h = height;
  if (in_ratio < ratio_lo) {
    h = static_cast<int>(std::lround(w / ratio_lo));
  } else if (in_ratio > ratio_hi) {
    w = static_cast<int>(std::lround(h * ratio_hi));
  }
  return {(width - w) / 2, (height - h) / 2, w, h};
}

Rect center_crop_window(int width, int height, int size, double crop_pct) {
  // torchvision: Resize(int(size / crop_pct)) on the shorter side, then CenterCrop(size)
  const int resized_short = static_cast<int>(std::floor(size / crop_pct));
  const double scale = static_cast<double>(std::min(width, height)) / resized_short;
  const int cw = std::min(width, static_cast<int>(std::lround(size * scale)));
  const int ch = std::min(height, static_cast<int>(std::lround(size * scale)));
  return {(width - cw) / 2, (height - ch) / 2, cw, ch};
}

ResizeMap window_map(Rect r, int dst_w, int dst_h) {
  ResizeMap m;
  m.x0 = r.x;
  m.y0 = r.y;
  m.sx = static_cast<double>(r.w) / dst_w;
  m.sy = static_cast<double>(r.h) / dst_h;
  m.bounds = r;
  return m;
}

EvalResize eval_resize(int width, int height, int size, double crop_pct) {
  const int scale_size = static_cast<int>(std::floor(size / crop_pct));
  const bool wide = width > height;
  const int s = wide ? height : width, l = wide ? width : height;
  const int resized_long = static_cast<int>(static_cast<double>(int64_t(scale_size) * l) / s);
  EvalResize e;
  e.w = wide ? resized_long : scale_size;
  e.h = wide ? scale_size : resized_long;
  e.left = static_cast<int>(std::nearbyint((e.w - size) / 2.0));
  e.top = static_cast<int>(std::nearbyint((e.h - size) / 2.0));
  return e;
}

ResizeMap eval_map(int width, int height, int size, double crop_pct) {
  const EvalResize e = eval_resize(width, height, size, crop_pct);
  ResizeMap m;
  m.sx = static_cast<double>(width) / e.w;
  m.sy = static_cast<double>(height) / e.h;
  m.x0 = e.left * m.sx;
  m.y0 = e.top * m.sy;
  m.bounds = {0, 0, width, height};
  return m;
}

namespace {
// [first, end) of the source pixels along one axis that n outputs from offset o at scale s can read
std::pair<int, int> axis_footprint(double o, double s, int n, Interpolation f, int lo, int hi) {
  const double support = (f == Interpolation::bicubic ? 2.0 : 1.0) * std::max(s, 1.0);
  const int first = static_cast<int>(std::floor(o + 0.5 * s - support)) - 1;
  const int end = static_cast<int>(std::ceil(o + (n - 0.5) * s + support)) + 1;
  return {std::max(first, lo), std::min(end, hi)};
}
}  // namespace

Rect map_footprint(const ResizeMap& m, int dst_w, int dst_h, Interpolation filter) {
  const Rect& b = m.bounds;
  const auto [x0, x1] = axis_footprint(m.x0, m.sx, dst_w, filter, b.x, b.x + b.w);
  const auto [y0, y1] = axis_footprint(m.y0, m.sy, dst_h, filter, b.y, b.y + b.h);
  return {x0, y0, std::max(1, x1 - x0), std::max(1, y1 - y0)};
}

ResizeMap map_into_decode(const ResizeMap& m, int denom, int origin_x, int origin_y, int width, int height) {
  ResizeMap d;
  d.sx = m.sx / denom;
  d.sy = m.sy / denom;
  d.x0 = m.x0 / denom - origin_x;
  d.y0 = m.y0 / denom - origin_y;
  // the old bounds in decoded pixels, rounded outwards, inside what was decoded
  const int bx0 = std::max(0, static_cast<int>(std::floor(double(m.bounds.x) / denom)) - origin_x);
  const int by0 = std::max(0, static_cast<int>(std::floor(double(m.bounds.y) / denom)) - origin_y);
  const int bx1 = std::min(width, static_cast<int>(std::ceil(double(m.bounds.x + m.bounds.w) / denom)) - origin_x);
  const int by1 = std::min(height, static_cast<int>(std::ceil(double(m.bounds.y + m.bounds.h) / denom)) - origin_y);
  d.bounds = {bx0, by0, std::max(1, bx1 - bx0), std::max(1, by1 - by0)};
  return d;
}

namespace {

// PIL's filters: the triangle, and Keys' cubic convolution with a = -0.5.
double filter_weight(Interpolation f, double x) {
  x = std::fabs(x);
  if (f == Interpolation::bilinear) return std::max(0.0, 1.0 - x);
  constexpr double a = -0.5;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
  return 0.0;
}

// Filter taps for one axis, as PIL's precompute_coeffs.
struct Taps {
  std::vector<int> start, count;  // per output pixel: first source index and number of taps
  std::vector<float> weights;     // count_max per output pixel
  int max_taps = 0;
};

// out_size outputs centred at in_offset + (i + 0.5) * scale, the taps inside [0, in_total)
Taps make_taps(double in_offset, double scale, int out_size, int in_total, Interpolation filter) {
  Taps t;
  const double fscale = std::max(scale, 1.0);  // widen the support when shrinking (antialias)
  const double support = (filter == Interpolation::bicubic ? 2.0 : 1.0) * fscale;
  t.max_taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  t.start.resize(out_size);
  t.count.resize(out_size);
  t.weights.assign(static_cast<size_t>(out_size) * t.max_taps, 0.f);
  for (int i = 0; i < out_size; ++i) {
    const double center = in_offset + (i + 0.5) * scale;
    int xmin = std::max(static_cast<int>(center - support + 0.5), 0);
    int xmax = std::min(static_cast<int>(center + support + 0.5), in_total);
    xmin = std::max(xmin, 0);
    double total = 0;
    float* w = &t.weights[static_cast<size_t>(i) * t.max_taps];
    int n = 0;
    for (int x = xmin; x < xmax && n < t.max_taps; ++x, ++n) {
      const double arg = (x - center + 0.5) / fscale;
      const double v = filter_weight(filter, arg);
      w[n] = static_cast<float>(v);
      total += v;
    }
    if (total > 0)
      for (int k = 0; k < n; ++k) w[k] = static_cast<float>(w[k] / total);
    t.start[i] = xmin;
    t.count[i] = n;
  }
  return t;
}

inline uint8_t clamp_u8(float v) { return static_cast<uint8_t>(std::min(255.f, std::max(0.f, v + 0.5f))); }

#ifdef __SSE2__
// One output pixel: the sum over k < T of w[k] * p[3k..3k+2], the three channels as one 4-lane vector (the fourth
// lane reads the next float, which the row buffer is padded for, and is dropped), rounded and clamped to uint8.
inline __attribute__((always_inline)) void pixel_four_lanes(const float* w, const float* p, int T, uint8_t* o) {
  __m128 acc = _mm_setzero_ps();
  for (int k = 0; k < T; ++k) acc = _mm_add_ps(acc, _mm_mul_ps(_mm_set1_ps(w[k]), _mm_loadu_ps(p + 3 * k)));
  acc = _mm_min_ps(_mm_max_ps(_mm_add_ps(acc, _mm_set1_ps(0.5f)), _mm_setzero_ps()), _mm_set1_ps(255.f));
  alignas(16) int32_t lanes[4];
  _mm_store_si128(reinterpret_cast<__m128i*>(lanes), _mm_cvttps_epi32(acc));
  o[0] = static_cast<uint8_t>(lanes[0]);
  o[1] = static_cast<uint8_t>(lanes[1]);
  o[2] = static_cast<uint8_t>(lanes[2]);
}
#endif

// Output pixel x of each row = sum over k < T of wa[x*T + k] * row[s0[x] + k] per channel. N > 0: T = N at
// compile time; N = 0: T given at run time. With SSE one pixel at a time (pixel_four_lanes).
template <int N>
inline __attribute__((always_inline)) void horizontal_pass(const float* tmp, int row_len, const float* wa,
                                                           const int* s0, uint8_t* dst, int dst_w, int dst_h,
                                                           int dst_stride, bool flip, int t_runtime = 0) {
  const int T = N > 0 ? N : t_runtime;
  for (int y = 0; y < dst_h; ++y) {
    const float* row = tmp + static_cast<size_t>(y) * row_len;
    uint8_t* out = dst + static_cast<size_t>(y) * dst_stride;
    for (int x = 0; x < dst_w; ++x) {
      const float* w = wa + static_cast<size_t>(x) * T;
      const float* p = row + static_cast<size_t>(s0[x]) * 3;
      const int ox = flip ? dst_w - 1 - x : x;
#ifdef __SSE2__
      pixel_four_lanes(w, p, T, out + 3 * ox);
#else
      float a = 0, b = 0, c = 0;
      for (int k = 0; k < T; ++k) {
        a += w[k] * p[3 * k];
        b += w[k] * p[3 * k + 1];
        c += w[k] * p[3 * k + 2];
      }
      out[3 * ox] = clamp_u8(a);
      out[3 * ox + 1] = clamp_u8(b);
      out[3 * ox + 2] = clamp_u8(c);
#endif
    }
  }
}

#if defined(__GNUC__) && defined(__x86_64__)
#define TRAINER_RESIZE_PAIRS 1
// The same sums two output pixels at a time: pixel x in the low 128-bit lane, x + 1 in the high one, each tap's
// weights broadcast per lane beforehand (`wp`: 8 floats per pair and tap); the same multiplies and adds in the
// same order per channel, so the same bytes as horizontal_pass. `wp` and `sp` are in output order (flip
// applied): sp[ox] is the float offset of output pixel ox's first tap in the row.
template <int N>
__attribute__((target("avx2"))) void horizontal_pass_pairs(const float* tmp, int row_len, const float* wp,
                                                           const int* sp, const float* wa, const int* s0,
                                                           uint8_t* dst, int dst_w, int dst_h, int dst_stride,
                                                           bool flip, int t_runtime = 0) {
  const int T = N > 0 ? N : t_runtime;
  const int pairs = dst_w / 2;
  const __m256 half = _mm256_set1_ps(0.5f), zero = _mm256_setzero_ps(), top = _mm256_set1_ps(255.f);
  const __m128i rgbrgb = _mm_setr_epi8(0, 1, 2, 4, 5, 6, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  for (int y = 0; y < dst_h; ++y) {
    const float* row = tmp + static_cast<size_t>(y) * row_len;
    uint8_t* out = dst + static_cast<size_t>(y) * dst_stride;
    for (int pr = 0; pr < pairs; ++pr) {
      const float* pa = row + sp[2 * pr];
      const float* pb = row + sp[2 * pr + 1];
      const float* w = wp + static_cast<size_t>(pr) * T * 8;
      __m256 acc = _mm256_setzero_ps();
      for (int k = 0; k < T; ++k) {
        const __m256 v =
            _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(pa + 3 * k)), _mm_loadu_ps(pb + 3 * k), 1);
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(w + 8 * k), v));
      }
      acc = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(acc, half), zero), top);
      const __m256i v32 = _mm256_cvttps_epi32(acc);
      const __m128i v16 = _mm_packs_epi32(_mm256_castsi256_si128(v32), _mm256_extracti128_si256(v32, 1));
      const __m128i v8 = _mm_shuffle_epi8(_mm_packus_epi16(v16, v16), rgbrgb);  // RGB. RGB. -> RGBRGB..
      uint8_t* o = out + 6 * pr;
      if (pr + 1 < pairs) {
        _mm_storel_epi64(reinterpret_cast<__m128i*>(o), v8);  // its last two bytes: the next pair's, written next
      } else {
        const uint64_t six = static_cast<uint64_t>(_mm_cvtsi128_si64(v8));
        std::memcpy(o, &six, 6);
      }
    }
  }
  if (dst_w & 1) {  // the last output pixel, alone, four lanes wide
    const int ox = dst_w - 1, x = flip ? 0 : ox;
    for (int y = 0; y < dst_h; ++y)
      pixel_four_lanes(wa + static_cast<size_t>(x) * T, tmp + static_cast<size_t>(y) * row_len + s0[x] * 3, T,
                       dst + static_cast<size_t>(y) * dst_stride + 3 * ox);
  }
}

bool cpu_has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
#endif

}  // namespace

// Built twice, for AVX2 and for the baseline ISA, the loader picking one at start-up (GCC target_clones): the
// filter loops vectorise 8 floats wide where the CPU allows.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
__attribute__((target_clones("avx2", "default")))
#endif
void resize_rgb_mapped(const uint8_t* src, int src_w, int src_h, const ResizeMap& m, uint8_t* dst, int dst_w,
                       int dst_h, int dst_stride, bool flip, Interpolation filter, ResizeSimd simd) {
  const Rect r = m.bounds;  // the taps' pixels; the pass below works within them
  // Enlarging both ways, bilinear: antialiasing changes nothing and OpenCV's SIMD bilinear (half-pixel centres, as
  // torchvision) does it; the flip is a second cheap pass. (OpenCV's cubic has a = -0.75, not PIL's -0.5.)
  const bool bicubic = filter == Interpolation::bicubic;
  const bool whole_window = m.x0 == r.x && m.y0 == r.y && std::abs(m.sx * dst_w - r.w) < 1e-9 &&
                            std::abs(m.sy * dst_h - r.h) < 1e-9;
  if (!bicubic && whole_window && r.w <= dst_w && r.h <= dst_h) {
    const cv::Mat in(r.h, r.w, CV_8UC3, const_cast<uint8_t*>(src + (static_cast<size_t>(r.y) * src_w + r.x) * 3),
                     static_cast<size_t>(src_w) * 3);
    cv::Mat out(dst_h, dst_w, CV_8UC3, dst, static_cast<size_t>(dst_stride));
    cv::resize(in, out, cv::Size(dst_w, dst_h), 0, 0, cv::INTER_LINEAR);
    if (flip) cv::flip(out, out, 1);
    return;
  }
  // Shrinking: the antialiased triangle filter, vertical pass first (contiguous rows: vectorises), then the
  // horizontal pass on the already-short image with weights pre-aligned to a fixed tap count (no branches; a
  // compile-time count for the common small ones, so the dot products unroll).
  const Taps tx = make_taps(m.x0 - r.x, m.sx, dst_w, r.w, filter);
  const Taps ty = make_taps(m.y0 - r.y, m.sy, dst_h, r.h, filter);
  const int row_len = r.w * 3;
  thread_local std::vector<float> tmp;  // (dst_h, r.w*3)
  tmp.resize(static_cast<size_t>(dst_h) * row_len + 4);  // + the 4th lane of the last pixel's load
  for (int y = 0; y < dst_h; ++y) {  // a row of floats stays in L1 while the taps add into it
    float* out = &tmp[static_cast<size_t>(y) * row_len];
    const float* w = &ty.weights[static_cast<size_t>(y) * ty.max_taps];
    const int n = ty.count[y];
    const uint8_t* base = src + (static_cast<size_t>(r.y + ty.start[y]) * src_w + r.x) * 3;
    const size_t stride = static_cast<size_t>(src_w) * 3;
    const float w0 = n > 0 ? w[0] : 0.f;
    for (int i = 0; i < row_len; ++i) out[i] = w0 * static_cast<float>(base[i]);
    for (int k = 1; k < n; ++k) {
      const uint8_t* in = base + k * stride;
      const float wk = w[k];
      for (int i = 0; i < row_len; ++i) out[i] += wk * static_cast<float>(in[i]);
    }
    // the cubic's negative lobes overshoot: back into the range, as PIL's uint8 intermediate is
    if (bicubic)
      for (int i = 0; i < row_len; ++i) out[i] = std::min(255.f, std::max(0.f, out[i]));
  }
  const int T = std::min(tx.max_taps, r.w);
  thread_local std::vector<float> wa;  // (dst_w, T) weights aligned to each output's first read
  thread_local std::vector<int> s0;
  wa.assign(static_cast<size_t>(dst_w) * T, 0.f);
  s0.resize(static_cast<size_t>(dst_w));
  for (int x = 0; x < dst_w; ++x) {
    const int first = std::min(tx.start[x], r.w - T);  // keep the T reads inside the row
    s0[static_cast<size_t>(x)] = first;
    const float* w = &tx.weights[static_cast<size_t>(x) * tx.max_taps];
    for (int k = 0; k < tx.count[x]; ++k) {
      const int at = tx.start[x] - first + k;
      if (at >= 0 && at < T) wa[static_cast<size_t>(x) * T + at] = w[k];
    }
  }
#ifdef TRAINER_RESIZE_PAIRS
  if (simd == ResizeSimd::best && dst_w >= 2 && cpu_has_avx2()) {
    thread_local std::vector<float> wp;  // (dst_w / 2, T, 8): each pair's weights per tap, broadcast per lane
    thread_local std::vector<int> sp;
    const int pairs = dst_w / 2;
    wp.resize(static_cast<size_t>(pairs) * T * 8);
    sp.resize(static_cast<size_t>(dst_w));
    for (int ox = 0; ox < dst_w; ++ox)
      sp[static_cast<size_t>(ox)] = s0[static_cast<size_t>(flip ? dst_w - 1 - ox : ox)] * 3;
    for (int pr = 0; pr < pairs; ++pr)
      for (int k = 0; k < T; ++k)
        for (int j = 0; j < 8; ++j) {
          const int ox = 2 * pr + j / 4, x = flip ? dst_w - 1 - ox : ox;
          wp[(static_cast<size_t>(pr) * T + k) * 8 + j] = wa[static_cast<size_t>(x) * T + k];
        }
    const auto run = [&](auto n) {
      horizontal_pass_pairs<decltype(n)::value>(tmp.data(), row_len, wp.data(), sp.data(), wa.data(), s0.data(),
                                                 dst, dst_w, dst_h, dst_stride, flip, T);
    };
    switch (T) {
      case 2: run(std::integral_constant<int, 2>{}); break;
      case 3: run(std::integral_constant<int, 3>{}); break;
      case 4: run(std::integral_constant<int, 4>{}); break;
      case 5: run(std::integral_constant<int, 5>{}); break;
      case 6: run(std::integral_constant<int, 6>{}); break;
      case 7: run(std::integral_constant<int, 7>{}); break;
      default: run(std::integral_constant<int, 0>{});
    }
    return;
  }
#endif
  (void)simd;
  switch (T) {
    case 2: horizontal_pass<2>(tmp.data(), row_len, wa.data(), s0.data(), dst, dst_w, dst_h, dst_stride, flip); break;
    case 3: horizontal_pass<3>(tmp.data(), row_len, wa.data(), s0.data(), dst, dst_w, dst_h, dst_stride, flip); break;
    case 4: horizontal_pass<4>(tmp.data(), row_len, wa.data(), s0.data(), dst, dst_w, dst_h, dst_stride, flip); break;
    case 5: horizontal_pass<5>(tmp.data(), row_len, wa.data(), s0.data(), dst, dst_w, dst_h, dst_stride, flip); break;
    case 6: horizontal_pass<6>(tmp.data(), row_len, wa.data(), s0.data(), dst, dst_w, dst_h, dst_stride, flip); break;
    case 7: horizontal_pass<7>(tmp.data(), row_len, wa.data(), s0.data(), dst, dst_w, dst_h, dst_stride, flip); break;
    default:
      horizontal_pass<0>(tmp.data(), row_len, wa.data(), s0.data(), dst, dst_w, dst_h, dst_stride, flip, T);
  }
  (void)src_h;
}

Interpolation interpolation_from(const std::string& name) {
  if (name == "bilinear") return Interpolation::bilinear;
  if (name == "bicubic") return Interpolation::bicubic;
  TRAINER_FAIL("interpolation '", name, "': expected bilinear or bicubic");
}

ImageFormat sniff_format(const uint8_t* d, size_t n) {
  if (n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF) return ImageFormat::jpeg;
  if (n >= 8 && std::memcmp(d, "\x89PNG\r\n\x1a\n", 8) == 0) return ImageFormat::png;
  return ImageFormat::unknown;
}

void decode_png(const uint8_t* data, size_t size, RgbImage& out, const std::string& name) {
  png_image img;
  std::memset(&img, 0, sizeof(img));
  img.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&img, data, size))
    TRAINER_FAIL(name, ": not a readable PNG: ", img.message);
  if (int64_t(img.width) * img.height > kMaxImagePixels || img.width == 0 || img.height == 0) {
    png_image_free(&img);
    TRAINER_FAIL(name, ": refusing a ", img.width, "x", img.height, " PNG (limit ", kMaxImagePixels, " pixels)");
  }
  img.format = PNG_FORMAT_RGB;
  out.width = static_cast<int>(img.width);
  out.height = static_cast<int>(img.height);
  out.pixels.resize(PNG_IMAGE_SIZE(img));
  // alpha is composited on black, as PIL's convert("RGB") drops it
  if (!png_image_finish_read(&img, nullptr, out.pixels.data(), 0, nullptr)) {
    const std::string why = img.message;
    png_image_free(&img);
    TRAINER_FAIL(name, ": corrupt PNG: ", why);
  }
}

namespace {
void check_pixel_limit(int w, int h, const std::string& name) {
  TRAINER_CHECK(w > 0 && h > 0 && int64_t(w) * h <= kMaxImagePixels, name, ": refusing a ", w, "x", h,
                " image (limit ", kMaxImagePixels, " pixels)");
}
}  // namespace

void read_image_size(JpegDecoder& jpeg, const uint8_t* data, size_t size, const std::string& name, int* w, int* h) {
  switch (sniff_format(data, size)) {
    case ImageFormat::jpeg: {
      const JpegInfo i = jpeg.read_info(data, size, name);
      *w = i.width;
      *h = i.height;
      return check_pixel_limit(*w, *h, name);
    }
    case ImageFormat::png: {
      png_image img;
      std::memset(&img, 0, sizeof(img));
      img.version = PNG_IMAGE_VERSION;
      if (!png_image_begin_read_from_memory(&img, data, size)) TRAINER_FAIL(name, ": not a readable PNG");
      *w = static_cast<int>(img.width);
      *h = static_cast<int>(img.height);
      png_image_free(&img);
      return check_pixel_limit(*w, *h, name);
    }
    case ImageFormat::unknown:
      break;
  }
  TRAINER_FAIL(name, ": not a JPEG or PNG file (", size, " bytes)");
}

}  // namespace trainer
