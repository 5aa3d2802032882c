// CIFAR-10 / CIFAR-100 in the "binary version" of the official archives: records of label byte(s) and a 32x32x3
// image stored channel-planar (1024 R, 1024 G, 1024 B). CIFAR-10: 1 label byte, train = data_batch_1..5.bin,
// eval = test_batch.bin. CIFAR-100: a coarse and a fine label byte (the fine one is used), train.bin / test.bin.
// Held in memory as (N,32,32,3) uint8 like the IDX sets.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "data/idx.h"

namespace trainer {

// Parses one file's bytes (`label_bytes` 1 for CIFAR-10, 2 for CIFAR-100); `name` labels errors.
InMemoryDataset parse_cifar(const uint8_t* data, size_t size, int label_bytes, const std::string& name);
// The split from <root>: split "train" or "test"; `variant` "cifar10" or "cifar100".
InMemoryDataset load_cifar_split(const std::string& root, const std::string& variant, const std::string& split);

}  // namespace trainer
