#include "data/jpeg_decoder.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/check.h"
#include "data/internal/libjpeg_errors.h"
#include "data/jpeg_cut.h"

namespace trainer {

using libjpeg::ErrorMgr;
using libjpeg::on_error;
using libjpeg::on_message;

int pick_scale_denom(int w, int h, int min_w, int min_h) {
  for (int d : {8, 4, 2}) {
    // libjpeg rounds scaled sizes up; stay conservative and require the floor to be large enough
    if (w / d >= min_w && h / d >= min_h) return d;
  }
  return 1;
}

struct JpegDecoder::Impl {
  jpeg_decompress_struct cinfo;
  ErrorMgr err;
  std::vector<uint8_t> row;  // one scanline of the decoder's output
  std::vector<uint8_t> cut;  // the window cut out of a file with restart markers
  bool last_cut = false;
};

JpegDecoder::JpegDecoder() : impl_(new Impl) {
  impl_->cinfo.err = jpeg_std_error(&impl_->err.pub);
  impl_->err.pub.error_exit = on_error;
  impl_->err.pub.emit_message = on_message;
  jpeg_create_decompress(&impl_->cinfo);
}

JpegDecoder::~JpegDecoder() {
  jpeg_destroy_decompress(&impl_->cinfo);
  delete impl_;
}

JpegInfo JpegDecoder::read_info(const uint8_t* data, size_t size, const std::string& name) {
  jpeg_decompress_struct& c = impl_->cinfo;
  impl_->err.warnings = 0;
  if (setjmp(impl_->err.jump)) {
    jpeg_abort_decompress(&c);
    TRAINER_FAIL(name, ": not a readable JPEG: ", impl_->err.message);
  }
  TRAINER_CHECK(size > 0, name, ": empty file");
  jpeg_mem_src(&c, data, static_cast<unsigned long>(size));
  jpeg_read_header(&c, TRUE);
  JpegInfo info{static_cast<int>(c.image_width), static_cast<int>(c.image_height), c.num_components};
  jpeg_abort_decompress(&c);
  return info;
}

bool JpegDecoder::last_decode_was_cut() const { return impl_->last_cut; }

void JpegDecoder::decode(const uint8_t* data, size_t size, const JpegDecodeOptions& opt, RgbImage& out,
                         const std::string& name) {
  Rect at;
  if (opt.crop && opt.cut && opt.window.w > 0 && opt.window.h > 0 &&
      cut_jpeg_window(data, size, opt.window, opt.scale_denom, impl_->cut, &at)) {
    // the cut's origin is a multiple of the MCU size, hence of every scale: the same window, shifted
    JpegDecodeOptions o = opt;
    o.cut = false;
    o.window.x -= at.x;
    o.window.y -= at.y;
    decode(impl_->cut.data(), impl_->cut.size(), o, out, name);
    impl_->last_cut = true;
    return;
  }
  impl_->last_cut = false;
  jpeg_decompress_struct& c = impl_->cinfo;
  impl_->err.warnings = 0;
  if (setjmp(impl_->err.jump)) {
    jpeg_abort_decompress(&c);
    TRAINER_FAIL(name, ": corrupt JPEG: ", impl_->err.message);
  }
  TRAINER_CHECK(size > 0, name, ": empty file");
  jpeg_mem_src(&c, data, static_cast<unsigned long>(size));
  jpeg_read_header(&c, TRUE);
  const int64_t pixels = int64_t(c.image_width) * c.image_height;
  if (pixels <= 0 || pixels > kMaxImagePixels) {
    jpeg_abort_decompress(&c);
    TRAINER_FAIL(name, ": refusing a ", c.image_width, "x", c.image_height, " JPEG (limit ", kMaxImagePixels,
                 " pixels)");
  }
  const bool cmyk = c.jpeg_color_space == JCS_CMYK || c.jpeg_color_space == JCS_YCCK;
  c.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  const int d = opt.scale_denom;
  TRAINER_CHECK(d == 1 || d == 2 || d == 4 || d == 8, "scale_denom must be 1, 2, 4 or 8");
  c.scale_num = 1;
  c.scale_denom = static_cast<unsigned>(d);
  c.dct_method = JDCT_ISLOW;
  jpeg_start_decompress(&c);
  const int sw = static_cast<int>(c.output_width), sh = static_cast<int>(c.output_height);

  // the window in scaled pixels, rounded outwards and clipped
  int x0 = 0, y0 = 0, x1 = sw, y1 = sh;
  if (opt.crop) {
    TRAINER_CHECK(opt.window.w > 0 && opt.window.h > 0, name, ": empty crop window");
    x0 = std::clamp(opt.window.x / d, 0, sw - 1);
    y0 = std::clamp(opt.window.y / d, 0, sh - 1);
    x1 = std::clamp((opt.window.x + opt.window.w + d - 1) / d, x0 + 1, sw);
    y1 = std::clamp((opt.window.y + opt.window.h + d - 1) / d, y0 + 1, sh);
  }
  const int out_w = x1 - x0, out_h = y1 - y0;
  // columns: libjpeg widens the window to iMCU boundaries; remember where ours starts inside it
  JDIMENSION xoff = static_cast<JDIMENSION>(x0), cw = static_cast<JDIMENSION>(out_w);
  if (opt.crop && (x0 > 0 || out_w < sw)) jpeg_crop_scanline(&c, &xoff, &cw);
  const int skip_cols = x0 - static_cast<int>(xoff);
  const int comps = c.output_components;
  impl_->row.resize(static_cast<size_t>(cw) * comps);
  out.width = out_w;
  out.height = out_h;
  out.pixels.resize(static_cast<size_t>(out_w) * out_h * 3);
  if (y0 > 0) jpeg_skip_scanlines(&c, static_cast<JDIMENSION>(y0));
  const bool inverted = cmyk && c.saw_Adobe_marker;  // Adobe writes inverted CMYK
  for (int y = 0; y < out_h; ++y) {
    JSAMPROW rp = impl_->row.data();
    if (jpeg_read_scanlines(&c, &rp, 1) != 1) {
      jpeg_abort_decompress(&c);
      TRAINER_FAIL(name, ": truncated JPEG (row ", y0 + y, " of ", sh, ")");
    }
    uint8_t* dst = out.pixels.data() + static_cast<size_t>(y) * out_w * 3;
    const uint8_t* src = impl_->row.data() + static_cast<size_t>(skip_cols) * comps;
    if (!cmyk) {
      std::memcpy(dst, src, static_cast<size_t>(out_w) * 3);
    } else {
      for (int x = 0; x < out_w; ++x) {
        int C = src[4 * x], M = src[4 * x + 1], Y = src[4 * x + 2], K = src[4 * x + 3];
        if (!inverted) C = 255 - C, M = 255 - M, Y = 255 - Y, K = 255 - K;
        dst[3 * x] = static_cast<uint8_t>(C * K / 255);
        dst[3 * x + 1] = static_cast<uint8_t>(M * K / 255);
        dst[3 * x + 2] = static_cast<uint8_t>(Y * K / 255);
      }
    }
  }
  // done with our rows: abort instead of reading (or skipping) the rest of the image
  jpeg_abort_decompress(&c);
  if (impl_->err.warnings > 0) TRAINER_FAIL(name, ": corrupt JPEG data: ", impl_->err.message);
}

}  // namespace trainer
