// File-based sources: an ImageFolder (one sub-folder per class; class index = position of the folder name in
// sorted order, as torchvision) or a list file ("path,label" per line, paths relative to a root).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace trainer {

struct ImageSample {
  std::string path;   // absolute or relative to the working folder (a shard: the tar)
  int64_t label = 0;
  int64_t offset = -1;  // a shard member: its bytes [offset, offset + size) of `path`; -1 = the whole file
  int64_t size = 0;
  std::string key;      // a shard member's key, for messages
  // How errors name the sample: the path, or "shard.tar:key".
  std::string name() const { return offset < 0 ? path : path + ":" + key; }
};

struct ImageList {
  std::vector<ImageSample> samples;
  std::vector<std::string> classes;  // index -> name (ImageFolder); empty for list files
};

// Errors before training starts: a missing root, no class folders, an empty class folder.
ImageList scan_image_folder(const std::string& root);
// Each non-empty, non-# line: "relative/path.jpg,label". Errors name the file and line.
ImageList read_list_file(const std::string& list_path, const std::string& root);

}  // namespace trainer
