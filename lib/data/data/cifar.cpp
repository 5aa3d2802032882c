#include "data/cifar.h"

#include <torch/torch.h>

#include <cstring>

#include "core/check.h"
#include "core/fs.h"

namespace trainer {

namespace {
constexpr int64_t kSide = 32, kPixels = kSide * kSide * 3;
}

InMemoryDataset parse_cifar(const uint8_t* data, size_t size, int label_bytes, const std::string& name) {
  TRAINER_CHECK(label_bytes == 1 || label_bytes == 2, "CIFAR label bytes must be 1 or 2");
  const size_t record = static_cast<size_t>(label_bytes + kPixels);
  TRAINER_CHECK(size > 0 && size % record == 0, name, ": ", size, " bytes is not a whole number of ", record,
                "-byte CIFAR-", label_bytes == 1 ? "10" : "100", " records (truncated, or the other variant?)");
  const int64_t n = static_cast<int64_t>(size / record);
  InMemoryDataset d;
  d.images = torch::empty({n, kSide, kSide, 3}, torch::kUInt8);
  d.labels = torch::empty({n}, torch::kInt64);
  auto* img = d.images.data_ptr<uint8_t>();
  auto* lab = d.labels.data_ptr<int64_t>();
  const int64_t classes = label_bytes == 1 ? 10 : 100;
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* r = data + static_cast<size_t>(i) * record;
    const int64_t label = r[label_bytes - 1];  // CIFAR-100: the fine label follows the coarse one
    TRAINER_CHECK(label < classes, name, ": record ", i, " has label ", label, ", expected 0..", classes - 1);
    lab[i] = label;
    const uint8_t* px = r + label_bytes;
    uint8_t* out = img + i * kPixels;
    for (int64_t p = 0; p < kSide * kSide; ++p)  // planar RGB -> interleaved HWC
      for (int c = 0; c < 3; ++c) out[p * 3 + c] = px[c * kSide * kSide + p];
  }
  d.num_classes = classes;
  return d;
}

InMemoryDataset load_cifar_split(const std::string& root, const std::string& variant, const std::string& split) {
  TRAINER_CHECK(variant == "cifar10" || variant == "cifar100", "unknown CIFAR variant '", variant, "'");
  TRAINER_CHECK(split == "train" || split == "test", "CIFAR split must be train or test, got '", split, "'");
  TRAINER_CHECK(fs::is_dir(root), "data.root ", root, " is not a folder");
  std::vector<std::string> files;
  if (variant == "cifar10") {
    if (split == "train")
      for (int i = 1; i <= 5; ++i) files.push_back("data_batch_" + std::to_string(i) + ".bin");
    else
      files.push_back("test_batch.bin");
  } else {
    files.push_back(split + ".bin");
  }
  std::vector<torch::Tensor> images, labels;
  for (const auto& f : files) {
    const std::string path = fs::join_path(root, f);
    TRAINER_CHECK(fs::exists(path), path, " missing (expected the binary version of ", variant, " in data.root)");
    const std::string bytes = fs::read_text(path);
    InMemoryDataset part = parse_cifar(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                                       variant == "cifar10" ? 1 : 2, path);
    images.push_back(part.images);
    labels.push_back(part.labels);
  }
  InMemoryDataset d;
  d.images = torch::cat(images);
  d.labels = torch::cat(labels);
  d.num_classes = variant == "cifar10" ? 10 : 100;
  return d;
}

}  // namespace trainer
