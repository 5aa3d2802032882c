// safetensors files (the format of timm/HF weights): 8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets}, "__metadata__": {str: str}}, then the raw little-endian tensor bytes.
// Read with bounds checks on every offset (hostile files are refused, never trusted); written atomically.
#pragma once
#include <torch/types.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace trainer {

struct SafeTensors {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;  // sorted by name, CPU, contiguous
  std::map<std::string, std::string> metadata;
};

// Throws Error naming the file and the entry on any malformed input.
SafeTensors read_safetensors(const std::string& path);
SafeTensors parse_safetensors(const uint8_t* data, size_t size, const std::string& name);
// Writes to path + ".tmp", fsyncs, renames over path.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace trainer
