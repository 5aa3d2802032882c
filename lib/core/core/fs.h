// File-system helpers on POSIX calls. Not std::filesystem: libtorch.so exports its own copies of some
// std::filesystem symbols, which interpose on libstdc++'s and crash (seen: remove_all) in torch processes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace trainer::fs {

bool exists(const std::string& path);
bool is_dir(const std::string& path);
// mkdir -p; throws Error naming the path and the reason.
void make_dirs(const std::string& path);
// rm -rf; missing paths are fine.
void remove_tree(const std::string& path);
// Entry names (not paths) in a folder, sorted; throws Error when it cannot be read.
std::vector<std::string> list_dir(const std::string& path);
int64_t file_size(const std::string& path);  // -1 when missing
std::string join_path(const std::string& a, const std::string& b);
std::string parent_path(const std::string& path);
// path from the root: an existing one resolved (links, ".."), else the working directory joined in front.
std::string absolute_path(const std::string& path);
// Writes text to path atomically (temp file, fsync, rename).
void write_text_atomic(const std::string& path, const std::string& text);
std::string read_text(const std::string& path);
// Reads n bytes at offset from an open file descriptor (retrying short reads); returns the bytes read, less
// than n only at the end of the file or on an error.
size_t pread_full(int fd, int64_t offset, size_t n, uint8_t* dst);
// Whether a folder accepts new files (creates and removes a probe file).
bool is_writable_dir(const std::string& path);

}  // namespace trainer::fs
