#include "data/image_folder.h"

#include <fstream>

#include "core/check.h"
#include "core/fs.h"
#include "core/strings.h"

namespace trainer {

namespace {
bool is_image_name(const std::string& n) {
  const std::string l = to_lower(n);
  return ends_with(l, ".jpg") || ends_with(l, ".jpeg") || ends_with(l, ".png");
}
}  // namespace

ImageList scan_image_folder(const std::string& root) {
  TRAINER_CHECK(fs::is_dir(root), "image folder ", root, " does not exist or is not a folder (hint: data.root)");
  ImageList out;
  for (const auto& name : fs::list_dir(root))
    if (fs::is_dir(fs::join_path(root, name))) out.classes.push_back(name);
  TRAINER_CHECK(!out.classes.empty(), "image folder ", root, " has no class sub-folders (expected root/<class>/*.jpg)");
  for (size_t c = 0; c < out.classes.size(); ++c) {
    const std::string dir = fs::join_path(root, out.classes[c]);
    size_t before = out.samples.size();
    for (const auto& f : fs::list_dir(dir))
      if (is_image_name(f)) {
        ImageSample smp;
        smp.path = fs::join_path(dir, f);
        smp.label = static_cast<int64_t>(c);
        out.samples.push_back(std::move(smp));
      }
    TRAINER_CHECK(out.samples.size() > before, "class folder ", dir, " holds no .jpg/.jpeg/.png file");
  }
  return out;
}

ImageList read_list_file(const std::string& list_path, const std::string& root) {
  std::ifstream f(list_path);
  TRAINER_CHECK(f.good(), "list file ", list_path, " cannot be read");
  ImageList out;
  std::string line;
  int lineno = 0;
  while (std::getline(f, line)) {
    ++lineno;
    line = trim(line);
    if (line.empty() || line[0] == '#') continue;
    const size_t comma = line.rfind(',');
    TRAINER_CHECK(comma != std::string::npos && comma > 0, list_path, ":", lineno, ": expected 'path,label', got '",
                  line, "'");
    int64_t label = -1;
    try {
      size_t pos = 0;
      label = std::stoll(trim(line.substr(comma + 1)), &pos);
    } catch (...) {
    }
    TRAINER_CHECK(label >= 0, list_path, ":", lineno, ": label must be a non-negative integer, got '",
                  line.substr(comma + 1), "'");
    ImageSample smp;
    smp.path = fs::join_path(root, trim(line.substr(0, comma)));
    smp.label = label;
    out.samples.push_back(std::move(smp));
  }
  TRAINER_CHECK(!out.samples.empty(), "list file ", list_path, " names no samples");
  return out;
}

}  // namespace trainer
