#include "data/shards.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>

#include "core/check.h"
#include "core/fs.h"
#include "core/log.h"
#include "core/strings.h"

namespace trainer {
namespace {

constexpr int64_t kBlock = 512;

// Octal field (spaces/NULs around), or GNU base-256 when the top bit of the first byte is set.
int64_t parse_number(const uint8_t* f, int len, bool* ok) {
  *ok = true;
  if (f[0] & 0x80) {
    int64_t v = f[0] & 0x3f;
    for (int i = 1; i < len; ++i) {
      if (v > (INT64_MAX >> 8)) return *ok = false, 0;
      v = (v << 8) | f[i];
    }
    return v;
  }
  int i = 0;
  while (i < len && (f[i] == ' ' || f[i] == 0)) ++i;
  int64_t v = 0;
  int digits = 0;
  for (; i < len && f[i] >= '0' && f[i] <= '7'; ++i, ++digits) {
    if (v > (INT64_MAX >> 3)) return *ok = false, 0;
    v = v * 8 + (f[i] - '0');
  }
  for (; i < len; ++i)
    if (f[i] != ' ' && f[i] != 0) *ok = false;
  return v;
}

std::string field_string(const uint8_t* f, int len) {
  int n = 0;
  while (n < len && f[n]) ++n;
  return std::string(reinterpret_cast<const char*>(f), static_cast<size_t>(n));
}


// pax extended header records: "<len> key=value\n"
void parse_pax(const std::string& data, std::string* path, int64_t* size, bool* has_size, const std::string& where) {
  size_t pos = 0;
  while (pos < data.size()) {
    size_t sp = data.find(' ', pos);
    TRAINER_CHECK(sp != std::string::npos && sp > pos && sp - pos < 20, where, ": malformed pax record");
    int64_t len = 0;
    for (size_t i = pos; i < sp; ++i) {
      TRAINER_CHECK(data[i] >= '0' && data[i] <= '9', where, ": malformed pax record length");
      len = len * 10 + (data[i] - '0');
    }
    TRAINER_CHECK(len > static_cast<int64_t>(sp - pos) + 1 && pos + static_cast<size_t>(len) <= data.size() &&
                      data[pos + static_cast<size_t>(len) - 1] == '\n',
                  where, ": malformed pax record");
    const std::string rec = data.substr(sp + 1, static_cast<size_t>(len) - (sp - pos) - 2);
    const size_t eq = rec.find('=');
    TRAINER_CHECK(eq != std::string::npos, where, ": pax record without '='");
    const std::string k = rec.substr(0, eq), v = rec.substr(eq + 1);
    if (k == "path") *path = v;
    if (k == "size") {
      int64_t n = 0;
      TRAINER_CHECK(!v.empty() && v.size() < 19 && std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }),
                    where, ": bad pax size '", v, "'");
      for (char c : v) n = n * 10 + (c - '0');
      *size = n;
      *has_size = true;
    }
    pos += static_cast<size_t>(len);
  }
}

bool is_image_ext(const std::string& e) { return e == "jpg" || e == "jpeg" || e == "png"; }

ReadAt file_reader(const std::string& path, int* fd_out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TRAINER_CHECK(fd >= 0, path, ": cannot open");
  *fd_out = fd;
  return [fd, path](int64_t off, size_t n, uint8_t* dst) {
    const size_t got = fs::pread_full(fd, off, n, dst);
    TRAINER_CHECK(got == n, path, ": short read at byte ", off + static_cast<int64_t>(got));
  };
}

}  // namespace

bool tar_header_checksum_ok(const uint8_t* h) {
  bool ok = false;
  const int64_t stored = parse_number(h + 148, 8, &ok);
  if (!ok) return false;
  int64_t sum = 0;
  for (int i = 0; i < kBlock; ++i) sum += (i >= 148 && i < 156) ? ' ' : h[i];
  return sum == stored;
}

std::vector<TarEntry> list_tar(const ReadAt& read, int64_t size, const std::string& name) {
  std::vector<TarEntry> out;
  uint8_t h[kBlock];
  int64_t pos = 0;
  std::string long_name, pax_path;
  int64_t pax_size = 0;
  bool pax_has_size = false;
  while (true) {
    if (pos + kBlock > size) {
      TRAINER_CHECK(pos == size, name, ": truncated tar (a partial header at byte ", pos, ")");
      break;  // no end-of-archive blocks: tolerated, as tar does
    }
    read(pos, kBlock, h);
    if (std::all_of(h, h + kBlock, [](uint8_t b) { return b == 0; })) break;  // end of archive
    const std::string where = str_cat(name, ": tar header at byte ", pos);
    TRAINER_CHECK(tar_header_checksum_ok(h), where, ": bad checksum (not a tar file, or corrupt)");
    bool ok = false;
    int64_t n = parse_number(h + 124, 12, &ok);
    TRAINER_CHECK(ok, where, ": bad size field");
    if (pax_has_size) n = pax_size;
    const int64_t data = pos + kBlock;
    TRAINER_CHECK(n >= 0 && n <= size - data, where, ": member of ", n, " bytes runs past the end of the ",
                  size, "-byte file (truncated?)");
    const char type = static_cast<char>(h[156]);
    std::string member = field_string(h, 100);
    const std::string prefix = field_string(h + 345, 155);
    if (std::memcmp(h + 257, "ustar", 5) == 0 && !prefix.empty()) member = prefix + "/" + member;
    if (type == 'L' || type == 'x') {
      TRAINER_CHECK(n <= (1 << 20), where, ": a ", n, "-byte extended header is implausible");
      std::string text(static_cast<size_t>(n), '\0');
      if (n) read(data, static_cast<size_t>(n), reinterpret_cast<uint8_t*>(&text[0]));
      if (type == 'L') {
        long_name = field_string(reinterpret_cast<const uint8_t*>(text.data()), static_cast<int>(text.size()));
      } else {
        parse_pax(text, &pax_path, &pax_size, &pax_has_size, where);
      }
    } else {
      if (type == '0' || type == '\0' || type == '7') {
        if (!long_name.empty()) member = long_name;
        if (!pax_path.empty()) member = pax_path;
        out.push_back({member, data, n});
      }
      long_name.clear();
      pax_path.clear();
      pax_has_size = false;
    }
    pos = data + (n + kBlock - 1) / kBlock * kBlock;
  }
  return out;
}

std::vector<ShardSample> index_tar(const ReadAt& read, int64_t size, const std::string& name) {
  std::vector<ShardSample> out;
  std::map<std::string, size_t> by_key;
  std::vector<bool> has_image, has_label;
  for (const TarEntry& e : list_tar(read, size, name)) {
    const size_t slash = e.name.rfind('/');
    const size_t dot = e.name.find('.', slash == std::string::npos ? 0 : slash + 1);
    if (dot == std::string::npos) continue;
    const std::string key = e.name.substr(0, dot), ext = to_lower(e.name.substr(dot + 1));
    if (!is_image_ext(ext) && ext != "cls") continue;  // other fields (json, txt, ...) are not ours
    auto it = by_key.find(key);
    if (it == by_key.end()) {
      it = by_key.emplace(key, out.size()).first;
      out.push_back({key, "", 0, 0, -1});
      has_image.push_back(false);
      has_label.push_back(false);
    }
    ShardSample& s = out[it->second];
    if (ext == "cls") {
      TRAINER_CHECK(e.size > 0 && e.size <= 32, name, ": ", e.name, ": a .cls member holds the class index as text, ",
                    "got ", e.size, " bytes");
      char buf[33] = {0};
      read(e.offset, static_cast<size_t>(e.size), reinterpret_cast<uint8_t*>(buf));
      std::string text = trim(std::string(buf, static_cast<size_t>(e.size)));
      TRAINER_CHECK(!text.empty() && text.size() < 12 &&
                        std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }),
                    name, ": ", e.name, ": expected a class index, got '", text, "'");
      s.label = std::stoll(text);
      has_label[it->second] = true;
    } else {
      TRAINER_CHECK(!has_image[it->second], name, ": key '", key, "' has two images");
      s.ext = ext;
      s.offset = e.offset;
      s.size = e.size;
      has_image[it->second] = true;
    }
  }
  for (size_t i = 0; i < out.size(); ++i) {
    TRAINER_CHECK(has_image[i], name, ": key '", out[i].key, "' has a label but no .jpg/.jpeg/.png image");
    TRAINER_CHECK(has_label[i], name, ": key '", out[i].key, "' has an image but no .cls label");
  }
  return out;
}

std::string format_shard_index(const std::vector<ShardSample>& samples, int64_t tar_size) {
  std::ostringstream o;
  o << "trainer-shard-index 1 " << samples.size() << " " << tar_size << "\n";
  for (const auto& s : samples) o << s.offset << " " << s.size << " " << s.label << " " << s.key << "." << s.ext << "\n";
  return o.str();
}

std::vector<ShardSample> parse_shard_index(const std::string& text, const std::string& name, int64_t tar_size) {
  const std::vector<std::string> lines = split(text, '\n');
  TRAINER_CHECK(!lines.empty(), name, ": empty shard index");
  auto num = [&](const std::string& t, size_t line, const char* what) -> int64_t {
    TRAINER_CHECK(!t.empty() && t.size() < 19 && std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; }),
                  name, ":", line, ": expected ", what, ", got '", t, "'");
    return std::stoll(t);
  };
  const std::vector<std::string> head = split(lines[0], ' ');
  TRAINER_CHECK(head.size() == 4 && head[0] == "trainer-shard-index" && head[1] == "1", name,
                ":1: not a shard index (expected 'trainer-shard-index 1 <samples> <tar bytes>')");
  const int64_t count = num(head[2], 1, "a sample count");
  const int64_t bytes = num(head[3], 1, "the tar's size");
  TRAINER_CHECK(bytes == tar_size, name, ": written for a tar of ", bytes, " bytes, but the tar has ", tar_size,
                ": the tar changed since (repack, or delete the index to scan the tar)");
  std::vector<ShardSample> out;
  for (size_t i = 1; i < lines.size(); ++i) {
    if (lines[i].empty()) continue;
    const std::vector<std::string> f = split(lines[i], ' ');
    TRAINER_CHECK(f.size() == 4, name, ":", i + 1, ": expected '<offset> <size> <label> <key>.<ext>'");
    ShardSample s;
    s.offset = num(f[0], i + 1, "a byte offset");
    s.size = num(f[1], i + 1, "a byte size");
    s.label = num(f[2], i + 1, "a class index");
    TRAINER_CHECK(s.offset <= tar_size && s.size <= tar_size - s.offset, name, ":", i + 1, ": bytes [", s.offset,
                  ", +", s.size, ") lie outside the ", tar_size, "-byte tar");
    const size_t dot = f[3].rfind('.');
    TRAINER_CHECK(dot != std::string::npos && dot > 0, name, ":", i + 1, ": expected <key>.<ext>, got '", f[3], "'");
    s.key = f[3].substr(0, dot);
    s.ext = f[3].substr(dot + 1);
    TRAINER_CHECK(is_image_ext(s.ext), name, ":", i + 1, ": '", s.ext, "' is not an image type (jpg, jpeg, png)");
    out.push_back(std::move(s));
  }
  TRAINER_CHECK(static_cast<int64_t>(out.size()) == count, name, ": the header promises ", count, " samples, found ",
                out.size(), " (truncated index?)");
  return out;
}

ImageList scan_shards(const std::string& dir) {
  TRAINER_CHECK(fs::is_dir(dir), dir, ": no such shard folder");
  ImageList list;
  std::vector<std::string> tars;
  for (const auto& f : fs::list_dir(dir))
    if (ends_with(f, ".tar")) tars.push_back(f);
  std::sort(tars.begin(), tars.end());
  TRAINER_CHECK(!tars.empty(), dir, ": no .tar shards (make them with `trainer pack`)");
  int scanned = 0;
  for (const auto& t : tars) {
    const std::string path = fs::join_path(dir, t), idx = path + ".idx";
    const int64_t size = fs::file_size(path);
    std::vector<ShardSample> samples;
    if (fs::exists(idx)) {
      samples = parse_shard_index(fs::read_text(idx), idx, size);
    } else {
      int fd = -1;
      ReadAt read = file_reader(path, &fd);
      try {
        samples = index_tar(read, size, path);
      } catch (...) {
        ::close(fd);
        throw;
      }
      ::close(fd);
      ++scanned;
    }
    TRAINER_CHECK(!samples.empty(), path, ": no samples (expected <key>.jpg + <key>.cls members)");
    for (auto& s : samples) {
      ImageSample is;
      is.path = path;
      is.label = s.label;
      is.offset = s.offset;
      is.size = s.size;
      is.key = s.key + "." + s.ext;
      list.samples.push_back(std::move(is));
    }
  }
  if (scanned) log::info(dir, ": ", scanned, " of ", tars.size(), " shards had no index and were scanned");
  const std::string classes = fs::join_path(dir, "classes.txt");
  if (fs::exists(classes))
    for (auto& c : split(fs::read_text(classes), '\n'))
      if (!trim(c).empty()) list.classes.push_back(trim(c));
  return list;
}

// ---- writing ----

ShardWriter::ShardWriter(std::string dir, int64_t max_samples, int64_t max_bytes)
    : dir_(std::move(dir)), max_samples_(std::max<int64_t>(max_samples, 1)), max_bytes_(std::max<int64_t>(max_bytes, 1)) {
  fs::make_dirs(dir_);
}

ShardWriter::~ShardWriter() {
  if (f_) {  // abandoned (an exception): remove the partial shard, keep the complete ones
    std::fclose(f_);
    std::remove(tmp_path_.c_str());
  }
}

void ShardWriter::open_shard() {
  final_path_ = fs::join_path(dir_, strprintf("shard-%06lld.tar", static_cast<long long>(shard_)));
  tmp_path_ = final_path_ + ".tmp";
  f_ = std::fopen(tmp_path_.c_str(), "wb");
  TRAINER_CHECK(f_, tmp_path_, ": cannot create (", std::strerror(errno), ")");
  pos_ = 0;
  samples_.clear();
}

void ShardWriter::write_member(const std::string& name, const uint8_t* data, size_t n) {
  TRAINER_CHECK(name.size() < 100, name, ": member names are limited to 99 bytes");
  uint8_t h[kBlock] = {0};
  std::memcpy(h, name.data(), name.size());
  std::snprintf(reinterpret_cast<char*>(h + 100), 8, "%07o", 0644);
  std::snprintf(reinterpret_cast<char*>(h + 108), 8, "%07o", 0);
  std::snprintf(reinterpret_cast<char*>(h + 116), 8, "%07o", 0);
  std::snprintf(reinterpret_cast<char*>(h + 124), 12, "%011llo", static_cast<unsigned long long>(n));
  std::snprintf(reinterpret_cast<char*>(h + 136), 12, "%011o", 0);
  h[156] = '0';
  std::memcpy(h + 257, "ustar", 6);
  std::memcpy(h + 263, "00", 2);
  std::memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (uint8_t b : h) sum += b;
  std::snprintf(reinterpret_cast<char*>(h + 148), 7, "%06o", sum);
  h[155] = ' ';
  static const uint8_t zeros[kBlock] = {0};
  const size_t pad = (kBlock - n % kBlock) % kBlock;
  const bool ok = std::fwrite(h, 1, kBlock, f_) == kBlock && (n == 0 || std::fwrite(data, 1, n, f_) == n) &&
                  (pad == 0 || std::fwrite(zeros, 1, pad, f_) == pad);
  TRAINER_CHECK(ok, tmp_path_, ": write failed (", std::strerror(errno), ")");
  pos_ += kBlock + static_cast<int64_t>(n + pad);
}

void ShardWriter::add(const std::string& key, const std::string& ext, const std::vector<uint8_t>& bytes, int64_t label) {
  TRAINER_CHECK(is_image_ext(ext), key, ": '", ext, "' is not an image type (jpg, jpeg, png)");
  TRAINER_CHECK(key.find('.') == std::string::npos && !key.empty(), "shard key '", key, "' must be non-empty, no '.'");
  if (f_ && (static_cast<int64_t>(samples_.size()) >= max_samples_ ||
             pos_ + static_cast<int64_t>(bytes.size()) > max_bytes_))
    close_shard();
  if (!f_) open_shard();
  ShardSample s;
  s.key = key;
  s.ext = ext;
  s.offset = pos_ + kBlock;
  s.size = static_cast<int64_t>(bytes.size());
  s.label = label;
  write_member(key + "." + ext, bytes.data(), bytes.size());
  const std::string cls = std::to_string(label);
  write_member(key + ".cls", reinterpret_cast<const uint8_t*>(cls.data()), cls.size());
  samples_.push_back(std::move(s));
}

void ShardWriter::close_shard() {
  static const uint8_t zeros[2 * kBlock] = {0};
  bool ok = std::fwrite(zeros, 1, sizeof zeros, f_) == sizeof zeros;
  pos_ += 2 * kBlock;
  ok = std::fflush(f_) == 0 && ::fsync(fileno(f_)) == 0 && ok;
  ok = std::fclose(f_) == 0 && ok;
  f_ = nullptr;
  if (!ok) {
    std::remove(tmp_path_.c_str());
    TRAINER_FAIL(tmp_path_, ": write failed (", std::strerror(errno), ")");
  }
  TRAINER_CHECK(std::rename(tmp_path_.c_str(), final_path_.c_str()) == 0, final_path_, ": rename failed (",
                std::strerror(errno), ")");
  fs::write_text_atomic(final_path_ + ".idx", format_shard_index(samples_, pos_));
  total_bytes_ += pos_;
  ++shard_;
}

void ShardWriter::finish() {
  if (f_) close_shard();
}

}  // namespace trainer
