// JPEG decoding with libjpeg-turbo's jpeglib API: one options struct (DCT scale, crop window), read_info /
// decode. Two tricks make training-time decode cheap: DCT-domain downscaling (1/2, 1/4, 1/8: the IDCT makes
// the smaller image directly) and crop-only decoding (jpeg_crop_scanline for columns, jpeg_skip_scanlines for
// rows: only the iMCU rows and columns of the crop window are entropy-decoded... and IDCT'd). Grayscale and
// CMYK/YCCK become RGB. Any libjpeg error or warning (corrupt or truncated data) throws Error.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace trainer {

struct JpegInfo {
  int width = 0, height = 0;  // full-resolution size
  int components = 0;         // 1 gray, 3 YCbCr/RGB, 4 CMYK/YCCK
};

struct Rect {
  int x = 0, y = 0, w = 0, h = 0;
};

struct JpegDecodeOptions {
  int scale_denom = 1;      // 1, 2, 4 or 8: decode at 1/scale_denom of full size
  bool crop = false;        // decode only `window` (in full-resolution pixels)
  Rect window;
  // With crop, where the file has restart markers that allow it (jpeg_cut.h): cut the window's MCUs out first
  // and entropy-decode only those. Same pixels; false decodes the ordinary way (tests compare the two).
  bool cut = true;
};

// An RGB image, rows of width*3 bytes.
struct RgbImage {
  int width = 0, height = 0;
  std::vector<uint8_t> pixels;  // (height, width, 3) uint8
};

// Largest 1/d (d in 8,4,2,1) that keeps a (w, h) region at least (min_w, min_h) pixels after scaling.
int pick_scale_denom(int w, int h, int min_w, int min_h);

class JpegDecoder {
 public:
  JpegDecoder();
  ~JpegDecoder();
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;

  // Header only. `name` labels errors (the file path).
  JpegInfo read_info(const uint8_t* data, size_t size, const std::string& name);
  // Decodes into `out`. With crop, the result covers window scaled by 1/scale_denom (rounded outwards to whole
  // pixels of the scaled image), so its size is about window.w/d x window.h/d.
  void decode(const uint8_t* data, size_t size, const JpegDecodeOptions& opt, RgbImage& out, const std::string& name);
  // Whether the last decode cut its window out of a file with restart markers (jpeg_cut.h).
  bool last_decode_was_cut() const;

 private:
  struct Impl;
  Impl* impl_;
};

// Refuses images larger than this many pixels (a hostile header cannot make us allocate gigabytes).
constexpr int64_t kMaxImagePixels = int64_t(1) << 28;

}  // namespace trainer
