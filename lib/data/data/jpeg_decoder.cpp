#include "data/jpeg_decoder.h"

#include <csetjmp>
#include <cstdio>
// jpeglib.h needs size_t and FILE declared first
#include <jerror.h>
#include <jpeglib.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/check.h"
#include "data/jpeg_cut.h"

namespace trainer {

namespace {

struct ErrorMgr {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  int warnings;
};

void on_error(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<ErrorMgr*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}

void on_message(j_common_ptr cinfo, int level) {
  auto* e = reinterpret_cast<ErrorMgr*>(cinfo->err);
  if (level < 0 && e->warnings++ == 0) (*cinfo->err->format_message)(cinfo, e->message);  // keep the first
}

}  // namespace

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

namespace trainer {

void encode_jpeg(const RgbImage& img, int quality, std::vector<uint8_t>& out, const std::string& name,
                 int restart_mcus) {
  TRAINER_CHECK(img.width > 0 && img.height > 0 &&
                    img.pixels.size() == static_cast<size_t>(img.width) * img.height * 3,
                name, ": cannot encode a ", img.width, "x", img.height, " image");
  jpeg_compress_struct cinfo;
  ErrorMgr err;
  err.warnings = 0;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = on_error;
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  if (setjmp(err.jump)) {
    jpeg_destroy_compress(&cinfo);
    std::free(buf);
    TRAINER_FAIL(name, ": JPEG encode failed: ", err.message);
  }
  jpeg_create_compress(&cinfo);
  jpeg_mem_dest(&cinfo, &buf, &size);
  cinfo.image_width = static_cast<JDIMENSION>(img.width);
  cinfo.image_height = static_cast<JDIMENSION>(img.height);
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, std::clamp(quality, 1, 100), TRUE);
  cinfo.restart_interval = static_cast<unsigned>(std::max(0, restart_mcus));
  cinfo.optimize_coding = TRUE;  // Huffman tables fitted to the image: smaller files for one more pass here
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(img.pixels.data() + static_cast<size_t>(cinfo.next_scanline) * img.width * 3);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  out.assign(buf, buf + size);
  jpeg_destroy_compress(&cinfo);
  std::free(buf);
}

bool transcode_with_restarts(const uint8_t* data, size_t size, std::vector<uint8_t>& out, const std::string& name) {
  TRAINER_CHECK(size > 0, name, ": empty file");
  // one error manager for both ends: any libjpeg error or warning lands at the one setjmp below
  ErrorMgr err;
  err.warnings = 0;
  jpeg_decompress_struct src;
  jpeg_compress_struct dst;
  src.err = jpeg_std_error(&err.pub);
  dst.err = &err.pub;
  err.pub.error_exit = on_error;
  err.pub.emit_message = on_message;
  jpeg_create_decompress(&src);
  jpeg_create_compress(&dst);
  unsigned char* buf = nullptr;
  unsigned long n = 0;
  const auto release = [&] {
    jpeg_destroy_compress(&dst);
    jpeg_destroy_decompress(&src);
    std::free(buf);
  };
  if (setjmp(err.jump)) {
    release();
    TRAINER_FAIL(name, ": not a readable JPEG: ", err.message);
  }
  jpeg_mem_src(&src, data, static_cast<unsigned long>(size));
  jpeg_save_markers(&src, JPEG_COM, 0xFFFF);
  for (int m = 0; m < 16; ++m) jpeg_save_markers(&src, JPEG_APP0 + m, 0xFFFF);
  jpeg_read_header(&src, TRUE);
  // the decoder's pixel limit before any coefficient is read: libjpeg would allocate them all (a header claiming
  // 60000 x 60000 px took about 11 GB before failing)
  const int64_t pixels = int64_t(src.image_width) * src.image_height;
  if (pixels <= 0 || pixels > kMaxImagePixels) {
    const std::string size = str_cat(src.image_width, "x", src.image_height);
    release();
    TRAINER_FAIL(name, ": refusing a ", size, " JPEG (limit ", kMaxImagePixels, " pixels)");
  }
  const bool cmyk = src.jpeg_color_space == JCS_CMYK || src.jpeg_color_space == JCS_YCCK;
  if (cmyk || (src.num_components != 1 && src.num_components != 3)) {
    release();
    return false;
  }
  jvirt_barray_ptr* coefficients = jpeg_read_coefficients(&src);
  if (err.warnings > 0) {
    const std::string why = err.message;
    release();
    TRAINER_FAIL(name, ": corrupt JPEG data: ", why);
  }
  jpeg_copy_critical_parameters(&src, &dst);
  dst.optimize_coding = TRUE;
  dst.restart_interval = 1;
  jpeg_mem_dest(&dst, &buf, &n);
  jpeg_write_coefficients(&dst, coefficients);
  for (jpeg_saved_marker_ptr m = src.marker_list; m; m = m->next) {
    // libjpeg writes its own JFIF (APP0) and Adobe (APP14) headers where they apply: not twice
    const bool jfif = m->marker == JPEG_APP0 && m->data_length >= 5 && std::memcmp(m->data, "JFIF", 5) == 0;
    const bool adobe = m->marker == JPEG_APP0 + 14 && m->data_length >= 5 && std::memcmp(m->data, "Adobe", 5) == 0;
    if ((jfif && dst.write_JFIF_header) || (adobe && dst.write_Adobe_marker)) continue;
    jpeg_write_marker(&dst, m->marker, m->data, m->data_length);
  }
  jpeg_finish_compress(&dst);
  jpeg_finish_decompress(&src);
  out.assign(buf, buf + n);
  release();
  return true;
}

}  // namespace trainer
