// Walking a JPEG's header segments (the markers from SOI up to the first scan), for the code that reads or rewrites
// headers without libjpeg: the restart-interval cut (jpeg_cut.cpp) and the mosaic (jpeg_mosaic.cpp).
#pragma once
#include <cstddef>
#include <cstdint>

namespace trainer {
namespace jpeg_segments {

inline int be16(const uint8_t* p) { return (p[0] << 8) | p[1]; }

// The header segments from SOI on: seg(marker, its payload, its length field, its offset) for each until seg
// returns false (then true here); false where the data ends first or a segment is malformed.
template <class F> bool walk(const uint8_t* d, size_t n, F&& seg) {
  if (n < 4 || d[0] != 0xFF || d[1] != 0xD8) return false;
  for (size_t p = 2; p + 4 <= n;) {
    if (d[p] != 0xFF) return false;
    if (d[p + 1] == 0xFF) {  // fill byte
      ++p;
      continue;
    }
    const size_t len = static_cast<size_t>(be16(d + p + 2));
    if (len < 2 || p + 2 + len > n) return false;
    if (!seg(d[p + 1], d + p + 4, len, p)) return true;
    p += 2 + len;
  }
  return false;
}

}  // namespace jpeg_segments
}  // namespace trainer
