// Image folders for loader tests, made from the fixture files of tests/data/make_images.py.
#pragma once
#include <string>

#include "core/fs.h"
#include "data/image_folder.h"
#include "test_support/test_support.h"

namespace trainer::test {

// dir/set/c<k>/<i>.jpg: `classes` x `per_class` copies of the fixture JPEGs (baseline, EXIF, odd size in turn)
inline ImageList jpeg_folder(TempDir& dir, int classes, int per_class) {
  const std::string fx = python_fixtures("data", "tests/data/make_images.py", "");
  const char* src[] = {"baseline.jpg", "exif.jpg", "odd.jpg"};
  for (int c = 0; c < classes; ++c) {
    const std::string d = dir.file("set/c" + std::to_string(c));
    fs::make_dirs(d);
    for (int i = 0; i < per_class; ++i)
      write_file(d + "/" + std::to_string(i) + ".jpg", read_file(fx + "/" + src[(i + c) % 3]));
  }
  return scan_image_folder(dir.file("set"));
}

}  // namespace trainer::test
