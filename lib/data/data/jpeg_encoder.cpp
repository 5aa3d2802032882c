#include "data/jpeg_encoder.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/check.h"
#include "data/internal/libjpeg_errors.h"

namespace trainer {

using libjpeg::ErrorMgr;
using libjpeg::on_error;
using libjpeg::on_message;

void encode_jpeg(const RgbImage& img, int quality, std::vector<uint8_t>& out, const std::string& name,
                 int restart_mcus, HuffmanTables tables) {
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
  cinfo.optimize_coding = tables == HuffmanTables::fitted;  // fitted: smaller files for one more pass here
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

bool transcode_with_restarts(const uint8_t* data, size_t size, std::vector<uint8_t>& out, const std::string& name,
                             int restart_mcus, HuffmanTables tables) {
  TRAINER_CHECK(size > 0, name, ": empty file");
  TRAINER_CHECK(restart_mcus >= 1, "transcode_with_restarts: restart_mcus must be at least 1");
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
  jpeg_copy_critical_parameters(&src, &dst);  // and libjpeg's defaults: the standard Huffman tables
  dst.optimize_coding = tables == HuffmanTables::fitted;
  dst.restart_interval = static_cast<unsigned>(restart_mcus);
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
