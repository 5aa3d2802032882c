#include "checkpoint/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/fs.h"
#include "core/log.h"
#include "models/safetensors.h"

namespace trainer {
namespace {

uint32_t tensors_crc(const std::vector<std::pair<std::string, torch::Tensor>>& tensors) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (const auto& kv : tensors) {
    crc = crc32(crc, reinterpret_cast<const Bytef*>(kv.first.data()), static_cast<uInt>(kv.first.size()));
    torch::Tensor t = kv.second.detach().to(torch::kCPU).contiguous();
    const size_t n = static_cast<size_t>(t.numel()) * t.element_size();
    const auto* p = static_cast<const Bytef*>(t.data_ptr());
    for (size_t off = 0; off < n; off += (1u << 30))
      crc = crc32(crc, p + off, static_cast<uInt>(std::min<size_t>(n - off, 1u << 30)));
  }
  return static_cast<uint32_t>(crc);
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

}  // namespace

void write_checkpoint(const std::string& path, const CheckpointState& s) {
  // tensors sorted by name: the checksum is computed in the order the reader sees them
  auto tensors = s.tensors;
  std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::map<std::string, std::string> meta = s.extra;
  meta["magic"] = kCheckpointMagic;
  meta["version"] = std::to_string(kCheckpointVersion);
  meta["epoch"] = std::to_string(s.epoch);
  meta["batch"] = std::to_string(s.batch);
  meta["step"] = std::to_string(s.step);
  meta["config"] = s.config_yaml;
  meta["crc32"] = std::to_string(tensors_crc(tensors));
  write_safetensors(path, tensors, meta);
  fsync_dir(fs::parent_path(path));
}

CheckpointState read_checkpoint(const std::string& path) {
  SafeTensors st = read_safetensors(path);
  auto get = [&](const std::string& k) -> std::string {
    auto it = st.metadata.find(k);
    TRAINER_CHECK(it != st.metadata.end(), path, ": not a trainer checkpoint (no '", k, "' in its metadata)");
    return it->second;
  };
  TRAINER_CHECK(get("magic") == kCheckpointMagic, path, ": not a trainer checkpoint (magic '", get("magic"), "')");
  TRAINER_CHECK(get("version") == std::to_string(kCheckpointVersion), path, ": checkpoint format version ",
                get("version"), ", this trainer reads version ", kCheckpointVersion);
  const std::string want = get("crc32");
  const std::string got = std::to_string(tensors_crc(st.tensors));
  TRAINER_CHECK(want == got, path, ": checksum mismatch (stored ", want, ", computed ", got, "): corrupt file");
  CheckpointState s;
  s.tensors = std::move(st.tensors);
  s.epoch = std::stoll(get("epoch"));
  s.batch = std::stoll(get("batch"));
  s.step = std::stoll(get("step"));
  s.config_yaml = get("config");
  for (auto& kv : st.metadata)
    if (kv.first != "magic" && kv.first != "version" && kv.first != "epoch" && kv.first != "batch" &&
        kv.first != "step" && kv.first != "config" && kv.first != "crc32")
      s.extra[kv.first] = kv.second;
  return s;
}

std::string CheckpointDir::path_for(int64_t step) const {
  char name[64];
  std::snprintf(name, sizeof(name), "ckpt-%010lld.safetensors", static_cast<long long>(step));
  return fs::join_path(dir_, name);
}

std::vector<std::string> CheckpointDir::list() const {
  std::vector<std::string> out;
  if (!fs::is_dir(dir_)) return out;
  for (const auto& n : fs::list_dir(dir_))  // sorted; zero-padded steps sort by step
    if (starts_with(n, "ckpt-") && ends_with(n, ".safetensors")) out.push_back(fs::join_path(dir_, n));
  return out;
}

std::string CheckpointDir::latest_valid() const {
  auto all = list();
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      read_checkpoint(*it);
      return *it;
    } catch (const Error& e) {
      log::warn("skipping checkpoint that does not verify: ", e.what());
    }
  }
  return "";
}

void CheckpointDir::prune(int64_t keep) const {
  auto all = list();
  for (size_t i = 0; i + static_cast<size_t>(std::max<int64_t>(keep, 1)) < all.size(); ++i) std::remove(all[i].c_str());
}

}  // namespace trainer
