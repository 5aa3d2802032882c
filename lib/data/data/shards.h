// Packed shards, WebDataset-compatible: plain tar files whose members are `<key>.jpg` (or .jpeg/.png) and
// `<key>.cls` (the class index as text), so Python tools (tarfile, webdataset) read them as they are. Beside each
// `shard-NNNNNN.tar` a small text index `shard-NNNNNN.tar.idx` gives every sample's byte range and label, so the
// loader reads a sample with one pread and shuffles across shards freely. A shard without an index is scanned
// (headers only) at start-up; an index that does not parse, or does not match its tar, is an error before
// training starts.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/image_folder.h"

namespace trainer {

// Reads n bytes at offset into dst, or throws (short read).
using ReadAt = std::function<void(int64_t offset, size_t n, uint8_t* dst)>;

struct TarEntry {
  std::string name;
  int64_t offset = 0;  // of the data
  int64_t size = 0;
};

// Regular files of a tar of `size` bytes (ustar/v7 headers, GNU long names, pax path/size records). Errors name
// `name` and the header offset: bad checksum, a size past the end, a truncated archive.
std::vector<TarEntry> list_tar(const ReadAt& read, int64_t size, const std::string& name);

// Whether a 512-byte tar header's checksum field matches its bytes (readers check each sample's own header, so a
// damaged one is caught where the index bypasses the scan, as Python's tarfile would).
bool tar_header_checksum_ok(const uint8_t* header);

struct ShardSample {
  std::string key, ext;  // WebDataset: key = member path up to the first '.' of its base name
  int64_t offset = 0, size = 0;
  int64_t label = 0;
};

// Groups a tar's members into samples (an image and a .cls each); reads the .cls contents.
std::vector<ShardSample> index_tar(const ReadAt& read, int64_t size, const std::string& name);
std::string format_shard_index(const std::vector<ShardSample>& samples, int64_t tar_size);
// Checks every line and that the index was written for a tar of `tar_size` bytes.
std::vector<ShardSample> parse_shard_index(const std::string& text, const std::string& name, int64_t tar_size);

// Every *.tar of `dir` (sorted), as image samples with byte ranges; class names from dir/classes.txt if present.
ImageList scan_shards(const std::string& dir);

// Writes shards of at most max_samples samples / max_bytes bytes: <dir>/shard-NNNNNN.tar and its .idx, each
// written to a temporary name and renamed when complete.
class ShardWriter {
 public:
  ShardWriter(std::string dir, int64_t max_samples, int64_t max_bytes);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;
  void add(const std::string& key, const std::string& ext, const std::vector<uint8_t>& bytes, int64_t label);
  void finish();  // completes the last shard
  int64_t shards() const { return shard_; }
  int64_t bytes_written() const { return total_bytes_; }

 private:
  void open_shard();
  void close_shard();
  void write_member(const std::string& name, const uint8_t* data, size_t n);

  std::string dir_;
  int64_t max_samples_, max_bytes_;
  int64_t shard_ = 0, total_bytes_ = 0, pos_ = 0;
  FILE* f_ = nullptr;
  std::string tmp_path_, final_path_;
  std::vector<ShardSample> samples_;
};

}  // namespace trainer
