// Reading samples' encoded bytes: one sample into a vector, or a whole batch into one buffer that the caller
// provides (the GPU loader's pinned memory), every file read straight into its slice by a few threads: no buffer
// per file to allocate and fault in, no second copy. Errors name the sample.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "data/image_folder.h"

namespace trainer {

// A sample's byte count: a shard member's from the index, a file's from the file system (at most 1 GiB).
size_t sample_byte_size(const ImageSample& s);

// A sample's `size` bytes (sample_byte_size) into dst: the file, or its byte range of a shard (whose tar header is
// checked first). A file whose size is no longer `size` is an error, as is a short read.
void read_sample_into(const ImageSample& s, uint8_t* dst, size_t size);

// A sample's encoded bytes: the file, or its byte range of a shard (one pread).
void read_sample_bytes(const ImageSample& s, std::vector<uint8_t>& buf);

// A batch's files in one buffer. files[i] is {nullptr, 0} where sample i failed, and errors[i] says why.
struct BatchBytes {
  std::vector<std::pair<const uint8_t*, size_t>> files;
  std::vector<std::string> errors;
  size_t total = 0;                  // bytes read into the buffer
  double size_ms = 0, read_ms = 0;  // finding the sizes and taking the buffer; reading the files
};

// buffer(n) returns at least n bytes (n > 0) that stay valid while the batch's files are used.
BatchBytes read_batch(const std::vector<const ImageSample*>& samples, int threads,
                      const std::function<uint8_t*(size_t)>& buffer);

}  // namespace trainer
