#include "observe/tfevents.h"

#include <sys/time.h>
#include <unistd.h>

#include <cstring>

#include "core/check.h"
#include "core/fs.h"

namespace trainer {

// ---- CRC-32C (Castagnoli), reflected polynomial 0x82F63B78, table-driven ----
namespace {
struct Crc32cTable {
  uint32_t t[256];
  Crc32cTable() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
  }
};
}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  static const Crc32cTable table;
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table.t[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

// ---- protobuf wire format, just what Event and Summary need ----
namespace {
void varint(std::string& s, uint64_t v) {
  while (v >= 0x80) {
    s.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  s.push_back(static_cast<char>(v));
}
void key(std::string& s, int field, int wire) { varint(s, static_cast<uint64_t>(field) << 3 | wire); }
void fixed64(std::string& s, int field, double v) {
  key(s, field, 1);
  char b[8];
  std::memcpy(b, &v, 8);  // little-endian hosts (x86-64, aarch64)
  s.append(b, 8);
}
void fixed32(std::string& s, int field, float v) {
  key(s, field, 5);
  char b[4];
  std::memcpy(b, &v, 4);
  s.append(b, 4);
}
void bytes(std::string& s, int field, const std::string& v) {
  key(s, field, 2);
  varint(s, v.size());
  s += v;
}
double wall_time() {
  timeval tv{};
  ::gettimeofday(&tv, nullptr);
  return static_cast<double>(tv.tv_sec) + tv.tv_usec * 1e-6;
}
// Event: wall_time = 1 (double), step = 2 (int64), file_version = 3 (string), summary = 5 (Summary)
std::string event_header(int64_t step) {
  std::string e;
  fixed64(e, 1, wall_time());
  key(e, 2, 0);
  varint(e, static_cast<uint64_t>(step));
  return e;
}
}  // namespace

EventWriter::EventWriter(const std::string& dir) {
  char host[256] = "localhost";
  ::gethostname(host, sizeof(host) - 1);
  path_ = fs::join_path(dir, str_cat("events.out.tfevents.", static_cast<long long>(wall_time()), ".", host));
  f_ = std::fopen(path_.c_str(), "ab");
  TRAINER_CHECK(f_, "cannot create the TensorBoard event file ", path_, ": ", std::strerror(errno));
  std::string e = event_header(0);
  bytes(e, 3, "brain.Event:2");
  record(e);
  flush();
}

EventWriter::~EventWriter() {
  if (f_) std::fclose(f_);
}

void EventWriter::scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  // Summary: repeated Value value = 1; Value: tag = 1 (string), simple_value = 2 (float)
  std::string summary;
  for (const auto& [tag, v] : values) {
    std::string value;
    bytes(value, 1, tag);
    fixed32(value, 2, static_cast<float>(v));
    bytes(summary, 1, value);
  }
  std::string e = event_header(step);
  bytes(e, 5, summary);
  record(e);
}

void EventWriter::session_start(int64_t step) {
  // Event.session_log = 7; SessionLog: status = 1 (START = 1)
  std::string log;
  key(log, 1, 0);
  varint(log, 1);
  std::string e = event_header(step);
  bytes(e, 7, log);
  record(e);
  flush();
}

void EventWriter::flush() {
  if (f_) std::fflush(f_);
}

void EventWriter::record(const std::string& event) {
  const uint64_t len = event.size();
  char head[12];
  std::memcpy(head, &len, 8);
  const uint32_t len_crc = masked_crc32c(head, 8);
  std::memcpy(head + 8, &len_crc, 4);
  const uint32_t data_crc = masked_crc32c(event.data(), event.size());
  const bool ok = std::fwrite(head, 1, 12, f_) == 12 && std::fwrite(event.data(), 1, event.size(), f_) == event.size() &&
                  std::fwrite(&data_crc, 1, 4, f_) == 4;
  TRAINER_CHECK(ok, "writing the TensorBoard event file ", path_, " failed: ", std::strerror(errno));
}

std::vector<std::string> read_tfrecords(const std::string& path) {
  const std::string data = fs::read_text(path);
  std::vector<std::string> out;
  size_t off = 0;
  while (off < data.size()) {
    TRAINER_CHECK(data.size() - off >= 12, path, ": truncated frame header at offset ", off);
    uint64_t len;
    uint32_t len_crc;
    std::memcpy(&len, data.data() + off, 8);
    std::memcpy(&len_crc, data.data() + off + 8, 4);
    TRAINER_CHECK(len_crc == masked_crc32c(data.data() + off, 8), path, ": bad length checksum at offset ", off);
    TRAINER_CHECK(len <= data.size() - off - 12 && data.size() - off - 12 - len >= 4, path,
                  ": frame at offset ", off, " runs past the end of the file");
    std::string event = data.substr(off + 12, len);
    uint32_t data_crc;
    std::memcpy(&data_crc, data.data() + off + 12 + len, 4);
    TRAINER_CHECK(data_crc == masked_crc32c(event.data(), event.size()), path, ": bad data checksum at offset ", off);
    out.push_back(std::move(event));
    off += 12 + len + 4;
  }
  return out;
}

}  // namespace trainer
