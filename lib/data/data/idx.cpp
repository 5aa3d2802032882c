#include "data/idx.h"

#include <zlib.h>

#include <torch/torch.h>

#include <cstring>

#include "core/check.h"
#include "core/fs.h"

namespace trainer {
namespace {

constexpr int64_t kMaxElements = int64_t(1) << 34;  // 16 G bytes: refuse absurd headers

std::string read_maybe_gz(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  TRAINER_CHECK(f, path, ": cannot open");
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  int err = 0;
  const char* msg = gzerror(f, &err);
  const std::string why = err != Z_OK && err != Z_STREAM_END ? std::string(msg) : std::string();
  gzclose(f);
  TRAINER_CHECK(n == 0 && why.empty(), path, ": read failed (corrupt gzip?): ", why);
  return out;
}

std::string find_split_file(const std::string& root, const std::string& stem) {
  for (const std::string& cand : {stem, stem + ".gz"}) {
    const std::string p = fs::join_path(root, cand);
    if (fs::exists(p)) return p;
  }
  TRAINER_FAIL("IDX file ", fs::join_path(root, stem), "[.gz] not found (hint: data.root and data.*_split; ",
               "Fashion-MNIST comes with Debian's dataset-fashion-mnist package)");
}

}  // namespace

torch::Tensor read_idx(const std::string& path) {
  const std::string bytes = read_maybe_gz(path);
  TRAINER_CHECK(bytes.size() >= 4, path, ": too short for an IDX header");
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  TRAINER_CHECK(p[0] == 0 && p[1] == 0 && p[2] == 0x08, path, ": not an IDX file of unsigned bytes (magic ",
                int(p[0]), ",", int(p[1]), ",", int(p[2]), ",", int(p[3]), "; expected 0,0,8,rank)");
  const int rank = p[3];
  TRAINER_CHECK(rank >= 1 && rank <= 4, path, ": IDX rank ", rank, " not in 1..4");
  TRAINER_CHECK(bytes.size() >= 4 + 4 * static_cast<size_t>(rank), path, ": truncated IDX header");
  std::vector<int64_t> dims;
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) {
    const uint8_t* d = p + 4 + 4 * i;
    const int64_t v = (int64_t(d[0]) << 24) | (int64_t(d[1]) << 16) | (int64_t(d[2]) << 8) | d[3];
    TRAINER_CHECK(v > 0 && n <= kMaxElements / v, path, ": implausible IDX dimension ", v);
    n *= v;
    dims.push_back(v);
  }
  const size_t header = 4 + 4 * static_cast<size_t>(rank);
  TRAINER_CHECK(bytes.size() - header == static_cast<size_t>(n), path, ": IDX data holds ", bytes.size() - header,
                " bytes but the header promises ", n, " (truncated?)");
  torch::Tensor t = torch::empty(dims, torch::kUInt8);
  std::memcpy(t.data_ptr(), p + header, static_cast<size_t>(n));
  return t;
}

InMemoryDataset load_idx_split(const std::string& root, const std::string& split) {
  TRAINER_CHECK(fs::is_dir(root), "data.root ", root, " is not a folder");
  const std::string ip = find_split_file(root, split + "-images-idx3-ubyte");
  const std::string lp = find_split_file(root, split + "-labels-idx1-ubyte");
  InMemoryDataset d;
  torch::Tensor images = read_idx(ip);
  TRAINER_CHECK(images.dim() == 3, ip, ": expected (N,H,W) images, got rank ", images.dim());
  d.images = images.unsqueeze(3).contiguous();
  d.labels = read_idx(lp).to(torch::kInt64);
  TRAINER_CHECK(d.labels.dim() == 1 && d.labels.size(0) == d.images.size(0), lp, ": ", d.labels.size(0),
                " labels for ", d.images.size(0), " images in ", ip);
  d.num_classes = d.labels.max().item<int64_t>() + 1;
  return d;
}

InMemoryDataset make_synthetic(int64_t n, int64_t size, int64_t channels, int64_t num_classes, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  InMemoryDataset d;
  d.labels = torch::randint(num_classes, {n}, gen, torch::kInt64);
  auto noise = torch::randint(0, 128, {n, size, size, channels}, gen, torch::kInt32);
  auto base = (d.labels * 127 / std::max<int64_t>(num_classes - 1, 1)).view({n, 1, 1, 1}).to(torch::kInt32);
  d.images = (noise + base).clamp(0, 255).to(torch::kUInt8);
  d.num_classes = num_classes;
  return d;
}

}  // namespace trainer
