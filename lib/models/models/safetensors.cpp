#include "models/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <torch/torch.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/fs.h"

namespace trainer {
namespace {

constexpr uint64_t kMaxHeader = 100ull << 20;  // 100 MB of JSON is already absurd

struct DtypeName {
  const char* name;
  torch::ScalarType type;
};
const DtypeName kDtypes[] = {
    {"F64", torch::kFloat64}, {"F32", torch::kFloat32}, {"F16", torch::kFloat16}, {"BF16", torch::kBFloat16},
    {"I64", torch::kInt64},   {"I32", torch::kInt32},   {"I16", torch::kInt16},   {"I8", torch::kInt8},
    {"U8", torch::kUInt8},    {"BOOL", torch::kBool},
};

torch::ScalarType dtype_from(const std::string& s, const std::string& where) {
  for (const auto& d : kDtypes)
    if (s == d.name) return d.type;
  TRAINER_FAIL(where, ": unsupported dtype '", s, "'");
}

const char* dtype_name(torch::ScalarType t) {
  for (const auto& d : kDtypes)
    if (t == d.type) return d.name;
  TRAINER_FAIL("cannot write dtype ", c10::toString(t), " to safetensors");
}

}  // namespace

SafeTensors parse_safetensors(const uint8_t* data, size_t size, const std::string& name) {
  TRAINER_CHECK(size >= 8, name, ": not a safetensors file (", size, " bytes, shorter than its 8-byte header length)");
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | data[i];
  TRAINER_CHECK(hlen <= kMaxHeader && hlen <= size - 8, name, ": header length ", hlen,
                " exceeds the file (", size, " bytes): truncated or not a safetensors file");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(data + 8, data + 8 + hlen);
  } catch (const std::exception& e) {
    TRAINER_FAIL(name, ": the JSON header does not parse: ", e.what());
  }
  TRAINER_CHECK(header.is_object(), name, ": the JSON header is not an object");
  const uint8_t* body = data + 8 + hlen;
  const uint64_t body_size = size - 8 - hlen;
  SafeTensors out;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string key = it.key();
    const auto& v = it.value();
    if (key == "__metadata__") {
      TRAINER_CHECK(v.is_object(), name, ": __metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m)
        if (m.value().is_string()) out.metadata[m.key()] = m.value().get<std::string>();
      continue;
    }
    const std::string where = str_cat(name, ": tensor '", key, "'");
    TRAINER_CHECK(v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"), where,
                  ": expected {dtype, shape, data_offsets}");
    TRAINER_CHECK(v["dtype"].is_string(), where, ": dtype is not a string");
    const auto type = dtype_from(v["dtype"].get<std::string>(), where);
    TRAINER_CHECK(v["shape"].is_array(), where, ": shape is not a list");
    std::vector<int64_t> shape;
    uint64_t numel = 1;
    for (const auto& d : v["shape"]) {
      TRAINER_CHECK(d.is_number_unsigned(), where, ": shape entries must be non-negative integers");
      const uint64_t n = d.get<uint64_t>();
      TRAINER_CHECK(n <= body_size && (n == 0 || numel <= body_size / n), where, ": shape is larger than the file");
      numel *= n;
      shape.push_back(static_cast<int64_t>(n));
    }
    const auto& off = v["data_offsets"];
    TRAINER_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(),
                  where, ": data_offsets must be [begin, end]");
    const uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
    TRAINER_CHECK(b <= e && e <= body_size, where, ": data_offsets [", b, ", ", e, "] outside the data (",
                  body_size, " bytes): truncated file?");
    const uint64_t bytes = numel * c10::elementSize(type);
    TRAINER_CHECK(e - b == bytes, where, ": data_offsets span ", e - b, " bytes but dtype x shape needs ", bytes);
    torch::Tensor t = torch::empty(shape, torch::TensorOptions().dtype(type));
    if (bytes) std::memcpy(t.data_ptr(), body + b, bytes);
    out.tensors.emplace_back(key, t);
  }
  return out;
}

SafeTensors read_safetensors(const std::string& path) {
  TRAINER_CHECK(!fs::is_dir(path), path, ": is a folder, expected a safetensors file");
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  TRAINER_CHECK(f.good(), path, ": cannot open (missing or unreadable)");
  const std::streamsize size = f.tellg();
  TRAINER_CHECK(size >= 0, path, ": cannot tell its size (not a regular file?)");
  f.seekg(0);
  std::vector<uint8_t> buf(static_cast<size_t>(size));
  TRAINER_CHECK(size == 0 || f.read(reinterpret_cast<char*>(buf.data()), size), path, ": read failed");
  return parse_safetensors(buf.data(), buf.size(), path);
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> cpu;
  uint64_t offset = 0;
  for (const auto& kv : tensors) {
    TRAINER_CHECK(!header.contains(kv.first), "duplicate tensor name '", kv.first, "'");
    torch::Tensor t = kv.second.detach().to(torch::kCPU).contiguous();
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    header[kv.first] = {{"dtype", dtype_name(t.scalar_type())},
                        {"shape", t.sizes().vec()},
                        {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    cpu.push_back(t);
  }
  std::string h = header.dump();
  while ((h.size() + 8) % 8) h += ' ';
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  TRAINER_CHECK(fd >= 0, tmp, ": cannot create: ", std::strerror(errno));
  auto write_all = [&](const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n) {
      ssize_t w = ::write(fd, c, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        const std::string why = std::strerror(errno);
        ::close(fd);
        ::unlink(tmp.c_str());
        TRAINER_FAIL(tmp, ": write failed: ", why);
      }
      c += w;
      n -= static_cast<size_t>(w);
    }
  };
  uint8_t len[8];
  uint64_t hl = h.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(hl >> (8 * i));
  write_all(len, 8);
  write_all(h.data(), h.size());
  for (const auto& t : cpu) write_all(t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size());
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!synced || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    TRAINER_FAIL(path, ": cannot finish writing: ", why);
  }
}

}  // namespace trainer
