// libjpeg's error plumbing shared by the decoder and the encoders: an error longjmps back to the caller's setjmp
// with the library's message; the first warning (corrupt data libjpeg would otherwise decode on) is kept so that
// the caller can refuse the file.
#pragma once
#include <csetjmp>
#include <cstdio>
// jpeglib.h needs size_t and FILE declared first
#include <jerror.h>
#include <jpeglib.h>

namespace trainer::libjpeg {

struct ErrorMgr {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  int warnings;
};

inline void on_error(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<ErrorMgr*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}

inline void on_message(j_common_ptr cinfo, int level) {
  auto* e = reinterpret_cast<ErrorMgr*>(cinfo->err);
  if (level < 0 && e->warnings++ == 0) (*cinfo->err->format_message)(cinfo, e->message);  // keep the first
}

}  // namespace trainer::libjpeg
