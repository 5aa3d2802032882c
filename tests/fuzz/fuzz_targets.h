// Fuzz targets for every reader of untrusted bytes: JPEG and PNG decode, IDX (and gzip), CIFAR, safetensors,
// checkpoints, TensorBoard records, list files, tar shards and their indexes, and the YAML config. Each takes one input; a clear trainer::Error is the
// expected answer to bad bytes, anything else (a crash, another exception, a hang, a huge allocation) is a finding.
// The same targets build two ways: with clang's libFuzzer (scripts/fuzz.sh, -fsanitize=fuzzer,address) and
// with any compiler into fuzz_smoke, a bounded mutation run over generated seeds that CI runs for each target.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace trainer::fuzz {

struct Target {
  const char* name;
  void (*run)(const uint8_t* data, size_t size);  // throws only trainer::Error for bad input
  std::vector<std::string> (*seeds)();            // valid inputs to start from
};

const std::vector<Target>& targets();
const Target* find_target(const std::string& name);

}  // namespace trainer::fuzz
