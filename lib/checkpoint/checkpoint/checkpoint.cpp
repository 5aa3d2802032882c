#include "checkpoint/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/fs.h"
#include "core/strings.h"
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
  auto count = [&](const std::string& k) -> int64_t {
    const std::string v = get(k);
    char* end = nullptr;
    errno = 0;
    const long long n = std::strtoll(v.c_str(), &end, 10);
    TRAINER_CHECK(!v.empty() && *end == '\0' && errno == 0 && n >= 0, path, ": metadata '", k,
                  "' is not a count: '", v, "'");
    return n;
  };
  s.epoch = count("epoch");
  s.batch = count("batch");
  s.step = count("step");
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

BestCheckpoints::BestCheckpoints(std::string dir, std::string metric, int64_t keep)
    : dir_(std::move(dir)), metric_(std::move(metric)), keep_(keep) {}

std::string BestCheckpoints::path_for(double value, int64_t step) const {
  return fs::join_path(dir_, strprintf("best-%s-%011.6f-step-%010lld.safetensors", metric_.c_str(), value,
                                       static_cast<long long>(step)));
}

std::vector<std::pair<double, std::string>> BestCheckpoints::ranked() const {
  std::vector<std::pair<double, std::string>> out;
  if (!fs::is_dir(dir_)) return out;
  const std::string prefix = "best-" + metric_ + "-";
  for (const auto& f : fs::list_dir(dir_)) {
    if (f.rfind(prefix, 0) != 0 || f.size() < 12 || f.substr(f.size() - 12) != ".safetensors") continue;
    char* end = nullptr;
    const double v = std::strtod(f.c_str() + prefix.size(), &end);
    if (end == f.c_str() + prefix.size()) continue;
    out.emplace_back(v, fs::join_path(dir_, f));
  }
  const bool hi = higher_is_better();
  std::sort(out.begin(), out.end(), [hi](const auto& a, const auto& b) {
    if (a.first != b.first) return hi ? a.first > b.first : a.first < b.first;
    return a.second > b.second;  // ties: the later step first
  });
  return out;
}

bool BestCheckpoints::qualifies(double value) const {
  const auto r = ranked();
  if (static_cast<int64_t>(r.size()) < keep_) return true;
  const double worst = r[static_cast<size_t>(keep_ - 1)].first;
  return higher_is_better() ? value > worst : value < worst;
}

std::vector<std::string> BestCheckpoints::prune() const {
  std::vector<std::string> kept;
  const auto r = ranked();
  for (size_t i = 0; i < r.size(); ++i) {
    if (static_cast<int64_t>(i) < keep_) kept.push_back(r[i].second);
    else std::remove(r[i].second.c_str());
  }
  return kept;
}

}  // namespace trainer
