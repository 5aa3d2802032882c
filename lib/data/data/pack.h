// `trainer pack`: an ImageFolder or a list file into WebDataset-compatible tar shards with indexes (shards.h),
// optionally shrinking every image so its longer side is at most max_side and re-encoding it as JPEG at a given
// quality (decode cost falls with the pixel count: the FFCV trick). JPEGs kept at their size are rewritten
// losslessly with a restart marker after every MCU (same pixels; crop decoding then reads only the window's share
// of the coded data, jpeg_cut.h), unless restart_markers is off. Samples are shuffled by seed so a sequential
// reader (webdataset in Python) sees mixed classes. Unreadable images are skipped, counted and named.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace trainer {

struct PackOptions {
  std::string src;               // an ImageFolder root or a list file ("path,label" lines)
  std::string root;              // list files: paths relative to this (default: the list file's folder)
  std::string out;               // output folder (created)
  int64_t shard_samples = 5000;  // at most this many samples per shard
  int64_t shard_mb = 1024;       // and at most this many MiB
  int max_side = 0;              // > 0: shrink larger images to this longer side (re-encodes)
  int quality = 0;               // > 0: re-encode every image as JPEG at this quality; with max_side only: 90
  bool restart_markers = true;   // JPEGs: a restart marker after every MCU (lossless rewrite); false: bytes as read
  // JPEGs written (rewritten or re-encoded): the standard Huffman tables for every file, so that files of one
  // quality can be tiled into mosaics (data.gpu_decode_mosaic); false: tables fitted to each file (smaller)
  bool standard_huffman = false;
  bool shuffle = true;
  uint64_t seed = 0;
  int threads = 0;               // 0 = all cores
};

struct PackStats {
  int64_t samples = 0, shards = 0, skipped = 0, reencoded = 0;
  int64_t transcoded = 0;               // rewritten losslessly with restart markers
  int64_t bytes_in = 0, bytes_out = 0;  // image bytes read, tar bytes written
};

// `trainer pack` arguments (everything after the word pack). Throws ConfigError naming the bad option.
PackOptions parse_pack_args(const std::vector<std::string>& args);
std::string pack_usage();

PackStats pack_dataset(const PackOptions& opt, const std::function<void(int64_t done, int64_t total)>& progress = {});

}  // namespace trainer
