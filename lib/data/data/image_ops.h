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

// Antialiased resize of RGB uint8 (torchvision/PIL's filters, support widened by the scale when shrinking), src
// region `r` of a (src_w x src_h) image -> (dst_w x dst_h), written row-major with dst_stride bytes per row. flip
// mirrors horizontally on the way.
void resize_rgb(const uint8_t* src, int src_w, int src_h, Rect r, uint8_t* dst, int dst_w, int dst_h, int dst_stride,
                bool flip, Interpolation filter = Interpolation::bilinear, ResizeSimd simd = ResizeSimd::best);

enum class ImageFormat { jpeg, png, unknown };
ImageFormat sniff_format(const uint8_t* data, size_t size);

// Decodes a whole PNG (any bit depth / palette / gray / alpha) to RGB. Throws Error naming `name`.
void decode_png(const uint8_t* data, size_t size, RgbImage& out, const std::string& name);
// Image size from the header (JPEG or PNG), without decoding pixels; refused (Error) past kMaxImagePixels.
void read_image_size(JpegDecoder& jpeg, const uint8_t* data, size_t size, const std::string& name, int* w, int* h);

}  // namespace trainer
