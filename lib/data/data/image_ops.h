// Per-sample image work of the CPU pipeline, in DALI's two steps: draw the random parameters first
// (RandomResizedCrop window, flip: testable apart from pixels), then move pixels (decode the window, resize,
// flip) straight into the batch buffer.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/random.h"
#include "data/jpeg_decoder.h"

namespace trainer {

// torchvision's RandomResizedCrop.get_params: 10 tries of (area fraction in scale, log-uniform aspect in
// ratio), then the centre crop clamped to the ratio range.
Rect draw_rrc(SampleRng& rng, int width, int height, double scale_lo, double scale_hi, double ratio_lo,
              double ratio_hi);
// Eval: the window that "resize the shorter side to size/crop_pct, then centre-crop size" keeps, in the
// original image's pixels.
Rect center_crop_window(int width, int height, int size, double crop_pct);

// How wide resize_rgb's horizontal pass may go: best (two output pixels per AVX2 vector where the CPU has AVX2)
// or four lanes (SSE, one pixel at a time). Both give the same bytes; the choice exists for tests and A/B runs.
enum class ResizeSimd { best, four_lanes };

// The resize filter: bilinear (triangle, support 1) or bicubic (Keys' cubic with a = -0.5, support 2), as PIL and
// torchvision's antialiased resize define them.
enum class Interpolation { bilinear, bicubic };
Interpolation interpolation_from(const std::string& name);  // "bilinear" | "bicubic"; throws Error otherwise

// Where a resize takes its output from: output pixel (row i, column j) is centred on source point
// (x0 + (j + 0.5) * sx, y0 + (i + 0.5) * sy), in pixels of the source image, and the filter's taps stay inside
// `bounds` (PIL clips them at the edge of what it resizes: a crop then resized stops at the crop's edge, a crop of
// a resized image reaches over it).
struct ResizeMap {
  double x0 = 0, y0 = 0, sx = 1, sy = 1;
  Rect bounds;
};
// The window r resized to (dst_w x dst_h), its taps inside r: torchvision's crop then resize (RandomResizedCrop).
ResizeMap window_map(Rect r, int dst_w, int dst_h);
// Evaluation of a (width x height) image as torchvision's Resize(floor(size / crop_pct)) (the shorter side to that,
// the longer one truncated) then CenterCrop(size) (offsets rounded half to even, as Python's round): the resized
// image's size and the crop's corner in it.
struct EvalResize {
  int w = 0, h = 0, left = 0, top = 0;
};
EvalResize eval_resize(int width, int height, int size, double crop_pct);
// The same as a map: the crop taken on the resized grid, the taps reaching over its edge up to the image's.
ResizeMap eval_map(int width, int height, int size, double crop_pct);
// The source pixels a (dst_w x dst_h) resize through m can read: the part of the image a decode must hold.
Rect map_footprint(const ResizeMap& m, int dst_w, int dst_h, Interpolation filter);
// m for a decode of the image at 1/denom scale (DCT scaling), whose pixel (0, 0) is pixel `origin` of the scaled
// image and which is (width x height): the taps inside what was decoded.
ResizeMap map_into_decode(const ResizeMap& m, int denom, int origin_x, int origin_y, int width, int height);

// Antialiased resize of RGB uint8 (torchvision/PIL's filters, support widened by the scale when shrinking) of a
// (src_w x src_h) image through m -> (dst_w x dst_h), written row-major with dst_stride bytes per row. flip
// mirrors horizontally on the way.
void resize_rgb_mapped(const uint8_t* src, int src_w, int src_h, const ResizeMap& m, uint8_t* dst, int dst_w,
                       int dst_h, int dst_stride, bool flip, Interpolation filter = Interpolation::bilinear,
                       ResizeSimd simd = ResizeSimd::best);
// The same for the window r of the image (window_map).
inline void resize_rgb(const uint8_t* src, int src_w, int src_h, Rect r, uint8_t* dst, int dst_w, int dst_h,
                       int dst_stride, bool flip, Interpolation filter = Interpolation::bilinear,
                       ResizeSimd simd = ResizeSimd::best) {
  resize_rgb_mapped(src, src_w, src_h, window_map(r, dst_w, dst_h), dst, dst_w, dst_h, dst_stride, flip, filter, simd);
}

enum class ImageFormat { jpeg, png, unknown };
ImageFormat sniff_format(const uint8_t* data, size_t size);

// Decodes a whole PNG (any bit depth / palette / gray / alpha) to RGB. Throws Error naming `name`.
void decode_png(const uint8_t* data, size_t size, RgbImage& out, const std::string& name);
// Image size from the header (JPEG or PNG), without decoding pixels; refused (Error) past kMaxImagePixels.
void read_image_size(JpegDecoder& jpeg, const uint8_t* data, size_t size, const std::string& name, int* w, int* h);

}  // namespace trainer
